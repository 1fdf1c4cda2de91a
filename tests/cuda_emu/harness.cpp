/* README: CPU emulation check of the CUDA attention kernels (inductor/cuda/attention.c), no GPU needed:
 * sh tests/cuda_emu/run.sh [case-filter]   (not part of pytest; a development check)
 * Stage 1 (-DEMU_STAGE=1) writes the kernels of every case below and their launch table (cases.inc);
 * stage 2 compiles them as C++ against emu.h, runs each case on random data (never zero) and compares
 * out / dq, dk, dv with a float64 reference, printing the largest error relative to the reference's
 * largest magnitude. EMU_CP=late (default early) delays cp.async copies to their wait_group. */
extern "C" {
#include "inductor/cuda/attention.h"
}
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

struct emu_case {
    const char *name;
    kern_sdpa_desc d;
    smelt_dtype dt;
    int mode;
    int misalign;   /* q, k, v, g start one element past an aligned base */
};

/* q [B, H, L, E], k [B, Hk, S, E], v [B, Hk, S, Ev]: Hk 1 broadcasts
 * (GQA-like); vt: v and dO stored transposed ([.., Ev, S]); mask: 0 none, 1 bool
 * [L, S] over all batch entries, 2 additive [B, 1, L, S]. */
static kern_sdpa_desc desc(int64_t B, int64_t H, int64_t L, int64_t S, int64_t E, int64_t Ev, int causal, int mask,
                           int hk1, int vt)
{
    kern_sdpa_desc d;
    memset(&d, 0, sizeof d);
    d.nb = 2, d.bdims[0] = B, d.bdims[1] = H;
    d.L = L, d.S = S, d.E = E, d.Ev = Ev, d.causal = causal;
    d.scale = (float)(1 / std::sqrt((double)E)) * 1.3f;
    int64_t Hk = hk1 ? 1 : H;
    d.q = { { H * L * E, L * E }, E, 1 };
    d.k = { { Hk * S * E, hk1 ? 0 : S * E }, E, 1 };
    d.v = vt ? kern_sdpa_operand{ { Hk * S * Ev, hk1 ? 0 : S * Ev }, 1, S }
             : kern_sdpa_operand{ { Hk * S * Ev, hk1 ? 0 : S * Ev }, Ev, 1 };
    d.o = { { H * L * Ev, L * Ev }, Ev, 1 };
    d.g = vt ? kern_sdpa_operand{ { H * L * Ev, L * Ev }, 1, L }   /* dO transposed with v */
             : kern_sdpa_operand{ { H * L * Ev, L * Ev }, Ev, 1 };
    if (mask == 1)
        d.mask_kind = KERN_SDPA_BOOL_MASK, d.mask = { { 0, 0 }, S, 1 };
    if (mask == 2)
        d.mask_kind = KERN_SDPA_ADD_MASK, d.mask = { { L * S, 0 }, S, 1 };
    return d;
}

static std::vector<emu_case> cases()
{
    std::vector<emu_case> c;
    const smelt_dtype F32 = SMELT_F32, F16 = SMELT_F16, BF16 = SMELT_BF16;
    for (int mode = 0; mode < 2; mode++) {
        /* tensor cores */
        c.push_back({ "tc 64 plain", desc(1, 2, 200, 300, 64, 64, 0, 0, 0, 0), F16, mode, 0 });
        c.push_back({ "tc 64 causal odd", desc(1, 2, 300, 277, 64, 64, 1, 0, 0, 0), BF16, mode, 0 });
        c.push_back({ "tc 80 boolmask", desc(2, 1, 17, 130, 80, 80, 0, 1, 0, 0), F16, mode, 0 });
        c.push_back({ "tc 128/64 addmask gqa vt", desc(1, 2, 130, 150, 128, 64, 0, 2, 1, 1), BF16, mode, 0 });
        c.push_back({ "tc 40/24 L1", desc(1, 3, 1, 300, 40, 24, 0, 0, 0, 0), F16, mode, 0 });
        c.push_back({ "tc 40/24 causal L20", desc(1, 1, 20, 300, 40, 24, 1, 0, 0, 0), BF16, mode, 0 });
        c.push_back({ "tc 256 causal", desc(1, 1, 70, 90, 256, 256, 1, 0, 0, 0), BF16, mode, 0 });
        c.push_back({ "tc 64 misaligned causal+mask", desc(1, 2, 50, 150, 64, 64, 1, 1, 0, 0), F16, mode, 1 });
        c.push_back({ "tc 128 causal L>S", desc(1, 1, 150, 100, 128, 128, 1, 0, 0, 0), F16, mode, 0 });
        c.push_back({ "tc big 128 causal 1000", desc(1, 1, 1000, 1000, 128, 128, 1, 0, 0, 0), BF16, mode, 0 });
        /* SIMT */
        c.push_back({ "simt f32 64 causal", desc(1, 2, 70, 70, 64, 64, 1, 0, 0, 0), F32, mode, 0 });
        c.push_back({ "simt f32 33/17 addmask gqa vt", desc(2, 2, 45, 37, 33, 17, 0, 2, 1, 1), F32, mode, 0 });
        c.push_back({ "simt f16 33 boolmask", desc(1, 2, 40, 50, 33, 33, 0, 1, 0, 0), F16, mode, 0 });
        c.push_back({ "simt f32 256 causal", desc(1, 1, 20, 40, 256, 256, 1, 0, 0, 0), F32, mode, 0 });
        c.push_back({ "simt f32 L1 E1", desc(1, 2, 1, 9, 1, 3, 0, 0, 0, 0), F32, mode, 0 });
        /* degenerate */
        c.push_back({ "S=0", desc(1, 2, 5, 0, 16, 16, 0, 0, 0, 0), F16, mode, 0 });
        c.push_back({ "L=0", desc(1, 2, 0, 5, 16, 16, 0, 0, 0, 0), F32, mode, 0 });
        c.push_back({ "Ev=0", desc(1, 2, 5, 5, 16, 0, 0, 0, 0, 0), F16, mode, 0 });
        c.push_back({ "B=0", desc(0, 2, 5, 5, 16, 16, 0, 0, 0, 0), BF16, mode, 0 });
    }
    return c;
}

#if EMU_STAGE == 1
/* Writes cases.inc: the kernels of case i as step i, then ENTRIES[i]: its
 * launches' entry points. */
int main()
{
    auto cs = cases();
    char *text = NULL;
    size_t len = 0;
    std::string table = "static void *const ENTRIES[][4] = {\n";
    for (size_t i = 0; i < cs.size(); i++) {
        char why[256];
        if (!cuda_sdpa_supports(&cs[i].d, cs[i].dt, cs[i].mode, why, sizeof why)) {
            fprintf(stderr, "case %zu (%s): %s\n", i, cs[i].name, why);
            return 1;
        }
        cuda_sdpa_source(&cs[i].d, cs[i].dt, cs[i].mode, (int)i, &text, &len);
        cuda_launch_dim l[4];
        int n = cuda_sdpa_launches(&cs[i].d, cs[i].dt, cs[i].mode, (int)i, l, 4);
        table += "    { ";
        for (int j = 0; j < n; j++)
            table += std::string("(void *)") + l[j].entry + ", ";
        table += "},\n";
    }
    fputs(text ? text : "", stdout);
    printf("%s};\n", table.c_str());
    free(text);
    return 0;
}
#else
#include "emu.h"
#include "cases.inc"

typedef unsigned short u16;

static int64_t nbatch(const kern_sdpa_desc &d)
{
    int64_t n = 1;
    for (int i = 0; i < d.nb; i++)
        n *= d.bdims[i];
    return n;
}

static int64_t boff(const kern_sdpa_desc &d, const kern_sdpa_operand &o, int64_t b)
{
    int64_t off = 0;
    for (int i = d.nb - 1; i >= 0; i--)
        off += b % d.bdims[i] * o.bstride[i], b /= d.bdims[i];
    return off;
}

/* Elements an operand spans (rows x cols), all strides non-negative. */
static int64_t span(const kern_sdpa_desc &d, const kern_sdpa_operand &o, int64_t rows, int64_t cols)
{
    if (rows == 0 || cols == 0)
        return 0;
    int64_t m = 0;
    for (int i = 0; i < d.nb; i++)
        m += (d.bdims[i] - 1) * o.bstride[i];
    return m + (rows - 1) * o.row + (cols - 1) * o.col + 1;
}

/* A tensor stored as T (float or 16-bit) with its values as double. */
struct buf {
    smelt_dtype dt;
    std::vector<unsigned char> mem;
    size_t off = 0;   /* misalignment, bytes */
    size_t esz() const { return dt == SMELT_F32 ? 4 : dt == SMELT_BOOL ? 1 : 2; }
    void init(smelt_dtype t, int64_t n, int mis)
    {
        dt = t, off = mis ? esz() : 0;
        mem.assign((size_t)n * esz() + off, 0);
    }
    void *ptr() { return mem.data() + off; }
    double get(int64_t i) const
    {
        const unsigned char *p = mem.data() + off + i * esz();
        if (dt == SMELT_F32) {
            float f;
            memcpy(&f, p, 4);
            return f;
        }
        if (dt == SMELT_BOOL)
            return *p;
        u16 h;
        memcpy(&h, p, 2);
        return dt == SMELT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    void set(int64_t i, double x)
    {
        unsigned char *p = mem.data() + off + i * esz();
        if (dt == SMELT_F32) {
            float f = (float)x;
            memcpy(p, &f, 4);
        } else if (dt == SMELT_BOOL) {
            *p = x != 0;
        } else {
            u16 h = dt == SMELT_F16 ? f32_to_f16((float)x) : f32_to_bf16((float)x);
            memcpy(p, &h, 2);
        }
    }
};

static std::mt19937_64 rng(12345);
static double uni(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
/* Never zero: magnitude in [0.05, 1]. */
static double nz() { return (rng() & 1 ? 1 : -1) * uni(0.05, 1.0); }

struct refout {
    std::vector<double> out, dq, dk, dv;
};

/* The float64 reference of kern_sdpa / kern_sdpa_backward (D from the o given). */
static refout reference(const kern_sdpa_desc &d, buf &q, buf &k, buf &v, buf &mask, buf &o, buf &g, int mode)
{
    refout r;
    int64_t NB = nbatch(d), L = d.L, S = d.S, E = d.E, Ev = d.Ev;
    r.out.assign(NB * L * Ev, 0), r.dq.assign(NB * L * E, 0), r.dk.assign(NB * S * E, 0), r.dv.assign(NB * S * Ev, 0);
    std::vector<double> P(S), dP(S);
    for (int64_t b = 0; b < NB; b++) {
        int64_t qo = boff(d, d.q, b), ko = boff(d, d.k, b), vo = boff(d, d.v, b), mo = boff(d, d.mask, b);
        int64_t oo = boff(d, d.o, b), go = boff(d, d.g, b);
        for (int64_t i = 0; i < L; i++) {
            double mx = -INFINITY;
            for (int64_t j = 0; j < S; j++) {
                double s = 0;
                for (int64_t e = 0; e < E; e++)
                    s += q.get(qo + i * d.q.row + e * d.q.col) * k.get(ko + j * d.k.row + e * d.k.col);
                s *= d.scale;
                if (d.causal && j > i)
                    s = -INFINITY;
                if (d.mask_kind == KERN_SDPA_BOOL_MASK && !mask.get(mo + i * d.mask.row + j * d.mask.col))
                    s = -INFINITY;
                if (d.mask_kind == KERN_SDPA_ADD_MASK)
                    s += mask.get(mo + i * d.mask.row + j * d.mask.col);
                P[j] = s, mx = std::max(mx, s);
            }
            double l = 0;
            for (int64_t j = 0; j < S; j++)
                l += (P[j] = mx == -INFINITY ? 0 : std::exp(P[j] - mx));
            for (int64_t j = 0; j < S; j++)
                P[j] = l > 0 ? P[j] / l : 0;
            for (int64_t c = 0; c < Ev; c++) {
                double a = 0;
                for (int64_t j = 0; j < S; j++)
                    a += P[j] * v.get(vo + j * d.v.row + c * d.v.col);
                r.out[(b * L + i) * Ev + c] = a;
            }
            if (mode == 0)
                continue;
            double D = 0;
            for (int64_t c = 0; c < Ev; c++)
                D += g.get(go + i * d.g.row + c * d.g.col) * o.get(oo + i * d.o.row + c * d.o.col);
            for (int64_t j = 0; j < S; j++) {
                double x = 0;
                for (int64_t c = 0; c < Ev; c++)
                    x += g.get(go + i * d.g.row + c * d.g.col) * v.get(vo + j * d.v.row + c * d.v.col);
                dP[j] = P[j] * (x - D);   /* dS */
                for (int64_t c = 0; c < Ev; c++)
                    r.dv[(b * S + j) * Ev + c] += P[j] * g.get(go + i * d.g.row + c * d.g.col);
                for (int64_t e = 0; e < E; e++) {
                    r.dq[(b * L + i) * E + e] += d.scale * dP[j] * k.get(ko + j * d.k.row + e * d.k.col);
                    r.dk[(b * S + j) * E + e] += d.scale * dP[j] * q.get(qo + i * d.q.row + e * d.q.col);
                }
            }
        }
    }
    return r;
}

/* Largest |got - want| over the largest |want| (absolute when that is 0). */
static double err(const char *what, buf &got, const std::vector<double> &want)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < want.size(); i++) {
        double x = got.get((int64_t)i);
        if (std::isnan(x))
            return printf("    %s: NaN at %zu\n", what, i), INFINITY;
        e = std::max(e, std::fabs(x - want[i])), m = std::max(m, std::fabs(want[i]));
    }
    return m > 0 ? e / m : e;
}

static double run_case(int ci, const emu_case &c)
{
    const kern_sdpa_desc &d = c.d;
    int64_t NB = nbatch(d), L = d.L, S = d.S, E = d.E, Ev = d.Ev;
    buf q, k, v, mask, o, g, out, dq, dk, dv;
    q.init(c.dt, span(d, d.q, L, E), c.misalign), k.init(c.dt, span(d, d.k, S, E), c.misalign);
    v.init(c.dt, span(d, d.v, S, Ev), c.misalign), g.init(c.dt, span(d, d.g, L, Ev), c.misalign);
    o.init(c.dt, span(d, d.o, L, Ev), 0);
    for (buf *x : { &q, &k, &v, &g })
        for (int64_t i = 0; i < (int64_t)((x->mem.size() - x->off) / x->esz()); i++)
            x->set(i, nz() * (x == &q || x == &k ? 1.5 : 1));
    if (d.mask_kind == KERN_SDPA_BOOL_MASK) {
        mask.init(SMELT_BOOL, span(d, d.mask, L, S), 0);
        for (int64_t i = 0; i < L; i++)   /* row 3: all masked; others ~30% */
            for (int64_t j = 0; j < S; j++)
                mask.set(i * d.mask.row + j * d.mask.col, i != 3 && uni(0, 1) > 0.3);
    } else if (d.mask_kind == KERN_SDPA_ADD_MASK) {
        mask.init(c.dt, span(d, d.mask, L, S), 0);
        for (int64_t b = 0; b < NB; b++)
            for (int64_t i = 0; i < L; i++)   /* row 2: all -inf; others some -inf */
                for (int64_t j = 0; j < S; j++)
                    mask.set(boff(d, d.mask, b) + i * d.mask.row + j * d.mask.col,
                             i == 2 || uni(0, 1) < 0.1 ? -INFINITY : nz() * 2);
    }
    out.init(c.dt, NB * L * Ev, 0), dq.init(c.dt, NB * L * E, 0), dk.init(c.dt, NB * S * E, 0);
    dv.init(c.dt, NB * S * Ev, 0);
    refout fw = reference(d, q, k, v, mask, o, g, 0);
    for (int64_t b = 0; b < NB; b++)   /* o: the forward's output, rounded to T */
        for (int64_t i = 0; i < L; i++)
            for (int64_t e = 0; e < Ev; e++)
                o.set(boff(d, d.o, b) + i * d.o.row + e * d.o.col, fw.out[(b * L + i) * Ev + e]);
    refout want = c.mode ? reference(d, q, k, v, mask, o, g, 1) : fw;
    std::vector<float> scratch((size_t)(cuda_sdpa_scratch_bytes(&d, c.dt, c.mode) / 4), NAN);
    cuda_launch_dim l[4];
    int n = cuda_sdpa_launches(&d, c.dt, c.mode, ci, l, 4);
    for (buf *x : { &out, &dq, &dk, &dv })   /* NaN bytes: unwritten outputs show */
        std::fill(x->mem.begin(), x->mem.end(), 0xff);
    void *mp = d.mask_kind ? mask.ptr() : NULL;
    for (int j = 0; j < n; j++) {
        void *f = ENTRIES[ci][j];
        if (c.mode == 0) {
            typedef void (*fn)(const void *, const void *, const void *, const void *, void *, float *);
            emu_launch(l[j].grid[0], l[j].block[0], l[j].shared,
                       [&] { ((fn)f)(q.ptr(), k.ptr(), v.ptr(), mp, out.ptr(), scratch.data()); });
        } else {
            typedef void (*fn)(const void *, const void *, const void *, const void *, const void *, const void *,
                               void *, void *, void *, float *);
            emu_launch(l[j].grid[0], l[j].block[0], l[j].shared, [&] {
                ((fn)f)(q.ptr(), k.ptr(), v.ptr(), o.ptr(), g.ptr(), mp, dq.ptr(), dk.ptr(), dv.ptr(), scratch.data());
            });
        }
    }
    double worst = 0;
    printf("%-34s %-4s %s launches %d:", c.name, c.dt == SMELT_F32 ? "f32" : c.dt == SMELT_F16 ? "f16" : "bf16",
           c.mode ? "bwd" : "fwd", n);
    if (c.mode == 0) {
        worst = err("out", out, want.out);
        printf(" out %.2e\n", worst);
    } else {
        double a = err("dq", dq, want.dq), b2 = err("dk", dk, want.dk), c2 = err("dv", dv, want.dv);
        printf(" dq %.2e dk %.2e dv %.2e\n", a, b2, c2);
        worst = std::max(a, std::max(b2, c2));
    }
    fflush(stdout);
    return worst;
}

int main(int argc, char **argv)
{
    emu_cp_late = getenv("EMU_CP") && !strcmp(getenv("EMU_CP"), "late");
    auto cs = cases();
    int bad = 0;
    for (size_t i = 0; i < cs.size(); i++) {
        if (argc > 1 && !strstr(cs[i].name, argv[1]))
            continue;
        double tol = cs[i].dt == SMELT_F32 ? 1e-5 : cs[i].dt == SMELT_F16 ? 4e-3 : 3e-2;
        double e = run_case((int)i, cs[i]);
        if (!(e <= tol))
            printf("    ^ above tolerance %.0e\n", tol), bad++;
    }
    printf("%s (EMU_CP=%s)\n", bad ? "FAILED" : "all cases within tolerance", emu_cp_late ? "late" : "early");
    return bad != 0;
}
#endif
