"""Matmuls whose B is a weight input run on a packed copy reused across
calls (kernels/matmul.c kern_matmul_packed): results must follow every
change of the weight (in-place updates, new tensors, threads)."""
import pytest
import torch

import smelt
import smelt._C as C
from conftest import in_threads


def linear_graph(M, K, N, transposed=True):
    g = C.Graph()
    x = g.input(torch.float32, (M, K))
    w = g.input(torch.float32, (N, K) if transposed else (K, N))
    b = g.op("permute", w, perm=[1, 0]) if transposed else w
    g.output(g.op("matmul", x, b))
    return g.compile()


def check(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


@pytest.fixture(params=[1, 2])
def threads(request):
    old = C.get_num_threads()
    C.set_num_threads(request.param)
    yield request.param
    C.set_num_threads(old)


@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (1, 13, 17), (7, 5, 3), (97, 31, 61), (131, 257, 67), (16, 64, 16)])
@pytest.mark.parametrize("transposed", [True, False])
def test_inplace_updates(threads, M, K, N, transposed):
    f = linear_graph(M, K, N, transposed)
    x = torch.randn(M, K)
    w = torch.randn((N, K) if transposed else (K, N))
    ref = lambda: x @ (w.T if transposed else w)
    for _ in range(3):
        check(f(x, w)[0], ref())
        check(f(x, w)[0], ref())
        with torch.no_grad():
            w.add_(1)
    w.copy_(torch.randn_like(w))
    check(f(x, w)[0], ref())
    x2 = torch.randn(M, K)
    check(f(x2, w)[0], x2 @ (w.T if transposed else w))


def test_new_weight_objects(threads):
    f = linear_graph(67, 129, 71)
    x = torch.randn(67, 129)
    for _ in range(4):   # freed and reallocated weights, often at the same address
        w = torch.randn(71, 129)
        check(f(x, w)[0], x @ w.T)
        del w
    with torch.inference_mode():
        wi = torch.randn(71, 129)   # no version counter: never packed
    check(f(x, wi)[0], x @ wi.T)
    w = torch.randn(71, 129)
    check(f(x, w)[0], x @ w.T)
    check(f(x, wi)[0], x @ wi.T)


def test_same_weight_two_matmuls(threads):
    g = C.Graph()
    x = g.input(torch.float32, (33, 40))
    w = g.input(torch.float32, (40, 40))
    wt = g.op("permute", w, perm=[1, 0])
    y = g.op("matmul", g.op("matmul", x, wt), w)
    g.output(y)
    f = g.compile()
    xv, wv = torch.randn(33, 40), torch.randn(40, 40) / 8
    for _ in range(2):
        check(f(xv, wv)[0], (xv @ wv.T) @ wv)
        with torch.no_grad():
            wv.mul_(0.5)


def test_batched_input(threads):
    g = C.Graph()
    x = g.input(torch.float32, (3, 29, 40))
    w = g.input(torch.float32, (23, 40))
    g.output(g.op("matmul", x, g.op("permute", w, perm=[1, 0])))
    f = g.compile()
    xv, wv = torch.randn(3, 29, 40), torch.randn(23, 40)
    check(f(xv, wv)[0], xv @ wv.T)
    wv.add_(2)
    check(f(xv, wv)[0], xv @ wv.T)


class MLP(torch.nn.Module):
    def __init__(self, d=61, h=131):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, h)
        self.fc2 = torch.nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_module_updates(threads):
    torch.manual_seed(0)
    m = MLP()
    cm = smelt.compile(m)
    x = torch.randn(37, 61)
    with torch.no_grad():
        check(cm(x), m(x))
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for p in m.parameters():
            p.grad = torch.randn_like(p)
        opt.step()
        check(cm(x), m(x))
        m.fc1.weight.add_(0.25)
        check(cm(x), m(x))
        m.load_state_dict(MLP().state_dict())
        check(cm(x), m(x))
        m.fc2.weight = torch.nn.Parameter(torch.randn(61, 131))
        check(cm(x), m(x))


def test_threads_share_a_plan(threads):
    f = linear_graph(64, 96, 80)
    w = torch.randn(80, 96)
    xs = [torch.randn(64, 96) for _ in range(4)]
    in_threads(lambda x: torch.testing.assert_close(f(x, w)[0], x @ w.T, rtol=1e-4, atol=1e-3),
               [(x,) for x in xs], reps=10)


def test_threads_with_different_weights(threads):
    f = linear_graph(45, 33, 27)
    pairs = [(torch.randn(45, 33), torch.randn(27, 33)) for _ in range(3)]
    in_threads(lambda x, w: torch.testing.assert_close(f(x, w)[0], x @ w.T, rtol=1e-4, atol=1e-3),
               pairs, reps=10)
