"""Generators and coroutines: generator functions compiled themselves,
generators consumed inside a compiled function, generator expressions,
yield from, send, async functions (driven to completion by the harness)."""
import itertools

from ..base import T, prog

C = "generators"


def scaled(x, n):
    for i in range(n):
        yield x * i


def pairs(xs):
    for a, b in zip(xs, xs[1:]):
        yield a - b


def delegating(x):
    yield from scaled(x, 2)
    yield x.sum()


@prog(C, inputs=(T(3, 4),))
def consume_generator(x):
    return sum(scaled(x, 4))


@prog(C, inputs=(T(3, 4),))
def list_of_generator(x):
    return list(scaled(x, 3))


@prog(C, inputs=(T(3, 4),))
def generator_expression_sum(x):
    return sum(x[i] * i for i in range(3))


@prog(C, inputs=(T(3, 4),))
def generator_expression_tuple(x):
    return tuple(t.relu() for t in (x, -x, x * 2))


@prog(C, inputs=(T(3, 4),))
def yield_from_consumed(x):
    return list(delegating(x))


@prog(C, inputs=(T(5, 4),))
def generator_over_list(x):
    return [d.abs() for d in pairs([x[i] for i in range(5)])]


@prog(C, inputs=(T(3, 4),))
def next_on_generator(x):
    g = scaled(x, 5)
    a = next(g)
    b = next(g)
    return a + b, next(g, None) is not None


@prog(C, inputs=(T(3, 4),))
def generator_with_break(x):
    out = x
    for i, y in enumerate(scaled(x, 10)):
        if i == 3:
            break
        out = out + y
    return out


@prog(C, inputs=(T(3, 4),))
def itertools_chain_islice(x):
    return list(itertools.islice(itertools.chain(scaled(x, 2), scaled(-x, 2)), 3))


@prog(C, inputs=(T(3, 4),))
def compiled_generator_function(x):
    for i in range(3):
        yield x + i


@prog(C, inputs=(T(3, 4),))
def compiled_generator_with_state(x):
    acc = x
    for i in range(3):
        acc = acc * 2
        yield acc
    yield acc.sum()


def accumulator():
    total = 0
    while True:
        v = yield total
        total = total + v


@prog(C, inputs=(T(3, 4),))
def generator_send(x):
    g = accumulator()
    next(g)
    g.send(x)
    return g.send(x * 2)


@prog(C, inputs=(T(3, 4),))
def any_all_generators(x):
    return any(v > 100 for v in [1, 2]), all(t.numel() == 12 for t in (x, x)), x * 2


async def async_double(x):
    return x * 2


@prog(C, inputs=(T(3, 4),))
async def compiled_async_function(x):
    return x.sin() + 1


@prog(C, inputs=(T(3, 4),))
async def async_awaits_coroutine(x):
    y = await async_double(x)
    return y + 1


@prog(C, inputs=(T(3, 4),))
def map_filter(x):
    xs = list(map(lambda t: t * 2, [x, x + 1, x + 2]))
    return list(filter(lambda t: t.shape[0] == 3, xs))
