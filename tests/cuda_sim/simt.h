/* simt.h — runs the CUDA C that smelt generates (inductor/cuda/codegen.c)
 * on the CPU, compiled by g++ (-std=c++20), for tests/test_cuda_emulated.py.
 *
 * Include this header, then the generated translation unit (which sees
 * SMELT_CUDA_EMU and leaves the f16 conversions, written in PTX there, to
 * this file), then call smelt_emu::launch(name, kernel, grid, block,
 * args, n) for each launch and smelt_emu::outcome() after the last.
 *
 * Execution model: one block at a time, in block order; the block's
 * threads are fibers (ucontext) on the calling OS thread, each run until
 * it reaches __syncthreads(), a warp collective, or returns. So `__shared__` is `static`
 * (one copy, shared by the block's threads), atomics need no hardware,
 * and the schedule is deterministic. Shared memory is uninitialised on a
 * GPU: here every block starts with all of it (the linker gathers it in
 * section smelt_shared) set to the byte `shared_fill`. With reverse_order
 * the threads of every round run in reverse order: a kernel free of races
 * between barriers and of reads of shared memory it did not write gives
 * bit-identical results in either order and with any fill, which the
 * test checks.
 *
 * Warp shuffles (__shfl*_sync) and __syncwarp are collectives: a thread
 * waits at one until every lane of its warp does, then each gets the
 * value of the lane it names.
 *
 * Errors (the first is kept; later launches of the run do nothing):
 * a __syncthreads() that not every thread of the block reaches, or that
 * threads reach at different call sites; a warp collective that not every
 * lane of the warp reaches at the same call site, or with a partial mask;
 * a launch whose argument count differs from the kernel's parameters; an
 * empty or oversized shape.
 *
 * Values: the math functions are <cmath>'s float/double overloads, as
 * CUDA's (expf for exp(float), ...); results may differ from a GPU's in
 * the last bits (no FMA contraction here, a different libm). The f16
 * conversions are IEEE's, as cvt.rn.f16.f32 / cvt.f32.f16: round to
 * nearest even, subnormals kept, overflow to inf; a NaN stays a NaN.
 */
#ifndef SMELT_CUDA_SIM_SIMT_H
#define SMELT_CUDA_SIM_SIMT_H

#ifndef SMELT_CUDA_EMU
#define SMELT_CUDA_EMU 1
#endif

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include <sys/mman.h>
#include <ucontext.h>

/* ---------- CUDA keywords and built-in variables ---------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static __attribute__((section("smelt_shared")))
#define __syncthreads() smelt_emu::sync(__LINE__)

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

inline dim3 threadIdx, blockIdx, blockDim, gridDim;

/* ---------- math: CUDA's names on <cmath> ---------- */

using std::acos, std::acosh, std::asin, std::asinh, std::atan, std::atan2, std::atanh, std::ceil, std::copysign,
    std::cos, std::cosh, std::erf, std::erfc, std::exp, std::exp2, std::expm1, std::fabs, std::floor, std::fmax,
    std::fmin, std::fmod, std::isfinite, std::isinf, std::isnan, std::lgamma, std::log, std::log10, std::log1p,
    std::log2, std::pow, std::rint, std::round, std::signbit, std::sin, std::sinh, std::sqrt, std::tan, std::tanh,
    std::trunc;

inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline double __longlong_as_double(long long i) { return std::bit_cast<double>(i); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rsqrt(float x) { return rsqrtf(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }

/* ---------- warp intrinsics (collectives of the scheduler below) ---------- */

namespace smelt_emu {
template <class T> T exchange(unsigned mask, T v, int src, int site);
inline unsigned lane_id();
}

constexpr int warpSize = 32;

template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32, int site = __builtin_LINE())
{
    int lane = (int)smelt_emu::lane_id();
    return smelt_emu::exchange(mask, v, lane / width * width + src % width, site);
}

template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, int site = __builtin_LINE())
{
    int lane = (int)smelt_emu::lane_id(), src = lane ^ lane_mask;
    return smelt_emu::exchange(mask, v, src / width == lane / width ? src : lane, site);
}

template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, int site = __builtin_LINE())
{
    int lane = (int)smelt_emu::lane_id();
    return smelt_emu::exchange(mask, v, lane % width + (int)delta < width ? lane + (int)delta : lane, site);
}

template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, int site = __builtin_LINE())
{
    int lane = (int)smelt_emu::lane_id();
    return smelt_emu::exchange(mask, v, lane % width >= (int)delta ? lane - (int)delta : lane, site);
}

inline void __syncwarp(unsigned mask = 0xffffffffu, int site = __builtin_LINE())
{
    smelt_emu::exchange(mask, 0, -1, site);
}

inline int atomicOr(int *p, int v) { return std::atomic_ref<int>(*p).fetch_or(v); }
inline unsigned atomicOr(unsigned *p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_or(v); }
inline int atomicAdd(int *p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline float atomicAdd(float *p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }

/* ---------- f16 <-> f32, as the PTX cvt instructions ---------- */

/* Exact: every half is a float. A NaN keeps its payload and is quieted
 * (as every IEEE conversion does). */
static inline float f16_to_f32(unsigned short h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31)
        return std::bit_cast<float>(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    if (e == 0) {   /* zero or subnormal: m * 2^-24, exact in float */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

/* Round to nearest, ties to even; overflow to inf; NaN stays NaN (quiet). */
static inline unsigned short f32_to_f16(float f)
{
    uint32_t x = std::bit_cast<uint32_t>(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)   /* NaN */
        return (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u)  /* >= 65520 (halfway past the largest half, 65504): inf */
        return (unsigned short)(sign | 0x7c00u);
    if (ax >= 0x38800000u)  /* normal half: rebias, round on the 13 dropped bits */
        return (unsigned short)(sign | ((ax - 0x38000000u + 0x0fffu + ((ax >> 13) & 1u)) >> 13));
    /* subnormal half (or zero): in units of 2^-24, m * 2^(e - 126) */
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | (e ? 0x800000u : 0);
    int s = 126 - (int)(e ? e : 1);
    if (s > 24)
        return (unsigned short)sign;
    uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return (unsigned short)(sign | q);
}

/* ---------- the block scheduler ---------- */

/* The linker's bounds of section smelt_shared (absent without __shared__). */
extern "C" char __start_smelt_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_smelt_shared[] __attribute__((weak, visibility("hidden")));

namespace smelt_emu {

/* A thread's state between scheduler rounds: runnable; waiting at a
 * __syncthreads() (site: its line); waiting at a warp collective (site:
 * its line; val: its value, src: the lane it reads, out: the result);
 * returned. */
enum { READY, AT_SYNC, AT_WARP, DONE };

struct fiber {
    ucontext_t ctx;
    int state, site;
    unsigned mask;
    int src;
    uint64_t val, out;
};

constexpr size_t STACK = 256 * 1024;   /* per thread, plus a guard page below */
constexpr unsigned MAX_BLOCK = 1024, WARP = 32;

inline ucontext_t main_ctx;
inline fiber fibers[MAX_BLOCK];
inline char *stacks[MAX_BLOCK];
inline unsigned cur;
inline int reverse_order, shared_fill = 0xA5;
inline std::string first_error;
inline void (*body)(void *);
inline void *body_arg;

inline void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char *fmt, ...)
{
    if (!first_error.empty())
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    first_error = buf;
}

/* Suspends the current thread in `state` at call site `site`. */
inline void wait(int state, int site)
{
    fibers[cur].state = state;
    fibers[cur].site = site;
    swapcontext(&fibers[cur].ctx, &main_ctx);
}

inline void sync(int line) { wait(AT_SYNC, line); }

inline unsigned lane_id() { return cur % WARP; }

/* A warp collective: every lane of the warp gives v and gets the value
 * lane `src` gave (src: a lane of this warp, or its own for none). */
template <class T>
T exchange(unsigned mask, T v, int src, int site)
{
    static_assert(sizeof(T) <= sizeof(uint64_t));
    fiber &f = fibers[cur];
    f.mask = mask, f.src = src < 0 || src >= (int)WARP ? (int)(cur % WARP) : src;
    f.val = 0;
    memcpy(&f.val, &v, sizeof v);
    wait(AT_WARP, site);
    T r;
    memcpy(&r, &fibers[cur].out, sizeof r);
    return r;
}

inline void trampoline()
{
    body(body_arg);
    fibers[cur].state = DONE;   /* uc_link resumes the scheduler */
}

/* Thread t's stack and context, made once (the stack with a PROT_NONE
 * guard page at its low end); each block then only resets the context. */
inline char *stack_of(unsigned t)
{
    if (!stacks[t]) {
        void *p = mmap(nullptr, STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                       0);
        if (p == MAP_FAILED)
            return nullptr;
        mprotect(p, 4096, PROT_NONE);
        stacks[t] = (char *)p + 4096;
        getcontext(&fibers[t].ctx);
        fibers[t].ctx.uc_stack.ss_sp = stacks[t];
        fibers[t].ctx.uc_stack.ss_size = STACK;
        fibers[t].ctx.uc_link = &main_ctx;
    }
    return stacks[t];
}

/* Completes the collective of warp [w0, w1) if its lanes wait at one;
 * 1 if they did, 0 if none did; fails (-1) on lanes elsewhere, at
 * different sites or naming other lanes than the mask. */
inline int complete_warp(unsigned b, unsigned w0, unsigned w1)
{
    unsigned n = 0, full = w1 - w0 == WARP ? 0xffffffffu : (1u << (w1 - w0)) - 1;
    for (unsigned t = w0; t < w1; t++)
        n += fibers[t].state == AT_WARP;
    if (!n)
        return 0;
    const fiber &f0 = fibers[w0];
    for (unsigned t = w0; t < w1; t++) {
        const fiber &f = fibers[t];
        if (f.state != AT_WARP || f.site != f0.site)
            return fail("block %u warp %u: lane %u is %s while lane 0 waits at the warp collective of line %d", b,
                        w0 / WARP, t - w0, f.state == AT_WARP ? "at another collective" : "elsewhere", f0.site), -1;
        if ((f.mask & full) != full || f.src >= (int)(w1 - w0))
            return fail("block %u warp %u: a collective (line %d) with mask %#x or source lane %d is not emulated", b,
                        w0 / WARP, f.site, f.mask, f.src), -1;
    }
    for (unsigned t = w0; t < w1; t++) {
        fibers[t].out = fibers[w0 + fibers[t].src].val;
        fibers[t].state = READY;
    }
    return 1;
}

/* Releases the block's __syncthreads() once every thread waits at it;
 * 0 when every thread has returned; fails (-1) otherwise. */
inline int complete_sync(unsigned b, unsigned nthreads)
{
    unsigned waiting = 0;
    int site = -1;
    for (unsigned t = 0; t < nthreads; t++) {
        if (fibers[t].state != AT_SYNC)
            continue;
        if (waiting++ && fibers[t].site != site)
            return fail("block %u: threads wait at different __syncthreads() (lines %d and %d)", b, site,
                        fibers[t].site), -1;
        site = fibers[t].site;
    }
    if (!waiting)
        return 0;
    if (waiting != nthreads)
        return fail("block %u: __syncthreads() at line %d reached by %u of %u threads (the others returned)", b, site,
                    waiting, nthreads), -1;
    for (unsigned t = 0; t < nthreads; t++)
        fibers[t].state = READY;
    return 1;
}

/* Runs one block: every runnable thread (in forward or reverse order) up
 * to its next barrier or collective, then completes the warps' collectives
 * or else the block's barrier, until every thread has returned. */
inline void run_block(unsigned b, unsigned nthreads)
{
    blockIdx = dim3{ b, 1, 1 };
    if (__start_smelt_shared)
        memset(__start_smelt_shared, shared_fill, (size_t)(__stop_smelt_shared - __start_smelt_shared));
    for (unsigned t = 0; t < nthreads; t++) {
        if (!stack_of(t))
            return fail("out of memory for thread stacks");
        makecontext(&fibers[t].ctx, trampoline, 0);
        fibers[t].state = READY;
    }
    for (;;) {
        for (unsigned k = 0; k < nthreads; k++) {
            unsigned t = reverse_order ? nthreads - 1 - k : k;
            if (fibers[t].state != READY)
                continue;
            cur = t;
            threadIdx = dim3{ t, 1, 1 };
            swapcontext(&main_ctx, &fibers[t].ctx);
        }
        int warps = 0;
        for (unsigned w0 = 0; w0 < nthreads; w0 += WARP) {
            int r = complete_warp(b, w0, w0 + WARP < nthreads ? w0 + WARP : nthreads);
            if (r < 0)
                return;
            warps += r;
        }
        if (!warps && complete_sync(b, nthreads) <= 0)
            return;
    }
}

template <class... P, size_t... I>
void call(void (*k)(P...), void *const *args, std::index_sequence<I...>)
{
    k(static_cast<P>(args[I])...);
}

/* Runs kernel k over `grid` blocks of `block` threads, its parameters
 * from args[0..n) (pointers, converted to k's parameter types). */
template <class... P>
void launch(const char *name, void (*k)(P...), long long grid, long long block, void *const *args, int n)
{
    if (!first_error.empty())
        return;
    if (n != (int)sizeof...(P))
        return fail("%s takes %d parameters, the launch gives %d", name, (int)sizeof...(P), n);
    if (grid < 1 || grid > (1LL << 31) - 1 || block < 1 || block > MAX_BLOCK)
        return fail("%s: launch shape grid %lld block %lld is not one CUDA runs", name, grid, block);
    static struct ctx {
        void (*k)(P...);
        void *const *args;
    } c;
    c = { k, args };
    body = [](void *p) {
        ctx *c = (ctx *)p;
        call(c->k, c->args, std::index_sequence_for<P...>{});
    };
    body_arg = &c;
    gridDim = dim3{ (unsigned)grid, 1, 1 };
    blockDim = dim3{ (unsigned)block, 1, 1 };
    for (long long b = 0; b < grid && first_error.empty(); b++)
        run_block((unsigned)b, (unsigned)block);
    if (!first_error.empty())
        first_error = std::string(name) + ": " + first_error;
}

/* The run's outcome: NULL, or the first error's text. */
inline const char *outcome() { return first_error.empty() ? nullptr : first_error.c_str(); }

}   // namespace smelt_emu

#endif
