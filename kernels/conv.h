/* smelt convolution: y = conv(x, w) + bias, float32, 1 to 3 spatial dims,
 * on oneDNN's convolution primitive (a portable direct loop where oneDNN is
 * unavailable or has only its reference kernel for the case).
 *
 * Layouts are given as strides, so the caller chooses where activations
 * live: channels-last (NHWC) activations are what oneDNN's fast CPU kernels
 * read and write, and the plan keeps a convolution's activations
 * channels-last between layers. Weights are in torch's layout
 * [O, C/groups, *k] (any strides); they are reordered into the layout the
 * primitive prefers on every call (weights are small next to the
 * activations, and a cached copy could not see in-place updates).
 */
#ifndef SMELT_KERN_CONV_H
#define SMELT_KERN_CONV_H

#include <stddef.h>
#include <stdint.h>

/* Dims of x: [n, c, in[0..nsp)]; w: [o, c/groups, k[0..nsp)]; y: [n, o,
 * out[0..nsp)] with out = (in + pad_lo + pad_hi - dil*(k-1) - 1)/stride + 1
 * (the caller computed it, >= 1). Strides in elements, any non-negative
 * values, per dim in that same dim order (x_strides[1] is the channel
 * stride). b_stride: element stride of the bias (has_bias). y is written in
 * full and does not overlap x, w or the bias. n, c and o may be 0. */
typedef struct kern_conv_desc {
    int nsp, has_bias;
    int64_t n, c, o, groups;
    int64_t in[3], k[3], out[3];
    int64_t stride[3], pad_lo[3], pad_hi[3], dil[3];
    int64_t x_strides[5], w_strides[5], y_strides[5];
    int64_t b_stride;
} kern_conv_desc;

/* 0 on success; -1 with a message in err. Thread-safe; runs on smelt's
 * thread pool (kernels/threadpool.h) and never starts threads of its own. */
int kern_conv(const kern_conv_desc *d, const float *x, const float *w, const float *bias, float *y,
              char *err, size_t errlen);

/* Drops cached primitives (smelt.reset / teardown). */
void kern_conv_cache_clear(void);

#endif
