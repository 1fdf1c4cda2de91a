/* float16 / bfloat16 <-> float32 conversions for the C kernels, as torch
 * converts: float16 exact both ways below, round to nearest even down;
 * bfloat16 the upper half of a float32, round to nearest even down (f32
 * denormals kept, not flushed); NaN -> the quiet NaN torch writes. */
#ifndef SMELT_KERN_HALF_H
#define SMELT_KERN_HALF_H

#include <stdint.h>
#include <string.h>

static inline float kern_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t kern_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* IEEE half -> float, exact (subnormals, inf and NaN payloads kept). */
static inline float kern_f16_to_f32(uint16_t h)
{
    uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t exp = o & (0x7c00u << 13);
    o += (uint32_t)(127 - 15) << 23;
    if (exp == 0x7c00u << 13) {
        o += (uint32_t)(128 - 16) << 23;                       /* inf, NaN */
    } else if (exp == 0) {                                     /* zero, subnormal */
        o += 1u << 23;
        o = kern_f32_bits(kern_bits_f32(o) - kern_bits_f32(113u << 23));
    }
    return kern_bits_f32(o | (uint32_t)(h & 0x8000u) << 16);
}

/* float -> IEEE half, round to nearest even; NaN -> 0x7e00 (as torch). */
static inline uint16_t kern_f32_to_f16(float f)
{
    uint32_t u = kern_f32_bits(f);
    uint32_t sign = u & 0x80000000u;
    uint16_t o;
    u ^= sign;
    if (u >= (uint32_t)(127 + 16) << 23) {                     /* overflow, inf, NaN */
        o = u > 0x7f800000u ? 0x7e00 : 0x7c00;
    } else if (u < 113u << 23) {                               /* half subnormal or 0 */
        uint32_t magic = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
        o = (uint16_t)(kern_f32_bits(kern_bits_f32(u) + kern_bits_f32(magic)) - magic);
    } else {
        uint32_t odd = (u >> 13) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
        o = (uint16_t)(u >> 13);
    }
    return o | (uint16_t)(sign >> 16);
}

static inline float kern_bf16_to_f32(uint16_t h)
{
    return kern_bits_f32((uint32_t)h << 16);
}

/* float -> bfloat16, round to nearest even; NaN -> 0x7fc0 (as torch). */
static inline uint16_t kern_f32_to_bf16(float f)
{
    uint32_t u = kern_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

#endif
