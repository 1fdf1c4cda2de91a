"""Python containers built, mutated and returned: list, tuple, dict, set,
OrderedDict, defaultdict, namedtuple, dataclass, nested mixes, containers
as inputs (mutated in place: the caller sees it)."""
import collections
import dataclasses
import typing

import torch

from ..base import T, call, prog

C = "containers"

Pair = collections.namedtuple("Pair", ["lo", "hi"])


class Stats(typing.NamedTuple):
    mean: torch.Tensor
    spread: torch.Tensor
    n: int


@dataclasses.dataclass
class Out:
    y: torch.Tensor
    aux: dict
    tag: str = "out"


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: torch.Tensor
    b: float


@prog(C, inputs=(T(3, 4),))
def return_list(x):
    return [x, x + 1, x * 2]


@prog(C, inputs=(T(3, 4),))
def list_append_loop(x):
    out = []
    for i in range(4):
        out.append(x * i)
    return out


@prog(C, inputs=(T(3, 4),))
def list_comprehension(x):
    return [x.sum(i % 2) for i in range(3)]


@prog(C, inputs=(T(3, 4),))
def list_methods(x):
    xs = [x, x.neg(), x.abs()]
    xs.insert(1, x * 3)
    last = xs.pop()
    xs.extend([last, last + 1])
    xs.reverse()
    del xs[0]
    return xs, len(xs)


@prog(C, inputs=(T(3, 4),))
def list_index_slice(x):
    xs = [x * k for k in range(6)]
    return xs[1:5:2], xs[-1], xs[::-1][0]


@prog(C, inputs=([T(3), T(3), T(3)],))
def list_input_sum(xs):
    return sum(xs), len(xs)


@prog(C, inputs=([T(3), T(3)],))
def list_input_mutated(xs):
    xs.append(xs[0] + xs[1])
    return xs[-1] * 2


@prog(C, inputs=([T(2, 2), T(2, 2)],))
def list_input_returned(xs):
    xs[0] = xs[0] + 1
    return xs


@prog(C, inputs=((T(4,), T(4,)),))
def tuple_input_unpack(t):
    a, b = t
    return a * b, (b, a)


@prog(C, inputs=(T(3, 4),))
def tuple_concat(x):
    t = (x,) + (x + 1, x + 2)
    return t * 2


@prog(C, inputs=(T(3, 4),))
def star_unpack(x):
    first, *rest = [x, x * 2, x * 3, x * 4]
    return first + sum(rest), len(rest)


@prog(C, inputs=(T(3, 4),))
def return_dict(x):
    return {"a": x, "b": x.sum(), "c": [x.mean()]}


@prog(C, inputs=(T(3, 4),))
def dict_build_update(x):
    d = {}
    d["z"] = x * 2
    d["a"] = x + 1
    d.update(m=x.mean(0), a=x - 1)
    d.setdefault("z", x)
    d.setdefault("new", x.sum())
    return d


@prog(C, inputs=(T(3, 4),))
def dict_iteration(x):
    d = {"p": x, "q": x * 2, "r": x * 3}
    tot = 0
    for k, v in d.items():
        tot = tot + v * len(k)
    return tot, list(d.keys()), sorted(d)


@prog(C, inputs=(T(3, 4),))
def dict_pop_del(x):
    d = {"a": x, "b": x + 1, "c": x + 2}
    b = d.pop("b")
    del d["a"]
    return b, d, d.get("zz", 7), "c" in d


@prog(C, inputs=({"w": T(4, 4), "b": T(4)}, T(2, 4)))
def dict_input(params, x):
    return x @ params["w"] + params["b"]


@prog(C, inputs=({"w": T(4), "scale": 2.0}, T(2, 4)))
def dict_input_mutated(d, x):
    d["out"] = x * d["w"] * d["scale"]
    d["scale"] = d["scale"] + 1
    return d["out"].sum()


@prog(C, inputs=(T(3, 4),))
def dict_comprehension(x):
    return {f"k{i}": x[i] * i for i in range(3)}


@prog(C, inputs=(T(3, 4),))
def nested_dict_list(x):
    return {"layers": [{"w": x * i, "id": i} for i in range(2)], "meta": ("m", 3)}


@prog(C, inputs=(T(3, 4),))
def ordered_dict(x):
    d = collections.OrderedDict()
    d["second"] = x * 2
    d["first"] = x
    d.move_to_end("second")
    return d


@prog(C, inputs=(T(3, 4),))
def defaultdict_list(x):
    d = collections.defaultdict(list)
    for i in range(4):
        d[i % 2].append(x * i)
    return {k: torch.stack(v) for k, v in d.items()}


@prog(C, inputs=(T(3, 4),))
def defaultdict_returned(x):
    d = collections.defaultdict(int)
    d["a"] += 1
    d["b"] += 2
    return x * d["a"] + d["b"], d


@prog(C, inputs=(T(3, 4),))
def counter_ops(x):
    c = collections.Counter(["a", "b", "a"])
    return x * c["a"] + c["b"] + c["zz"]


@prog(C, inputs=(T(3, 4),))
def set_ops(x):
    s = {1, 2, 3}
    s.add(5)
    s.discard(2)
    t = s | {7}
    return x * len(t) + (3 in s), sorted(t)


@prog(C, inputs=(T(3, 4),))
def set_returned(x):
    s = set()
    for i in range(3):
        s.add(i * 2)
    return x + 1, s, frozenset(s)


@prog(C, inputs=(T(3, 4),))
def set_iteration_sum(x):
    acc = x
    for k in sorted({3, 1, 2}):
        acc = acc * k
    return acc


@prog(C, inputs=(T(3, 4),))
def namedtuple_return(x):
    return Pair(x.min(), x.max())


@prog(C, inputs=(T(3, 4),))
def namedtuple_methods(x):
    p = Pair(x, x * 2)
    q = p._replace(hi=x * 3)
    return q.hi - q.lo, p._asdict()["lo"], Pair._fields


@prog(C, inputs=(Pair(T(3), T(3)),))
def namedtuple_input(p):
    return p.hi - p.lo, p[0]


@prog(C, inputs=(T(5, 4),))
def typed_namedtuple(x):
    return Stats(x.mean(0), x.std(0), x.shape[0])


@prog(C, inputs=(T(3, 4),))
def dataclass_return(x):
    return Out(x * 2, {"s": x.sum()})


@prog(C, inputs=(T(3, 4),))
def dataclass_mutate(x):
    o = Out(x, {})
    o.y = o.y + 1
    o.aux["n"] = 3
    o.tag = "changed"
    return o


@prog(C, inputs=(T(3, 4),))
def frozen_dataclass(x):
    f = Frozen(x, 2.5)
    return f.a * f.b, dataclasses.replace(f, b=1.0)


@prog(C, inputs=(T(3, 4),))
def dataclass_asdict(x):
    return dataclasses.asdict(Out(x, {"k": 1}))


@prog(C, inputs=(T(3, 4),))
def zip_enumerate(x):
    names = ["a", "b", "c"]
    return {n: x[i] * i for i, n in enumerate(names)}, list(zip(names, [x.sum(), x.mean(), x.max()]))


@prog(C, inputs=(T(3, 4),))
def list_of_tuples_sorted(x):
    items = [(3, x), (1, x * 2), (2, x * 3)]
    items.sort(key=lambda kv: kv[0])
    return [v for _, v in items]


@prog(C, inputs=(T(6,),))
def tensor_iteration(x):
    return [v * 2 for v in x.view(3, 2)]


@prog(C, inputs=(T(3, 4),))
def list_multiply_compare(x):
    a = [1, 2] * 2
    return x * sum(a), a == [1, 2, 1, 2], a < [1, 3]


@prog(C, inputs=(T(3, 4),))
def nested_return_structure(x):
    return (x, [x + 1, (x + 2, {"d": x + 3})], None, "s", 4, 2.5)


@prog(C, inputs=(T(3, 4),))
def dict_with_tuple_keys(x):
    d = {(0, "a"): x, (1, "b"): x * 2}
    return d[(1, "b")] - d[(0, "a")], d


@prog(C, inputs=(T(3, 4),), steps=[call(), call([T(2), T(2), T(2)]), call([T(2)])])
def list_input_length_changes(xs):
    if isinstance(xs, list):
        return [v + 1 for v in xs]
    return xs + 1


@prog(C, inputs=(T(3, 4),))
def dict_keys_values_lists(x):
    d = dict(a=x, b=x * 2)
    return list(d.values()), tuple(d.items()), dict(zip(["u", "v"], [x, x]))
