"""Globals, closures, class and module attributes, os.environ and default
arguments that CHANGE between calls: a compiled entry that kept the old
value gives a stale (wrong) answer."""
import os
import sys
import types

import torch
import torch.nn.functional as F

from ..base import T, call, do, prog, setg

C = "globals"

SCALE = 2.0
OFFSET = 1
FLAG = True
MODE = "relu"
ACTS = {"relu": torch.relu, "tanh": torch.tanh}
WEIGHTS = [0.5, 1.5]
NAMES = {"a", "b"}
TABLE = {"k": 3.0}
BIAS = torch.ones(4)
FUNC = torch.sin
COUNTER = 0
LOG = []
SEEN = {}
CHOICE = 0
NOT_YET = None
EPS = 1e-5
SHAPE = (2, 6)
DTYPE = torch.float32
CFG = types.SimpleNamespace(depth=2, scale=0.5)


class Settings:
    factor = 3.0
    enabled = True

    def __init__(self):
        self.inst = 1.0


SETTINGS = Settings()
helper_mod = types.ModuleType("helper_mod")
helper_mod.alpha = 0.25
helper_mod.fn = torch.cos
sys.modules.setdefault("corpus_helper_mod", helper_mod)


def _mutate(act):
    return do(lambda ctx: act(ctx.g))


@prog(C, inputs=(T(4, 4),), steps=[call(), setg("SCALE", 3.0), call(), setg("SCALE", 0.5), call()])
def global_float_rebound(x):
    return x * SCALE


@prog(C, inputs=(T(4, 4),), steps=[call(), setg("OFFSET", 5), call()])
def global_int_rebound(x):
    return x + OFFSET


@prog(C, inputs=(T(4, 4),), steps=[call(), setg("FLAG", False), call(), setg("FLAG", True), call()])
def global_bool_branch(x):
    if FLAG:
        return x.relu()
    return x.sigmoid()


@prog(C, inputs=(T(4, 4),), steps=[call(), setg("MODE", "tanh"), call()])
def global_string_dispatch(x):
    return ACTS[MODE](x)


@prog(C, inputs=(T(4, 4),), steps=[call(), _mutate(lambda g: g["ACTS"].__setitem__("relu", torch.sigmoid)), call()])
def global_dict_of_fns_mutated(x):
    return ACTS["relu"](x)


@prog(C, inputs=(T(4, 4),), steps=[call(), _mutate(lambda g: g["WEIGHTS"].append(2.0)), call(),
                                   _mutate(lambda g: g["WEIGHTS"].__setitem__(0, -1.0)), call()])
def global_list_mutated(x):
    out = x
    for w in WEIGHTS:
        out = out * w
    return out


@prog(C, inputs=(T(4, 4),), steps=[call(), _mutate(lambda g: g["WEIGHTS"].__setitem__(1, 4.0)), call()])
def global_list_item(x):
    return x * WEIGHTS[1]


@prog(C, inputs=(T(4, 4),), steps=[call(), _mutate(lambda g: g["WEIGHTS"].pop()), call()])
def global_list_len(x):
    return x * len(WEIGHTS)


@prog(C, inputs=(T(4, 4),), steps=[call(), _mutate(lambda g: g["NAMES"].add("c")), call(),
                                   _mutate(lambda g: g["NAMES"].discard("a")), call()])
def global_set_mutated(x):
    if "c" in NAMES:
        return x * 2
    return x * len(NAMES)


@prog(C, inputs=(T(4, 4),), steps=[call(), _mutate(lambda g: g["TABLE"].__setitem__("k", -2.0)), call(),
                                   _mutate(lambda g: g["TABLE"].__setitem__("extra", 1.0)), call()])
def global_dict_mutated(x):
    return x * TABLE["k"] + len(TABLE)


@prog(C, inputs=(T(4, 4),), steps=[call(), _mutate(lambda g: g["TABLE"].clear()), call()])
def global_dict_get_default(x):
    return x * TABLE.get("k", 10.0)


@prog(C, inputs=(T(3, 4),), steps=[call(), _mutate(lambda g: g["BIAS"].mul_(3)), call()])
def global_tensor_mutated_in_place(x):
    return x + BIAS


@prog(C, inputs=(T(3, 4),), steps=[call(), setg("BIAS", torch.full((4,), -2.0)), call()])
def global_tensor_rebound(x):
    return x + BIAS


@prog(C, inputs=(T(3, 4),), steps=[call(), setg("BIAS", torch.ones(2, 4)), call()])
def global_tensor_rebound_new_shape(x):
    return (x[:2] + BIAS).sum(0)


@prog(C, inputs=(T(3, 4),), steps=[call(), setg("FUNC", torch.cos), call(), setg("FUNC", lambda t: t * 7), call()])
def global_function_rebound(x):
    return FUNC(x)


@prog(C, inputs=(T(3, 4),), steps=[call(), call(), call()], state=("COUNTER",))
def global_counter_increment(x):
    global COUNTER
    COUNTER += 1
    return x * COUNTER


@prog(C, inputs=(T(3, 4),), steps=[call(), call()], state=("LOG",))
def global_list_appended_by_program(x):
    LOG.append(len(LOG))
    return x + len(LOG)


@prog(C, inputs=(T(3, 4),), steps=[call(), call()], state=("SEEN",))
def global_dict_written_by_program(x):
    SEEN[len(SEEN)] = x.shape[0]
    return x * len(SEEN)


@prog(C, inputs=(T(3, 4),), steps=[call(), call()], state=("LOG",))
def global_list_gets_tensor(x):
    y = x * 2
    LOG.append(y)
    return y + 1


@prog(C, inputs=(T(3, 4),), steps=[call(), call()], state=("NOT_YET",))
def global_created_by_program(x):
    global NOT_YET
    NOT_YET = x.sum()
    return x - 1


@prog(C, inputs=(T(3, 4),), steps=[call(), setg("CHOICE", 1), call(), setg("CHOICE", 2), call()])
def global_int_selects_branch(x):
    if CHOICE == 0:
        return x + 1
    elif CHOICE == 1:
        return x * 10
    return -x


@prog(C, inputs=(T(3, 4),), steps=[call(), setg("EPS", 0.5), call()])
def global_eps_in_function_call(x):
    return F.layer_norm(x, (4,), eps=EPS)


@prog(C, inputs=(T(12,),), steps=[call(), setg("SHAPE", (3, 4)), call()])
def global_shape_tuple(x):
    return x.reshape(SHAPE).sum(0)


@prog(C, inputs=(T(3, 4),), steps=[call(), setg("DTYPE", torch.float64), call()])
def global_dtype(x):
    return x.to(DTYPE) * 2


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.g["CFG"], "scale", 4.0)), call(),
                                   do(lambda ctx: setattr(ctx.g["CFG"], "depth", 4)), call()])
def global_namespace_attrs(x):
    for _ in range(CFG.depth):
        x = x * CFG.scale
    return x


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.g["Settings"], "factor", -1.0)), call()])
def class_attribute_changed(x):
    return x * Settings.factor


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.g["Settings"], "enabled", False)), call()])
def class_attribute_bool_via_instance(x):
    if SETTINGS.enabled:
        return x + SETTINGS.factor
    return x


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.g["SETTINGS"], "inst", 9.0)), call()])
def instance_attribute_changed(x):
    return x * SETTINGS.inst


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.g["SETTINGS"], "factor", 0.1)), call()])
def instance_shadows_class_attr(x):
    return x * SETTINGS.factor


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.g["helper_mod"], "alpha", 2.0)), call(),
                                   do(lambda ctx: setattr(ctx.g["helper_mod"], "fn", torch.exp)), call()])
def module_attribute_changed(x):
    return helper_mod.fn(x) * helper_mod.alpha


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: os.environ.__setitem__("CORPUS_SCALE", "4")), call(),
                                   do(lambda ctx: os.environ.pop("CORPUS_SCALE", None)), call()])
def environ_read(x):
    return x * float(os.environ.get("CORPUS_SCALE", "1"))


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: os.environ.__setitem__("CORPUS_MODE", "fast")), call(),
                                   do(lambda ctx: os.environ.pop("CORPUS_MODE", None)), call()])
def environ_flag_branch(x):
    if os.environ.get("CORPUS_MODE") == "fast":
        return x * 2
    return x.exp()


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: os.environ.__setitem__("CORPUS_ON", "1")), call(),
                                   do(lambda ctx: os.environ.pop("CORPUS_ON", None)), call()])
def environ_membership(x):
    return x + ("CORPUS_ON" in os.environ)


def _make_closure():
    k = [2.0]

    def inner(x):
        return x * k[0]

    def bump():
        k[0] += 1.0
    return inner, bump


_closure_fn, _closure_bump = _make_closure()


def _make_rebinding():
    scale = 1.5

    def inner(x):
        return x * scale

    def set_scale(v):
        nonlocal scale
        scale = v
    return inner, set_scale


_rebind_fn, _rebind_set = _make_rebinding()


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: _closure_bump()), call()])
def closure_list_cell_mutated(x):
    return _closure_fn(x) + 1


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: _rebind_set(-3.0)), call()])
def closure_cell_rebound_via_callee(x):
    return _rebind_fn(x)


# the subject is a closure whose cell changes between calls
def _closure_subject():
    factor = 2.0

    def f(x):
        return x * factor

    def setf(v):
        nonlocal factor
        factor = v
    return f, setf


_cs_fn, _cs_set = _closure_subject()
_cs_fn.__name__ = "closure_itself_rebound"


def _register_closure_subject():
    from ..base import _register
    _register(_cs_fn, C, False, (T(3, 4),), None, [call(), do(lambda ctx: _cs_set(5.0)), call()],
              (), False, None, None, False, "")


_register_closure_subject()


def _counter_closure():
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return x * n
    return f


_cc = _counter_closure()
_cc.__name__ = "closure_nonlocal_counter"


def _register_counter_closure():
    from ..base import _register
    _register(_cc, C, False, (T(3, 4),), None, [call(), call(), call()], ("cell:n",), False, None, None, False, "")


_register_counter_closure()


@prog(C, inputs=(T(3, 4),))
def nested_closure_built_per_call(x):
    m = x.mean()

    def centre(t):
        return t - m
    return centre(x) * 2


@prog(C, inputs=(T(3, 4),))
def lambda_captures_local(x):
    s = x.std()
    f = lambda t: t / s  # noqa: E731
    return f(x) + f(x * 2)


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.g["default_arg_fn"], "__defaults__", (7.0,))), call()])
def default_arg_changed(x):
    return default_arg_fn(x)


def default_arg_fn(t, k=2.0):
    return t * k


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: ctx.g["MUTABLE_DEFAULT_HOLDER"].append(1)), call()])
def mutable_default_arg(x):
    return uses_mutable_default(x)


MUTABLE_DEFAULT_HOLDER = []


def uses_mutable_default(t, acc=MUTABLE_DEFAULT_HOLDER):
    return t * (len(acc) + 1)


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(ctx.g["subject_defaults"], "__kwdefaults__", {"k": 3.0})), call()])
def kwonly_default_of_callee(x):
    return subject_defaults(x)


def subject_defaults(t, *, k=1.0):
    return t + k


@prog(C, inputs=(T(3, 4), 2.0), steps=[call(), call(T(3, 4), 5.0), call(T(3, 4), 2.0)])
def float_argument_changes(x, k):
    return x * k


@prog(C, inputs=(T(3, 4), 3), steps=[call(), call(T(3, 4), 4), call(T(3, 4), -1)])
def int_argument_changes(x, n):
    for _ in range(abs(n)):
        x = x + n
    return x


@prog(C, inputs=(T(3, 4), True), steps=[call(), call(T(3, 4), False)])
def bool_argument_changes(x, flag):
    return x.relu() if flag else x.neg()


@prog(C, inputs=(T(3, 4), "sum"), steps=[call(), call(T(3, 4), "mean"), call(T(3, 4), "max")])
def string_argument_changes(x, how):
    return getattr(x, how)()


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: setattr(torch.Tensor, "corpus_extra", 2.0)), call(),
                                   do(lambda ctx: delattr(torch.Tensor, "corpus_extra")), call()])
def tensor_class_attribute_added(x):
    return x * getattr(x, "corpus_extra", 1.0)


@prog(C, inputs=(T(3, 4),), steps=[call(), setg("SCALE", 3.0), call()])
def global_read_by_helper(x):
    return read_scale(x) + 1


def read_scale(t):
    return t * SCALE


@prog(C, inputs=(T(3, 4),), steps=[call(), do(lambda ctx: ctx.g.pop("MAYBE", None) or ctx.g.__setitem__("MAYBE", 2)), call()])
def global_defined_later(x):
    return x * globals().get("MAYBE", 1)


@prog(C, inputs=(T(3, 4),), steps=[call(), setg("SCALE", 10.0), call()])
def global_through_builtin_globals(x):
    return x * globals()["SCALE"]
