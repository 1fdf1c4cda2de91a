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

/* The backward of kern_conv for the same geometry d (has_bias 0: the bias
 * gradient is a sum the caller computes). kern_conv_backward_data writes
 * dx, the gradient of x for the gradient dy of y (dx laid out by
 * d->x_strides, which must not be 0 in a dim of size > 1; dy by
 * d->y_strides); kern_conv_backward_weights writes dw, the gradient of w
 * (laid out by d->w_strides, the same rule), from x and dy. Outputs are
 * written in full (zeros where no term reaches) and overlap no input.
 * 0 on success; -1 with a message in err. oneDNN's backward-data and
 * backward-weights primitives over batch ranges, one per pool thread (the
 * weights gradient summed over the ranges); a portable loop where oneDNN
 * has no fast kernel. */
int kern_conv_backward_data(const kern_conv_desc *d, const float *dy, const float *w, float *dx,
                            char *err, size_t errlen);
int kern_conv_backward_weights(const kern_conv_desc *d, const float *x, const float *dy, float *dw,
                               char *err, size_t errlen);

/* Drops cached primitives (smelt.reset / teardown). */
void kern_conv_cache_clear(void);

#endif
