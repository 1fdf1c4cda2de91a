#!/usr/bin/env python3
"""Refits the polynomials of inductor/cpu/vmath.c.

Each is a weighted minimax fit (Lawson's iteratively reweighted least
squares on Chebyshev points) of the function's remainder after its exact
leading terms, with the weight making the error relative to the function
itself (absolute for erf's upper interval). Prints, per polynomial, the
fit's maximum error in units of 2^-24 relative (half a float32 ULP) and the
coefficients rounded to float32, lowest degree first, as vmath.c lists
them. Needs numpy and mpmath (torch's dependency sympy brings it).

    python3 scripts/fit_vmath.py            # all
    python3 scripts/fit_vmath.py erf tanh   # some
"""
import sys

import mpmath
import numpy as np

N = 20000


def cheb(a, b, n=N):
    k = np.arange(n)
    return (a + b) / 2 + (b - a) / 2 * np.cos(np.pi * (k + 0.5) / n)


def lawson(x, f, basis, weight, iters=200):
    """Coefficients c minimising max |weight (sum c_j basis_j(x) - f)|, and that max."""
    A = np.stack([b(x) for b in basis], 1)
    u = np.ones_like(x) / len(x)
    for _ in range(iters):
        sw = np.sqrt(u) * weight
        c, *_ = np.linalg.lstsq(A * sw[:, None], f * sw, rcond=None)
        e = np.abs((A @ c - f) * weight)
        u = u * e
        u /= u.sum()
    return c, e.max()


def powers(k0, step, n):
    return [lambda v, j=j: v ** (k0 + step * j) for j in range(n)]


def mp(fn, x):
    return np.array([float(fn(mpmath.mpf(float(v)))) for v in x])


def fit_exp():
    r = cheb(-0.3466, 0.3466)
    r = r[np.abs(r) > 1e-6]
    return lawson(r, (np.expm1(r) - r) / r ** 2, powers(0, 1, 5), r ** 2 / np.exp(r))


def fit_log():
    g = cheb(np.sqrt(0.5) - 1, np.sqrt(2) - 1)
    g = g[np.abs(g) > 1e-4]
    return lawson(g, (np.log1p(g) - g + g * g / 2) / g ** 3, powers(0, 1, 8), np.abs(g ** 3 / np.log1p(g)))


def fit_sin():
    r = cheb(0, np.pi / 4)
    r = r[r > 1e-4]
    return lawson(r, (np.sin(r) - r) / r ** 3, powers(0, 2, 3), r ** 3 / np.sin(r))


def fit_cos():
    r = cheb(0, np.pi / 4)
    r = r[r > 1e-4]
    return lawson(r, (np.cos(r) - 1 + r * r / 2) / r ** 4, powers(0, 2, 3), r ** 4 / np.cos(r))


def fit_tanh():
    x = cheb(0, 0.625)
    x = x[x > 1e-4]
    return lawson(x, (np.tanh(x) - x) / x ** 3, powers(0, 2, 5), x ** 3 / np.tanh(x))


def fit_sinh():
    x = cheb(0, 1.0)
    x = x[x > 1e-4]
    return lawson(x, (np.sinh(x) - x) / x ** 3, powers(0, 2, 4), x ** 3 / np.sinh(x))


def fit_atan():
    x = cheb(0, 0.41422)
    x = x[x > 1e-4]
    return lawson(x, (np.arctan(x) - x) / x ** 3, powers(0, 2, 5), x ** 3 / np.arctan(x))


def fit_asin():
    x = cheb(0, 0.5)
    x = x[x > 1e-4]
    return lawson(x, (np.arcsin(x) - x) / x ** 3, powers(0, 2, 5), x ** 3 / np.arcsin(x))


def fit_erf_small():
    x = cheb(0, 1.25, 4000)
    x = x[x > 1e-4]
    e = mp(mpmath.erf, x)
    return lawson(x, e / x, powers(0, 2, 7), x / e)


def fit_erf_big():   # erfc(a) = Q(a - 2.5), absolute error
    x = cheb(1.25, 3.92, 4000)
    return lawson(x - 2.5, mp(mpmath.erfc, x), powers(0, 1, 13), np.ones_like(x))


def fit_erfc():      # erfc(a) e^(a^2) = u P(u), u = 1 / (1 + a/2)
    t = cheb(0.0, 10.3, 4000)
    g = np.array([float(mpmath.erfc(v) * mpmath.exp(v * v)) for v in t])
    u = 1 / (1 + 0.5 * t)
    return lawson(u, g / u, powers(0, 1, 11), u / g, iters=100)


FITS = {"exp": fit_exp, "log": fit_log, "sin": fit_sin, "cos": fit_cos, "tanh": fit_tanh, "sinh": fit_sinh, "atan": fit_atan,
        "asin": fit_asin, "erf_small": fit_erf_small, "erf_big": fit_erf_big, "erfc": fit_erfc}


def main(argv):
    for name in argv or FITS:
        c, err = FITS[name]()
        c32 = ", ".join("%.9e" % float(np.float32(v)) for v in c)
        print(f"{name}: max error {err / 2 ** -24:.3f} x 2^-24\n  {{ {c32} }}")


if __name__ == "__main__":
    main(sys.argv[1:])
