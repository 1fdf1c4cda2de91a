"""smelt.compile / smelt.reset / smelt.explain / smelt.cache_info /
smelt.clear_cache: the thin public layer over smelt._C.

Everything smelt.compile returns calls one smelt._C.CompiledFunction (a C
vectorcall object: tracing, guards and the cache of compiled entries are
all in C), directly or through C-level binding (a bound method, a
functools.partial), so no Python frame runs per call:
  - a Python function: its CompiledFunction;
  - a bound method, a callable object (its class's Python __call__): the
    function compiled, bound to the object;
  - a functools.partial: the partial applied to its function compiled;
  - anything else callable (a builtin, a C function, a class): a
    CompiledFunction of the trampoline `_call(self, *args, **kwargs)`
    (`self(*args, **kwargs)`) bound to it, so what it calls is traced;
  - an nn.Module: a CompiledModule, whose calls go through the trampoline
    bound to the original module, so nn.Module.__call__ (hooks included)
    runs as in eager.
"""
import functools
import operator
import os
import types
import typing
import weakref

import torch

from . import _C

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

# Known `options` keys and the values each accepts.
OPTIONS = {"weight_packing": ("auto", "always", "never"), "backend": ("cpu", "spirv")}


class CompileArgumentError(ValueError, RuntimeError):
    """A bad argument to smelt.compile. A ValueError, and a RuntimeError
    too: what torch.compile raises for the same mistakes."""


class CompileSettings(typing.NamedTuple):
    """The checked arguments of one smelt.compile call."""
    fullgraph: bool = False
    dynamic: typing.Optional[bool] = None
    mode: typing.Optional[str] = None
    options: typing.Optional[dict] = None


# Every CompiledFunction smelt.compile made (trampolines included) and its
# settings: reset() drops their entries.
_live = weakref.WeakKeyDictionary()


def _disabled():
    return os.environ.get("SMELT_DISABLE", "") not in ("", "0")


def _names(values):
    return ", ".join(repr(v) for v in values)


def _check_backend(backend):
    if backend is None or (isinstance(backend, str) and backend == "smelt"):
        return
    what = f"backend={backend!r}" if isinstance(backend, str) else \
        f"a custom backend ({getattr(backend, '__name__', type(backend).__name__)})"
    raise CompileArgumentError(
        f"smelt.compile: {what} is not supported: smelt compiles with its own CPU back end "
        "(backend=None or 'smelt'); use torch.compile for other backends")


def _check_options(options):
    if not isinstance(options, dict):
        raise TypeError(f"smelt.compile: options must be a dict, got {type(options).__name__}")
    for key, value in options.items():
        if key not in OPTIONS:
            raise CompileArgumentError(
                f"smelt.compile: unknown option {key!r}; the known options are {_names(OPTIONS)}")
        if not isinstance(value, str) or value not in OPTIONS[key]:
            raise CompileArgumentError(
                f"smelt.compile: option {key!r} must be one of {_names(OPTIONS[key])}, got {value!r}")
    return dict(options)


def _settings(fullgraph, dynamic, backend, mode, options):
    """The CompileSettings of smelt.compile's arguments, or the error they
    deserve (raised at the call, decorator form included)."""
    _check_backend(backend)
    if dynamic is not None and not isinstance(dynamic, bool):
        raise CompileArgumentError(f"smelt.compile: dynamic must be None, True or False, got {dynamic!r}")
    if mode is not None and options is not None:
        raise CompileArgumentError("smelt.compile: give mode or options, not both")
    if not isinstance(mode, (str, type(None))) or mode not in MODES:
        raise CompileArgumentError(f"smelt.compile: unknown mode {mode!r}; the modes are {_names(MODES)}")
    if options is not None:
        options = _check_options(options)
    return CompileSettings(bool(fullgraph), dynamic, mode, options)


def compile(model=None, *, fullgraph=False, dynamic=None, backend=None, mode=None, options=None,
            disable=False):
    """Compile a function, method, callable object or nn.Module with smelt.

    Usable as `smelt.compile(fn)`, `@smelt.compile` and
    `@smelt.compile(fullgraph=True)`. Arguments as torch.compile's (see
    README.md): fullgraph=True raises where the code cannot be traced
    whole instead of running it eagerly; dynamic: None (a size that
    changes between calls becomes symbolic: one entry serves its values),
    True (every size of a tensor argument symbolic from the first call;
    sizes 0 and 1 specialised), False (every size static); backend must be
    None or "smelt"; mode is one of MODES (all compile the same way); options
    is a dict of OPTIONS keys (not together with mode). disable=True, or
    SMELT_DISABLE=1, returns model unchanged."""
    settings = _settings(fullgraph, dynamic, backend, mode, options)
    if model is None:
        def decorate(fn):
            if fn is None:
                raise TypeError("smelt.compile: nothing to compile (got None)")
            return fn if disable or _disabled() else _compile(fn, settings)
        return decorate
    if disable or _disabled():
        return model
    return _compile(model, settings)


def _mark(t, dims, attr, what):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"smelt.{what}: expected a tensor, got {type(t).__name__}")
    dims = [dims] if isinstance(dims, int) else list(dims)
    marked = set(getattr(t, attr, ()))
    for d in dims:
        if not isinstance(d, int) or not -t.dim() <= d < t.dim():
            raise IndexError(f"smelt.{what}: dim {d!r} out of range for a {t.dim()}-d tensor")
        marked.add(d % t.dim())
    setattr(t, attr, marked)


def mark_dynamic(t, dims):
    """Marks sizes `dims` (an int or a sequence) of tensor t dynamic: a
    compiled function traces them as symbols from the first call (unless it
    was compiled with dynamic=False), so one entry serves every value
    (sizes 0 and 1 are still specialised). The same attribute as
    torch._dynamo.mark_dynamic, without importing dynamo."""
    _mark(t, dims, "_dynamo_dynamic_indices", "mark_dynamic")


def mark_static(t, dims):
    """Marks sizes `dims` of tensor t static: never symbols, whatever the
    compiled function's dynamic setting (torch._dynamo.mark_static's
    attribute)."""
    _mark(t, dims, "_dynamo_static_indices", "mark_static")


def _call(self, *args, **kwargs):
    """The trampoline: a Python frame the tracer follows into self (a
    module, a builtin, any callable)."""
    return self(*args, **kwargs)


def _trampoline(target, settings):
    """A CompiledFunction of a copy of _call whose code is named after
    target's call (what logs, SMELT_DEBUG_DIR and explain show)."""
    name = getattr(target, "__qualname__", None)
    if not isinstance(name, str):
        name = type(target).__qualname__ + ".__call__"
    fn = types.FunctionType(_call.__code__.replace(co_qualname=name), _call.__globals__, "_call")
    fn.__qualname__ = name
    return _function(fn, settings)


def _function(fn, settings):
    """fn's CompiledFunction, kept for reset()."""
    cf = _C.CompiledFunction(fn, fullgraph=settings.fullgraph,
                             weight_packing=(settings.options or {}).get("weight_packing", "auto"),
                             dynamic=settings.dynamic, backend=(settings.options or {}).get("backend"))
    _live[cf] = settings
    return cf


def _optimizer_step(opt, closure=None):
    """What smelt.compile(opt.step) compiles."""
    return opt.step(closure)


def _compile(obj, settings):
    """What smelt.compile returns for obj (see the module docstring). An
    object smelt.compile made is compiled anew from its original."""
    if isinstance(obj, CompiledModule):
        obj = obj._orig_mod
    if isinstance(obj, torch.nn.Module):
        return CompiledModule(obj, settings)
    if isinstance(obj, _C.CompiledFunction):
        obj = obj.fn
    if isinstance(obj, types.FunctionType):
        return _function(obj, settings)
    if isinstance(obj, types.MethodType):
        if isinstance(obj.__self__, torch.optim.Optimizer) and obj.__name__ == "step":
            # torch's step is a profiling wrapper: compile a call of it, which
            # the tracer turns into the update graph (tracer/optim.c)
            return types.MethodType(_function(_optimizer_step, settings), obj.__self__)
        return types.MethodType(_compile(obj.__func__, settings), obj.__self__)
    if isinstance(obj, functools.partial):
        inner = _compile(obj.func, settings)
        p = functools.partial(inner, *obj.args, **obj.keywords)
        p._smelt = inner._smelt
        return p
    if not callable(obj):
        raise TypeError(f"smelt.compile: expected a function or nn.Module, got {type(obj).__name__}")
    call = getattr(type(obj), "__call__", None)
    if not isinstance(obj, type) and isinstance(call, (types.FunctionType, _C.CompiledFunction)):
        return types.MethodType(_compile(call, settings), obj)
    return types.MethodType(_trampoline(obj, settings), obj)


def _to_original(name):
    def method(self, *args, **kwargs):
        return getattr(self._orig_mod, name)(*args, **kwargs)
    method.__name__ = name
    method.__doc__ = f"{name} of the original module (a compiled module's hooks are the original's)."
    return method


class CompiledModule(torch.nn.Module):
    """A module whose calls run through smelt (CompiledModule(mod) is
    smelt.compile(mod)). The original is `_orig_mod`; attribute reads and
    writes, parameters, buffers, state_dict (the original's keys),
    load_state_dict and train()/eval() are the original's, and hooks
    registered through the compiled module are registered on the original.
    A call (or `forward(...)`) is one C call of `_smelt`, the trampoline's
    CompiledFunction bound to the original: nn.Module.__call__ of the
    original, with its hooks, is what is traced. copy.deepcopy and pickle
    rebuild it around a copy of the original, compiled anew."""

    _own = frozenset({"_orig_mod", "_smelt", "_smelt_settings", "forward"})

    def __init__(self, mod, settings=None):
        super().__init__()
        self._orig_mod = mod                       # a submodule: children(), train(), to()
        if not isinstance(settings, CompileSettings):   # (was CompiledModule(mod, fullgraph))
            settings = CompileSettings(fullgraph=bool(settings))
        self._smelt_settings = settings
        self._smelt = _trampoline(mod, self._smelt_settings)
        self.forward = types.MethodType(self._smelt, mod)

    # no nn.Module.__call__ of the wrapper (two Python frames): the bound
    # trampoline itself, read from the instance by C code
    __call__ = property(operator.attrgetter("forward"))

    @property
    def training(self):
        return self._orig_mod.training

    @training.setter
    def training(self, value):
        mods = self.__dict__.get("_modules")   # (nn.Module.__init__ sets it before _orig_mod exists)
        if mods and "_orig_mod" in mods:
            mods["_orig_mod"].training = value

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_orig_mod" or (name.startswith("__") and name.endswith("__")):
                raise
            return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        if name in CompiledModule._own or hasattr(type(self), name):
            super().__setattr__(name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name):
        if name in CompiledModule._own or hasattr(type(self), name):
            super().__delattr__(name)
        else:
            delattr(self._orig_mod, name)

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """The original's state_dict, with its own keys. Inside a parent's
        state_dict (prefix set) the keys are under `_orig_mod.`, the path
        the parent's load_state_dict walks (as torch.compile's wrapper)."""
        inner = prefix + "_orig_mod." if prefix else ""
        return self._orig_mod.state_dict(*args, destination=destination, prefix=inner, keep_vars=keep_vars)

    def load_state_dict(self, *args, **kwargs):
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def __reduce__(self):
        return (CompiledModule, (self._orig_mod, self._smelt_settings))

    def __len__(self):
        return len(self._orig_mod)

    def __dir__(self):
        return sorted(set(self._orig_mod.__dir__()) | set(super().__dir__()))

    def __repr__(self):
        return f"smelt.CompiledModule({self._orig_mod!r})"


for _name in ("register_forward_pre_hook", "register_forward_hook", "register_full_backward_pre_hook",
              "register_full_backward_hook", "register_backward_hook", "register_state_dict_pre_hook",
              "register_state_dict_post_hook", "register_load_state_dict_pre_hook",
              "register_load_state_dict_post_hook", "_register_state_dict_hook",
              "_register_load_state_dict_pre_hook"):
    if hasattr(torch.nn.Module, _name):
        setattr(CompiledModule, _name, _to_original(_name))


def reset():
    """Drop every compiled entry of every compiled function and module."""
    for cf in list(_live):
        cf.reset()
    _C.CompiledFunction._reset_hooked()
    _C.release_thread_arena()


def cache_info():
    """The disk cache of compiled code: a dict with `hits`, `misses`, `writes`,
    `evictions` and `corrupt` (damaged entries discarded) counted since this
    process started, `entries` and `bytes` on disk now, `enabled` (False when
    disabled or the directory is unsafe) and `dir`."""
    return _C.cache_info()


def clear_cache():
    """Delete every entry of the disk cache of compiled code (all processes
    share it). Compiled functions already loaded keep working."""
    _C.cache_clear()


class Explanation(dict):
    """What compiling a call would do (smelt.explain): `compiles` (False: the
    frame would run eagerly, `reason` says why and where), `graph` (the
    traced graph, one node a line), `guards` (the checks that select the
    compiled entry), `host_calls` (torch ops that run as extern calls inside
    the graph), `side_effects` (what the call does to objects from outside:
    lists and dicts changed, attributes and globals assigned, which the
    compiled code replays after its graph; one line each), counts
    (`nodes`, `inputs`, `num_guards`,
    `inputs_updated_in_place`), `arena_bytes` (the compiled graph's arena
    of temporaries, kept between calls), `backward` (True: inputs require
    grad in grad mode and a backward graph compiles with the forward, so
    the call is one autograd node), `graphs` (how many graphs the call would
    compile), `partial` (True: the frame breaks but is compiled around its
    breaks: `graph` is the graph before the first break, `breaks` lists
    each break with its reason and whether the frame resumes in compiled
    code after it; the call is run once to find them) and `frames`: when
    the frame would run eagerly, what smelt
    would do with each function it calls (the same keys, plus `function`,
    `file`, `line` and `calls`), in the order they are first called.
    str() gives a readable report."""

    def __str__(self):
        if self.get("partial"):
            g, b = self["graphs"], len(self["breaks"])
            lines = [f"smelt.explain: {g} graph{'s' * (g != 1)} around {b} graph break{'s' * (b != 1)}"]
            lines += [f"  break ({'resumes in compiled code' if b['resumes'] else 'runs eagerly from here'}): "
                      f"{b['reason']}" for b in self["breaks"]]
            if self["frames"]:
                lines.append("  the functions called around the breaks:")
                lines += ["    " + _frame_line(f) for f in self["frames"]]
            lines += ["graph before the first break:", self["graph"].rstrip()]
            return "\n".join(lines)
        lines = [f"smelt.explain: {'compiles as one graph' if self['compiles'] else 'runs eagerly'}"]
        if not self["compiles"]:
            lines.append(f"  reason: {self['reason']}")
            if self["frames"]:
                lines.append(f"  the functions it calls ({self['graphs']} would compile):")
                lines += ["    " + _frame_line(f) for f in self["frames"]]
            return "\n".join(lines)
        lines.append("  " + _counts(self))
        if self["host_calls"]:
            lines.append("  host calls: " + ", ".join(self["host_calls"]))
        if self["side_effects"]:
            lines.append("  side effects, replayed after the graph: " + "; ".join(self["side_effects"]))
        lines += ["graph:", self["graph"].rstrip(), "guards:", self["guards"].rstrip()]
        return "\n".join(lines)


def _counts(r):
    return (f"{r['nodes']} nodes, {r['inputs']} inputs, {r['num_guards']} guards, "
            f"{len(r['host_calls'])} host calls, {r['inputs_updated_in_place']} inputs updated in place"
            + (f", {r['arena_bytes'] / 2**20:.1f} MB of temporaries" if r.get("arena_bytes") else ""))


def _frame_line(f):
    where = f"{f['function']} ({f['file']}:{f['line']}, {f['calls']} call{'s' if f['calls'] > 1 else ''})"
    if f["compiles"]:
        return f"compiles: {where}: {_counts(f)}"
    return f"eager:    {where}: {f['reason']}"


def _target(obj):
    """(CompiledFunction, leading arguments, keywords) that a result of
    smelt.compile calls, or None for anything else."""
    if isinstance(obj, CompiledModule):
        return obj._smelt, (obj._orig_mod,), {}
    if isinstance(obj, _C.CompiledFunction):
        return obj, (), {}
    if isinstance(obj, types.MethodType) and isinstance(obj.__func__, _C.CompiledFunction):
        return obj.__func__, (obj.__self__,), {}
    if isinstance(obj, functools.partial) and hasattr(obj, "_smelt"):
        inner = _target(obj.func)
        return inner and (inner[0], inner[1] + obj.args, {**inner[2], **obj.keywords})
    return None


def explain(obj, *args, **kwargs):
    """Trace obj (anything smelt.compile takes, or what it returned) for
    this call and report what would be compiled, without keeping anything:
    see Explanation. A call smelt cannot compile as one graph gets the
    reason, with file:line; the call is then run once: through a fresh
    compiled function when the frame compiles around its graph breaks (to
    report each break and the graphs between them), or eagerly (as smelt
    would run it) to see what smelt would do with the functions it
    calls."""
    t = _target(obj)
    if t is None:
        if not callable(obj):
            raise TypeError(f"smelt.explain: expected a function or nn.Module, got {type(obj).__name__}")
        t = _target(_compile(obj, CompileSettings(fullgraph=True)))
    target, lead, keywords = t
    args, kwargs = lead + args, {**keywords, **kwargs}
    info = target._explain(*args, **kwargs)
    info["breaks"] = []
    if info["partial"]:
        # compiled around its breaks: the call runs once through a fresh
        # CompiledFunction (nothing kept), which says what each part became
        # and what the functions called around the breaks would do
        info.update(target._explain_partial(*args, **kwargs))
        info["graphs"] += sum(f["compiles"] for f in info["frames"])
    else:
        info["frames"] = [] if info["compiles"] else target._explain_callees(*args, **kwargs)
        info["graphs"] = 1 if info["compiles"] else sum(f["compiles"] for f in info["frames"])
    for rep in [info] + info["frames"]:
        rep["host_calls"] = [_call_name(fn) for fn in rep["host_calls"]]
    return Explanation(info)


def _call_name(fn):
    """torch.cumsum, Tensor.index_add_, torch._C._nn.pad, ..."""
    name = getattr(fn, "__name__", None) or repr(fn)
    owner = getattr(fn, "__objclass__", None)
    if owner is not None:
        return f"{owner.__name__}.{name}"
    module = getattr(fn, "__module__", None) or "torch"
    return f"{module}.{name}"
