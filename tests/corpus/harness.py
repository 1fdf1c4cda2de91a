"""Runs one corpus program on eager and on smelt.compile and compares.

For every call step, both sides get their own deep copy of the step's
inputs (aliasing between inputs kept), the same torch seed and the same
grad mode; between the two runs the observable state the program touches
(its declared globals and module attributes, a module's parameters,
buffers and train/eval flags) is put back as it was, so side effects are
compared too. Compared: the result (types exactly, container structure
and key order, tensor dtype/shape/device/layout/requires_grad/attributes,
values within a tolerance), which results are the very input objects (and,
for programs that declare `alias`, which share an input's storage), the
inputs after the call, the declared state after the call, what was printed
and logged, and the exception type when eager raises.

The outcome of a program: `ok` or `wrong` (with the first difference), and
how smelt ran it: `whole` (every call ran compiled code, no graph break),
`partial` (a break, but compiled code ran: a callee's graph, compiled now or
by an earlier program for shared code such as nn.Linear.forward, or another
entry), `eager` (nothing compiled). Graph and break counts come from
`._smelt.stats()` of the compiled object and of every CompiledFunction the
frame hook kept for the program's own code and its modules' forwards
(differences over the program's run: graphs compiled, not reused).
"""
import contextlib
import copy
import dataclasses
import inspect
import io
import logging
import math
import re
import time
import types
import warnings
import zlib

import torch

import smelt
from smelt import _C

from .base import Call, Ctx, Do, build

LOG = logging.getLogger("corpus")

FLOAT_TOL = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-9),
             torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2),
             torch.complex64: (1e-4, 1e-5), torch.complex128: (1e-7, 1e-9)}

IMMUTABLE = (int, float, bool, complex, str, bytes, type(None), torch.dtype, torch.device,
             torch.Size, torch.layout, torch.memory_format, range, slice, type(Ellipsis))


# ---------------------------------------------------------------- frozen values

@dataclasses.dataclass
class FTensor:
    """A tensor as observed at one moment (later in-place writes do not change it)."""
    cls: type
    dtype: torch.dtype
    shape: tuple
    device: str
    layout: torch.layout
    requires_grad: bool
    data: torch.Tensor
    attrs: object


@dataclasses.dataclass
class FObj:
    cls: type
    fields: dict


@dataclasses.dataclass
class FOpaque:
    cls: type
    text: str


def freeze(v, depth=0):
    """A copy of v to compare later (see FTensor/FObj)."""
    if depth > 8:
        return FOpaque(type(v), "<deep>")
    if isinstance(v, torch.Tensor):
        return freeze_tensor(v, depth)
    if isinstance(v, IMMUTABLE):
        return v
    if isinstance(v, list):
        return [freeze(x, depth + 1) for x in v]
    if isinstance(v, tuple):
        items = [freeze(x, depth + 1) for x in v]
        return type(v)(*items) if hasattr(v, "_fields") else tuple(items)
    if isinstance(v, dict):
        items = [(k, freeze(x, depth + 1)) for k, x in v.items()]
        return FObj(type(v), {"items": items, "factory": getattr(v, "default_factory", None)})
    if isinstance(v, (set, frozenset)):
        return FObj(type(v), {"items": sorted((repr(freeze(x, depth + 1)) for x in v))})
    if isinstance(v, torch.nn.Module):
        return FOpaque(type(v), "module")
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return FObj(type(v), {f.name: freeze(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v)})
    try:
        import numpy as np
        if isinstance(v, np.ndarray):
            return FObj(np.ndarray, {"dtype": str(v.dtype), "shape": v.shape,
                                     "data": freeze(torch.from_numpy(v.copy()), depth + 1)})
        if isinstance(v, np.generic):
            return FObj(type(v), {"value": v.item()})
    except ImportError:
        pass
    if callable(v) or inspect.isclass(v) or inspect.ismodule(v):
        return FOpaque(type(v), getattr(v, "__qualname__", type(v).__name__))
    if hasattr(v, "__dict__"):
        return FObj(type(v), {k: freeze(x, depth + 1) for k, x in vars(v).items()})
    return FOpaque(type(v), repr(v))


def freeze_tensor(t, depth):
    attrs = {k: freeze(x, depth + 1) for k, x in vars(t).items()} if vars(t) else None
    with torch._C.DisableTorchFunctionSubclass():
        d = t.detach()
        if d.layout != torch.strided:
            d = d.to_dense()
        d = d.clone()
    return FTensor(type(t), t.dtype, tuple(t.shape), str(t.device), t.layout, t.requires_grad, d, attrs)


# ---------------------------------------------------------------- comparison

def compare(e, c, tol, path):
    """None when c (compiled, frozen) matches e (eager, frozen), else the
    first difference as text."""
    if type(e) is not type(c):
        return f"{path}: type {_tn(c)}, eager {_tn(e)}"
    if isinstance(e, FTensor):
        return compare_tensor(e, c, tol, path)
    if isinstance(e, (FObj, FOpaque)):
        if e.cls is not c.cls:
            return f"{path}: type {c.cls.__name__}, eager {e.cls.__name__}"
        if isinstance(e, FOpaque):
            return None if e.text == c.text or e.text == "module" else f"{path}: {c.text}, eager {e.text}"
        return compare_fields(e.fields, c.fields, tol, path)
    if isinstance(e, (list, tuple)):
        if len(e) != len(c):
            return f"{path}: length {len(c)}, eager {len(e)}"
        for i, (x, y) in enumerate(zip(e, c)):
            d = compare(x, y, tol, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(e, float):
        ok = e == c or (math.isnan(e) and math.isnan(c)) or math.isclose(e, c, rel_tol=1e-5, abs_tol=1e-7)
        return None if ok else f"{path}: {c!r}, eager {e!r}"
    if isinstance(e, complex):
        return None if abs(e - c) <= 1e-5 * (1 + abs(e)) else f"{path}: {c!r}, eager {e!r}"
    return None if e == c else f"{path}: {c!r}, eager {e!r}"


def compare_fields(e, c, tol, path):
    if list(e) != list(c):
        return f"{path}: fields {list(c)}, eager {list(e)}"
    for k in e:
        if k == "items" and isinstance(e[k], list) and e[k] and isinstance(e[k][0], tuple):
            ek, ck = [x[0] for x in e[k]], [x[0] for x in c[k]]
            if ek != ck:
                return f"{path}: keys {ck}, eager {ek}"
            for (key, x), (_, y) in zip(e[k], c[k]):
                d = compare(x, y, tol, f"{path}[{key!r}]")
                if d:
                    return d
            continue
        d = compare(e[k], c[k], tol, f"{path}.{k}")
        if d:
            return d
    return None


def compare_tensor(e, c, tol, path):
    for field in ("cls", "dtype", "shape", "device", "layout", "requires_grad"):
        if getattr(e, field) != getattr(c, field):
            return f"{path}: {field} {getattr(c, field)}, eager {getattr(e, field)}"
    d = compare(e.attrs, c.attrs, tol, f"{path}.__dict__")
    if d:
        return d
    x, y = e.data, c.data
    if x.dtype.is_floating_point or x.dtype.is_complex:
        rtol, atol = tol or FLOAT_TOL.get(x.dtype, (1e-4, 1e-5))
        if x.dtype.is_floating_point:
            x, y = x.double(), y.double()
        bad = ~((x == y) | ((x - y).abs() <= atol + rtol * x.abs()) | (x.isnan() & y.isnan()))
    else:
        bad = x != y
    if bad.any():
        i = tuple(int(k) for k in bad.nonzero()[0]) if bad.ndim else ()
        return (f"{path}: {int(bad.sum())} of {x.numel()} elements differ, first at {list(i)}: "
                f"{y[i].item()!r}, eager {x[i].item()!r}")
    return None


def _tn(v):
    if isinstance(v, (FObj, FOpaque, FTensor)):
        return v.cls.__name__
    return type(v).__name__


NUM = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")


def compare_text(e, c, what):
    """Printed/logged text: equal, except numbers with decimals compared to 1e-3."""
    if e == c:
        return None
    ew, cw = NUM.split(e), NUM.split(c)
    en, cn = NUM.findall(e), NUM.findall(c)
    if ew == cw and len(en) == len(cn) and all(math.isclose(float(a), float(b), rel_tol=1e-3, abs_tol=1e-4)
                                               for a, b in zip(en, cn)):
        return None
    return f"{what}: {c[:200]!r}, eager {e[:200]!r}"


# ---------------------------------------------------------------- identity patterns

def walk(v, out, seen, depth=0):
    """Objects reachable from v whose identity a user can observe
    (tensors, lists, dicts, sets, other mutable objects), in DFS order."""
    if depth > 6 or isinstance(v, IMMUTABLE) or id(v) in seen:
        return out
    seen.add(id(v))
    if not isinstance(v, tuple):
        out.append(v)
    if isinstance(v, (list, tuple, set, frozenset)):
        for x in v:
            walk(x, out, seen, depth + 1)
    elif isinstance(v, dict):
        for x in v.values():
            walk(x, out, seen, depth + 1)
    return out


def identity_pattern(result, known, storage):
    """For each object reachable from result: the index of the known object
    it is (-1: none), the index of an earlier result object it is, and with
    `storage`, the index of the known tensor whose storage it shares."""
    objs = walk(result, [], set())
    ids = {id(k): i for i, k in enumerate(known)}
    pat = []
    for j, o in enumerate(objs):
        entry = [type(o).__name__, ids.get(id(o), -1)]
        if storage and isinstance(o, torch.Tensor):
            entry.append(shared_storage(o, known))
        pat.append(tuple(entry))
    return pat


def identity_diff(e, c):
    """Text for two different identity patterns: the first entry that differs."""
    if len(e) != len(c):
        return f"identity of results: {len(c)} distinct objects, eager {len(e)}"
    for j, (x, y) in enumerate(zip(e, c)):
        if x != y:
            what = ["type ", "is input #", "shares storage with input #"]
            k = next(i for i in range(len(x)) if x[i] != y[i])
            return (f"identity of results: object {j} ({x[0]}) {what[k]}{y[k]}, eager {what[k]}{x[k]} "
                    f"(-1: none, -2: no storage)")
    return None


def shared_storage(t, known):
    if t.layout != torch.strided or t.numel() == 0:
        return -2
    p = t.untyped_storage().data_ptr()
    for i, k in enumerate(known):
        if isinstance(k, torch.Tensor) and k.layout == torch.strided and k.numel() and \
                k.untyped_storage().data_ptr() == p:
            return i
    return -1


# ---------------------------------------------------------------- state

def state_of(p, subject):
    """{key: current value} of everything the program declares observable,
    plus a module's parameters, buffers and training flags."""
    st = {}
    for name in p.state:
        if name.startswith("self."):
            st[name] = _attr(subject, name[5:])
        elif name.startswith("cell:"):
            st[name] = _cell(subject, name[5:]).cell_contents
        elif "." in name:
            head, rest = name.split(".", 1)
            st[name] = _attr(p.module_globals[head], rest)
        else:
            st[name] = p.module_globals.get(name, "<unbound>")
    if isinstance(subject, torch.nn.Module):
        for k, v in subject.state_dict(keep_vars=True).items():
            st["sd:" + k] = v
        st["training"] = [m.training for m in subject.modules()]
        for k, v in subject.named_parameters():
            st["grad:" + k] = v.grad
    return st


def _cell(fn, name):
    return fn.__closure__[fn.__code__.co_freevars.index(name)]


def _attr(o, path):
    for part in path.split("."):
        o = getattr(o, part)
    return o


def save_state(p, subject):
    with torch.no_grad():
        return {k: v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
                for k, v in state_of(p, subject).items()}


def restore_state(p, subject, saved):
    cur = state_of(p, subject)
    for k, v in saved.items():
        c = cur[k]
        if k == "training":
            for m, flag in zip(subject.modules(), v):
                m.training = flag
        elif k.startswith("grad:"):
            subject.get_parameter(k[5:]).grad = None if v is None else v.clone()
        elif isinstance(c, torch.Tensor) and isinstance(v, torch.Tensor) and c.shape == v.shape and c.dtype == v.dtype:
            with torch.no_grad():
                c.copy_(v)
        elif type(c) is type(v) and isinstance(c, list):
            c[:] = v
        elif type(c) is type(v) and isinstance(c, (dict, set)):
            c.clear()
            c.update(v)
        elif k.startswith("cell:"):
            _cell(subject, k[5:]).cell_contents = v
        elif k.startswith("self."):
            *path, last = k[5:].split(".")
            setattr(_attr(subject, ".".join(path)) if path else subject, last, v)
        elif "." in k and not k.startswith("sd:"):
            head, rest = k.split(".", 1)
            *path, last = rest.split(".")
            o = p.module_globals[head]
            setattr(_attr(o, ".".join(path)) if path else o, last, v)
        elif not k.startswith("sd:"):
            p.module_globals[k] = v


# ---------------------------------------------------------------- one side

class Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(f"{record.levelname}:{record.getMessage()}")


@dataclasses.dataclass
class GeneratorItems:
    """What a returned generator yielded (compared in place of it)."""
    items: list


@dataclasses.dataclass
class CoroutineValue:
    """What a returned coroutine returned when driven to its end."""
    value: object


def materialise(out):
    """A generator's items, a coroutine's value."""
    if inspect.isgenerator(out):
        return GeneratorItems(list(out))
    if inspect.iscoroutine(out):
        try:
            while True:
                out.send(None)
        except StopIteration as stop:
            return CoroutineValue(stop.value)
    return out


def copy_inputs(tree):
    """A deep copy of tree (aliasing kept); tensor subclasses, which
    deepcopy cannot copy in general, are cloned by hand (attributes too)."""
    memo = {}
    for v in walk(tree, [], set()):
        if isinstance(v, torch.Tensor) and v.layout not in (torch.strided, torch.sparse_coo):
            memo[id(v)] = v.clone()
        elif isinstance(v, torch.Tensor) and type(v) not in (torch.Tensor, torch.nn.Parameter):
            with torch._C.DisableTorchFunctionSubclass():
                c = v.detach().clone().requires_grad_(v.requires_grad)
            c = torch.Tensor._make_subclass(type(v), c, v.requires_grad)
            c.__dict__.update(copy.deepcopy(v.__dict__))
            memo[id(v)] = c
    return copy.deepcopy(tree, memo)


def run_side(fn, p, subject, args, kwargs, seed):
    """Runs fn on a deep copy of the inputs; returns what the user observes."""
    args, kwargs = copy_inputs((args, kwargs))
    known = walk((args, kwargs), [], set())
    if isinstance(subject, torch.nn.Module):
        known += [subject] + list(subject.parameters()) + list(subject.buffers())
    torch.manual_seed(seed)
    out, exc = None, None
    buf, cap = io.StringIO(), Capture()
    LOG.addHandler(cap)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            mode = torch.is_grad_enabled() if p.grad == "keep" else p.grad
            with contextlib.redirect_stdout(buf), torch.set_grad_enabled(mode):
                out = materialise(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - compared with the other side
            exc = e
        finally:
            LOG.removeHandler(cap)
    ours = [f"{w.category.__name__}: {w.message}" for w in warned
            if "/corpus/" in (w.filename or "") and not str(w.message).startswith("smelt")
            and "Triggered internally" not in str(w.message)]
    return {
        "exc": exc,
        "out": freeze(out),
        "ident": identity_pattern(out, known, p.alias),
        "args": freeze((args, kwargs)),
        "stdout": buf.getvalue(),
        "log": "\n".join(cap.lines + ours),
        "state": freeze({k: v for k, v in state_of(p, subject).items()}),
    }


def compare_sides(e, c, tol, alias):
    """The first difference between eager's and compiled's observations
    (identity of results only with `alias`)."""
    if e["exc"] is not None or c["exc"] is not None:
        if e["exc"] is None:
            return f"compiled raised {type(c['exc']).__name__}: {str(c['exc'])[:300]}"
        if c["exc"] is None:
            return f"eager raised {type(e['exc']).__name__}: {str(e['exc'])[:200]}, compiled returned"
        if type(e["exc"]) is not type(c["exc"]):
            return (f"compiled raised {type(c['exc']).__name__}: {str(c['exc'])[:200]}, "
                    f"eager {type(e['exc']).__name__}: {str(e['exc'])[:200]}")
    else:
        d = compare(e["out"], c["out"], tol, "out")
        if d:
            return d
        if alias and e["ident"] != c["ident"]:
            return identity_diff(e["ident"], c["ident"])
    return (compare(e["args"], c["args"], tol, "inputs after the call")
            or compare(e["state"], c["state"], tol, "state")
            or compare_text(e["stdout"], c["stdout"], "printed")
            or compare_text(e["log"], c["log"], "logged"))


# ---------------------------------------------------------------- counting graphs

def codes_of(p, subject):
    """Code objects of the program's module (functions, methods, nested
    code) and the forwards of the subject's submodules."""
    codes = []

    def add(co):
        if isinstance(co, types.CodeType) and co not in codes:
            codes.append(co)
            for k in co.co_consts:
                add(k)

    def add_fn(f):
        f = getattr(f, "__func__", f)
        if isinstance(f, property):
            for g in (f.fget, f.fset):
                add_fn(g)
        elif hasattr(f, "__code__"):
            add(f.__code__)

    modname = p.module_globals["__name__"]
    for v in list(p.module_globals.values()):
        if inspect.isclass(v) and v.__module__ == modname:
            for a in vars(v).values():
                add_fn(a)
        elif isinstance(v, types.FunctionType) and v.__module__ == modname:
            add_fn(v)
    if isinstance(subject, torch.nn.Module):
        for m in subject.modules():
            for name in ("forward", "__call__", "_call_impl"):
                add_fn(getattr(type(m), name, None))
    elif hasattr(subject, "__code__"):
        add(subject.__code__)
    return codes


def hooked(code):
    cells = tuple(types.CellType() for _ in code.co_freevars)
    return _C.CompiledFunction.of(types.FunctionType(code, {}, "f", None, cells))


def counters(codes, skip):
    """{code: (compiles, breaks, last_break, hits)} of the CompiledFunction
    kept for each code."""
    out = {}
    for co in codes:
        cf = hooked(co)
        if cf is not None and cf is not skip:
            st = cf.stats()
            out[co] = (st["compiles"], st["breaks"], st["last_break"], st["hits"])
    return out


# ---------------------------------------------------------------- a program

def seed_of(name, step):
    return (zlib.crc32(name.encode()) * 64 + step) % (2 ** 62)


def run_program(p):
    """Runs p (see the module doc); returns its result record."""
    t0 = time.perf_counter()
    g = p.module_globals
    saved_globals = dict(g)
    res = {"name": p.name, "category": p.category, "status": "ok", "detail": "", "step": None}
    try:
        _run_steps(p, res)
    except Exception as e:  # noqa: BLE001 - a harness error (the program's set-up), not smelt's
        res.update(status="error", detail=f"harness: {type(e).__name__}: {e}"[:500])
    finally:
        for k in [k for k in g if k not in saved_globals]:
            del g[k]
        g.update(saved_globals)
        reset_torch_state()
    res["seconds"] = round(time.perf_counter() - t0, 3)
    return res


def _run_steps(p, res):
    subject = p.build()
    codes = codes_of(p, subject)
    before = counters(codes, None)
    compiled = smelt.compile(subject, fullgraph=p.fullgraph)
    top = compiled._smelt
    ctx = Ctx(subject, p.module_globals)
    ncalls = 0
    for i, step in enumerate(p.steps):
        if isinstance(step, Do):
            step.act(ctx)
            continue
        assert isinstance(step, Call)
        gen = torch.Generator().manual_seed(seed_of(p.name, i))
        args = build(step.inputs if step.inputs is not None else p.inputs, gen)
        kwargs = build(step.kwargs if step.kwargs is not None else p.kwargs, gen)
        saved = save_state(p, subject)
        e = run_side(subject, p, subject, args, kwargs, seed_of(p.name, 1000 + i))
        after_eager = save_state(p, subject)
        restore_state(p, subject, saved)
        c = run_side(compiled, p, subject, args, kwargs, seed_of(p.name, 1000 + i))
        ncalls += 1
        diff = compare_sides(e, c, p.tol, p.alias)
        if diff and res["status"] == "ok":
            res.update(status="wrong", detail=diff, step=i)
        if not diff and not p.alias and not e["exc"] and e["ident"] != c["ident"] and "note" not in res:
            res["note"] = f"step {i}: " + identity_diff(e["ident"], c["ident"])
        restore_state(p, subject, after_eager)
    classify(res, top, codes, before, ncalls)


def classify(res, top, codes, before, ncalls):
    st = top.stats()
    graphs, breaks = st["compiles"], st["breaks"]
    reasons = [st["last_break"]] if st["breaks"] else []
    reused = 0       # runs of callee entries compiled before this program (shared code)
    for co, (comp, brk, why, hits) in counters(codes, top).items():
        c0, b0, _, h0 = before.get(co, (0, 0, None, 0))
        graphs += comp - c0
        breaks += brk - b0
        reused += hits - h0
        if brk > b0 and why:
            reasons.append(why)
    whole = st["breaks"] == 0 and st["eager_entries"] == 0 and st["compiles"] >= 1
    res.update(mode="whole" if whole else "partial" if graphs > 0 or reused > 0 else "eager",
               graphs=graphs, breaks=breaks, calls=ncalls, top_compiles=st["compiles"],
               top_breaks=st["breaks"], hits=st["hits"], reasons=reasons)


def reset_torch_state():
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    from torch.nn.modules import module as m
    for d in (m._global_forward_hooks, m._global_forward_pre_hooks, m._global_backward_hooks,
              m._global_module_registration_hooks if hasattr(m, "_global_module_registration_hooks") else {}):
        d.clear()
