/* attention.c — smelt's flash attention for NVIDIA GPUs (see attention.h).
 *
 * The kernels are C++ templates (SDPA_COMMON, below: written once per
 * translation unit) over a step's configuration struct s<step>_cfg, which
 * this file writes: sizes, strides and batch offsets, scale, causal flag,
 * mask kind and the tile sizes chosen here, all constants. Each entry
 * point is a one-line instantiation.
 *
 * Forward, f16/bf16 with E and Ev multiples of 8 (E, Ev rounded up to 16
 * with zeros in shared memory): FlashAttention-2's scheme on tensor cores
 * (mma.sync m16n8k16, ldmatrix, cp.async; sm_80 and later): a block per
 * (batch entry, 16 NW query rows), a warp per 16 rows, Q held as mma
 * fragments, K/V tiles of BN keys in shared memory, online softmax in
 * registers; causal tiles past the diagonal are not visited.
 * Backward: a first pass (the forward's kernel without P V) writes each
 * row's max m and 1 / l (not one log-sum-exp: see kernels/attention.c)
 * and D = rowsum(dO O), and zeroes dQ's float accumulator; the second, a
 * block per (entry, 64 keys), recomputes P and accumulates dK, dV in
 * registers and dQ by atomicAdd (tensor cores for E, Ev <= 128, in
 * multiples of 8); the third writes dq = scale * accumulator as T.
 * Everything else (float32, other head sizes) runs SIMT kernels of the
 * same structure with float tiles in shared memory.
 *
 * The inline PTX sits in small helpers with a plain C++ body under
 * SMELT_CUDA_EMU, which tests/cuda_emu/ compiles with a CPU emulation of
 * the CUDA execution model to check the kernels without a GPU.
 */
#include "attention.h"
#include "cuda.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kernel templates (see the comment at the top). */
static const char SDPA_COMMON[] =
    "/* smelt attention kernels (inductor/cuda/attention.c): templates over a\n"
    " * step's configuration struct C (sizes, strides, tiles as constants). */\n"
    "#ifndef SMELT_SDPA_COMMON\n"
    "#define SMELT_SDPA_COMMON\n"
    "#define SDPA_NEG_INF __int_as_float(0xff800000)\n"
    "#define SDPA_LOG2E 1.44269504088896341f\n"
    "#ifdef SMELT_CUDA_EMU\n"
    "#define SDPA_SMEM(name) unsigned char *name = emu_smem\n"
    "#else\n"
    "#define SDPA_SMEM(name) extern __shared__ __align__(128) unsigned char name[]\n"
    "#endif\n"
    "\n"
    "/* Element type DT (0 float, 1 f16 bits, 2 bf16 bits): loads and stores\n"
    " * through float; pack(lo, hi): two values rounded into one register, lo\n"
    " * in the lower half (the lower column of an mma fragment). */\n"
    "template <int DT> struct sdpa_ty;\n"
    "template <> struct sdpa_ty<0> {\n"
    "    typedef float T;\n"
    "    static __device__ __forceinline__ float ld(const float *p, long long i) { return p[i]; }\n"
    "    static __device__ __forceinline__ void st(float *p, long long i, float x) { p[i] = x; }\n"
    "};\n"
    "template <> struct sdpa_ty<1> {\n"
    "    typedef unsigned short T;\n"
    "    static __device__ __forceinline__ float ld(const T *p, long long i) { return f16_to_f32(p[i]); }\n"
    "    static __device__ __forceinline__ void st(T *p, long long i, float x) { p[i] = f32_to_f16(x); }\n"
    "    static __device__ __forceinline__ float cv(unsigned short h) { return f16_to_f32(h); }\n"
    "    static __device__ __forceinline__ unsigned pack(float lo, float hi)\n"
    "    {\n"
    "#ifdef SMELT_CUDA_EMU\n"
    "        return (unsigned)f32_to_f16(lo) | (unsigned)f32_to_f16(hi) << 16;\n"
    "#else\n"
    "        unsigned r;\n"
    "        asm(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo));\n"
    "        return r;\n"
    "#endif\n"
    "    }\n"
    "};\n"
    "template <> struct sdpa_ty<2> {\n"
    "    typedef unsigned short T;\n"
    "    static __device__ __forceinline__ float ld(const T *p, long long i) { return bf16_to_f32(p[i]); }\n"
    "    static __device__ __forceinline__ void st(T *p, long long i, float x) { p[i] = f32_to_bf16(x); }\n"
    "    static __device__ __forceinline__ float cv(unsigned short h) { return bf16_to_f32(h); }\n"
    "    static __device__ __forceinline__ unsigned pack(float lo, float hi)\n"
    "    {\n"
    "#ifdef SMELT_CUDA_EMU\n"
    "        return (unsigned)f32_to_bf16(lo) | (unsigned)f32_to_bf16(hi) << 16;\n"
    "#else\n"
    "        unsigned r;\n"
    "        asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo));\n"
    "        return r;\n"
    "#endif\n"
    "    }\n"
    "};\n"
    "\n"
    "static __device__ __forceinline__ float sdpa_exp2(float x)\n"
    "{\n"
    "#ifdef SMELT_CUDA_EMU\n"
    "    return exp2f(x);\n"
    "#else\n"
    "    float y;\n"
    "    asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x));\n"
    "    return y;\n"
    "#endif\n"
    "}\n"
    "\n"
    "static __device__ __forceinline__ float sdpa_xor(float x, int m) { return __shfl_xor_sync(0xffffffffu, x, m); }\n"
    "\n"
    "#ifndef SMELT_CUDA_EMU\n"
    "static __device__ __forceinline__ unsigned sdpa_saddr(const void *p)\n"
    "{\n"
    "    unsigned a;\n"
    "    asm(\"{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\" : \"=r\"(a) : \"l\"(p));\n"
    "    return a;\n"
    "}\n"
    "#endif\n"
    "\n"
    "/* ldmatrix .x4 (warp-wide): lanes 8j .. 8j+7 give the addresses of rows\n"
    " * 0..7 of 8x8 matrix j (16 bytes each); r[j] gets, of matrix j, row lane/4,\n"
    " * columns 2 (lane%4) and +1 (TRANS: rows 2 (lane%4) and +1 of column\n"
    " * lane/4), the first in the lower half. */\n"
    "template <int TRANS> static __device__ __forceinline__ void sdpa_ldsm4(unsigned *r, const unsigned short *p)\n"
    "{\n"
    "#ifdef SMELT_CUDA_EMU\n"
    "    const unsigned short *all[32];\n"
    "    emu_check_smem(p, 16);\n"
    "    emu_warp_gather(&p, all, sizeof p);\n"
    "    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;\n"
    "    for (int j = 0; j < 4; j++) {\n"
    "        unsigned lo = TRANS ? all[8 * j + 2 * t][g] : all[8 * j + g][2 * t];\n"
    "        unsigned hi = TRANS ? all[8 * j + 2 * t + 1][g] : all[8 * j + g][2 * t + 1];\n"
    "        r[j] = lo | hi << 16;\n"
    "    }\n"
    "#else\n"
    "    if (TRANS)\n"
    "        asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\"\n"
    "                     : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(sdpa_saddr(p)));\n"
    "    else\n"
    "        asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\"\n"
    "                     : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(sdpa_saddr(p)));\n"
    "#endif\n"
    "}\n"
    "\n"
    "/* d (16x8 f32) += a (16x16) b (16x8), mma.sync m16n8k16 (warp-wide), with\n"
    " * g = lane/4, t = lane%4: a[0..3] hold (row g, cols 2t, 2t+1), (g+8, 2t..),\n"
    " * (g, 2t+8..), (g+8, 2t+8..); b[0..1] (rows 2t, 2t+1 of col g), (2t+8..);\n"
    " * d[0..3] (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1). */\n"
    "template <int DT> static __device__ __forceinline__ void sdpa_mma(float *d, const unsigned *a, unsigned b0, unsigned b1)\n"
    "{\n"
    "#ifdef SMELT_CUDA_EMU\n"
    "    struct F { unsigned a[4], b[2]; } mine = { { a[0], a[1], a[2], a[3] }, { b0, b1 } }, all[32];\n"
    "    emu_warp_gather(&mine, all, sizeof mine);\n"
    "    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;\n"
    "    for (int i = 0; i < 4; i++) {\n"
    "        int row = g + (i >> 1) * 8, col = 2 * t + (i & 1);\n"
    "        float s = 0;\n"
    "        for (int k = 0; k < 16; k++) {\n"
    "            unsigned ra = all[(row & 7) * 4 + ((k & 7) >> 1)].a[(row >> 3) + 2 * (k >> 3)];\n"
    "            unsigned rb = all[col * 4 + ((k & 7) >> 1)].b[k >> 3];\n"
    "            s += sdpa_ty<DT>::cv((unsigned short)(ra >> 16 * (k & 1))) *\n"
    "                 sdpa_ty<DT>::cv((unsigned short)(rb >> 16 * (k & 1)));\n"
    "        }\n"
    "        d[i] += s;\n"
    "    }\n"
    "#else\n"
    "    if (DT == 1)\n"
    "        asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, \"\n"
    "                     \"{%0,%1,%2,%3};\"\n"
    "                     : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n"
    "                     : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
    "    else\n"
    "        asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, \"\n"
    "                     \"{%0,%1,%2,%3};\"\n"
    "                     : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n"
    "                     : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
    "#endif\n"
    "}\n"
    "\n"
    "/* cp.async: 16 (or 4) bytes global -> shared, completed by wait<N> (all\n"
    " * but the N most recent committed groups) and visible to the block after\n"
    " * the __syncthreads that follows. */\n"
    "static __device__ __forceinline__ void sdpa_cp16(void *dst, const void *src)\n"
    "{\n"
    "#ifdef SMELT_CUDA_EMU\n"
    "    emu_cp_async(dst, src, 16);\n"
    "#else\n"
    "    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" ::\"r\"(sdpa_saddr(dst)), \"l\"(src) : \"memory\");\n"
    "#endif\n"
    "}\n"
    "static __device__ __forceinline__ void sdpa_cp4(void *dst, const void *src)\n"
    "{\n"
    "#ifdef SMELT_CUDA_EMU\n"
    "    emu_cp_async(dst, src, 4);\n"
    "#else\n"
    "    asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4;\" ::\"r\"(sdpa_saddr(dst)), \"l\"(src) : \"memory\");\n"
    "#endif\n"
    "}\n"
    "static __device__ __forceinline__ void sdpa_commit()\n"
    "{\n"
    "#ifdef SMELT_CUDA_EMU\n"
    "    emu_cp_commit();\n"
    "#else\n"
    "    asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n"
    "#endif\n"
    "}\n"
    "template <int N> static __device__ __forceinline__ void sdpa_wait()\n"
    "{\n"
    "#ifdef SMELT_CUDA_EMU\n"
    "    emu_cp_wait(N);\n"
    "#else\n"
    "    asm volatile(\"cp.async.wait_group %0;\" ::\"n\"(N) : \"memory\");\n"
    "#endif\n"
    "}\n"
    "\n"
    "/* Rows r0 .. r0+ROWS-1 (of n) of x, row stride R, column stride CS, E\n"
    " * columns, into s (ROWS x LD halves): columns E .. EP and rows past n\n"
    " * zero. VEC && vec (CS 1, R and E multiples of 8, x 16-byte aligned):\n"
    " * by cp.async (the caller commits), else by plain stores. */\n"
    "template <int ROWS, int E, int EP, int LD, int NT, long long R, long long CS, int VEC>\n"
    "static __device__ __forceinline__ void sdpa_tile(unsigned short *s, const unsigned short *x, long long r0, long long n,\n"
    "                                                 bool vec)\n"
    "{\n"
    "    if (VEC && vec) {\n"
    "        for (int c = threadIdx.x; c < ROWS * (EP / 8); c += NT) {\n"
    "            int r = c / (EP / 8), e = c % (EP / 8) * 8;\n"
    "            unsigned short *dst = s + r * LD + e;\n"
    "            if (r0 + r < n && e < E)\n"
    "                sdpa_cp16(dst, x + (r0 + r) * R + e);\n"
    "            else\n"
    "                ((unsigned long long *)dst)[0] = 0, ((unsigned long long *)dst)[1] = 0;\n"
    "        }\n"
    "    } else {\n"
    "        for (int c = threadIdx.x; c < ROWS * EP; c += NT) {\n"
    "            int r = c / EP, e = c % EP;\n"
    "            s[r * LD + e] = r0 + r < n && e < E ? x[(r0 + r) * R + e * CS] : (unsigned short)0;\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "/* The score of query i and key j in log2 units from x = q . k: scaled,\n"
    " * the additive mask added, -inf where j is no key, i no query, causal\n"
    " * hides j, or the bool mask is 0. */\n"
    "template <class C> static __device__ __forceinline__ float sdpa_score(float x, const unsigned char *m, long long i,\n"
    "                                                                     long long j)\n"
    "{\n"
    "    if (j >= C::S || i >= C::L || (C::CAUSAL && j > i))\n"
    "        return SDPA_NEG_INF;\n"
    "    x *= C::SC2;\n"
    "    long long at = i * C::MR + j * C::MC;\n"
    "    if (C::MASK == 1)\n"
    "        return m[at] ? x : SDPA_NEG_INF;\n"
    "    if (C::MASK == 2)\n"
    "        return x + sdpa_ty<C::DT>::ld((const typename sdpa_ty<C::DT>::T *)m, at) * SDPA_LOG2E;\n"
    "    return x;\n"
    "}\n"
    "\n"
    "template <class C> static __device__ __forceinline__ const unsigned char *sdpa_mask(const void *mask, long long b)\n"
    "{\n"
    "    if (!C::MASK)\n"
    "        return 0;\n"
    "    return (const unsigned char *)mask + C::moff(b) * (C::MASK == 1 ? 1 : (long long)sizeof(typename sdpa_ty<C::DT>::T));\n"
    "}\n"
    "\n"
    "/* Scratch of the backward: m (row max of the log2 scores), 1 / l, D =\n"
    " * rowsum(dO O) ([NB, L] each), then dQ's float accumulator [NB, L, E]. */\n"
    "template <class C> static __device__ __forceinline__ float *sdpa_st(float *s, int w) { return s + w * C::NB * C::L; }\n"
    "\n"
    "/* The backward's first pass, after a block's m and 1 / l: D of rows\n"
    " * i0 .. i0+BM-1 of entry b (a warp per row), and their dQ accumulator\n"
    " * zeroed. */\n"
    "template <class C, int NT, int BM>\n"
    "static __device__ __forceinline__ void sdpa_stats_tail(const typename sdpa_ty<C::DT>::T *o,\n"
    "                                                       const typename sdpa_ty<C::DT>::T *g, float *scratch,\n"
    "                                                       long long b, long long i0)\n"
    "{\n"
    "    typedef sdpa_ty<C::DT> Y;\n"
    "    o += C::ooff(b), g += C::goff(b);\n"
    "    const int lane = threadIdx.x & 31;\n"
    "    for (int r = threadIdx.x >> 5; r < BM && i0 + r < C::L; r += NT / 32) {\n"
    "        long long i = i0 + r;\n"
    "        float x = 0;\n"
    "        for (int e = lane; e < C::EV; e += 32)\n"
    "            x += Y::ld(o, i * C::OR + e * C::OC) * Y::ld(g, i * C::GR + e * C::GC);\n"
    "        for (int m = 16; m; m >>= 1)\n"
    "            x += sdpa_xor(x, m);\n"
    "        if (lane == 0)\n"
    "            sdpa_st<C>(scratch, 2)[b * C::L + i] = x;\n"
    "    }\n"
    "    float *dq = sdpa_st<C>(scratch, 3) + (b * C::L + i0) * C::E;\n"
    "    long long n = (C::L - i0 < BM ? C::L - i0 : BM) * C::E;\n"
    "    for (long long x = threadIdx.x; x < n; x += NT)\n"
    "        dq[x] = 0;\n"
    "}\n"
    "\n"
    "/* ------------------------------------------------------------------ tensor cores: forward\n"
    " * Block: NW warps, 16 query rows each (BM = 16 NW rows from block\n"
    " * (NQB - 1 - blockIdx / NB), so the longest causal blocks start first).\n"
    " * Q (in registers, as mma fragments) against key tiles of BN: S = Q K^T\n"
    " * by mma from K in shared memory (ldmatrix), masked in registers, online\n"
    " * softmax (row max over the 4 lanes of a row), P rounded to T and P V by\n"
    " * mma from V (ldmatrix .trans). K and V tiles by cp.async: V(j) loads\n"
    " * during S(j), K(j+1) during softmax and P V(j). Tiles past the causal\n"
    " * diagonal are not visited; a warp skips the tiles (and 16-key steps)\n"
    " * that its rows cannot see. STATS: the backward's first pass (no V):\n"
    " * m and 1 / l of each row, then sdpa_stats_tail. */\n"
    "template <class C, int STATS>\n"
    "static __device__ __forceinline__ void sdpa_tc_fwd(const unsigned short *q, const unsigned short *k,\n"
    "                                                   const unsigned short *v, const unsigned short *o,\n"
    "                                                   const unsigned short *g, const void *mask, unsigned short *out,\n"
    "                                                   float *scratch)\n"
    "{\n"
    "    typedef sdpa_ty<C::DT> Y;\n"
    "    constexpr int NW = C::NW, NT = 32 * NW, BM = 16 * NW, BN = C::BN, EP = C::EP, EVP = C::EVP;\n"
    "    constexpr int QLD = EP + 8, VLD = EVP + 8, NK = EP / 16, NS = BN / 8, NO = EVP / 8;\n"
    "    SDPA_SMEM(sm);\n"
    "    unsigned short *sq = (unsigned short *)sm, *sk = sq, *sv = sk + BN * QLD;\n"
    "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, t4 = lane & 3;\n"
    "    const long long b = blockIdx.x % C::NB, i0 = (C::NQB - 1 - blockIdx.x / C::NB) * BM, wr0 = i0 + warp * 16;\n"
    "    q += C::qoff(b), k += C::koff(b), v += C::voff(b);\n"
    "    const unsigned char *mb = sdpa_mask<C>(mask, b);\n"
    "    const bool vk = !((unsigned long long)k & 15), vv = !((unsigned long long)v & 15);\n"
    "    sdpa_tile<BM, C::E, EP, QLD, NT, C::QR, C::QC, C::QVEC>(sq, q, i0, C::L, !((unsigned long long)q & 15));\n"
    "    sdpa_commit();\n"
    "    sdpa_wait<0>();\n"
    "    __syncthreads();\n"
    "    unsigned qf[NK][4];\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < NK; kk++)\n"
    "        sdpa_ldsm4<0>(qf[kk], sq + (warp * 16 + (lane & 15)) * QLD + kk * 16 + (lane >> 4) * 8);\n"
    "    __syncthreads();\n"
    "    float acc[NO][4], mr[2] = { SDPA_NEG_INF, SDPA_NEG_INF }, lr[2] = { 0.f, 0.f };\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < NO; n++)\n"
    "        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;\n"
    "    const long long jend = C::CAUSAL && i0 + BM < C::S ? i0 + BM : C::S;\n"
    "    const int ntile = (int)((jend + BN - 1) / BN);\n"
    "    if (ntile > 0) {\n"
    "        sdpa_tile<BN, C::E, EP, QLD, NT, C::KR, C::KC, C::KVEC>(sk, k, 0, C::S, vk);\n"
    "        sdpa_commit();\n"
    "    }\n"
    "    for (int jt = 0; jt < ntile; jt++) {\n"
    "        const long long j0 = (long long)jt * BN;\n"
    "        if (!STATS) {\n"
    "            sdpa_tile<BN, C::EV, EVP, VLD, NT, C::VR, C::VC, C::VVEC>(sv, v, j0, C::S, vv);\n"
    "            sdpa_commit();\n"
    "            sdpa_wait<1>();\n"
    "        } else {\n"
    "            sdpa_wait<0>();\n"
    "        }\n"
    "        __syncthreads();\n"
    "        const bool live = !C::CAUSAL || j0 <= wr0 + 15;\n"
    "        float s[NS][4];\n"
    "#pragma unroll\n"
    "        for (int n = 0; n < NS; n++)\n"
    "            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;\n"
    "        if (live) {\n"
    "#pragma unroll\n"
    "            for (int kk = 0; kk < NK; kk++)\n"
    "#pragma unroll\n"
    "                for (int nn = 0; nn < BN / 16; nn++) {\n"
    "                    if (C::CAUSAL && j0 + nn * 16 > wr0 + 15)\n"
    "                        continue;\n"
    "                    unsigned bf[4];\n"
    "                    sdpa_ldsm4<0>(bf, sk + (nn * 16 + (lane & 7) + (lane >> 4) * 8) * QLD + kk * 16 +\n"
    "                                          ((lane >> 3) & 1) * 8);\n"
    "                    sdpa_mma<C::DT>(s[2 * nn], qf[kk], bf[0], bf[1]);\n"
    "                    sdpa_mma<C::DT>(s[2 * nn + 1], qf[kk], bf[2], bf[3]);\n"
    "                }\n"
    "        }\n"
    "        __syncthreads();\n"
    "        if (jt + 1 < ntile) {\n"
    "            sdpa_tile<BN, C::E, EP, QLD, NT, C::KR, C::KC, C::KVEC>(sk, k, j0 + BN, C::S, vk);\n"
    "            sdpa_commit();\n"
    "        }\n"
    "        if (live) {\n"
    "            const bool edge = C::MASK || j0 + BN > C::S || (C::CAUSAL && j0 + BN - 1 > wr0);\n"
    "#pragma unroll\n"
    "            for (int n = 0; n < NS; n++)\n"
    "#pragma unroll\n"
    "                for (int e = 0; e < 4; e++)\n"
    "                    s[n][e] = edge ? sdpa_score<C>(s[n][e], mb, wr0 + gr + (e >> 1) * 8, j0 + n * 8 + 2 * t4 + (e & 1))\n"
    "                                   : s[n][e] * C::SC2;\n"
    "#pragma unroll\n"
    "            for (int h = 0; h < 2; h++) {\n"
    "                float mx = SDPA_NEG_INF, sum = 0.f;\n"
    "#pragma unroll\n"
    "                for (int n = 0; n < NS; n++)\n"
    "                    mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));\n"
    "                mx = fmaxf(mx, sdpa_xor(mx, 1));\n"
    "                mx = fmaxf(mx, sdpa_xor(mx, 2));\n"
    "                const float mn = fmaxf(mr[h], mx), mu = mn == SDPA_NEG_INF ? 0.f : mn;\n"
    "                const float corr = sdpa_exp2(mr[h] - mu);\n"
    "                mr[h] = mn;\n"
    "#pragma unroll\n"
    "                for (int n = 0; n < NS; n++) {\n"
    "                    s[n][2 * h] = sdpa_exp2(s[n][2 * h] - mu);\n"
    "                    s[n][2 * h + 1] = sdpa_exp2(s[n][2 * h + 1] - mu);\n"
    "                    sum += s[n][2 * h] + s[n][2 * h + 1];\n"
    "                }\n"
    "                lr[h] = lr[h] * corr + sum;\n"
    "#pragma unroll\n"
    "                for (int n = 0; n < NO; n++)\n"
    "                    acc[n][2 * h] *= corr, acc[n][2 * h + 1] *= corr;\n"
    "            }\n"
    "        }\n"
    "        if (!STATS) {\n"
    "            if (jt + 1 < ntile)\n"
    "                sdpa_wait<1>();\n"
    "            else\n"
    "                sdpa_wait<0>();\n"
    "            __syncthreads();\n"
    "            if (live) {\n"
    "#pragma unroll\n"
    "                for (int kk = 0; kk < BN / 16; kk++) {\n"
    "                    if (C::CAUSAL && j0 + kk * 16 > wr0 + 15)\n"
    "                        continue;\n"
    "                    unsigned a[4] = { Y::pack(s[2 * kk][0], s[2 * kk][1]), Y::pack(s[2 * kk][2], s[2 * kk][3]),\n"
    "                                      Y::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),\n"
    "                                      Y::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]) };\n"
    "#pragma unroll\n"
    "                    for (int nn = 0; nn < EVP / 16; nn++) {\n"
    "                        unsigned bf[4];\n"
    "                        sdpa_ldsm4<1>(bf, sv + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * VLD + nn * 16 +\n"
    "                                              (lane >> 4) * 8);\n"
    "                        sdpa_mma<C::DT>(acc[2 * nn], a, bf[0], bf[1]);\n"
    "                        sdpa_mma<C::DT>(acc[2 * nn + 1], a, bf[2], bf[3]);\n"
    "                    }\n"
    "                }\n"
    "            }\n"
    "            __syncthreads();\n"
    "        }\n"
    "    }\n"
    "    sdpa_wait<0>();\n"
    "#pragma unroll\n"
    "    for (int h = 0; h < 2; h++) {\n"
    "        float l = lr[h] + sdpa_xor(lr[h], 1);\n"
    "        l += sdpa_xor(l, 2);\n"
    "        const long long i = wr0 + gr + 8 * h;\n"
    "        const float inv = l > 0.f ? 1.f / l : 0.f;\n"
    "        if (i >= C::L)\n"
    "            continue;\n"
    "        if (STATS) {\n"
    "            if (t4 == 0)\n"
    "                sdpa_st<C>(scratch, 0)[b * C::L + i] = l > 0.f ? mr[h] : 0.f,\n"
    "                sdpa_st<C>(scratch, 1)[b * C::L + i] = inv;\n"
    "            continue;\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int n = 0; n < NO; n++)\n"
    "#pragma unroll\n"
    "            for (int e = 0; e < 2; e++)\n"
    "                if (n * 8 + 2 * t4 + e < C::EV)\n"
    "                    Y::st(out, (b * C::L + i) * C::EV + n * 8 + 2 * t4 + e, acc[n][2 * h + e] * inv);\n"
    "    }\n"
    "    if (STATS)\n"
    "        sdpa_stats_tail<C, NT, BM>(o, g, scratch, b, i0);\n"
    "}\n"
    "\n"
    "/* ------------------------------------------------------------------ tensor cores: backward\n"
    " * Block: 4 warps over a tile of 64 keys (16 per warp) of entry\n"
    " * blockIdx % NB, visiting the query tiles of BM rows that can see them,\n"
    " * Q, dO and the rows' m, 1 / l, D double-buffered by cp.async (tile i+1\n"
    " * loads during tile i). Per tile, in registers (rows: the warp's keys):\n"
    " * S^T = K Q^T, P^T = exp2(S^T - m) / l, dV += P^T dO, dP^T = V dO^T,\n"
    " * dS^T = P^T (dP^T - D), dK += dS^T Q; then dS^T goes to shared memory\n"
    " * (as T) and each warp adds its part of dQ = dS K (16 rows by EP / WPR\n"
    " * columns) to the float accumulator with atomicAdd. dK (times scale) and\n"
    " * dV are written at the end. */\n"
    "template <class C, int BM>\n"
    "static __device__ __forceinline__ void sdpa_bwd_rows(unsigned short *sq, unsigned short *sg, float *ss,\n"
    "                                                     const unsigned short *q, const unsigned short *g,\n"
    "                                                     float *scratch, long long b, long long i0, bool vq, bool vg)\n"
    "{\n"
    "    sdpa_tile<BM, C::E, C::EP, C::EP + 8, 128, C::QR, C::QC, C::QVEC>(sq, q, i0, C::L, vq);\n"
    "    sdpa_tile<BM, C::EV, C::EVP, C::EVP + 8, 128, C::GR, C::GC, C::GVEC>(sg, g, i0, C::L, vg);\n"
    "    for (int x = threadIdx.x; x < 3 * BM; x += 128) {\n"
    "        int w = x / BM, r = x % BM;\n"
    "        if (i0 + r < C::L)\n"
    "            sdpa_cp4(ss + x, sdpa_st<C>(scratch, w) + b * C::L + i0 + r);\n"
    "        else\n"
    "            ss[x] = 0.f;\n"
    "    }\n"
    "}\n"
    "\n"
    "template <class C>\n"
    "static __device__ __forceinline__ void sdpa_tc_bwd(const unsigned short *q, const unsigned short *k,\n"
    "                                                   const unsigned short *v, const unsigned short *g, const void *mask,\n"
    "                                                   unsigned short *dk, unsigned short *dv, float *scratch)\n"
    "{\n"
    "    typedef sdpa_ty<C::DT> Y;\n"
    "    constexpr int BN = 64, BM = C::BBM, EP = C::EP, EVP = C::EVP, KLD = EP + 8, VLD = EVP + 8, DLD = BM + 8;\n"
    "    constexpr int RT = BM / 16, WPR = 4 / RT, NCT = EP / 8 / WPR;\n"
    "    SDPA_SMEM(sm);\n"
    "    unsigned short *sk = (unsigned short *)sm, *sv = sk + BN * KLD, *sq = sv + BN * VLD, *sg = sq + 2 * BM * KLD;\n"
    "    unsigned short *sd = sg + 2 * BM * VLD;\n"
    "    float *ss = (float *)(sd + BN * DLD);\n"
    "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, t4 = lane & 3;\n"
    "    const long long b = blockIdx.x % C::NB, j0 = blockIdx.x / C::NB * BN, kw0 = j0 + warp * 16;\n"
    "    q += C::qoff(b), k += C::koff(b), v += C::voff(b), g += C::goff(b);\n"
    "    const unsigned char *mb = sdpa_mask<C>(mask, b);\n"
    "    const bool vq = !((unsigned long long)q & 15), vg = !((unsigned long long)g & 15);\n"
    "    float *dqa = sdpa_st<C>(scratch, 3) + b * C::L * C::E;\n"
    "    sdpa_tile<BN, C::E, EP, KLD, 128, C::KR, C::KC, C::KVEC>(sk, k, j0, C::S, !((unsigned long long)k & 15));\n"
    "    sdpa_tile<BN, C::EV, EVP, VLD, 128, C::VR, C::VC, C::VVEC>(sv, v, j0, C::S, !((unsigned long long)v & 15));\n"
    "    sdpa_commit();\n"
    "    const long long istart = C::CAUSAL ? j0 / BM * BM : 0;\n"
    "    const int nq = istart < C::L ? (int)((C::L - istart + BM - 1) / BM) : 0;\n"
    "    if (nq > 0) {\n"
    "        sdpa_bwd_rows<C, BM>(sq, sg, ss, q, g, scratch, b, istart, vq, vg);\n"
    "        sdpa_commit();\n"
    "    }\n"
    "    float dka[EP / 8][4], dva[EVP / 8][4];\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < EP / 8; n++)\n"
    "        dka[n][0] = dka[n][1] = dka[n][2] = dka[n][3] = 0.f;\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < EVP / 8; n++)\n"
    "        dva[n][0] = dva[n][1] = dva[n][2] = dva[n][3] = 0.f;\n"
    "    for (int it = 0; it < nq; it++) {\n"
    "        const long long i0 = istart + (long long)it * BM;\n"
    "        const int buf = it & 1;\n"
    "        sdpa_wait<0>();\n"
    "        __syncthreads();\n"
    "        if (it + 1 < nq) {\n"
    "            sdpa_bwd_rows<C, BM>(sq + (buf ^ 1) * BM * KLD, sg + (buf ^ 1) * BM * VLD, ss + (buf ^ 1) * 3 * BM, q, g,\n"
    "                                 scratch, b, i0 + BM, vq, vg);\n"
    "            sdpa_commit();\n"
    "        }\n"
    "        const unsigned short *qb = sq + buf * BM * KLD, *gb = sg + buf * BM * VLD;\n"
    "        const float *st = ss + buf * 3 * BM;\n"
    "        float p[BM / 8][4], dp[BM / 8][4];\n"
    "#pragma unroll\n"
    "        for (int n = 0; n < BM / 8; n++)\n"
    "            p[n][0] = p[n][1] = p[n][2] = p[n][3] = dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.f;\n"
    "#pragma unroll\n"
    "        for (int kk = 0; kk < EP / 16; kk++) {\n"
    "            unsigned a[4];\n"
    "            sdpa_ldsm4<0>(a, sk + (warp * 16 + (lane & 15)) * KLD + kk * 16 + (lane >> 4) * 8);\n"
    "#pragma unroll\n"
    "            for (int nn = 0; nn < BM / 16; nn++) {\n"
    "                unsigned bf[4];\n"
    "                sdpa_ldsm4<0>(bf, qb + (nn * 16 + (lane & 7) + (lane >> 4) * 8) * KLD + kk * 16 + ((lane >> 3) & 1) * 8);\n"
    "                sdpa_mma<C::DT>(p[2 * nn], a, bf[0], bf[1]);\n"
    "                sdpa_mma<C::DT>(p[2 * nn + 1], a, bf[2], bf[3]);\n"
    "            }\n"
    "        }\n"
    "        const bool edge = C::MASK || j0 + BN > C::S || i0 + BM > C::L || (C::CAUSAL && kw0 + 15 > i0);\n"
    "#pragma unroll\n"
    "        for (int n = 0; n < BM / 8; n++)\n"
    "#pragma unroll\n"
    "            for (int e = 0; e < 4; e++) {\n"
    "                const int r = n * 8 + 2 * t4 + (e & 1);\n"
    "                const float x = edge ? sdpa_score<C>(p[n][e], mb, i0 + r, kw0 + gr + (e >> 1) * 8) : p[n][e] * C::SC2;\n"
    "                p[n][e] = sdpa_exp2(x - st[r]) * st[BM + r];\n"
    "            }\n"
    "#pragma unroll\n"
    "        for (int kk = 0; kk < BM / 16; kk++) {\n"
    "            unsigned a[4] = { Y::pack(p[2 * kk][0], p[2 * kk][1]), Y::pack(p[2 * kk][2], p[2 * kk][3]),\n"
    "                              Y::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]), Y::pack(p[2 * kk + 1][2], p[2 * kk + 1][3]) };\n"
    "#pragma unroll\n"
    "            for (int nn = 0; nn < EVP / 16; nn++) {\n"
    "                unsigned bf[4];\n"
    "                sdpa_ldsm4<1>(bf, gb + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * VLD + nn * 16 + (lane >> 4) * 8);\n"
    "                sdpa_mma<C::DT>(dva[2 * nn], a, bf[0], bf[1]);\n"
    "                sdpa_mma<C::DT>(dva[2 * nn + 1], a, bf[2], bf[3]);\n"
    "            }\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int kk = 0; kk < EVP / 16; kk++) {\n"
    "            unsigned a[4];\n"
    "            sdpa_ldsm4<0>(a, sv + (warp * 16 + (lane & 15)) * VLD + kk * 16 + (lane >> 4) * 8);\n"
    "#pragma unroll\n"
    "            for (int nn = 0; nn < BM / 16; nn++) {\n"
    "                unsigned bf[4];\n"
    "                sdpa_ldsm4<0>(bf, gb + (nn * 16 + (lane & 7) + (lane >> 4) * 8) * VLD + kk * 16 + ((lane >> 3) & 1) * 8);\n"
    "                sdpa_mma<C::DT>(dp[2 * nn], a, bf[0], bf[1]);\n"
    "                sdpa_mma<C::DT>(dp[2 * nn + 1], a, bf[2], bf[3]);\n"
    "            }\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int n = 0; n < BM / 8; n++)\n"
    "#pragma unroll\n"
    "            for (int e = 0; e < 4; e++)\n"
    "                dp[n][e] = p[n][e] * (dp[n][e] - st[2 * BM + n * 8 + 2 * t4 + (e & 1)]);\n"
    "#pragma unroll\n"
    "        for (int kk = 0; kk < BM / 16; kk++) {\n"
    "            unsigned a[4] = { Y::pack(dp[2 * kk][0], dp[2 * kk][1]), Y::pack(dp[2 * kk][2], dp[2 * kk][3]),\n"
    "                              Y::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),\n"
    "                              Y::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]) };\n"
    "#pragma unroll\n"
    "            for (int nn = 0; nn < EP / 16; nn++) {\n"
    "                unsigned bf[4];\n"
    "                sdpa_ldsm4<1>(bf, qb + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * KLD + nn * 16 + (lane >> 4) * 8);\n"
    "                sdpa_mma<C::DT>(dka[2 * nn], a, bf[0], bf[1]);\n"
    "                sdpa_mma<C::DT>(dka[2 * nn + 1], a, bf[2], bf[3]);\n"
    "            }\n"
    "            *(unsigned *)(sd + (warp * 16 + gr) * DLD + kk * 16 + 2 * t4) = a[0];\n"
    "            *(unsigned *)(sd + (warp * 16 + gr + 8) * DLD + kk * 16 + 2 * t4) = a[1];\n"
    "            *(unsigned *)(sd + (warp * 16 + gr) * DLD + kk * 16 + 8 + 2 * t4) = a[2];\n"
    "            *(unsigned *)(sd + (warp * 16 + gr + 8) * DLD + kk * 16 + 8 + 2 * t4) = a[3];\n"
    "        }\n"
    "        __syncthreads();\n"
    "        const int rt = warp % RT, c0 = warp / RT * NCT;\n"
    "        float dq[NCT][4];\n"
    "#pragma unroll\n"
    "        for (int c = 0; c < NCT; c++)\n"
    "            dq[c][0] = dq[c][1] = dq[c][2] = dq[c][3] = 0.f;\n"
    "#pragma unroll\n"
    "        for (int k2 = 0; k2 < BN / 32; k2++) {\n"
    "            unsigned a0[4], a1[4];\n"
    "            sdpa_ldsm4<1>(a0, sd + (k2 * 32 + (lane & 7) + (lane >> 4) * 8) * DLD + rt * 16 + ((lane >> 3) & 1) * 8);\n"
    "            sdpa_ldsm4<1>(a1, sd + (k2 * 32 + 16 + (lane & 7) + (lane >> 4) * 8) * DLD + rt * 16 + ((lane >> 3) & 1) * 8);\n"
    "#pragma unroll\n"
    "            for (int c = 0; c < NCT; c++) {\n"
    "                unsigned bf[4];\n"
    "                sdpa_ldsm4<1>(bf, sk + (k2 * 32 + lane) * KLD + (c0 + c) * 8);\n"
    "                sdpa_mma<C::DT>(dq[c], a0, bf[0], bf[1]);\n"
    "                sdpa_mma<C::DT>(dq[c], a1, bf[2], bf[3]);\n"
    "            }\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int c = 0; c < NCT; c++)\n"
    "#pragma unroll\n"
    "            for (int e = 0; e < 4; e++) {\n"
    "                const long long i = i0 + rt * 16 + gr + (e >> 1) * 8;\n"
    "                const int col = (c0 + c) * 8 + 2 * t4 + (e & 1);\n"
    "                if (i < C::L && col < C::E)\n"
    "                    atomicAdd(dqa + i * C::E + col, dq[c][e]);\n"
    "            }\n"
    "    }\n"
    "    sdpa_wait<0>();\n"
    "#pragma unroll\n"
    "    for (int h = 0; h < 2; h++) {\n"
    "        const long long j = kw0 + gr + 8 * h;\n"
    "        if (j >= C::S)\n"
    "            continue;\n"
    "#pragma unroll\n"
    "        for (int n = 0; n < EP / 8; n++)\n"
    "#pragma unroll\n"
    "            for (int e = 0; e < 2; e++)\n"
    "                if (n * 8 + 2 * t4 + e < C::E)\n"
    "                    Y::st(dk, (b * C::S + j) * C::E + n * 8 + 2 * t4 + e, dka[n][2 * h + e] * C::SC);\n"
    "#pragma unroll\n"
    "        for (int n = 0; n < EVP / 8; n++)\n"
    "#pragma unroll\n"
    "            for (int e = 0; e < 2; e++)\n"
    "                if (n * 8 + 2 * t4 + e < C::EV)\n"
    "                    Y::st(dv, (b * C::S + j) * C::EV + n * 8 + 2 * t4 + e, dva[n][2 * h + e]);\n"
    "    }\n"
    "}\n"
    "\n"
    "/* ------------------------------------------------------------------ SIMT\n"
    " * Rows r0 .. r0+ROWS-1 (of n) of x as float into s (ROWS x LD), columns\n"
    " * E .. CP and rows past n zero. */\n"
    "template <class C, int ROWS, int E, int CP, int LD>\n"
    "static __device__ __forceinline__ void sdpa_ftile(float *s, const typename sdpa_ty<C::DT>::T *x, long long R,\n"
    "                                                  long long CS, long long r0, long long n)\n"
    "{\n"
    "    for (int t = threadIdx.x; t < ROWS * CP; t += 128) {\n"
    "        const int r = t / CP, c = t % CP;\n"
    "        s[r * LD + c] = r0 + r < n && c < E ? sdpa_ty<C::DT>::ld(x, (r0 + r) * R + c * CS) : 0.f;\n"
    "    }\n"
    "}\n"
    "\n"
    "/* s[i][j] += sum over e < K of a[(r(i)) * LA + e] b[(c(j)) * LB + e]:\n"
    " * rows r(i) = rg + 16 i, columns c(j) = kg + 8 j (a thread's micro-tile). */\n"
    "template <int RM, int RN, int K, int LA, int LB>\n"
    "static __device__ __forceinline__ void sdpa_fdot(float (*s)[RN], const float *a, const float *b, int rg, int kg)\n"
    "{\n"
    "#pragma unroll 4\n"
    "    for (int e = 0; e < K; e++) {\n"
    "        float x[RM], y[RN];\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < RM; i++)\n"
    "            x[i] = a[(rg + 16 * i) * LA + e];\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < RN; j++)\n"
    "            y[j] = b[(kg + 8 * j) * LB + e];\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < RM; i++)\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < RN; j++)\n"
    "                s[i][j] += x[i] * y[j];\n"
    "    }\n"
    "}\n"
    "\n"
    "/* SIMT forward. Block: 128 threads over BM = SBM query rows (of block\n"
    " * NQB - 1 - blockIdx / NB), key tiles of BN = SBN in shared memory as\n"
    " * float. Thread (rg, kg) = (tid / 8, tid % 8) holds the scores of rows rg\n"
    " * + 16 i and keys kg + 8 j, so a row's 8 threads are adjacent lanes: the\n"
    " * online softmax is in registers with shuffles; P goes through shared\n"
    " * memory to P V, whose accumulators the thread holds for the same rows and\n"
    " * columns kg + 8 u. STATS as in sdpa_tc_fwd. */\n"
    "template <class C, int STATS>\n"
    "static __device__ __forceinline__ void sdpa_simt_fwd(const typename sdpa_ty<C::DT>::T *q,\n"
    "                                                     const typename sdpa_ty<C::DT>::T *k,\n"
    "                                                     const typename sdpa_ty<C::DT>::T *v,\n"
    "                                                     const typename sdpa_ty<C::DT>::T *o,\n"
    "                                                     const typename sdpa_ty<C::DT>::T *g, const void *mask,\n"
    "                                                     typename sdpa_ty<C::DT>::T *out, float *scratch)\n"
    "{\n"
    "    typedef sdpa_ty<C::DT> Y;\n"
    "    constexpr int BM = C::SBM, BN = C::SBN, E = C::E, EV = C::EV, RM = BM / 16, RN = BN / 8, NC = (EV + 7) / 8;\n"
    "    constexpr int KLD = E + 1, VLD = 8 * NC, PLD = BN + 1;\n"
    "    SDPA_SMEM(sm);\n"
    "    float *qs = (float *)sm, *ks = qs + BM * KLD, *vs = ks + BN * KLD, *ps = vs + BN * VLD;\n"
    "    const int rg = threadIdx.x >> 3, kg = threadIdx.x & 7;\n"
    "    const long long b = blockIdx.x % C::NB, i0 = (C::NQB - 1 - blockIdx.x / C::NB) * BM;\n"
    "    q += C::qoff(b), k += C::koff(b), v += C::voff(b);\n"
    "    const unsigned char *mb = sdpa_mask<C>(mask, b);\n"
    "    sdpa_ftile<C, BM, E, E, KLD>(qs, q, C::QR, C::QC, i0, C::L);\n"
    "    float acc[RM][NC], mr[RM], lr[RM];\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < RM; i++) {\n"
    "        mr[i] = SDPA_NEG_INF, lr[i] = 0.f;\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < NC; u++)\n"
    "            acc[i][u] = 0.f;\n"
    "    }\n"
    "    const long long jend = C::CAUSAL && i0 + BM < C::S ? i0 + BM : C::S;\n"
    "    for (long long j0 = 0; j0 < jend; j0 += BN) {\n"
    "        __syncthreads();\n"
    "        sdpa_ftile<C, BN, E, E, KLD>(ks, k, C::KR, C::KC, j0, C::S);\n"
    "        if (!STATS)\n"
    "            sdpa_ftile<C, BN, EV, VLD, VLD>(vs, v, C::VR, C::VC, j0, C::S);\n"
    "        __syncthreads();\n"
    "        float s[RM][RN];\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < RM; i++)\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < RN; j++)\n"
    "                s[i][j] = 0.f;\n"
    "        sdpa_fdot<RM, RN, E, KLD, KLD>(s, qs, ks, rg, kg);\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < RM; i++) {\n"
    "            float mx = SDPA_NEG_INF, sum = 0.f;\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < RN; j++) {\n"
    "                s[i][j] = sdpa_score<C>(s[i][j], mb, i0 + rg + 16 * i, j0 + kg + 8 * j);\n"
    "                mx = fmaxf(mx, s[i][j]);\n"
    "            }\n"
    "            mx = fmaxf(mx, sdpa_xor(mx, 1));\n"
    "            mx = fmaxf(mx, sdpa_xor(mx, 2));\n"
    "            mx = fmaxf(mx, sdpa_xor(mx, 4));\n"
    "            const float mn = fmaxf(mr[i], mx), mu = mn == SDPA_NEG_INF ? 0.f : mn, corr = sdpa_exp2(mr[i] - mu);\n"
    "            mr[i] = mn;\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < RN; j++) {\n"
    "                const float p = sdpa_exp2(s[i][j] - mu);\n"
    "                sum += p;\n"
    "                if (!STATS)\n"
    "                    ps[(rg + 16 * i) * PLD + kg + 8 * j] = p;\n"
    "            }\n"
    "            lr[i] = lr[i] * corr + sum;\n"
    "#pragma unroll\n"
    "            for (int u = 0; u < NC; u++)\n"
    "                acc[i][u] *= corr;\n"
    "        }\n"
    "        if (STATS)\n"
    "            continue;\n"
    "        __syncthreads();\n"
    "#pragma unroll 2\n"
    "        for (int j = 0; j < BN; j++) {\n"
    "            float p[RM], x[NC];\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < RM; i++)\n"
    "                p[i] = ps[(rg + 16 * i) * PLD + j];\n"
    "#pragma unroll\n"
    "            for (int u = 0; u < NC; u++)\n"
    "                x[u] = vs[j * VLD + kg + 8 * u];\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < RM; i++)\n"
    "#pragma unroll\n"
    "                for (int u = 0; u < NC; u++)\n"
    "                    acc[i][u] += p[i] * x[u];\n"
    "        }\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < RM; i++) {\n"
    "        float l = lr[i] + sdpa_xor(lr[i], 1);\n"
    "        l += sdpa_xor(l, 2);\n"
    "        l += sdpa_xor(l, 4);\n"
    "        const long long r = i0 + rg + 16 * i;\n"
    "        const float inv = l > 0.f ? 1.f / l : 0.f;\n"
    "        if (r >= C::L)\n"
    "            continue;\n"
    "        if (STATS) {\n"
    "            if (kg == 0)\n"
    "                sdpa_st<C>(scratch, 0)[b * C::L + r] = l > 0.f ? mr[i] : 0.f, sdpa_st<C>(scratch, 1)[b * C::L + r] = inv;\n"
    "            continue;\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < NC; u++)\n"
    "            if (kg + 8 * u < EV)\n"
    "                Y::st(out, (b * C::L + r) * EV + kg + 8 * u, acc[i][u] * inv);\n"
    "    }\n"
    "    if (STATS)\n"
    "        sdpa_stats_tail<C, 128, BM>(o, g, scratch, b, i0);\n"
    "}\n"
    "\n"
    "/* SIMT backward. Block: 128 threads over a tile of BN = SBB keys, visiting\n"
    " * the query tiles (BM = SBB rows) that can see them. Thread (rg, kg): S\n"
    " * and dP for rows rg + 16 i, keys kg + 8 j (P and dS then to shared\n"
    " * memory); dK and dV accumulators for keys rg + 16 i, columns kg + 8 u;\n"
    " * dQ = dS K for rows rg + 16 i, columns kg + 8 u, added to the float\n"
    " * accumulator by atomicAdd. */\n"
    "template <class C>\n"
    "static __device__ __forceinline__ void sdpa_simt_bwd(const typename sdpa_ty<C::DT>::T *q,\n"
    "                                                     const typename sdpa_ty<C::DT>::T *k,\n"
    "                                                     const typename sdpa_ty<C::DT>::T *v,\n"
    "                                                     const typename sdpa_ty<C::DT>::T *g, const void *mask,\n"
    "                                                     typename sdpa_ty<C::DT>::T *dk, typename sdpa_ty<C::DT>::T *dv,\n"
    "                                                     float *scratch)\n"
    "{\n"
    "    typedef sdpa_ty<C::DT> Y;\n"
    "    constexpr int BN = C::SBB, BM = C::SBB, E = C::E, EV = C::EV, RM = BM / 16, RN = BN / 8, RK = BN / 16;\n"
    "    constexpr int NE = (E + 7) / 8, NV = (EV + 7) / 8, KLD = 8 * NE + 1, VLD = 8 * NV + 1, PLD = BN + 1;\n"
    "    SDPA_SMEM(sm);\n"
    "    float *ks = (float *)sm, *vs = ks + BN * KLD, *qs = vs + BN * VLD, *gs = qs + BM * KLD, *ps = gs + BM * VLD;\n"
    "    float *ds = ps + BM * PLD, *st = ds + BM * PLD;\n"
    "    const int tid = threadIdx.x, rg = tid >> 3, kg = tid & 7;\n"
    "    const long long b = blockIdx.x % C::NB, j0 = blockIdx.x / C::NB * BN;\n"
    "    q += C::qoff(b), k += C::koff(b), v += C::voff(b), g += C::goff(b);\n"
    "    const unsigned char *mb = sdpa_mask<C>(mask, b);\n"
    "    float *dqa = sdpa_st<C>(scratch, 3) + b * C::L * E;\n"
    "    sdpa_ftile<C, BN, E, 8 * NE, KLD>(ks, k, C::KR, C::KC, j0, C::S);\n"
    "    sdpa_ftile<C, BN, EV, 8 * NV, VLD>(vs, v, C::VR, C::VC, j0, C::S);\n"
    "    float dka[RK][NE], dva[RK][NV];\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < RK; i++) {\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < NE; u++)\n"
    "            dka[i][u] = 0.f;\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < NV; u++)\n"
    "            dva[i][u] = 0.f;\n"
    "    }\n"
    "    for (long long i0 = C::CAUSAL ? j0 / BM * BM : 0; i0 < C::L; i0 += BM) {\n"
    "        __syncthreads();\n"
    "        sdpa_ftile<C, BM, E, 8 * NE, KLD>(qs, q, C::QR, C::QC, i0, C::L);\n"
    "        sdpa_ftile<C, BM, EV, 8 * NV, VLD>(gs, g, C::GR, C::GC, i0, C::L);\n"
    "        for (int x = tid; x < 3 * BM; x += 128)\n"
    "            st[x] = i0 + x % BM < C::L ? sdpa_st<C>(scratch, x / BM)[b * C::L + i0 + x % BM] : 0.f;\n"
    "        __syncthreads();\n"
    "        float s[RM][RN], dp[RM][RN];\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < RM; i++)\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < RN; j++)\n"
    "                s[i][j] = dp[i][j] = 0.f;\n"
    "        sdpa_fdot<RM, RN, E, KLD, KLD>(s, qs, ks, rg, kg);\n"
    "        sdpa_fdot<RM, RN, EV, VLD, VLD>(dp, gs, vs, rg, kg);\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < RM; i++)\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < RN; j++) {\n"
    "                const int r = rg + 16 * i, c = kg + 8 * j;\n"
    "                const float p = sdpa_exp2(sdpa_score<C>(s[i][j], mb, i0 + r, j0 + c) - st[r]) * st[BM + r];\n"
    "                ps[r * PLD + c] = p;\n"
    "                ds[r * PLD + c] = p * (dp[i][j] - st[2 * BM + r]);\n"
    "            }\n"
    "        __syncthreads();\n"
    "#pragma unroll 2\n"
    "        for (int r = 0; r < BM; r++) {\n"
    "            float pa[RK], da[RK], x[NV], y[NE];\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < RK; i++)\n"
    "                pa[i] = ps[r * PLD + rg + 16 * i], da[i] = ds[r * PLD + rg + 16 * i];\n"
    "#pragma unroll\n"
    "            for (int u = 0; u < NV; u++)\n"
    "                x[u] = gs[r * VLD + kg + 8 * u];\n"
    "#pragma unroll\n"
    "            for (int u = 0; u < NE; u++)\n"
    "                y[u] = qs[r * KLD + kg + 8 * u];\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < RK; i++) {\n"
    "#pragma unroll\n"
    "                for (int u = 0; u < NV; u++)\n"
    "                    dva[i][u] += pa[i] * x[u];\n"
    "#pragma unroll\n"
    "                for (int u = 0; u < NE; u++)\n"
    "                    dka[i][u] += da[i] * y[u];\n"
    "            }\n"
    "        }\n"
    "        float dq[RM][NE];\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < RM; i++)\n"
    "#pragma unroll\n"
    "            for (int u = 0; u < NE; u++)\n"
    "                dq[i][u] = 0.f;\n"
    "#pragma unroll 2\n"
    "        for (int j = 0; j < BN; j++) {\n"
    "            float a[RM], y[NE];\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < RM; i++)\n"
    "                a[i] = ds[(rg + 16 * i) * PLD + j];\n"
    "#pragma unroll\n"
    "            for (int u = 0; u < NE; u++)\n"
    "                y[u] = ks[j * KLD + kg + 8 * u];\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < RM; i++)\n"
    "#pragma unroll\n"
    "                for (int u = 0; u < NE; u++)\n"
    "                    dq[i][u] += a[i] * y[u];\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < RM; i++)\n"
    "#pragma unroll\n"
    "            for (int u = 0; u < NE; u++)\n"
    "                if (i0 + rg + 16 * i < C::L && kg + 8 * u < E)\n"
    "                    atomicAdd(dqa + (i0 + rg + 16 * i) * E + kg + 8 * u, dq[i][u]);\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < RK; i++) {\n"
    "        const long long j = j0 + rg + 16 * i;\n"
    "        if (j >= C::S)\n"
    "            continue;\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < NE; u++)\n"
    "            if (kg + 8 * u < E)\n"
    "                Y::st(dk, (b * C::S + j) * E + kg + 8 * u, dka[i][u] * C::SC);\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < NV; u++)\n"
    "            if (kg + 8 * u < EV)\n"
    "                Y::st(dv, (b * C::S + j) * EV + kg + 8 * u, dva[i][u]);\n"
    "    }\n"
    "}\n"
    "\n"
    "/* dq = scale * the float accumulator (256 threads per block). */\n"
    "template <class C>\n"
    "static __device__ __forceinline__ void sdpa_dq_out(typename sdpa_ty<C::DT>::T *dq, const float *scratch)\n"
    "{\n"
    "    const long long x = (long long)blockIdx.x * 256 + threadIdx.x;\n"
    "    if (x < C::NB * C::L * C::E)\n"
    "        sdpa_ty<C::DT>::st(dq, x, scratch[3 * C::NB * C::L + x] * C::SC);\n"
    "}\n"
    "\n"
    "/* Zero gradients where there is no query or no value column. */\n"
    "template <class C>\n"
    "static __device__ __forceinline__ void sdpa_bzero(typename sdpa_ty<C::DT>::T *dq, typename sdpa_ty<C::DT>::T *dk,\n"
    "                                                  typename sdpa_ty<C::DT>::T *dv)\n"
    "{\n"
    "    const long long x = (long long)blockIdx.x * 256 + threadIdx.x;\n"
    "    if (x < C::NB * C::L * C::E)\n"
    "        sdpa_ty<C::DT>::st(dq, x, 0.f);\n"
    "    if (x < C::NB * C::S * C::E)\n"
    "        sdpa_ty<C::DT>::st(dk, x, 0.f);\n"
    "    if (x < C::NB * C::S * C::EV)\n"
    "        sdpa_ty<C::DT>::st(dv, x, 0.f);\n"
    "}\n"
    "#endif\n";

typedef cuda_text sb;


/* ------------------------------------------------------------------ tiles */

enum { SMEM_FWD_MAX = 48 * 1024, SMEM_BWD_MAX = 99 * 1024 };

/* The kernels a step runs and their tile sizes. */
typedef struct sdpa_tiles {
    int tc;          /* forward / first pass on tensor cores */
    int tcb;         /* backward's second pass on tensor cores */
    int ep, evp;     /* E, Ev rounded up to 16 */
    int nw, bn;      /* tensor-core forward: warps (16 query rows each), key tile */
    int bbm;         /* tensor-core backward: query tile (key tile 64) */
    int sbm, sbn;    /* SIMT forward: query and key tile */
    int sbb;         /* SIMT backward: query and key tile */
} sdpa_tiles;

static int64_t nbatch(const kern_sdpa_desc *d)
{
    int64_t n = 1;
    for (int i = 0; i < d->nb; i++)
        n *= d->bdims[i];
    return n;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int imax(int a, int b) { return a > b ? a : b; }

static unsigned tc_fwd_smem(const sdpa_tiles *t)
{
    int qld = t->ep + 8;
    return 2u * (unsigned)imax(16 * t->nw * qld, t->bn * (qld + t->evp + 8));
}

static unsigned tc_bwd_smem(const sdpa_tiles *t)
{
    int kld = t->ep + 8, vld = t->evp + 8;
    return 2u * (unsigned)(64 * kld + 64 * vld + 2 * t->bbm * (kld + vld) + 64 * (t->bbm + 8)) + 24u * (unsigned)t->bbm;
}

static unsigned simt_fwd_smem(const kern_sdpa_desc *d, int bm, int bn)
{
    int kld = (int)d->E + 1, vld = (int)cdiv(d->Ev, 8) * 8;
    return 4u * (unsigned)(bm * kld + bn * kld + bn * vld + bm * (bn + 1));
}

static unsigned simt_bwd_smem(const kern_sdpa_desc *d, int bb)
{
    int kld = (int)cdiv(d->E, 8) * 8 + 1, vld = (int)cdiv(d->Ev, 8) * 8 + 1;
    return 4u * (unsigned)(2 * bb * kld + 2 * bb * vld + 2 * bb * (bb + 1) + 3 * bb);
}

/* Tile sizes: shared memory within 48 KiB for the forward kernels (no
 * opt-in needed), 99 KiB for the backward's (sm_86's limit); the
 * tensor-core forward's registers: 16-row warps, BN from 128 keys (E, Ev
 * <= 64) down to 32 (above 128). */
static void plan(const kern_sdpa_desc *d, smelt_dtype dt, sdpa_tiles *t)
{
    memset(t, 0, sizeof *t);
    t->ep = (int)cdiv(d->E, 16) * 16, t->evp = (int)cdiv(d->Ev, 16) * 16;
    int hd = imax(t->ep, t->evp);
    t->tc = dt != SMELT_F32 && d->E % 8 == 0 && d->Ev % 8 == 0;
    t->tcb = t->tc && hd <= 128;
    t->bn = hd <= 64 ? 128 : hd <= 128 ? 64 : 32;
    t->nw = (int)(d->L > 64 && hd <= 128 ? 8 : d->L > 48 ? 4 : d->L < 16 ? 1 : cdiv(d->L, 16));
    t->bbm = hd <= 64 ? 64 : 32;
    static const int fwd_try[][2] = { { 32, 32 }, { 32, 16 }, { 16, 16 }, { 16, 8 } };
    for (int i = 0; i < 4; i++) {
        t->sbm = fwd_try[i][0], t->sbn = fwd_try[i][1];
        if (simt_fwd_smem(d, t->sbm, t->sbn) <= SMEM_FWD_MAX)
            break;
    }
    t->sbb = simt_bwd_smem(d, 32) <= SMEM_BWD_MAX ? 32 : 16;
}

/* Query rows per block of the forward kernel (and the first pass). */
static int fwd_rows(const sdpa_tiles *t) { return t->tc ? 16 * t->nw : t->sbm; }

int cuda_sdpa_supports(const kern_sdpa_desc *d, smelt_dtype dt, int mode, char *why, size_t n)
{
    const char *no = NULL;
    if (dt != SMELT_F32 && dt != SMELT_F16 && dt != SMELT_BF16)
        no = "sdpa on CUDA: dtype is not float32, float16 or bfloat16";
    else if (mode != 0 && mode != 1)
        no = "sdpa on CUDA: mode is not forward (0) or backward (1)";
    else if (d->nb < 0 || d->nb > KERN_SDPA_MAX_BATCH)
        no = "sdpa on CUDA: bad batch dims";
    else if (d->E < 1 || d->E > 256 || d->Ev < 0 || d->Ev > 256)
        no = "sdpa on CUDA: head sizes (E, Ev) above 256 are not supported";
    else if (d->L < 0 || d->S < 0 || d->L > (1 << 30) || d->S > (1 << 30))
        no = "sdpa on CUDA: bad sequence lengths";
    else if (!isfinite(d->scale))
        no = "sdpa on CUDA: scale is not finite";
    else if (d->mask_kind != KERN_SDPA_NO_MASK && d->mask_kind != KERN_SDPA_BOOL_MASK &&
             d->mask_kind != KERN_SDPA_ADD_MASK)
        no = "sdpa on CUDA: bad mask kind";
    for (int i = 0; !no && i < d->nb; i++)
        if (d->bdims[i] < 0)
            no = "sdpa on CUDA: bad batch dims";
    if (!no) {
        sdpa_tiles t;
        plan(d, dt, &t);
        int64_t nb = nbatch(d), rows = fwd_rows(&t);
        if (nb * cdiv(d->L, rows) > INT32_MAX || nb * d->L * d->E / 256 > INT32_MAX ||
            nb * cdiv(d->S, 16) > INT32_MAX || nb * d->S * imax((int)d->E, (int)d->Ev) / 256 > INT32_MAX)
            no = "sdpa on CUDA: too many blocks for one launch";
    }
    if (no && why && n)
        snprintf(why, n, "%s", no);
    return !no;
}

/* ------------------------------------------------------------------ source */

/* static member `name` of the config: operand o's batch offset of entry b. */
static void emit_offset(sb *b, const char *name, const kern_sdpa_desc *d, const kern_sdpa_operand *o)
{
    cuda_text_put(b, "    static __device__ __forceinline__ long long %s(long long b) { return 0", name);
    int64_t div = 1;
    for (int i = d->nb - 1; i >= 0; i--) {
        if (d->bdims[i] > 1 && o->bstride[i] != 0) {
            cuda_text_put(b, " + b");
            if (div > 1)
                cuda_text_put(b, " / %lldLL", (long long)div);
            if (i > 0)
                cuda_text_put(b, " %% %lldLL", (long long)d->bdims[i]);
            cuda_text_put(b, " * %lldLL", (long long)o->bstride[i]);
        }
        div *= d->bdims[i] > 0 ? d->bdims[i] : 1;
    }
    cuda_text_put(b, "; }\n");
}

/* Whether rows of operand o (cols columns) can be copied 16 bytes at a
 * time from a 16-byte aligned base: unit columns, rows and batch strides
 * multiples of 8 elements. */
static int vec_ok(const kern_sdpa_desc *d, const kern_sdpa_operand *o, int64_t cols)
{
    if (cols % 8 || o->col != 1 || o->row % 8)
        return 0;
    for (int i = 0; i < d->nb; i++)
        if (d->bdims[i] > 1 && o->bstride[i] % 8)
            return 0;
    return 1;
}

static void emit_config(sb *b, const kern_sdpa_desc *d, smelt_dtype dt, int step, const sdpa_tiles *t)
{
    int64_t nb = nbatch(d);
    cuda_text_put(b, "struct s%d_cfg {\n", step);
    cuda_text_put(b, "    static constexpr int DT = %d, MASK = %d, CAUSAL = %d;\n", dt == SMELT_F32 ? 0 : dt == SMELT_F16 ? 1 : 2,
        (int)d->mask_kind, d->causal ? 1 : 0);
    cuda_text_put(b, "    static constexpr long long NB = %lldLL, L = %lldLL, S = %lldLL, NQB = %lldLL;\n", (long long)nb,
        (long long)d->L, (long long)d->S, (long long)cdiv(d->L, fwd_rows(t)));
    cuda_text_put(b, "    static constexpr int E = %d, EV = %d, EP = %d, EVP = %d;\n", (int)d->E, (int)d->Ev, t->ep, t->evp);
    cuda_text_put(b, "    static constexpr float SC = %.9ef, SC2 = %.9ef;\n", (double)d->scale,
        (double)(float)(d->scale * 1.4426950408889634));
    const kern_sdpa_operand *op[] = { &d->q, &d->k, &d->v, &d->mask, &d->o, &d->g };
    static const char *const nm[] = { "Q", "K", "V", "M", "O", "G" }, *const off[] = { "qoff", "koff", "voff",
                                                                                     "moff", "ooff", "goff" };
    for (int i = 0; i < 6; i++)
        cuda_text_put(b, "    static constexpr long long %sR = %lldLL, %sC = %lldLL;\n", nm[i], (long long)op[i]->row, nm[i],
            (long long)op[i]->col);
    cuda_text_put(b, "    static constexpr int QVEC = %d, KVEC = %d, VVEC = %d, GVEC = %d;\n", vec_ok(d, &d->q, d->E),
        vec_ok(d, &d->k, d->E), vec_ok(d, &d->v, d->Ev), vec_ok(d, &d->g, d->Ev));
    cuda_text_put(b, "    static constexpr int NW = %d, BN = %d, BBM = %d, SBM = %d, SBN = %d, SBB = %d;\n", t->nw, t->bn,
        t->bbm, t->sbm, t->sbn, t->sbb);
    for (int i = 0; i < 6; i++)
        emit_offset(b, off[i], d, op[i]);
    cuda_text_put(b, "};\n");
}

/* The launches of a step (see cuda_sdpa_launches) into l[0..3]: their count. */
static int launch_list(const kern_sdpa_desc *d, smelt_dtype dt, int mode, int step, cuda_launch_dim *l);

/* The call an entry point makes (name: the entry's suffix). */
static void entry_call(char *c, size_t n, const char *name, int step, const sdpa_tiles *t)
{
    const char *fwd = t->tc ? "sdpa_tc_fwd" : "sdpa_simt_fwd";
    if (!strcmp(name, "fwd"))
        snprintf(c, n, "%s<s%d_cfg, 0>(q, k, v, 0, 0, mask, out, scratch)", fwd, step);
    else if (!strcmp(name, "bstats"))
        snprintf(c, n, "%s<s%d_cfg, 1>(q, k, v, o, g, mask, 0, scratch)", fwd, step);
    else if (!strcmp(name, "bwd"))
        snprintf(c, n, "%s<s%d_cfg>(q, k, v, g, mask, dk, dv, scratch)", t->tcb ? "sdpa_tc_bwd" : "sdpa_simt_bwd",
                 step);
    else if (!strcmp(name, "bdq"))
        snprintf(c, n, "sdpa_dq_out<s%d_cfg>(dq, scratch)", step);
    else
        snprintf(c, n, "sdpa_bzero<s%d_cfg>(dq, dk, dv)", step);
}

/* The entry point of launch l: its parameter list for the mode (element
 * type ty), a one-line body. */
static void emit_entry(sb *b, const cuda_launch_dim *l, const char *ty, int step, const sdpa_tiles *t)
{
    char call[160];
    entry_call(call, sizeof call, strchr(l->entry, '_') + 1, step, t);
    cuda_text_put(b, "extern \"C\" __global__ void __launch_bounds__(%u) %s(const %s *q, const %s *k, const %s *v, ", l->block[0],
        l->entry, ty, ty, ty);
    if (l->args)
        cuda_text_put(b, "const %s *o, const %s *g, const void *mask, %s *dq, %s *dk, %s *dv, ", ty, ty, ty, ty, ty);
    else
        cuda_text_put(b, "const void *mask, %s *out, ", ty);
    cuda_text_put(b, "float *scratch)\n{ %s; }\n", call);
}

void cuda_sdpa_source(const kern_sdpa_desc *d, smelt_dtype dt, int mode, int step, char **text, size_t *len)
{
    sdpa_tiles t;
    plan(d, dt, &t);
    sb b = { 0 };
    if (!*text || !strstr(*text, "#define SMELT_SDPA_COMMON"))
        cuda_text_put(&b, "%s", SDPA_COMMON);
    cuda_text_put(&b, "\n/* attention step %d: %s, L %lld, S %lld, E %lld, Ev %lld */\n", step, mode ? "backward" : "forward",
        (long long)d->L, (long long)d->S, (long long)d->E, (long long)d->Ev);
    emit_config(&b, d, dt, step, &t);
    cuda_launch_dim l[4];
    int n = launch_list(d, dt, mode, step, l);
    for (int i = 0; i < n; i++)
        emit_entry(&b, &l[i], dt == SMELT_F32 ? "float" : "unsigned short", step, &t);
    if (!(*text = realloc(*text, *len + b.n + 1)))
        abort();
    memcpy(*text + *len, b.s, b.n + 1);
    *len += b.n;
    free(b.s);
}

/* ------------------------------------------------------------------ launches */

static void launch(cuda_launch_dim *l, int step, const char *name, int64_t grid, int block, unsigned shared, int mode)
{
    memset(l, 0, sizeof *l);
    snprintf(l->entry, sizeof l->entry, "s%d_%s", step, name);
    l->grid[0] = (unsigned)grid, l->grid[1] = l->grid[2] = 1;
    l->block[0] = (unsigned)block, l->block[1] = l->block[2] = 1;
    l->shared = shared, l->args = mode;
}

/* Forward: one kernel, none when there is nothing to write. Backward:
 * the first pass, the second (when there are keys), dq; or one kernel
 * zeroing the gradients when there is no query or no value column. */
static int launch_list(const kern_sdpa_desc *d, smelt_dtype dt, int mode, int step, cuda_launch_dim *l)
{
    sdpa_tiles t;
    plan(d, dt, &t);
    int64_t nb = nbatch(d), rows = fwd_rows(&t);
    int n = 0, nt = t.tc ? 32 * t.nw : 128;
    unsigned fs = t.tc ? tc_fwd_smem(&t) : simt_fwd_smem(d, t.sbm, t.sbn);
    if (nb == 0 || (mode == 0 && (d->L == 0 || d->Ev == 0)))
        return 0;
    if (mode == 0) {
        launch(&l[n++], step, "fwd", nb * cdiv(d->L, rows), nt, fs, 0);
    } else if (d->L == 0 || d->Ev == 0) {
        int64_t kv = d->S * imax((int)d->E, (int)d->Ev), most = nb * (kv > d->L * d->E ? kv : d->L * d->E);
        if (most > 0)
            launch(&l[n++], step, "bzero", cdiv(most, 256), 256, 0, 1);
    } else {
        launch(&l[n++], step, "bstats", nb * cdiv(d->L, rows), nt, fs, 1);
        if (d->S > 0)
            launch(&l[n++], step, "bwd", nb * cdiv(d->S, t.tcb ? 64 : t.sbb), 128,
                   t.tcb ? tc_bwd_smem(&t) : simt_bwd_smem(d, t.sbb), 1);
        launch(&l[n++], step, "bdq", cdiv(nb * d->L * d->E, 256), 256, 0, 1);
    }
    return n;
}

int cuda_sdpa_launches(const kern_sdpa_desc *d, smelt_dtype dt, int mode, int step, cuda_launch_dim *out, int max)
{
    cuda_launch_dim l[4];
    int n = launch_list(d, dt, mode, step, l);
    if (n > max)
        return -1;
    memcpy(out, l, sizeof l[0] * (size_t)n);
    return n;
}

int64_t cuda_sdpa_scratch_bytes(const kern_sdpa_desc *d, smelt_dtype dt, int mode)
{
    (void)dt;
    int64_t nb = nbatch(d);
    if (mode == 0 || d->L == 0 || d->Ev == 0)
        return 0;
    return 4 * nb * d->L * (3 + d->E);
}
