"""Things a compiled entry must not keep from an earlier call: modules
passed as arguments (different instances of one class: other constants,
other submodule types, other flags), instances of one class reached
through the frame hook (a graph break in the caller), monkeypatched
functions and methods, instance-level forward overrides, input dicts and
lists whose contents change, aliasing between inputs that changes."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..base import Fn, T, call, do, mod, prog

C = "staleness"


class Scale(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * self.k


class Act(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        return torch.relu(x) if self.kind == "relu" else torch.tanh(x)


def module_of(make, text):
    return Fn(lambda g: make(), text)


@prog(C, inputs=(module_of(lambda: Scale(2.0), "Scale(2)"), T(3, 4)), grad=False,
      steps=[call(), call(module_of(lambda: Scale(5.0), "Scale(5)"), T(3, 4)),
             call(module_of(lambda: Scale(2.0), "Scale(2)"), T(3, 4))])
def module_arg_constant_differs(m, x):
    return m(x)


@prog(C, inputs=(module_of(lambda: Act("relu"), "Act(relu)"), T(3, 4)), grad=False,
      steps=[call(), call(module_of(lambda: Act("tanh"), "Act(tanh)"), T(3, 4))])
def module_arg_string_attr_differs(m, x):
    return m(x)


@prog(C, inputs=(module_of(lambda: nn.LayerNorm(4, eps=1e-5), "LN(eps 1e-5)"), T(3, 4)), grad=False,
      steps=[call(), call(module_of(lambda: nn.LayerNorm(4, eps=10.0), "LN(eps 10)"), T(3, 4))])
def layernorm_arg_eps_differs(m, x):
    return m(x)


@prog(C, inputs=(module_of(lambda: nn.LeakyReLU(0.01), "LeakyReLU(0.01)"), T(3, 4)), grad=False,
      steps=[call(), call(module_of(lambda: nn.LeakyReLU(0.5), "LeakyReLU(0.5)"), T(3, 4))])
def builtin_module_arg_slope_differs(m, x):
    return m(x)


@prog(C, inputs=(module_of(lambda: nn.Softmax(dim=0), "Softmax(0)"), T(3, 4)), grad=False,
      steps=[call(), call(module_of(lambda: nn.Softmax(dim=1), "Softmax(1)"), T(3, 4))])
def softmax_module_arg_dim_differs(m, x):
    return m(x)


@prog(C, inputs=(module_of(lambda: nn.Linear(4, 4), "Linear(bias)"), T(3, 4)), grad=False,
      steps=[call(), call(module_of(lambda: nn.Linear(4, 4, bias=False), "Linear(no bias)"), T(3, 4))])
def linear_arg_bias_present_or_not(m, x):
    return m(x)


@prog(C, inputs=(module_of(lambda: nn.Dropout(0.5).eval(), "Dropout eval"), T(3, 4)), grad=False,
      steps=[call(), call(module_of(lambda: nn.Dropout(0.0).train(), "Dropout(0) train"), T(3, 4))])
def dropout_arg_training_flag_differs(m, x):
    return m(x)


@prog(C, inputs=(module_of(lambda: nn.Sequential(Scale(2.0), Act("relu")), "Seq(2, relu)"), T(3, 4)), grad=False,
      steps=[call(), call(module_of(lambda: nn.Sequential(Scale(-1.0), Act("tanh")), "Seq(-1, tanh)"), T(3, 4))])
def sequential_arg_children_differ(m, x):
    return m(x)


class BreakingParent(nn.Module):
    """A print in forward: the children run through the frame hook."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = Scale(2.0), Scale(-3.0), Act("tanh")
        self.d = Act("relu")

    def forward(self, x):
        print("parent")
        return self.d(self.c(self.b(self.a(x))))


@mod(C, inputs=(T(3, 4),))
def hooked_children_of_one_class_differ():
    return BreakingParent()


class BreakingParentLN(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(4, eps=1e-5), nn.LayerNorm(4, eps=3.0)

    def forward(self, x):
        y = self.n1(x)
        print("between")
        return self.n2(y)


@mod(C, inputs=(T(3, 4),))
def hooked_builtin_children_differ():
    return BreakingParentLN()


def scale_helper(t, k):
    return t * k


@prog(C, inputs=(T(3, 4),))
def hooked_helper_called_with_different_constants(x):
    a = scale_helper(x, 2.0)
    print("break")
    return scale_helper(a, 7.0)


def _patch_relu(ctx):
    ctx.g["_saved_relu"] = F.relu
    F.relu = lambda t, inplace=False: t * 100


def _unpatch_relu(ctx):
    F.relu = ctx.g.pop("_saved_relu")


@prog(C, inputs=(T(3, 4),), steps=[call(), do(_patch_relu), call(), do(_unpatch_relu), call()])
def monkeypatched_torch_function(x):
    return F.relu(x) + 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def helper(self, x):
        return x + 1

    def forward(self, x):
        return self.helper(self.fc(x))


def _patch_method(ctx):
    Net.helper = lambda self, x: x * 1000


def _unpatch_method(ctx):
    del Net.helper
    Net.helper = lambda self, x: x + 1


@mod(C, inputs=(T(3, 4),), steps=[call(), do(_patch_method), call(), do(_unpatch_method), call()])
def class_method_replaced():
    return Net()


def _instance_forward(ctx):
    m = ctx.subject
    m.forward = lambda x: m.fc(x) * -1


@mod(C, inputs=(T(3, 4),), steps=[call(), do(_instance_forward), call()])
def instance_forward_override_after_compile():
    return Net()


def _with_instance_forward():
    m = Net()
    m.forward = lambda x: m.fc(x) * -1
    return m


@mod(C, inputs=(T(3, 4),))
def instance_forward_override_before_compile():
    return _with_instance_forward()


def _instance_helper(ctx):
    ctx.subject.helper = lambda x: x * 50


@mod(C, inputs=(T(3, 4),), steps=[call(), do(_instance_helper), call()])
def instance_method_override_after_compile():
    return Net()


class Other(Net):
    def helper(self, x):
        return x - 100


def _swap_class(ctx):
    ctx.subject.__class__ = Other


@mod(C, inputs=(T(3, 4),), steps=[call(), do(_swap_class), call()])
def instance_class_swapped():
    return Net()


@prog(C, inputs=({"scale": 2.0, "shift": 1}, T(3, 4)),
      steps=[call(), call({"scale": -1.0, "shift": 1}, T(3, 4)), call({"scale": 2.0, "shift": 5}, T(3, 4)),
             call({"scale": 2.0}, T(3, 4))])
def config_dict_argument_values_change(cfg, x):
    return x * cfg["scale"] + cfg.get("shift", 0)


@prog(C, inputs=([2.0, 3.0], T(3, 4)), steps=[call(), call([2.0, -3.0], T(3, 4)), call([1.0], T(3, 4))])
def list_of_floats_argument_changes(ks, x):
    for k in ks:
        x = x * k
    return x


@prog(C, inputs=((2, "relu"), T(3, 4)), steps=[call(), call((3, "relu"), T(3, 4)), call((2, "tanh"), T(3, 4))])
def tuple_argument_changes(spec, x):
    n, act = spec
    for _ in range(n):
        x = getattr(torch, act)(x) + 1
    return x


def _pair_same(g):
    t = torch.randn(3, 4, generator=g)
    return (t, t)


def _pair_distinct(g):
    return (torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g))


@prog(C, inputs=(Fn(_pair_distinct, "(a, b)"),),
      steps=[call(), call(Fn(_pair_same, "(t, t)")), call(Fn(_pair_distinct, "(a, b)"))])
def inputs_alias_in_one_call_only(pair):
    a, b = pair
    a.mul_(2)
    return a + b


def _view_pair(g):
    t = torch.randn(4, 4, generator=g)
    return (t[:3], t[1:])


@prog(C, inputs=(Fn(_pair_distinct, "(a, b)"),),
      steps=[call(), call(Fn(_view_pair, "(t[:3], t[1:])")), call(Fn(_pair_distinct, "(a, b)"))])
def inputs_overlap_in_one_call_only(pair):
    a, b = pair
    b.add_(a)
    return b * 2


class ListAttr(nn.Module):
    def __init__(self):
        super().__init__()
        self.scales = [1.0, 2.0]
        self.table = {"a": 1.0}

    def forward(self, x):
        for s in self.scales:
            x = x * s
        return x + self.table["a"]


@mod(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: ctx.subject.scales.append(3.0)), call(),
                                  do(lambda ctx: ctx.subject.table.__setitem__("a", -5.0)), call()])
def module_list_and_dict_attrs_mutated():
    return ListAttr()


class BufferReplaced(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.ones(4))

    def forward(self, x):
        return x + self.offset


@mod(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.subject, "offset", torch.full((4,), -7.0))),
                                  call(), do(lambda ctx: setattr(ctx.subject, "offset", torch.ones(1, 4))), call()])
def buffer_reassigned_between_calls():
    return BufferReplaced()


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.enabled = True

    def forward(self, x):
        y = self.fc(x)
        return y * 2 if self.enabled else y


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = Gate()

    def forward(self, x):
        return self.gate(x) + 1


@mod(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.subject.gate, "enabled", False)), call()])
def nested_submodule_flag_changed():
    return Holder()


@mod(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: ctx.subject.gate.fc.register_parameter("bias", None)), call()])
def submodule_bias_removed():
    return Holder()


@mod(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.subject, "gate", Gate())), call()])
def submodule_replaced_by_fresh_instance():
    return Holder()


@mod(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: ctx.subject.gate.fc.weight.data.fill_(0.5)), call()])
def weight_data_filled():
    return Holder()


@mod(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.subject.gate.fc, "weight",
                                                                   nn.Parameter(torch.eye(4)))), call()])
def weight_parameter_replaced():
    return Holder()


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: torch.set_grad_enabled(False)), call(),
                                   do(lambda ctx: torch.set_grad_enabled(True)), call()], grad="keep")
def grad_mode_flipped_between_calls(x):
    return x * 2, torch.is_grad_enabled()


def _closure_list_factory():
    fns = []
    for i in range(3):
        fns.append(lambda t, i=i: t * (i + 1))
    late = [lambda t: t * i for i in range(3)]
    return fns, late


FNS, LATE = _closure_list_factory()


@prog(C, inputs=(T(3, 4),))
def loop_closures_default_vs_late_binding(x):
    return [f(x) for f in FNS], [f(x) for f in LATE]
