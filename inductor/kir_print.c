/* kir_print.c — text listing of a plan's loop-level kernels, for
 * SMELT_LOGS=output_code and Compiled.code("kernels"). */
#include "plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0)
            return;
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        b->cap = (b->cap + (size_t)k + 1) * 2;
        b->s = realloc(b->s, b->cap);
        if (!b->s)
            abort();
    }
}

static void print_ix(sbuf *b, const kir_pool *P, int32_t e)
{
    const kix *k = &P->ix[e];
    switch (k->op) {
    case KIX_CONST: sb_printf(b, "%lld", (long long)k->c); return;
    case KIX_VAR: sb_printf(b, "v%lld", (long long)k->c); return;
    case KIX_ADD: print_ix(b, P, k->a); sb_printf(b, " + "); print_ix(b, P, k->b); return;
    case KIX_MUL: sb_printf(b, "%lld*", (long long)k->c); break;
    default: break;
    }
    if (k->op != KIX_MUL)
        sb_printf(b, "(");
    const kix *a = &P->ix[k->a];
    int paren = k->op == KIX_MUL && a->op == KIX_ADD;
    sb_printf(b, paren ? "(" : "");
    print_ix(b, P, k->a);
    sb_printf(b, paren ? ")" : "");
    if (k->op == KIX_DIV)
        sb_printf(b, " / %lld)", (long long)k->c);
    else if (k->op == KIX_MOD)
        sb_printf(b, " %% %lld)", (long long)k->c);
}

static void print_ex(sbuf *b, const kir_pool *P, int32_t e)
{
    const kexpr *x = &P->ex[e];
    switch (x->op) {
    case KE_LOAD:
        sb_printf(b, "buf%d[", x->buf);
        print_ix(b, P, x->ix);
        sb_printf(b, "]");
        return;
    case KE_CONST:
        if (smelt_dtype_is_float((smelt_dtype)x->dtype))
            sb_printf(b, "%g", x->f);
        else
            sb_printf(b, "%lld", (long long)x->i);
        return;
    case KE_INDEX:
        sb_printf(b, "index(");
        print_ix(b, P, x->ix);
        sb_printf(b, ")");
        return;
    case KE_PHASE:
        sb_printf(b, "phase%d", x->phase);
        return;
    case KE_GATHER:
        sb_printf(b, "buf%d[", x->buf);
        print_ix(b, P, x->ix);
        sb_printf(b, " + ");
        print_ex(b, P, x->src[0]);
        sb_printf(b, " * %lld]", (long long)x->i);
        return;
    default:
        sb_printf(b, "%s(", smelt_op_name((smelt_op)x->gop));
        for (int k = 0; k < 3 && x->src[k] >= 0; k++) {
            sb_printf(b, k ? ", " : "");
            print_ex(b, P, x->src[k]);
        }
        sb_printf(b, x->gop == SMELT_OP_CAST ? " -> %s)" : ")", smelt_dtype_name((smelt_dtype)x->dtype));
    }
}

static void print_kernel(sbuf *b, const smelt_plan *p, int i)
{
    const kir_kernel *k = &p->kernels[i];
    static const char *kind[] = { "reduce", "store", "rowstore" };
    sb_printf(b, "kernel %d: vars [", i);
    for (int v = 0; v < k->nvars; v++)
        sb_printf(b, "%sv%d:%lld%s%s", v ? ", " : "", v, (long long)k->size[v],
                  k->rmask >> v & 1 ? " r" : "", v == k->vvar ? " vec" : "");
    sb_printf(b, "]\n");
    for (int j = 0, ph = 0; j < k->nitems; j++) {
        const kitem *it = &k->items[j];
        sb_printf(b, "  %s", kind[it->kind]);
        if (it->kind == KI_REDUCE)
            sb_printf(b, " phase%d = %s:%s ", ph++, smelt_op_name((smelt_op)it->rop),
                      smelt_dtype_name((smelt_dtype)it->acc_dtype));
        else {
            sb_printf(b, " buf%d[", it->buf);
            print_ix(b, &p->pool, it->ix);
            sb_printf(b, "] = ");
        }
        print_ex(b, &p->pool, it->value);
        sb_printf(b, "\n");
    }
}

char *ind_kernels_print(const smelt_plan *p)
{
    sbuf b = { 0 };
    sb_printf(&b, "");
    for (int32_t s = 0; s < p->nsteps; s++) {
        const plan_step *st = &p->steps[s];
        if (st->kind == PS_KERNEL)
            print_kernel(&b, p, st->kernel);
        else if (st->kind == PS_SDPA && st->attn->flex) {
            static const char *const what[PLAN_FLEX_NKERN] = { "score function", "score function under the mask",
                                                               "mask", "score function's derivative" };
            sb_printf(&b, "flex attention%s q buf%d, k buf%d, v buf%d -> buf%d (flash, %d block tables), per tile:\n",
                      st->attn->mode ? " backward" : "", st->attn->buf[0], st->attn->buf[1], st->attn->buf[2],
                      st->attn->buf[PLAN_SDPA_OUT], (st->attn->fx.tab_buf[0] >= 0) + (st->attn->fx.tab_buf[2] >= 0));
            for (int k = 0; k < PLAN_FLEX_NKERN; k++)
                if (st->attn->fx.kern[k] >= 0) {
                    sb_printf(&b, "  %s: ", what[k]);
                    print_kernel(&b, p, st->attn->fx.kern[k]);
                }
        } else if (st->kind == PS_SDPA && !st->attn->mode)
            sb_printf(&b, "sdpa q buf%d, k buf%d, v buf%d%s -> buf%d (flash, %s)\n", st->attn->buf[0],
                      st->attn->buf[1], st->attn->buf[2], st->attn->nin == 4 ? ", mask" : "",
                      st->attn->buf[PLAN_SDPA_OUT], st->attn->d.causal ? "causal" : "full");
        else if (st->kind == PS_SDPA)
            sb_printf(&b, "sdpa backward q buf%d, k buf%d, v buf%d, out buf%d, g buf%d%s -> buf%d (flash, %s)\n",
                      st->attn->buf[0], st->attn->buf[1], st->attn->buf[2], st->attn->buf[3], st->attn->buf[4],
                      st->attn->nin == 6 ? ", mask" : "", st->attn->buf[PLAN_SDPA_OUT],
                      st->attn->d.causal ? "causal" : "full");
        else if (st->kind == PS_CALL) {
            const plan_call *c = st->call;
            sb_printf(&b, "host call %d (", (int)c->id);
            for (int k = 0; k < c->nin; k++)
                sb_printf(&b, "%sbuf%d", k ? ", " : "", c->in_buf[k]);
            sb_printf(&b, ") ->");
            for (int k = 0; k < c->nout; k++)
                sb_printf(&b, " buf%d", c->out_buf[k]);
            sb_printf(&b, "\n");
        } else if (st->kind == PS_CONV) {
            const plan_conv *c = st->conv;
            static const char *const fmt[3] = { "conv x buf%d, w buf%d%s -> buf%d%s (oneDNN, groups %lld)\n",
                                                "conv backward input dy buf%d, w buf%d%s -> dx buf%d%s (oneDNN, "
                                                "groups %lld)\n",
                                                "conv backward weight x buf%d, dy buf%d%s -> dw buf%d%s (oneDNN, "
                                                "groups %lld)\n" };
            sb_printf(&b, fmt[c->mode], c->buf[0], c->buf[1], c->nin == 3 ? ", bias" : "", c->buf[3],
                      p->bufs[c->buf[3]].chlast ? " channels-last" : "", (long long)c->d.groups);
        } else
            sb_printf(&b, "matmul buf%d @ buf%d -> buf%d (%s%s)\n", st->a_buf, st->b_buf, st->c_buf,
                      smelt_dtype_name(st->mm.dtype), st->mm.c_f32 ? " operands, float32 result" : "");
    }
    return b.s;
}
