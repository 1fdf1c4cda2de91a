"""smelt as a torch.compile backend: `torch.compile(model, backend="smelt")`.

TorchDynamo captures each frame into an FX GraphModule and hands it to
`backend(gm, example_inputs)`. The GraphModule's forward is ordinary Python
that FX generated: one call per node (`torch._C._nn.linear(x, w, b)`,
`operator.add`, `x.view(...)`, `torch._C._set_grad_enabled(False)`). smelt
compiles that forward with smelt.compile, so its tracer maps every node
through the same op table it uses for user code (tracer/ops.c): there is no
second table of FX targets to keep in step. What follows from that:

  - a node the op table cannot map is a graph break in smelt's trace: that
    call runs eagerly inside the compiled forward (the rest stays compiled),
    and the reason is logged on the `graph_breaks` channel, as for
    smelt.compile; the `dynamo` channel (SMELT_LOGS=dynamo) logs each graph
    Dynamo hands over;
  - training: Dynamo passes parameters as graph inputs that require grad,
    and smelt's tracer differentiates the graph itself (its compiled
    backward, autograd/); AOTAutograd is not used. An eager segment (a
    break) is differentiated by eager autograd;
  - guards: Dynamo guards the frame, smelt guards its graph's inputs (dtype,
    shape, strides, requires_grad). A size Dynamo made symbolic is an int
    input; where a tensor input has that size, the graph reads it from the
    tensor instead, so smelt's own dynamic shapes take it (one entry for
    every value, as for smelt.compile's callers).

`import smelt` registers the backend with Dynamo's registry (when Dynamo is
imported later, at that moment), and the package's `torch_dynamo_backends`
entry point (pyproject.toml) makes the name known without the import.
"""
import importlib.abc
import importlib.util
import itertools
import logging
import sys
import types
import weakref

from . import _api

log = logging.getLogger("smelt.dynamo")

NAME = "smelt"
REGISTRY = "torch._dynamo.backends.registry"

# The CompiledFunctions the backend made, for compiled_graphs().
_made = weakref.WeakSet()
_count = itertools.count()


def backend(gm, example_inputs, *, mode=None, options=None):
    """Dynamo's compiler function: the GraphModule's forward compiled by
    smelt, bound to gm (called as fn(*inputs), returns forward's tuple).
    `mode` and `options` are torch.compile's, checked as smelt.compile
    checks them (options: smelt's OPTIONS)."""
    settings = _api._settings(False, None, None, mode, options)
    changed = _sizes_from_tensors(gm) | _inline_wrappers(gm)
    wide = sum(nd.op == "placeholder" for nd in gm.graph.nodes) > MAX_PARAMS
    if changed:
        gm.recompile()
    if wide:   # (a large model's parameters): forward(self, inputs), one tuple, on a copy (Dynamo reads gm's inputs)
        gm = _box_inputs(gm)
    for m in gm.modules():   # a _LazyGraphModule's forward is a stub until made real
        if getattr(m, "_needs_recompile", lambda: False)():
            m.real_recompile()
    fn = gm.forward.__func__
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"smelt backend: expected an FX GraphModule, got {type(gm).__name__}")
    n = next(_count)
    code = fn.__code__
    name = f"dynamo_graph_{n}"
    if wide:   # called with the inputs, it passes them to forward as one tuple
        fn, bound_to = _graph_call, gm.forward
        code = fn.__code__
    else:
        bound_to = gm
    fn = types.FunctionType(code.replace(co_name=name, co_qualname=name), fn.__globals__, name,
                            fn.__defaults__, fn.__closure__)
    cf = _api._function(fn, settings)
    _made.add(cf)
    if log.isEnabledFor(logging.INFO):
        ops = [nd for nd in gm.graph.nodes if nd.op in ("call_function", "call_method", "call_module")]
        log.info("graph %d: %d inputs, %d calls, compiled by smelt as %s (%s)", n, len(example_inputs),
                 len(ops), name, code.co_filename)
    return types.MethodType(cf, bound_to)


# Parameters smelt binds per compiled frame (pyext/function_obj.c
# MAX_LOCALS, less self): wider graphs go through _graph_call.
MAX_PARAMS = 63


def _graph_call(forward, *inputs):
    """A wide graph's compiled entry: its forward (rewritten by _box_inputs)
    traced inline on the inputs as one tuple: no call has more arguments
    than the tracer takes."""
    return forward(inputs)


def _box_inputs(gm):
    """A copy of gm whose inputs are one tuple input `inputs`, each old
    input `inputs[i]`."""
    import operator
    import torch.fx
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    old = [nd for nd in graph.nodes if nd.op == "placeholder"]
    with graph.inserting_before(old[0]):
        box = graph.placeholder("inputs")
    with graph.inserting_after(old[-1]):
        for i in reversed(range(len(old))):
            item = graph.call_function(operator.getitem, (box, i))
            old[i].replace_all_uses_with(item)
    for nd in old:
        graph.erase_node(nd)
    return torch.fx.GraphModule(gm, graph)


def _sizes_from_tensors(gm):
    """Reads each symbolic size Dynamo passes as an int input from a tensor
    input that has it (`x.size(d)`), so smelt's tracer sees the size as
    the tensor's symbolic dimension instead of specialising on the int (a
    new entry per value). The int input stays, unused. True if the graph
    changed."""
    import torch
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    where = {}
    for n in inputs:
        v = n.meta.get("example_value")
        if isinstance(v, torch.Tensor) and not v.is_sparse:
            for d, size in enumerate(v.shape):
                if isinstance(size, torch.SymInt):
                    where.setdefault(str(size.node.expr), (n, d))
    changed = False
    for n in inputs:
        v = n.meta.get("example_value")
        hit = where.get(str(v.node.expr)) if isinstance(v, torch.SymInt) and n.users else None
        if hit is not None:
            with gm.graph.inserting_after(inputs[-1]):
                size = gm.graph.call_method("size", hit)
            n.replace_all_uses_with(size)
            changed = True
    return changed


# Higher-order ops that only wrap a subgraph (body, *args): the body's
# values are the op's. Checkpointing decides what the backward keeps, which
# smelt's own split decides anyway.
WRAPPERS = ("tag_activation_checkpoint", "wrap")


def _inline_wrappers(gm):
    """Replaces each call of a WRAPPERS op on a submodule body by a call
    of the body's forward (traced inline by smelt; its keyword arguments,
    the checkpoint's options, dropped). True if the graph changed."""
    import torch
    ops = {getattr(torch.ops.higher_order, name, None) for name in WRAPPERS} - {None}
    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in ops or not n.args:
            continue
        body = n.args[0]
        if getattr(body, "op", None) != "get_attr" or not isinstance(gm.get_submodule(body.target), torch.nn.Module):
            continue
        with gm.graph.inserting_before(n):   # body.forward(*args): not GraphModule.__call__'s _WrappedCall
            call = gm.graph.call_method("forward", (body, *n.args[1:]))
        n.replace_all_uses_with(call)
        gm.graph.erase_node(n)
        changed = True
    return changed


def compiled_graphs():
    """The smelt CompiledFunctions the backend made for Dynamo's graphs (alive
    ones, oldest first): each has stats() and fn, as smelt.compile's."""
    return sorted(_made, key=lambda cf: int(cf.fn.__name__.rpartition("_")[2]))


def _register(registry):
    """Adds the backend to Dynamo's registry module, unless the name is
    taken or its entry point was found: loading the entry point (which
    imports smelt) registers this same function."""
    if NAME not in registry._COMPILER_FNS and registry._BACKENDS.get(NAME) is None:
        registry.register_backend(compiler_fn=backend, name=NAME)


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Registers the backend right after Dynamo's registry module runs:
    importing Dynamo in `import smelt` would cost seconds. Removes itself
    once it has."""

    def find_spec(self, name, path, target=None):
        if name != REGISTRY:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _register(module)
        spec.loader = _Loader(spec.loader, exec_module)
        return spec


class _Loader(importlib.abc.Loader):
    """A loader that runs `exec_module` in place of the wrapped loader's."""

    def __init__(self, inner, exec_module):
        self._inner, self.exec_module = inner, exec_module

    def create_module(self, spec):
        return self._inner.create_module(spec)


def install():
    """Makes backend="smelt" known to Dynamo, now or when it is imported."""
    registry = sys.modules.get(REGISTRY)
    if registry is not None:
        _register(registry)
    elif not any(isinstance(f, _RegisterOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())
