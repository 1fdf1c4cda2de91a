"""Compiled regions under autograd (pyext/autograd_bridge.c).

A region whose inputs require grad runs as one torch.autograd.Function:
its forward runs the forward plan (which also returns the values the
backward reads), its backward the backward plan. Forward inputs the
backward reads are kept with save_for_backward, so an in-place change to
one before backward raises autograd's own error, as in eager.
"""
import torch
from torch.autograd.function import once_differentiable

_FWD_INPUT, _SAVED, _GRAD = 0, 1, 2


class _Fallback(Exception):
    """The forward plan asked to run eagerly (a host call's result did not
    match what was traced)."""


class Spec:
    """How the forward and backward plans connect (see autograd/autograd.h)."""
    __slots__ = ("nout", "saved_inputs", "args", "grad_in", "uses", "grad_outs", "nondiff", "nin", "saved_bytes",
                 "like")

    def __init__(self, nout, kinds, index, grad_in, uses, diff, nin, saved_bytes):
        self.nout, self.grad_in, self.uses, self.nin, self.saved_bytes = nout, grad_in, uses, nin, saved_bytes
        # the outputs whose gradients flow in, in backward-input order (bit j of uses)
        self.grad_outs = tuple(i for k, i in zip(kinds, index) if k == _GRAD)
        self.nondiff = tuple(o for o in range(nout) if not diff[o])
        self.like = None   # output number -> (shape, dtype) of those outputs, from the first run (shapes are guarded)
        self.saved_inputs = tuple(sorted({i for k, i in zip(kinds, index) if k == _FWD_INPUT}))
        pos = {i: p for p, i in enumerate(self.saved_inputs)}
        nsi = len(self.saved_inputs)
        # each backward input: ("s", position in saved tensors) or ("g", output number)
        self.args = tuple(("s", pos[i]) if k == _FWD_INPUT else ("s", nsi + i - nout) if k == _SAVED else ("g", i)
                          for k, i in zip(kinds, index))


class _Region(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fwd, bwd, spec, *ins):
        outs = fwd._run_guarded(*ins)   # (ins passed the frame's guards)
        if outs is NotImplemented:
            raise _Fallback
        ctx.spec, ctx.bwd = spec, bwd
        ctx.save_for_backward(*(ins[i] for i in spec.saved_inputs), *outs[spec.nout:])
        user = outs[:spec.nout]
        ctx.set_materialize_grads(False)   # an output no gradient reached: None, as eager's
        if spec.like is None:
            spec.like = {o: (user[o].shape, user[o].dtype, user[o].device) for o in spec.grad_outs}
        if spec.nondiff:
            ctx.mark_non_differentiable(*(user[o] for o in spec.nondiff))
        return tuple(user)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        spec, saved = ctx.spec, ctx.saved_tensors
        flowed = 0
        for j, o in enumerate(spec.grad_outs):
            if grads[o] is not None:
                flowed |= 1 << min(j, 63)
        res = [None] * (3 + spec.nin)
        if not flowed:
            return tuple(res)
        args = [saved[i] if k == "s" else grads[i].contiguous() if grads[i] is not None
                else torch.zeros(spec.like[i][0], dtype=spec.like[i][1], device=spec.like[i][2]) for k, i in spec.args]
        gs = ctx.bwd(*args)
        for g, i, u in zip(gs, spec.grad_in, spec.uses):
            res[3 + i] = g if u & flowed else None
        return tuple(res)


def run(fwd, bwd, spec, *ins):
    """The region's outputs (a list) for graph inputs ins, recorded as one
    autograd node; NotImplemented: run the frame eagerly."""
    try:
        return list(_Region.apply(fwd, bwd, spec, *ins))
    except _Fallback:
        return NotImplemented


def dropout_noise(x, p):
    """The noise eager's dropout multiplies x by (a host call of compiled
    code in training mode): drawn from torch's generator exactly as
    at::dropout draws it, so a seeded run matches eager, and the product
    is a graph op whose gradient is the same noise."""
    if p == 1:
        return torch.zeros_like(x)   # no draw, as eager
    return torch.empty_like(x).bernoulli_(1 - p).div_(1 - p)


def index_add_rows(g, ids, n, base=None, out=None):
    """The rows of g summed into n zero rows at ids, or into a copy of base
    (the gradient so far: a tied embedding's), the backward of embedding
    and of whole-row gathers, a host call of the backward plan. out: the
    plan's buffer for the result (None when it hands the result over),
    written in place."""
    if out is None:
        out = g.new_empty((n,) + tuple(g.shape[1:]))
    if base is not None:
        out.copy_(base)
    else:
        out.zero_()
    return out.index_add_(0, ids, g)


index_add_rows.smelt_writes_out = True


def _unfold_backward(g, sizes, dim, size, step):
    return torch.ops.aten.unfold_backward(g, sizes, dim, size, step)


def call_template(kind, p):
    """(fn, args, kwargs) of the backward plan's host call of kind
    (autograd/autograd.h ad_call_kind) with integer params p."""
    from smelt._C import Slot
    if kind == 0:
        return index_add_rows, (Slot(0), Slot(1), p[0], Slot(2) if p[1] else None, Slot(2 + p[1])), {}
    if kind == 1:
        nd = p[0]
        return _unfold_backward, (Slot(0), list(p[1:1 + nd]), p[1 + nd], p[2 + nd], p[3 + nd]), {}
    raise ValueError(f"smelt: unknown backward host call kind {kind}")


def _swap(o, leaves):
    """o with every tensor that is a key of leaves (by id) replaced by its
    leaf, inside tuples, lists and dict values (as the host call's template
    holds them)."""
    if isinstance(o, torch.Tensor):
        return leaves.get(id(o), o)
    if type(o) in (tuple, list):
        return type(o)(_swap(v, leaves) for v in o)
    if type(o) is dict:
        return {k: _swap(v, leaves) for k, v in o.items()}
    return o


def vjp_call(fn, args, kwargs, nsrc, nout, *tensors):
    """The gradients of a forward host call's sources (tensors[:nsrc], which
    fill its template's places) for the gradients of its results
    (tensors[nsrc:]): the call run again under torch's autograd; zeros where
    a source gets none."""
    srcs, grads = tensors[:nsrc], tensors[nsrc:]
    leaves = {id(t): t.detach().requires_grad_(t.is_floating_point() or t.is_complex()) for t in srcs}
    with torch.enable_grad():
        out = fn(*_swap(args, leaves), **_swap(kwargs, leaves))
    outs = out if isinstance(out, (tuple, list)) else (out,)
    pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [leaves[id(t)] for t in srcs if leaves[id(t)].requires_grad]
    got = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True) \
        if pairs and wrt else [None] * len(wrt)
    by = {id(x): g for x, g in zip(wrt, got)}
    res = []
    for t in srcs:
        g = by.get(id(leaves[id(t)]))
        res.append(g if g is not None else torch.zeros_like(t))
    return tuple(res)


class _SeededRefused(RuntimeError):
    pass


def call_unseeded(fn, *args, **kwargs):
    """fn(*args, **kwargs) (a custom autograd.Function's apply, on meta
    tensors: the tracer's probe of a host call), refused if any op it runs
    draws random numbers: its backward host call runs it again, and would
    draw others than the forward did."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Seeded(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if torch.Tag.nondeterministic_seeded in func.tags:
                raise _SeededRefused(f"draws random numbers ({func.name()}): a backward that runs it again "
                                     "would draw others")
            return func(*args, **(kwargs or {}))

    with _Seeded():
        return fn(*args, **kwargs)
