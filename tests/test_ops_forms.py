"""Argument forms of view and creation ops that ran eagerly before: lists
of dims (movedim, squeeze), split by a torch.Size, the H/mH attributes,
torch.zero_, scalar_tensor. Each compiles whole, to views where eager's
results are views, and agrees with eager."""
import torch

import smelt


def both(fn, *args):
    e = fn(*[a.clone() for a in args])
    cf = smelt.compile(fn)
    r = cf(*[a.clone() for a in args])
    info = smelt.explain(cf, *args)
    assert info["compiles"] and info["host_calls"] == [], info
    return e, r


def same(e, r):
    for a, b in zip(e if isinstance(e, (tuple, list)) else (e,), r if isinstance(r, (tuple, list)) else (r,)):
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride(), (a, b)
        torch.testing.assert_close(b, a)


def test_dims_as_sequences():
    x = torch.randn(2, 1, 3, 1, 4)
    for fn in (lambda x: torch.movedim(x, [0, 2], [3, 0]), lambda x: x.moveaxis((1, -1), (-1, 1)) * 2,
               lambda x: x.squeeze((1, 3)), lambda x: torch.squeeze(x, [0, 1]), lambda x: x.squeeze(-2)):
        same(*both(fn, x))


def test_movedim_result_is_a_view():
    x = torch.randn(2, 3, 4)
    y = smelt.compile(lambda x: torch.movedim(x, [0, 1], [2, 0]))(x)
    y[0, 0, 0] = 42.0
    assert x[0, 0, 0] == 42.0


def test_split_by_a_size_and_conjugate_transposes():
    x = torch.randn(6, 4)
    same(*both(lambda x: torch.split(x, torch.Size([2, 4])), x))
    same(*both(lambda x: (x.H, x.mH, x.mT + 1), x))
    same(*both(lambda x: x.mH, torch.randn(2, 3, 5)))


def test_zero_and_scalar_tensor():
    same(*both(lambda x: torch.zero_(x) + 1, torch.randn(3, 2)))
    same(*both(lambda x: x + torch.scalar_tensor(2.5), torch.randn(3)))
    same(*both(lambda x: x * torch.scalar_tensor(3, dtype=torch.int64), torch.arange(4)))


def test_nearest_downsampling_is_a_new_tensor():
    # every second element: a strided slice of x inside, a new contiguous
    # tensor outside (eager's upsample kernels never alias their input)
    for shape in ((2, 3, 4), (1, 2, 4, 6)):
        x = torch.randn(shape)
        fn = lambda x: torch.nn.functional.interpolate(x, scale_factor=0.5, mode="nearest")
        e, r = both(fn, x)
        same(e, r)
        r = smelt.compile(fn)(x)
        assert r.is_contiguous() and r.data_ptr() != x.data_ptr()
        r.fill_(7.0)
        assert not (x == 7.0).any()
