"""Graph breaks in the middle of a frame: .item(), .tolist(), print,
logging, warnings, Python-side data reads (numpy conversion, str of a
tensor), unsupported calls between tensor code; in the top function and
in a helper. Results, printed and logged text must be eager's."""
import logging
import warnings

import torch
import torch.nn as nn

from ..base import T, call, mod, prog

C = "breaks"
log = logging.getLogger("corpus.breaks")


@prog(C, inputs=(T(3, 4),))
def item_in_middle(x):
    y = x.exp()
    s = y.sum().item()
    return y / s


@prog(C, inputs=(T(3, 4),))
def item_used_in_python_math(x):
    m = x.max().item()
    return x * (1.0 if m > 0 else -1.0) + m


@prog(C, inputs=(T(4,),))
def tolist_in_middle(x):
    vals = (x * 2).tolist()
    return x + sum(vals), vals


@prog(C, inputs=(T(3, 4),))
def print_in_middle(x):
    y = x * 2
    print("shape", tuple(y.shape))
    return y + 1


@prog(C, inputs=(T(2, 2),))
def print_tensor_value(x):
    y = x.abs() + 1
    print(y)
    return y.log()


@prog(C, inputs=(T(3, 4),))
def logging_in_middle(x):
    y = x.relu()
    log.warning("relu done: %d", y.shape[0])
    return y * 3


@prog(C, inputs=(T(3, 4),))
def logging_debug_disabled(x):
    y = x.relu()
    log.debug("not shown %s", y.shape)
    return y * 3


@prog(C, inputs=(T(3, 4),))
def warning_in_middle(x):
    y = x + 1
    warnings.warn("corpus warning")
    return y * 2


@prog(C, inputs=(T(3, 4),))
def two_breaks(x):
    a = x.sin()
    print("first")
    b = a.cos() + a.sum().item()
    print("second")
    return b * 2


@prog(C, inputs=(T(3, 4),))
def break_in_helper(x):
    return helper_prints(x * 2) + 1


def helper_prints(t):
    print("in helper")
    return t.tanh()


@prog(C, inputs=(T(3, 4),))
def break_in_loop(x):
    for i in range(3):
        x = x * 2
        if i == 1:
            print("iter", i)
    return x


@prog(C, inputs=(T(3, 4),))
def str_of_tensor(x):
    s = str(x.shape) + repr(x.dtype)
    return x + len(s)


@prog(C, inputs=(T(3, 4),))
def format_tensor_value(x):
    msg = f"{x.sum():.3f}"
    return x * 2, msg


@prog(C, inputs=(T(3, 4),))
def numpy_in_middle(x):
    a = (x * 2).numpy()
    return torch.from_numpy(a + 1) * 3


@prog(C, inputs=(T(3, 4),))
def nonzero_dynamic_shape(x):
    idx = (x > 0).nonzero()
    return idx.shape[0] * x, idx


@prog(C, inputs=(T(3, 4),))
def boolean_mask_index(x):
    return x[x > 0].sum(), x[x > 0] * 2


@prog(C, inputs=(T(3, 4),))
def unique_dynamic(x):
    return torch.unique((x * 2).round())


@prog(C, inputs=(T(3, 4),))
def id_and_hash_break(x):
    d = {id(x): 1}
    return x * len(d)


class PrintModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        x = self.a(x)
        print("between layers")
        return self.b(x)


@mod(C, inputs=(T(3, 4),))
def module_print_between_layers():
    return PrintModule()


class ItemModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        x = self.fc(x)
        if x.mean().item() > 0:
            return x.relu()
        return x.sigmoid()


@mod(C, inputs=(T(3, 4),), steps=[call(), call(), call()])
def module_item_branch():
    return ItemModule()


@prog(C, inputs=(T(3, 4),), steps=[call(), call()])
def break_then_more_graph_work(x):
    y = x @ x.t()
    n = int(y.trace().item() > 0)
    z = y.softmax(-1) * (n + 1)
    return z.sum(0)


@prog(C, inputs=(T(3, 4),))
def torch_manual_seed_inside(x):
    torch.manual_seed(0)
    return x + torch.rand(3, 4)


@prog(C, inputs=(T(3, 4),))
def random_ops(x):
    return x + torch.randn(3, 4), torch.rand_like(x).shape


@prog(C, inputs=(T(3, 4),))
def dropout_functional_training(x):
    return torch.nn.functional.dropout(x, 0.5, training=True)
