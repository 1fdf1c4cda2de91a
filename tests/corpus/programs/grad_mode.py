"""Grad mode and autograd: inputs and parameters that require grad under
grad mode (eager's result must come back with a graph: requires_grad,
backward through the result gives eager's gradients), no_grad /
enable_grad / inference_mode blocks inside, detach, backward called
inside the function."""
import torch
import torch.nn as nn

from ..base import T, mod, prog

C = "grad"


@prog(C, inputs=(T(3, 4, grad=True),))
def result_requires_grad(x):
    y = (x * 2).sin()
    return y, y.requires_grad


@prog(C, inputs=(T(3, 4, grad=True),))
def backward_inside(x):
    y = (x ** 2).sum()
    y.backward()
    return x.grad


@prog(C, inputs=(T(3, 4, grad=True),))
def no_grad_block_inside(x):
    with torch.no_grad():
        y = x * 2
    return y, y.requires_grad


@prog(C, inputs=(T(3, 4),), grad=False)
def enable_grad_inside_no_grad(x):
    with torch.enable_grad():
        y = x * 2
    return y, torch.is_grad_enabled()


@prog(C, inputs=(T(3, 4),))
def inference_mode_inside(x):
    with torch.inference_mode():
        y = x * 2
    return y + 1


@prog(C, inputs=(T(3, 4, grad=True),))
def detach_inside(x):
    return x.detach() * 2, (x * 2).detach().requires_grad


@prog(C, inputs=(T(3, 4, grad=True),))
def autograd_grad_inside(x):
    y = (x.sin() * x).sum()
    (g,) = torch.autograd.grad(y, x)
    return g


@mod(C, inputs=(T(3, 6),), grad=True)
def module_params_require_grad():
    return nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 2))


class TrainStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 1)

    def forward(self, x):
        loss = self.fc(x).pow(2).mean()
        loss.backward()
        return loss.detach(), self.fc.weight.grad.clone()


@mod(C, inputs=(T(3, 6),), grad=True)
def module_backward_inside():
    return TrainStep()


@prog(C, inputs=(T(3, 4),))
def set_grad_enabled_function(x):
    prev = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    y = x * 3
    torch.set_grad_enabled(prev)
    return y, torch.is_grad_enabled()


@prog(C, inputs=(T(3, 4, grad=True),), grad=False)
def grad_input_under_no_grad(x):
    return x * 2 + 1
