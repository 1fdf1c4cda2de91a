"""Module hooks: forward hooks and pre-hooks on the top module and on
submodules, registered before or after compile, removed again, hooks that
change the result or the input, global module hooks, and state dict
hooks."""
import torch
import torch.nn as nn
from torch.nn.modules import module as nn_module

from ..base import T, call, do, mod

C = "hooks"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 6)
        self.fc2 = nn.Linear(6, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def double_output(module, inputs, output):
    return output * 2


def shift_input(module, inputs):
    return (inputs[0] + 1,)


def add_hook(path, kind, hook, store="handle"):
    """A step that registers hook on subject.<path> (kind: forward,
    forward_pre) and keeps the handle on the subject as attribute store."""
    def act(ctx):
        m = ctx.subject
        for p in path.split(".") if path else []:
            m = getattr(m, p)
        h = getattr(m, f"register_{kind}_hook")(hook)
        ctx.subject.__dict__.setdefault("_corpus_handles", {})[store] = h
    return do(act, f"register {kind} hook on {path or 'top'}")


def remove_hook(store="handle"):
    def act(ctx):
        ctx.subject.__dict__["_corpus_handles"].pop(store).remove()
    return do(act, f"remove {store}")


@mod(C, inputs=(T(3, 6),), steps=[call(), add_hook("", "forward", double_output), call(), remove_hook(), call()])
def top_forward_hook_added_after_compile():
    return Net()


@mod(C, inputs=(T(3, 6),), steps=[call(), add_hook("fc1", "forward", double_output), call(), remove_hook(), call()])
def submodule_forward_hook_added_after_compile():
    return Net()


@mod(C, inputs=(T(3, 6),), steps=[call(), add_hook("fc2", "forward_pre", shift_input), call(), remove_hook(), call()])
def submodule_pre_hook_added_after_compile():
    return Net()


@mod(C, inputs=(T(3, 6),), steps=[call(), add_hook("", "forward_pre", shift_input), call(), remove_hook(), call()])
def top_pre_hook_added_after_compile():
    return Net()


def _with_hook():
    n = Net()
    n.fc1.register_forward_hook(double_output)
    return n


@mod(C, inputs=(T(3, 6),))
def submodule_hook_before_compile():
    return _with_hook()


def _with_top_hook():
    n = Net()
    n.register_forward_hook(lambda m, i, o: o.softmax(-1))
    return n


@mod(C, inputs=(T(3, 6),))
def top_hook_before_compile():
    return _with_top_hook()


RECORD = []


def recording_hook(module, inputs, output):
    RECORD.append(type(module).__name__)


@mod(C, inputs=(T(3, 6),), steps=[call(), add_hook("fc2", "forward", recording_hook), call(), call()],
     state=("RECORD",))
def hook_with_side_effect():
    return Net()


def _kw_pre_hook(module, args, kwargs):
    return args, dict(kwargs, scale=3.0)


class KwNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x, scale=1.0):
        return self.fc(x) * scale


@mod(C, inputs=(T(3, 6),), steps=[call(), do(lambda ctx: ctx.subject.register_forward_pre_hook(
    _kw_pre_hook, with_kwargs=True)), call()])
def pre_hook_with_kwargs():
    return KwNet()


def _global_hook(ctx):
    ctx.subject.__dict__["_g"] = nn_module.register_module_forward_hook(
        lambda m, i, o: o + 100 if isinstance(m, nn.Linear) else None)


def _remove_global(ctx):
    ctx.subject.__dict__.pop("_g").remove()


@mod(C, inputs=(T(3, 6),), steps=[call(), do(_global_hook), call(), do(_remove_global), call()])
def global_forward_hook_added():
    return Net()


def _always_call(ctx):
    ctx.subject.__dict__["_corpus_handles"] = {"h": ctx.subject.fc1.register_forward_hook(
        double_output, always_call=True)}


@mod(C, inputs=(T(3, 6),), steps=[call(), do(_always_call), call()])
def always_call_hook():
    return Net()


def _prepend(ctx):
    ctx.subject.fc1.register_forward_hook(lambda m, i, o: o + 1)
    ctx.subject.fc1.register_forward_hook(lambda m, i, o: o * 3, prepend=True)


@mod(C, inputs=(T(3, 6),), steps=[call(), do(_prepend), call()])
def hook_order_prepend():
    return Net()


@mod(C, inputs=(T(3, 6),), steps=[call(), add_hook("fc1", "forward", double_output, "a"),
                                  add_hook("fc2", "forward_pre", shift_input, "b"), call(),
                                  remove_hook("a"), call(), remove_hook("b"), call()])
def two_hooks_removed_one_by_one():
    return Net()


class HookInsideForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        h = self.fc.register_forward_hook(double_output)
        y = self.fc(x)
        h.remove()
        return y + self.fc(x)


@mod(C, inputs=(T(3, 6),))
def hook_registered_inside_forward():
    return HookInsideForward()


def _tensor_hook_net():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)

        def forward(self, x):
            y = self.fc(x)
            return y.sum()
    return M()


@mod(C, inputs=(T(3, 6),), steps=[call(), do(lambda ctx: ctx.subject.register_full_backward_hook(
    lambda m, gi, go: None)), call()])
def backward_hook_registered():
    return _tensor_hook_net()


def _sd_hook(ctx):
    ctx.subject._register_state_dict_hook(lambda m, sd, prefix, local: sd)


@mod(C, inputs=(T(3, 6),), steps=[call(), do(_sd_hook), call()])
def state_dict_hook_does_not_matter():
    return Net()
