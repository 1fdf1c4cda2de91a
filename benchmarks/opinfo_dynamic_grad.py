"""OpInfo entries over symbolic sizes under autograd (about 25 minutes on
two cores, so not part of `make test`; tests/test_opinfo_dynamic.py covers
the forward): each entry's first two float32 samples with every floating
input requiring grad, compiled with dynamic=True, called with the sample
and with every size >= 2 grown by 3 and by 8. Outputs must match eager's
(or raise what eager raises), and so must the gradients of a random
weighting of the outputs. Prints one line per difference, then a count.

Usage: python3 benchmarks/opinfo_dynamic_grad.py [FIRST [LAST]]   (entry indices)
"""
import itertools
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402

import opinfo_lib as L  # noqa: E402
import smelt  # noqa: E402
from test_opinfo_dynamic import _grown, difference  # noqa: E402


def _weighted(out, seed):
    g = torch.Generator().manual_seed(seed)
    leaves = [t for t in torch.utils._pytree.tree_leaves(out)
              if isinstance(t, torch.Tensor) and t.requires_grad and t.dtype.is_floating_point]
    return sum((t * torch.randn(t.shape, generator=g)).sum() for t in leaves) if leaves else None


def _leaves(ins):
    return [t for t in ins if isinstance(t, torch.Tensor) and t.requires_grad]


def run(op, cap=2):
    bad = []
    for i, sample in enumerate(itertools.islice(L.samples(op, torch.float32, False), cap)):
        try:
            f, tensors, src = L.render(op.op, sample, name="f")
        except Exception:  # noqa: BLE001 - what cannot be rendered is not run
            continue
        cf = smelt.compile(f, dynamic=True)
        for k in (0, 3, 8):
            grown = [_grown(t, k) if k else t.detach().clone() for t in tensors]
            grown = [t.detach().requires_grad_(t.dtype.is_floating_point) if isinstance(t, torch.Tensor) else t
                     for t in grown]
            e_in, s_in = ([t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                           for t in grown] for _ in range(2))
            e, e_err = L._call(f, e_in, 1)
            s, s_err = L._call(cf, s_in, 1)
            where = f"{op.name} sample {i} +{k}"
            why = difference(where, src, e, e_err, s, s_err, [], [], not L.RANDOM.search(op.name), strides=False)
            if why or e_err is not None:
                bad += [why] if why else []
                continue
            le, ls = _weighted(e, 7), _weighted(s, 7)
            if le is None or ls is None:
                continue
            try:
                ge = torch.autograd.grad(le, _leaves(e_in), allow_unused=True)
            except Exception:  # noqa: BLE001 - eager has no gradient here
                continue
            gs = torch.autograd.grad(ls, _leaves(s_in), allow_unused=True)
            for a, b in zip(ge, gs):
                if (a is None) != (b is None) or (a is not None and
                                                  not torch.allclose(a, b, rtol=1e-3, atol=1e-4, equal_nan=True)):
                    bad.append(f"{where}: gradients differ\n{src}")
                    break
    return bad


def main(argv):
    warnings.simplefilter("ignore")
    ops = [o for o in L.op_db() if torch.float32 in o.supported_dtypes("cpu") and o.supports_autograd]
    lo = int(argv[0]) if argv else 0
    hi = int(argv[1]) if len(argv) > 1 else len(ops)
    n = 0
    for op in ops[lo:hi]:
        for line in run(op):
            print(line, flush=True)
            n += 1
    print(f"{n} differences over entries {lo}..{min(hi, len(ops))} of {len(ops)}")
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
