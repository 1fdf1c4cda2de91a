"""Exceptions: raised and caught inside, raised out of the function
(eager's type must come out), eager's exception on bad input (shape
mismatch, wrong dtype, bad index, wrong argument count), try/finally,
custom exception classes, assert."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..base import I, T, call, mod, prog

C = "exceptions"


class CorpusError(ValueError):
    pass


@prog(C, inputs=(T(3, 4),))
def raise_and_catch(x):
    try:
        raise KeyError("k")
    except KeyError:
        y = x * 2
    return y


@prog(C, inputs=(T(3, 4),))
def catch_by_base_class(x):
    try:
        raise CorpusError("bad")
    except ValueError as e:
        return x + len(str(e))


@prog(C, inputs=(T(3, 4),))
def try_finally_runs(x):
    out = []
    try:
        out.append(x * 2)
    finally:
        out.append(x * 3)
    return out


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(5, 4))])
def raise_escapes(x):
    if x.shape[0] == 5:
        raise CorpusError("five rows")
    return x + 1


@prog(C, inputs=(T(3, 4), T(5, 4)))
def shape_mismatch_raises(a, b):
    return a + b


@prog(C, inputs=(T(3, 4), T(3, 4)))
def matmul_shape_error(a, b):
    return a @ b


@prog(C, inputs=(T(3, 4),))
def index_out_of_range(x):
    return x[7]


@prog(C, inputs=(T(3, 4),))
def bad_dim_raises(x):
    return x.sum(5)


@prog(C, inputs=(T(3, 4),))
def bad_view_raises(x):
    return x.t().view(12)


@prog(C, inputs=(T(3, 4),))
def reshape_bad_numel(x):
    return x.reshape(5, 3)


@prog(C, inputs=(T(3, 4), I(3, 4)))
def dtype_mismatch_inplace(x, i):
    i.add_(x)
    return i


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(3, 4), T(3, 4))])
def wrong_argument_count(x):
    return x * 2


@prog(C, inputs=(T(3, 4),), kwargs={"nope": 1})
def unexpected_keyword(x):
    return x * 2


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(4, 4))])
def assert_on_shape(x):
    assert x.shape[0] == 3, "need 3 rows"
    return x.sum(0)


@prog(C, inputs=(T(3, 4),))
def list_index_error_caught(x):
    xs = [x]
    try:
        return xs[3]
    except IndexError:
        return xs[0] * -1


@prog(C, inputs=(T(3, 4),))
def dict_key_error_raised(x):
    d = {"a": x}
    return d["b"]


@prog(C, inputs=(T(3, 4),))
def attribute_error_caught(x):
    try:
        return x.not_an_attribute
    except AttributeError:
        return x + 10


@prog(C, inputs=(T(3, 4),))
def exception_in_helper_caught(x):
    try:
        return helper_raises(x)
    except RuntimeError as e:
        return x * len(e.args)


def helper_raises(t):
    raise RuntimeError("helper", 2)


@prog(C, inputs=(T(3, 4),))
def stop_iteration_manual(x):
    it = iter([x, x * 2])
    total = 0
    while True:
        try:
            total = total + next(it)
        except StopIteration:
            break
    return total


@prog(C, inputs=(T(3, 4),))
def type_error_from_torch(x):
    return torch.cat(x, 0)


@mod(C, inputs=(T(3, 5),))
def module_bad_input_shape():
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU())


@prog(C, inputs=(T(3, 4),))
def conv_wrong_rank(x):
    return F.conv2d(x, torch.ones(2, 3, 3, 3))


@prog(C, inputs=(T(3, 4),))
def raise_from_chain(x):
    try:
        try:
            raise KeyError("inner")
        except KeyError as e:
            raise CorpusError("outer") from e
    except CorpusError as e:
        return x * (e.__cause__ is not None)


@prog(C, inputs=(T(3, 4),))
def reraise_bare(x):
    try:
        y = x * 2
        raise TypeError("t")
    except TypeError:
        raise


@prog(C, inputs=(T(3, 4),))
def with_suppress(x):
    import contextlib
    with contextlib.suppress(ZeroDivisionError):
        1 / 0
    return x + 1
