"""The guard tree (guards/guards.h) through smelt._C._GuardTree.

Every leaf kind passes and fails with a reason naming the source path;
shared prefixes are fetched once; fetch exceptions are failures; tensor
metadata (dtype, device, sizes, strides, requires_grad, dynamic dims) is
checked; the tree keeps what it compares alive; odd inputs raise cleanly.
"""
import collections
import gc
import math
import weakref

import pytest
import torch

from conftest import C

G = {}   # default globals for checks that use none


def tree():
    return C._GuardTree()


def ok(t, locs, glb=None, **kw):
    res = t.check(locs, G if glb is None else glb, **kw)
    assert res == (True, None), res


def fails(t, locs, glb=None, **kw):
    """The failure reason (asserts the check failed)."""
    passed, reason = t.check(locs, G if glb is None else glb, **kw)
    assert not passed and isinstance(reason, str) and reason, (passed, reason)
    return reason


# ---------------------------------------------------------------- accessors

class Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_sources_of_every_accessor():
    t = tree()
    x = t.local(0, "x")
    assert t.source(x) == "L['x']"
    assert t.source(t.attr(x, "layer")) == "L['x'].layer"
    assert t.source(t.item(t.attr(x, "layers"), 2)) == "L['x'].layers[2]"
    assert t.source(t.dict_item(x, "k")) == "L['x']['k']"
    assert t.source(t.dict_item(x, 3)) == "L['x'][3]"
    assert t.source(t.closure_cell(x, 1)) == "L['x'].__closure__[1].cell_contents"
    assert t.source(t.type_of(x)) == "type(L['x'])"
    assert t.source(t.global_("torch")) == "G['torch']"
    assert t.source(t.attr(t.attr(t.attr(x, "self_"), "layer"), "weight")) == \
        "L['x'].self_.layer.weight"


def test_local_and_global_lookup():
    t = tree()
    t.equals(t.local(1, "n"), 5)
    t.id_is(t.global_("len"), len)           # a builtin: found in builtins
    t.id_is(t.global_("helper"), math)
    ok(t, [None, 5], {"helper": math})
    assert fails(t, [None, 5], {}) == "G['helper'] is missing (neither a global nor a builtin)"
    # a global shadowing the builtin is found first
    reason = fails(t, [None, 5], {"helper": math, "len": abs})
    assert reason.startswith("G['len'] is <built-in function len> failed: got ")
    # no builtins dict: only globals
    assert "G['len'] is missing" in fails(t, [None, 5], {"helper": math}, builtins={})


def test_item_accessor():
    t = tree()
    xs = t.local(0, "xs")
    t.equals(t.item(xs, 0), 10)
    t.equals(t.item(xs, -1), 30)
    ok(t, [(10, 20, 30)])
    ok(t, [[10, 20, 30]])
    ok(t, [{0: 10, -1: 30}])                  # other objects: __getitem__(index)
    assert fails(t, [(10, 20, 31)]) == "L['xs'][-1] == 30 failed: got 31"
    assert fails(t, [()]) == "L['xs'][0] could not be fetched: index out of range (len 0)"
    assert fails(t, [{0: 10}]) == "L['xs'][-1] could not be fetched: KeyError: -1"


def test_dict_item_accessor():
    t = tree()
    d = t.local(0, "d")
    t.equals(t.dict_item(d, "a"), 1)
    t.equals(t.dict_item(d, 2), "two")
    ok(t, [{"a": 1, 2: "two"}])
    ok(t, [collections.OrderedDict(a=1, **{}) | {2: "two"}])
    assert fails(t, [{"a": 1, 2: "zwei"}]) == "L['d'][2] == 'two' failed: got 'zwei'"
    assert fails(t, [{"a": 1}]) == "L['d'][2] could not be fetched: no such key"
    ok(t, [{"a": 1, 2.0: "two"}])   # dict lookup semantics (2 == 2.0); the value is guarded
    assert fails(t, [[1, 2]]).startswith("L['d']['a'] could not be fetched: TypeError")


def test_closure_cell_and_type_accessors():
    def make(v):
        def f():
            return v
        return f

    t = tree()
    fn = t.local(0, "fn")
    t.equals(t.closure_cell(fn, 0), 3)
    t.id_is(t.type_of(t.local(1, "x")), int)
    ok(t, [make(3), 7])
    assert fails(t, [make(4), 7]) == "L['fn'].__closure__[0].cell_contents == 3 failed: got 4"
    assert fails(t, [make(3), "s"]) == "type(L['x']) is int failed: got str"
    assert "not a function" in fails(t, [len, 7])
    assert "closure cells" in fails(t, [lambda: 0, 7])


# ---------------------------------------------------------------- sharing

class Counting:
    """Counts every attribute fetch that goes through __getattr__."""

    def __init__(self):
        object.__setattr__(self, "fetches", collections.Counter())

    def __getattr__(self, name):
        self.fetches[name] += 1
        if name == "missing":
            raise AttributeError(name)
        return {"a": 1, "b": (1, 2)}.get(name, name)


def test_same_path_is_same_node_and_fetched_once():
    t = tree()
    x = t.local(0, "x")
    assert t.local(0, "x") == x
    a1, a2 = t.attr(x, "a"), t.attr(x, "a")
    assert a1 == a2
    b = t.attr(x, "b")
    assert t.item(b, 1) == t.item(b, 1) != t.item(b, 0)
    assert t.dict_item(x, "a") != a1          # another accessor kind: another node
    t.equals(a1, 1)
    t.equals(a2, 1)                            # identical leaf: not added twice
    t.type_is(a1, int)
    t.equals(t.item(b, 1), 2)
    t.equals(t.item(b, 0), 1)
    assert t.num_checks == 4
    obj = Counting()
    ok(t, [obj])
    assert obj.fetches == {"a": 1, "b": 1}


# ---------------------------------------------------------------- leaves

def test_type_is_names_the_path():
    t = tree()
    layer0 = t.item(t.attr(t.local(0, "self"), "layers"), 0)
    t.type_is(layer0, torch.nn.Linear)
    ok(t, [Obj(layers=[torch.nn.Linear(2, 2)])])
    reason = fails(t, [Obj(layers=[torch.nn.Conv2d(1, 1, 1)])])
    assert reason == "type(L['self'].layers[0]) is Linear failed: got Conv2d"

    class Sub(torch.nn.Linear):
        pass
    assert fails(t, [Obj(layers=[Sub(2, 2)])]) == \
        "type(L['self'].layers[0]) is Linear failed: got Sub"


def test_id_is():
    t = tree()
    sentinel = object()
    t.id_is(t.local(0, "x"), sentinel)
    ok(t, [sentinel])
    reason = fails(t, [object()])
    assert reason.startswith("L['x'] is <object object at 0x") and "failed: got <object" in reason


@pytest.mark.parametrize("want, good, bad", [
    (1, [1, 10 ** 0], [True, 1.0, 2, "1", None]),
    (True, [True], [1, 1.0, False]),
    (1.0, [1.0], [1, True, 1.0000001]),
    (0.0, [0.0], [-0.0, 0, False]),
    (math.nan, [math.nan, float("nan")], [0.0, None]),
    ("ab", ["ab", "a" + "b"], ["AB", b"ab", None]),
    (None, [None], [0, False, ""]),
    (2 ** 70, [2 ** 70], [2 ** 70 + 1, float(2 ** 70)]),
    ((1, "a", (2.5, None)), [(1, "a", (2.5, None))], [(1, "a", (2.5, 0)), (True, "a", (2.5, None)),
                                                      [1, "a", (2.5, None)], (1, "a")]),
])
def test_equals_exact_types(want, good, bad):
    t = tree()
    t.equals(t.local(0, "v"), want)
    for g in good:
        ok(t, [g])
    for b in bad:
        reason = fails(t, [b])
        assert reason.startswith(f"L['v'] == {want!r} failed: got "), reason


def test_equals_rejects_non_constants():
    t = tree()
    v = t.local(0, "v")
    for bad in ([1], {1: 2}, object(), (1, [2]), {1, object()}):
        with pytest.raises(TypeError):
            t.equals(v, bad)


def test_equals_sets_and_bytes():
    # sets compare by contents, element types included (1, True and 1.0 are
    # one set element but three constants)
    t = tree()
    t.equals(t.local(0, "s"), {1, "a", 2.5})
    t.equals(t.local(1, "b"), b"xy")
    ok(t, [{2.5, "a", 1}, b"xy"])
    for s in ({1, "a"}, {1, "a", 2.5, 3}, {True, "a", 2.5}, {1.0, "a", 2.5}, frozenset({1, "a", 2.5})):
        assert fails(t, [s, b"xy"]).startswith("L['s'] == "), s
    assert fails(t, [{1, "a", 2.5}, b"xz"]).startswith("L['b'] == b'xy' failed")


def test_id_is_holds_objects_weakly():
    # an object that supports weak references is not kept alive by the
    # tree, and a new object at a reused address never matches
    import gc
    import weakref

    class Obj:
        pass

    t = tree()
    o = Obj()
    ref = weakref.ref(o)
    t.id_is(t.local(0, "x"), o)
    ok(t, [o])
    assert fails(t, [Obj()]).startswith("L['x'] is <")
    del o
    gc.collect()
    assert ref() is None
    assert fails(t, [Obj()]) == "L['x'] is <an object that no longer exists> failed"


def test_value_eq_and_has_key():
    t = tree()
    t.value_eq(t.local(0, "dev"), torch.device("cpu"))
    t.has_key(t.local(1, "d"), "FLAG", False)
    t.has_key(t.local(1, "d"), b"K", True)
    ok(t, [torch.device("cpu"), {b"K": 1}])
    assert fails(t, [torch.device("meta"), {b"K": 1}]).startswith("L['dev'] == cpu failed: got meta")
    assert fails(t, ["cpu", {b"K": 1}]).startswith("L['dev'] == cpu failed")
    assert fails(t, [torch.device("cpu"), {b"K": 1, "FLAG": 0}]) == "'FLAG' not in L['d'] failed"
    assert fails(t, [torch.device("cpu"), {}]) == "b'K' in L['d'] failed"


def test_none_and_bool():
    t = tree()
    t.is_none(t.local(0, "a"))
    t.not_none(t.local(1, "b"))
    t.bool_is(t.attr(t.local(2, "m"), "training"), True)
    m = torch.nn.Linear(1, 1)
    ok(t, [None, 0, m])
    assert fails(t, [0, 0, m]) == "L['a'] is None failed: got 0"
    assert fails(t, [None, None, m]) == "L['b'] is not None failed: got None"
    m.eval()
    assert fails(t, [None, 0, m]) == "L['m'].training is True failed: got False"


def test_len_eq():
    t = tree()
    t.len_eq(t.local(0, "xs"), 3)
    for good in ([1, 2, 3], (1, 2, 3), {1: 1, 2: 2, 3: 3}, "abc", torch.nn.ModuleList(
            [torch.nn.ReLU()] * 3)):
        ok(t, [good])
    assert fails(t, [[1, 2]]) == "len(L['xs']) == 3 failed: got 2"
    assert fails(t, [5]).startswith("len(L['xs']): TypeError: object of type 'int' has no len()")


def test_dict_keys_in_order():
    t = tree()
    t.dict_keys(t.local(0, "d"), ("a", 1))
    ok(t, [{"a": 0, 1: 0}])
    ok(t, [collections.OrderedDict([("a", 0), (1, 0)])])
    assert fails(t, [{1: 0, "a": 0}]) == "tuple(L['d'].keys()) == ('a', 1) failed: got (1, 'a')"
    assert fails(t, [{"a": 0, True: 0}]).endswith("got ('a', True)")
    assert fails(t, [{"a": 0}]).endswith("got ('a',)")
    od = collections.OrderedDict([("a", 0), (1, 0)])
    od.move_to_end("a")
    assert fails(t, [od]).endswith("got (1, 'a')")
    assert fails(t, [["a", 1]]).startswith("tuple(L['d'].keys()) == ('a', 1) failed: got <list")
    with pytest.raises(TypeError):
        t.dict_keys(t.local(0, "d"), ["a"])
    with pytest.raises(TypeError):
        t.dict_keys(t.local(0, "d"), (1.5,))


def test_empty_dict_or_none():
    t = tree()
    t.empty_dict_or_none(t.attr(t.local(0, "m"), "_forward_hooks"))
    m = torch.nn.Linear(1, 1)
    ok(t, [m])
    ok(t, [Obj(_forward_hooks=None)])
    ok(t, [Obj(_forward_hooks={})])
    h = m.register_forward_hook(lambda *a: None)
    reason = fails(t, [m])
    assert reason.startswith("L['m']._forward_hooks in (None, {}) failed: got <")
    h.remove()
    ok(t, [m])
    assert fails(t, [Obj(_forward_hooks=[])]).startswith("L['m']._forward_hooks in (None, {})")


def test_global_state():
    t = tree()
    t.global_state()
    ok(t, [])
    with torch.no_grad():
        assert fails(t, []) == "torch.is_grad_enabled() is True failed: got False"
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert fails(t, []) == \
            "torch.get_default_dtype() is torch.float32 failed: got torch.float64"
    finally:
        torch.set_default_dtype(old)
    ok(t, [])
    with torch.autocast("cpu"):
        assert fails(t, []) == "torch._C._is_any_autocast_enabled() is False failed: got True"
    h = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, i: None)
    try:
        assert fails(t, []) == \
            "bool(nn.modules.module._global_forward_pre_hooks) is False failed: got True"
    finally:
        h.remove()
    ok(t, [])


# ---------------------------------------------------------------- tensors

def tm(example, dynamic=None):
    t = tree()
    t.tensor_match(t.local(0, "x"), example, dynamic=dynamic)
    return t


def test_tensor_match_same_metadata_passes():
    for x in (torch.randn(4, 16), torch.randn(16, 4).t(), torch.randn(()),
              torch.randn(3, 0, 5), torch.randn(7, 34)[:, ::2], torch.randn(1, 5).expand(3, 5),
              torch.randint(0, 9, (3, 1, 5), dtype=torch.int32)):
        t = tm(x)
        ok(t, [x])
        if x.is_contiguous() or x.dim() == 2 and x.stride() == (1, x.shape[0]):
            ok(t, [x.clone()])        # clone keeps the strides of dense layouts
        ok(t, [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)])


def test_tensor_match_dtype_device_requires_grad_type():
    x = torch.randn(4, 16)
    t = tm(x)
    assert fails(t, [x.double()]) == "L['x'].dtype == torch.float32 failed: got torch.float64"
    assert fails(t, [x.to("meta")]) == "L['x'].device == cpu failed: got meta"
    assert fails(t, [x.clone().requires_grad_()]) == \
        "L['x'].requires_grad == False failed: got True"
    assert fails(t, [torch.nn.Parameter(x)]) == "type(L['x']) is Tensor failed: got Parameter"
    assert fails(t, [[1, 2]]) == "type(L['x']) is Tensor failed: got list"
    m = tm(x.to("meta"))
    ok(m, [torch.empty(4, 16, device="meta")])
    assert fails(m, [x]) == "L['x'].device == meta failed: got cpu"
    p = tm(torch.nn.Parameter(x))
    ok(p, [torch.nn.Parameter(torch.randn(4, 16))])
    assert fails(p, [torch.nn.Parameter(x, requires_grad=False)]) == \
        "L['x'].requires_grad == True failed: got False"


def test_tensor_match_sizes_and_strides():
    t = tm(torch.randn(4, 16))
    assert fails(t, [torch.randn(4, 17)]) == "L['x'].size()[1] == 16 failed: got 17"
    assert fails(t, [torch.randn(4, 16, 1)]) == "L['x'].dim() == 2 failed: got 3"
    assert fails(t, [torch.randn(16, 4).t()]) == "L['x'].stride()[0] == 16 failed: got 1"
    tt = tm(torch.randn(16, 4).t())
    assert fails(tt, [torch.randn(4, 16)]) == "L['x'].stride()[0] == 1 failed: got 16"
    s = tm(torch.randn(7, 34)[:, ::2])
    ok(s, [torch.randn(8, 34)[1:, 1::2]])
    assert fails(s, [torch.randn(7, 17)]) == "L['x'].stride()[0] == 34 failed: got 17"


def test_tensor_match_size_one_and_empty_strides_ignored():
    t = tm(torch.randn(3, 1, 5))
    ok(t, [torch.randn(3, 5).unsqueeze(1)])
    ok(t, [torch.randn(3, 5, 1).transpose(1, 2).contiguous()])
    ok(t, [torch.empty_strided((3, 1, 5), (5, 99, 1))])   # stride of a size-1 dim: unused
    e = tm(torch.randn(3, 0, 5))
    ok(e, [torch.randn(5, 0, 3).permute(2, 1, 0)])         # no elements: strides unused
    assert fails(e, [torch.randn(3, 1, 5)]) == "L['x'].size()[1] == 0 failed: got 1"


def test_tensor_match_dynamic_dims():
    x = torch.randn(4, 16)
    t = tm(x, dynamic=[True, False])
    for n in (2, 3, 4, 100):
        ok(t, [torch.randn(n, 16)])
    assert fails(t, [torch.randn(1, 16)]) == "L['x'].size()[0] >= 2 failed: got 1"
    assert fails(t, [torch.randn(0, 16)]) == "L['x'].size()[0] >= 2 failed: got 0"
    assert fails(t, [torch.randn(5, 17)]) == "L['x'].size()[1] == 16 failed: got 17"
    # the inner dim dynamic: the outer stride follows it
    d = tm(x, dynamic=[False, True])
    for n in (2, 5, 33):
        ok(d, [torch.randn(4, n)])
    assert fails(d, [torch.randn(4, 7).t().contiguous().t()]) == \
        "L['x'].stride()[0] == 28 failed: got 1"   # stride()[1] * size()[1] of the input
    # transposed, dynamic: strides stay "the transposed layout" for any size
    tt = tm(torch.randn(16, 4).t(), dynamic=[True, True])
    for a, b in ((4, 16), (3, 9), (50, 2)):
        ok(tt, [torch.randn(b, a).t()])
    assert fails(tt, [torch.randn(3, 9)]) == "L['x'].stride()[0] == 1 failed: got 9"
    # a padded row stride does not follow from the size: stays a number
    p = tm(torch.randn(4, 20)[:, :16], dynamic=[True, False])
    ok(p, [torch.randn(9, 20)[:, :16]])
    assert fails(p, [torch.randn(9, 16)]) == "L['x'].stride()[0] == 20 failed: got 16"
    # sizes 0 and 1 stay static even when flagged
    one = tm(torch.randn(1, 16), dynamic=[True, False])
    assert fails(one, [torch.randn(2, 16)]) == "L['x'].size()[0] == 1 failed: got 2"


def test_tensor_match_text():
    t = tm(torch.randn(16, 4).t(), dynamic=[True, True])
    text = str(t)
    assert "L['x'] is a Tensor: dtype=torch.float32, device=cpu, requires_grad=False, " \
           "size=(s0, s1), stride=(1, s0), s0 >= 2, s1 >= 2" in text, text
    c = str(tm(torch.randn(2, 3, 4), dynamic=[False, True, True]))
    assert "size=(2, s1, s2), stride=(s2*s1, s2, 1), contiguous" in c, c


def test_tensor_match_rejects_bad_examples():
    t = tree()
    x = t.local(0, "x")
    with pytest.raises(TypeError):
        t.tensor_match(x, [1, 2])
    with pytest.raises(ValueError):
        t.tensor_match(x, torch.randn(2, 2), dynamic=[True])


def test_tensor_getter_cache_follows_type_changes():
    class T(torch.Tensor):
        pass
    x = torch.randn(2, 3).as_subclass(T)
    t = tm(x)
    ok(t, [x])
    T.dtype = property(lambda self: torch.float64)    # the type changed: no stale getter
    try:
        assert fails(t, [x]) == "L['x'].dtype == torch.float32 failed: got torch.float64"
    finally:
        del T.dtype
    ok(t, [x])


# ---------------------------------------------------------------- failures, errors

class Raising:
    @property
    def bad(self):
        raise RuntimeError("boom")

    @property
    def stop(self):
        raise KeyboardInterrupt


def test_fetch_exceptions_are_failures():
    t = tree()
    o = t.local(0, "o")
    t.equals(t.attr(t.attr(o, "inner"), "bad"), 1)
    assert fails(t, [Obj(inner=Raising())]) == \
        "L['o'].inner.bad could not be fetched: RuntimeError: boom"
    assert fails(t, [Obj()]) == \
        "L['o'].inner could not be fetched: AttributeError: 'Obj' object has no attribute 'inner'"
    c = tree()
    c.equals(c.attr(c.local(0, "o"), "missing"), 1)
    assert fails(c, [Counting()]) == "L['o'].missing could not be fetched: AttributeError: missing"


def test_base_exceptions_propagate():
    t = tree()
    t.equals(t.attr(t.local(0, "o"), "stop"), 1)
    with pytest.raises(KeyboardInterrupt):
        t.check([Raising()], G)


def test_unbound_and_missing_locals():
    t = tree()
    t.is_none(t.local(2, "z"))
    assert fails(t, [1]) == "L['z'] is missing: the frame has 1 locals"
    assert fails(t, []) == "L['z'] is missing: the frame has 0 locals"
    ok(t, [1, 2, None, 4])


def test_odd_inputs_raise_cleanly():
    t = tree()
    x = t.local(0, "x")
    t.global_("g")
    with pytest.raises(TypeError):
        t.check([1], [])                       # globals not a dict
    with pytest.raises(TypeError):
        t.check([1], {}, builtins=5)
    with pytest.raises(TypeError):
        t.check(5, {})                         # locals not a sequence
    with pytest.raises(ValueError):
        t.attr(99, "a")                        # no such node
    with pytest.raises(ValueError):
        t.attr(0, "a")                         # the root has no value
    with pytest.raises(ValueError):
        t.type_is(0, int)
    with pytest.raises(ValueError):
        t.local(-1, "x")
    with pytest.raises(TypeError):
        t.dict_item(x, 1.5)
    with pytest.raises(TypeError):
        t.dict_item(x, True)                   # bool is no exact int
    with pytest.raises(TypeError):
        t.type_is(x, 3)
    with pytest.raises(ValueError):
        t.len_eq(x, -1)


# ---------------------------------------------------------------- lifetime

def test_tree_holds_types_and_constants():
    # types and constants a leaf compares with are held by the tree; objects
    # compared by identity are held weakly (test_id_is_holds_objects_weakly)
    Local = type("Local", (), {})
    ref = weakref.ref(Local)
    t = tree()
    t.type_is(t.local(0, "y"), Local)
    t.equals(t.local(1, "s"), "a string " * 3)
    del Local
    gc.collect()
    assert ref() is not None                   # still referenced by the tree
    ok(t, [ref()(), "a string " * 3])
    assert "type(L['y']) is Local failed" in fails(t, [object(), "a string " * 3])


def test_tree_in_a_cycle_is_collected():
    class Holder:
        pass
    h = Holder()
    h.tree = tree()
    h.tree.id_is(h.tree.local(0, "x"), h)     # tree -> h -> tree
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is None


# ---------------------------------------------------------------- printer

def test_printer():
    t = tree()
    t.global_state()
    s = t.local(0, "self")
    t.type_is(s, torch.nn.Linear)
    t.bool_is(t.attr(s, "training"), True)
    t.len_eq(t.local(1, "xs"), 2)
    text = str(t)
    lines = text.splitlines()
    assert lines[0] == "guards: 12 checks on 3 values"   # 9 of global state
    assert "  | torch.is_grad_enabled() is True" in lines
    assert "  | torch._C._is_any_autocast_enabled() is False" in lines
    assert "  | torch._C._len_torch_dispatch_stack() is 0" in lines
    assert "  | bool(nn.modules.module._global_forward_hooks) is False" in lines
    assert "  L['self']" in lines
    assert "    | type(L['self']) is Linear" in lines
    assert "    L['self'].training" in lines
    assert "      | L['self'].training is True" in lines
    assert "    | len(L['xs']) == 2" in lines
    assert t.num_nodes == 4 and t.num_checks == 12


# ---------------------------------------------------------------- timing

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(5))


def module_tree(net, through_dicts):
    """Guards of a 5-layer module (10 parameters): type, training and hook
    dicts per module, TENSOR_MATCH per parameter. through_dicts: reach
    children and parameters via _modules / _parameters (as the tracer
    should) instead of Module.__getattr__."""
    t = tree()
    t.global_state()

    def sub(node, name):
        return t.dict_item(t.attr(node, "_modules"), name) if through_dicts else \
            (t.attr(node, name) if not name.isdigit() else t.item(node, int(name)))

    def guard_module(node, mod):
        t.type_is(node, type(mod))
        t.bool_is(t.attr(node, "training"), mod.training)
        for h in ("_forward_hooks", "_forward_pre_hooks"):
            t.empty_dict_or_none(t.attr(node, h))

    s = t.local(0, "self")
    guard_module(s, net)
    layers = sub(s, "layers")
    for i, layer in enumerate(net.layers):
        ln = sub(layers, str(i))
        guard_module(ln, layer)
        for pname, p in layer.named_parameters(recurse=False):
            pn = t.dict_item(t.attr(ln, "_parameters"), pname) if through_dicts else \
                t.attr(ln, pname)
            t.tensor_match(pn, p)
    t.tensor_match(t.local(1, "x"), torch.randn(4, 8))
    return t


def test_timing_report(capsys):
    """Rough ns per guard_check (timed in C); printed, not asserted."""
    a, b = torch.randn(4, 16), torch.randn(16, 4).t()
    fn = tree()
    fn.global_state()
    fn.tensor_match(fn.local(0, "x"), a)
    fn.tensor_match(fn.local(1, "y"), b)
    net = Net()
    x = torch.randn(4, 8)
    trees = {
        "fn(x, y): 2 tensors + global state": (fn, [a, b]),
        "module, 10 params via _modules/_parameters": (module_tree(net, True), [net, x]),
        "module, 10 params via getattr": (module_tree(net, False), [net, x]),
    }
    with capsys.disabled():
        print()
        for name, (t, locs) in trees.items():
            ok(t, locs)
            t.bench(locs, G, 2000)
            ns = min(t.bench(locs, G, 20000) for _ in range(3))
            print(f"  guards: {name}: {t.num_checks} checks, {ns:.0f} ns per check")
