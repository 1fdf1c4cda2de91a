/* smelt's shared oneDNN state, used by matmul.c and conv.c.
 *
 * One CPU engine per process. oneDNN runs every primitive single-threaded
 * (its OpenMP team would otherwise spin against smelt's own thread pool):
 * callers bracket primitive creation and execution with
 * kern_onednn_serial_begin/end and split the work across kern_parallel_for
 * themselves. Primitives are created with a user-mode scratchpad
 * (kern_onednn_pd_create), and kern_onednn_execute runs them on a stream
 * and scratchpad owned by the calling thread, so pool threads never share
 * oneDNN's global scratchpad.
 */
#ifndef SMELT_KERN_ONEDNN_H
#define SMELT_KERN_ONEDNN_H

#include <stddef.h>
#include <stdint.h>

#include <oneapi/dnnl/dnnl.h>

/* The CPU engine, created on first use; NULL if oneDNN cannot make one. */
dnnl_engine_t kern_onednn_engine(void);

/* 1 if the CPU has bf16 instructions (without them oneDNN emulates bf16). */
int kern_onednn_native_bf16(void);

/* 1 if kern_onednn_serial_begin really sets oneDNN's OpenMP thread count
 * (the OpenMP runtime was found); primitives depend on that count, so
 * primitive caches put this in their keys. */
int kern_onednn_pins_threads(void);

/* Sets oneDNN's OpenMP thread count to 1 for this thread; returns the value
 * to hand to kern_onednn_serial_end, which restores the previous count. */
int kern_onednn_serial_begin(void);
void kern_onednn_serial_end(int saved);
/* The same with n threads (oneDNN's team runs one large call; 1 if the
 * count cannot be set, see kern_onednn_pins_threads). */
int kern_onednn_threads_begin(int n);

/* Gives the size-1 dims among dims[0..nd) the strides a dense row-major
 * layout would give them (the others' strides are kept), so that a layout
 * oneDNN has a fast kernel for is recognised as such. */
void kern_onednn_fix_unit_strides(int nd, const int64_t *dims, int64_t *strides);

/* The primitive descriptor for op_desc (a dnnl_*_desc_t) with a user-mode
 * scratchpad, or NULL if oneDNN fails or has only its slow reference
 * kernel ("ref" implementations) for it. */
dnnl_primitive_desc_t kern_onednn_pd_create(const void *op_desc);

/* The same for a backward op_desc, with the forward primitive descriptor
 * oneDNN takes as its hint (NULL for forward ops). */
dnnl_primitive_desc_t kern_onednn_pd_create_hinted(const void *op_desc, const_dnnl_primitive_desc_t hint);

/* The reorder from src to dst (user-mode scratchpad), or NULL. */
dnnl_primitive_desc_t kern_onednn_reorder_pd_create(const dnnl_memory_desc_t *src,
                                                    const dnnl_memory_desc_t *dst);

/* A primitive made from pd, with its scratchpad's descriptor and size
 * (0 bytes: none). Returns NULL on failure. pd stays the caller's. */
dnnl_primitive_t kern_onednn_prim_create(const_dnnl_primitive_desc_t pd,
                                         dnnl_memory_desc_t *scratch_md, size_t *scratch_bytes);

/* Per-thread buffers, one per slot: 64-byte aligned, grown on demand
 * (contents are not kept when a buffer grows), freed when the thread
 * exits. KERN_BUF_SCRATCHPAD is kern_onednn_execute's; the others are for
 * callers (conv.c: packed weights, activation copies). */
typedef enum kern_onednn_buf {
    KERN_BUF_SCRATCHPAD,
    KERN_BUF_WEIGHTS,
    KERN_BUF_SRC,
    KERN_BUF_DST,
    KERN_BUF_COUNT
} kern_onednn_buf;

/* This thread's buffer in slot, of at least n bytes; NULL if out of memory. */
void *kern_onednn_thread_buf(kern_onednn_buf slot, size_t n);

/* Runs prim on this thread's stream with nargs (<= 6) arguments (ids,
 * descriptors, data pointers) plus this thread's scratchpad described by
 * scratch_md when scratch_bytes > 0, and waits for it. */
dnnl_status_t kern_onednn_execute(dnnl_primitive_t prim, int nargs, const int *ids,
                                  const dnnl_memory_desc_t *mds, void *const *ptrs,
                                  const dnnl_memory_desc_t *scratch_md, size_t scratch_bytes);

#endif
