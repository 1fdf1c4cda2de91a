/* emu.h — a CPU emulation of the CUDA execution model, enough to run the
 * attention kernels of inductor/cuda/attention.c compiled as C++ with
 * SMELT_CUDA_EMU defined: each thread of a block is a std::thread (blocks
 * one at a time), __syncthreads a std::barrier over the block, warp-wide
 * operations (shuffles, and the kernels' emulated ldmatrix / mma bodies)
 * exchange through a per-warp buffer between two barriers, dynamic shared
 * memory one exactly-sized buffer per block filled with NaN bytes,
 * cp.async copies done at issue (EMU_CP=early) or only at the
 * cp.async.wait_group that covers them (EMU_CP=late: a read before the
 * wait sees stale data). */
#pragma once
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <memory>
#include <thread>
#include <vector>

#define SMELT_CUDA_EMU 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct emu_dim3 {
    unsigned x, y, z;
};
inline thread_local emu_dim3 threadIdx, blockIdx;
inline emu_dim3 blockDim, gridDim;

struct emu_warp {
    std::barrier<> bar{ 32 };
    unsigned char buf[32][64];
};
inline thread_local std::barrier<> *emu_block_bar;
inline thread_local emu_warp *emu_my_warp;
inline unsigned char *emu_smem;
inline size_t emu_smem_size;
inline int emu_cp_late;

#define EMU_FAIL(...) (fprintf(stderr, "emu: " __VA_ARGS__), fprintf(stderr, "\n"), abort())

inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }

/* Every lane of the warp gives n bytes at mine; all gets the 32 lanes'. */
inline void emu_warp_gather(const void *mine, void *all, size_t n)
{
    if (n > sizeof emu_my_warp->buf[0])
        EMU_FAIL("gather of %zu bytes", n);
    memcpy(emu_my_warp->buf[threadIdx.x & 31], mine, n);
    emu_my_warp->bar.arrive_and_wait();
    for (int i = 0; i < 32; i++)
        memcpy((char *)all + i * n, emu_my_warp->buf[i], n);
    emu_my_warp->bar.arrive_and_wait();
}

inline float __shfl_xor_sync(unsigned mask, float v, int m)
{
    float all[32];
    if (mask != 0xffffffffu)
        EMU_FAIL("partial shuffle mask");
    emu_warp_gather(&v, all, sizeof v);
    return all[(threadIdx.x & 31) ^ m];
}

inline void emu_check_smem(const void *p, size_t n)
{
    const unsigned char *c = (const unsigned char *)p;
    if (c < emu_smem || c + n > emu_smem + emu_smem_size || ((uintptr_t)c & (n - 1)))
        EMU_FAIL("shared access %p + %zu outside [%p, +%zu) or misaligned", p, n, (void *)emu_smem, emu_smem_size);
}

/* cp.async: pending copies of this thread, committed groups in order. */
struct emu_copy {
    void *dst;
    const void *src;
    int n, group;
};
inline thread_local std::vector<emu_copy> *emu_pending;
inline thread_local int emu_groups;   /* groups committed so far */

inline void emu_cp_async(void *dst, const void *src, int n)
{
    emu_check_smem(dst, (size_t)n);
    if ((uintptr_t)src & (uintptr_t)(n - 1))
        EMU_FAIL("cp.async source %p not %d-byte aligned", src, n);
    if (!emu_cp_late)
        memcpy(dst, src, (size_t)n);
    else
        emu_pending->push_back({ dst, src, n, -1 });
}
inline void emu_cp_commit()
{
    for (auto &c : *emu_pending)
        if (c.group < 0)
            c.group = emu_groups;
    emu_groups++;
}
/* Completes every committed group but the n most recent. */
inline void emu_cp_wait(int n)
{
    std::vector<emu_copy> keep;
    for (auto &c : *emu_pending)
        if (c.group >= 0 && c.group < emu_groups - n)
            memcpy(c.dst, c.src, (size_t)c.n);
        else
            keep.push_back(c);
    *emu_pending = keep;
}

inline float atomicAdd(float *p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }

inline float __int_as_float(int i)
{
    float f;
    memcpy(&f, &i, 4);
    return f;
}
inline int __float_as_int(float f)
{
    int i;
    memcpy(&i, &f, 4);
    return i;
}

/* The CUDA back end's prelude (inductor/cuda/codegen.c) in plain C++:
 * f16 by the compiler's _Float16 (round to nearest even), bf16 as there. */
static inline float f16_to_f32(unsigned short h)
{
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}
static inline unsigned short f32_to_f16(float f)
{
    _Float16 x = (_Float16)f;
    unsigned short h;
    memcpy(&h, &x, 2);
    return h;
}
static inline float bf16_to_f32(unsigned short h) { return __int_as_float((int)h << 16); }
static inline unsigned short f32_to_bf16(float f)
{
    unsigned int b = (unsigned int)__float_as_int(f);
    if (isnan(f))
        return (unsigned short)((b >> 16) | 0x40);
    return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

/* Runs body() as every thread of grid x block (1-D), one block at a time,
 * with `shared` bytes of dynamic shared memory. */
template <class F> void emu_launch(unsigned grid, unsigned block, unsigned shared, F body)
{
    if (block % 32)
        EMU_FAIL("block of %u threads", block);
    gridDim = { grid, 1, 1 }, blockDim = { block, 1, 1 };
    for (unsigned bx = 0; bx < grid; bx++) {
        std::vector<unsigned char> smem(shared ? shared : 1, 0xff);
        emu_smem = smem.data(), emu_smem_size = shared;
        std::barrier<> bar((ptrdiff_t)block);
        std::unique_ptr<emu_warp[]> warps(new emu_warp[block / 32]);
        std::vector<std::thread> th;
        for (unsigned t = 0; t < block; t++)
            th.emplace_back([&, t] {
                threadIdx = { t, 0, 0 }, blockIdx = { bx, 0, 0 };
                emu_block_bar = &bar, emu_my_warp = &warps[t / 32];
                std::vector<emu_copy> pending;
                emu_pending = &pending, emu_groups = 0;
                body();
                for (auto &c : pending)
                    if (c.group < 0 || emu_cp_late)
                        EMU_FAIL("thread %u of block %u ends with a cp.async not waited for", t, bx);
            });
        for (auto &t : th)
            t.join();
    }
}
