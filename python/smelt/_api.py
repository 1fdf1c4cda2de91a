"""smelt.compile / smelt.reset / smelt.cache_info / smelt.clear_cache: the
thin public layer over smelt._C.

A compiled function is a smelt._C.CompiledFunction (tracing, guards and the
cache of compiled entries are all in C). A compiled nn.Module is a wrapper
module that keeps the original's parameters, state_dict, train()/eval() and
attributes, and runs `type(module).forward` through one CompiledFunction.
"""
import os
import weakref

import torch

from . import _C

_live = weakref.WeakSet()   # every CompiledFunction, for reset()


def _disabled():
    return os.environ.get("SMELT_DISABLE", "") not in ("", "0")


def _compile_function(fn, fullgraph):
    """The C CompiledFunction itself (no Python frame per call); it carries
    fn's __name__/__qualname__/__module__/__wrapped__, binds as a method, and
    `._smelt` returns it (stats(), reset())."""
    cf = _C.CompiledFunction(fn, fullgraph=fullgraph)
    _live.add(cf)
    return cf


class CompiledModule(torch.nn.Module):
    """A module whose forward runs through smelt. Attribute access, parameters,
    buffers, state_dict and train()/eval() are those of the original module."""

    def __init__(self, mod, fullgraph):
        super().__init__()
        self._orig_mod = mod
        self.training = mod.training
        forward = type(mod).forward
        self._smelt = _C.CompiledFunction(forward, fullgraph=fullgraph)
        _live.add(self._smelt)

    def forward(self, *args, **kwargs):
        return self._smelt(self._orig_mod, *args, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)

    def state_dict(self, *args, **kwargs):
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def __repr__(self):
        return f"smelt.CompiledModule({self._orig_mod!r})"


def compile(obj=None, *, dynamic=None, fullgraph=False, mode=None, options=None):
    """Compile a function or nn.Module; also usable as @smelt.compile or
    @smelt.compile(fullgraph=True). With SMELT_DISABLE=1 returns obj as is.

    dynamic, mode and options are accepted for torch.compile compatibility;
    dynamic shapes are not implemented yet (every new shape compiles anew)."""
    if obj is None:
        return lambda o: compile(o, dynamic=dynamic, fullgraph=fullgraph, mode=mode, options=options)
    if _disabled():
        return obj
    if isinstance(obj, torch.nn.Module):
        return CompiledModule(obj, fullgraph)
    if callable(obj) and hasattr(obj, "__code__"):
        return _compile_function(obj, fullgraph)
    raise TypeError(f"smelt.compile: expected a function or nn.Module, got {type(obj).__name__}")


def reset():
    """Drop every compiled entry of every compiled function and module."""
    for cf in list(_live):
        cf.reset()
    _C.CompiledFunction._reset_hooked()


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
    the graph), counts (`nodes`, `inputs`, `num_guards`,
    `inputs_updated_in_place`), `graphs` (how many graphs the call would
    compile) and `frames`: when the frame would run eagerly, what smelt
    would do with each function it calls (the same keys, plus `function`,
    `file`, `line` and `calls`), in the order they are first called.
    str() gives a readable report."""

    def __str__(self):
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
        lines += ["graph:", self["graph"].rstrip(), "guards:", self["guards"].rstrip()]
        return "\n".join(lines)


def _counts(r):
    return (f"{r['nodes']} nodes, {r['inputs']} inputs, {r['num_guards']} guards, "
            f"{len(r['host_calls'])} host calls, {r['inputs_updated_in_place']} inputs updated in place")


def _frame_line(f):
    where = f"{f['function']} ({f['file']}:{f['line']}, {f['calls']} call{'s' if f['calls'] > 1 else ''})"
    if f["compiles"]:
        return f"compiles: {where}: {_counts(f)}"
    return f"eager:    {where}: {f['reason']}"


def explain(obj, *args, **kwargs):
    """Trace obj (a function, nn.Module, or what smelt.compile returned) for
    this call and report what would be compiled, without running compiled
    code or keeping anything: see Explanation. A call smelt cannot compile
    gets the reason the frame would run eagerly, with file:line; the call
    is then run once eagerly (as smelt would run it) to see what smelt would
    do with the functions it calls."""
    if isinstance(obj, CompiledModule):
        target, args = obj._smelt, (obj._orig_mod,) + args
    elif isinstance(obj, torch.nn.Module):
        target, args = _C.CompiledFunction(type(obj).forward, fullgraph=True), (obj,) + args
    elif isinstance(obj, _C.CompiledFunction):
        target = obj
    elif callable(obj) and hasattr(obj, "__code__"):
        target = _C.CompiledFunction(obj, fullgraph=True)
    else:
        raise TypeError(f"smelt.explain: expected a function or nn.Module, got {type(obj).__name__}")
    info = target._explain(*args, **kwargs)
    info["frames"] = [] if info["compiles"] else target._explain_callees(*args, **kwargs)
    for rep in [info] + info["frames"]:
        rep["host_calls"] = [_call_name(fn) for fn in rep["host_calls"]]
    info["graphs"] = 1 if info["compiles"] else sum(f["compiles"] for f in info["frames"])
    return Explanation(info)


def _call_name(fn):
    """torch.cumsum, Tensor.index_add_, torch._C._nn.pad, ..."""
    name = getattr(fn, "__name__", None) or repr(fn)
    owner = getattr(fn, "__objclass__", None)
    if owner is not None:
        return f"{owner.__name__}.{name}"
    module = getattr(fn, "__module__", None) or "torch"
    return f"{module}.{name}"
