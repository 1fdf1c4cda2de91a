/* smelt's shared oneDNN state (see onednn.h for the contract). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "onednn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef void (*omp_set_fn)(int);
typedef int (*omp_get_fn)(void);

/* The CPU engine; whether the CPU has bf16 instructions; the OpenMP runtime
 * oneDNN runs on, if it could be found, to set its thread count. */
static struct {
    dnnl_engine_t eng;
    int native_bf16;
    omp_set_fn omp_set;
    omp_get_fn omp_get;
} D;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Per-thread state: a stream and the buffers, made on first use and
 * freed by the key's destructor when the thread exits. */
typedef struct onednn_tls {
    dnnl_stream_t stream;
    void *buf[KERN_BUF_COUNT];
    size_t bytes[KERN_BUF_COUNT];
} onednn_tls;

static pthread_key_t g_tls_key;
static int g_tls_ok;
static _Thread_local onednn_tls *tl;

static void tls_free(void *p)
{
    onednn_tls *t = p;
    if (t->stream)
        dnnl_stream_destroy(t->stream);
    for (int i = 0; i < KERN_BUF_COUNT; i++)
        free(t->buf[i]);
    free(t);
    tl = NULL;
}

static void onednn_init_once(void)
{
    g_tls_ok = pthread_key_create(&g_tls_key, tls_free) == 0;
    if (dnnl_engine_create(&D.eng, dnnl_cpu, 0) != dnnl_success) {
        D.eng = NULL;
        return;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    D.native_bf16 = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
    /* through oneDNN's own handle (dlsym searches its dependencies): a
     * wheel bundles oneDNN's libgomp under another soname than torch's */
    Dl_info info;
    void *gomp = dladdr((void *)dnnl_engine_create, &info) && info.dli_fname
                     ? dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    if (gomp) {
        D.omp_set = (omp_set_fn)dlsym(gomp, "omp_set_num_threads");
        D.omp_get = (omp_get_fn)dlsym(gomp, "omp_get_max_threads");
        if (!D.omp_set || !D.omp_get)
            D.omp_set = NULL, D.omp_get = NULL;
    }
#endif
}

dnnl_engine_t kern_onednn_engine(void)
{
    pthread_once(&g_once, onednn_init_once);
    return D.eng;
}

int kern_onednn_native_bf16(void)
{
    return kern_onednn_engine() && D.native_bf16;
}

int kern_onednn_pins_threads(void)
{
    pthread_once(&g_once, onednn_init_once);
    return D.omp_set != NULL;
}

int kern_onednn_threads_begin(int n)
{
    pthread_once(&g_once, onednn_init_once);
    int old = D.omp_set ? D.omp_get() : 1;
    if (D.omp_set && old != n)
        D.omp_set(n);
    return old;
}

int kern_onednn_serial_begin(void)
{
    return kern_onednn_threads_begin(1);
}

void kern_onednn_serial_end(int saved)
{
    if (D.omp_set && saved != D.omp_get())
        D.omp_set(saved);
}

void kern_onednn_fix_unit_strides(int nd, const int64_t *dims, int64_t *strides)
{
    for (int i = nd - 1; i >= 0; i--)
        if (dims[i] == 1)
            strides[i] = i == nd - 1 ? 1 : strides[i + 1] * dims[i + 1];
}

static dnnl_primitive_attr_t user_scratch_attr(void)
{
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success)
        return NULL;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    return attr;
}

/* pd, or NULL (pd destroyed) where it is oneDNN's reference kernel. */
static dnnl_primitive_desc_t drop_ref(dnnl_primitive_desc_t pd)
{
    const char *impl = "ref";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (strncmp(impl, "ref", 3) != 0)
        return pd;
    dnnl_primitive_desc_destroy(pd);
    return NULL;
}

dnnl_primitive_desc_t kern_onednn_pd_create(const void *op_desc)
{
    return kern_onednn_pd_create_hinted(op_desc, NULL);
}

dnnl_primitive_desc_t kern_onednn_pd_create_hinted(const void *op_desc, const_dnnl_primitive_desc_t hint)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr;
    if (!kern_onednn_engine() || !(attr = user_scratch_attr()))
        return NULL;
    if (dnnl_primitive_desc_create(&pd, op_desc, attr, D.eng, hint) != dnnl_success)
        pd = NULL;
    dnnl_primitive_attr_destroy(attr);
    return pd ? drop_ref(pd) : NULL;
}

dnnl_primitive_desc_t kern_onednn_reorder_pd_create(const dnnl_memory_desc_t *src,
                                                    const dnnl_memory_desc_t *dst)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr;
    if (!kern_onednn_engine() || !(attr = user_scratch_attr()))
        return NULL;
    if (dnnl_reorder_primitive_desc_create(&pd, src, D.eng, dst, D.eng, attr) != dnnl_success)
        pd = NULL;
    dnnl_primitive_attr_destroy(attr);
    return pd;
}

dnnl_primitive_t kern_onednn_prim_create(const_dnnl_primitive_desc_t pd,
                                         dnnl_memory_desc_t *scratch_md, size_t *scratch_bytes)
{
    dnnl_primitive_t prim = NULL;
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    memset(scratch_md, 0, sizeof *scratch_md);
    *scratch_bytes = 0;
    if (smd) {
        *scratch_md = *smd;
        *scratch_bytes = dnnl_memory_desc_get_size(smd);
    }
    if (dnnl_primitive_create(&prim, pd) != dnnl_success)
        return NULL;
    return prim;
}

/* This thread's state, or NULL if out of memory. */
static onednn_tls *thread_tls(void)
{
    if (tl)
        return tl;
    pthread_once(&g_once, onednn_init_once);
    if (!g_tls_ok || !(tl = calloc(1, sizeof *tl)))
        return NULL;
    if (pthread_setspecific(g_tls_key, tl) != 0) {
        free(tl);
        tl = NULL;
    }
    return tl;
}

void *kern_onednn_thread_buf(kern_onednn_buf slot, size_t n)
{
    onednn_tls *t = thread_tls();
    if (!t || (unsigned)slot >= KERN_BUF_COUNT)
        return NULL;
    if (n > t->bytes[slot] || !t->buf[slot]) {
        size_t size = n ? (n + 63) / 64 * 64 : 64;
        free(t->buf[slot]);
        t->bytes[slot] = 0;
        if (!(t->buf[slot] = aligned_alloc(64, size)))
            return NULL;
        t->bytes[slot] = size;
    }
    return t->buf[slot];
}

/* This thread's stream, made on first use; NULL on failure. */
static dnnl_stream_t thread_stream(void)
{
    onednn_tls *t = thread_tls();
    if (t && !t->stream &&
        dnnl_stream_create(&t->stream, D.eng, dnnl_stream_default_flags) != dnnl_success)
        t->stream = NULL;
    return t ? t->stream : NULL;
}

enum { MAX_ARGS = 7 };

dnnl_status_t kern_onednn_execute(dnnl_primitive_t prim, int nargs, const int *ids,
                                  const dnnl_memory_desc_t *mds, void *const *ptrs,
                                  const dnnl_memory_desc_t *scratch_md, size_t scratch_bytes)
{
    dnnl_memory_t mem[MAX_ARGS] = {NULL};
    dnnl_exec_arg_t args[MAX_ARGS];
    dnnl_stream_t stream;
    void *scratch = NULL;
    if (nargs < 0 || nargs >= MAX_ARGS)
        return dnnl_invalid_arguments;
    if (!kern_onednn_engine() || !(stream = thread_stream()) ||
        (scratch_bytes && !(scratch = kern_onednn_thread_buf(KERN_BUF_SCRATCHPAD, scratch_bytes))))
        return dnnl_out_of_memory;
    int n = nargs + (scratch_bytes > 0);
    dnnl_status_t st = dnnl_success;
    for (int i = 0; i < n && st == dnnl_success; i++) {
        int sp = i == nargs;
        st = dnnl_memory_create(&mem[i], sp ? scratch_md : &mds[i], D.eng, sp ? scratch : ptrs[i]);
        args[i] = (dnnl_exec_arg_t){sp ? DNNL_ARG_SCRATCHPAD : ids[i], mem[i]};
    }
    if (st == dnnl_success)
        st = dnnl_primitive_execute(prim, stream, n, args);
    if (st == dnnl_success)
        st = dnnl_stream_wait(stream);
    for (int i = 0; i < n; i++)
        if (mem[i])
            dnnl_memory_destroy(mem[i]);
    return st;
}
