/* kslots.c — the plan buffers a kernel touches (plan.h ind_kernel_slots):
 * the slot tables of the back ends that pass each buffer as an argument. */
#include "plan.h"

#include <stdlib.h>

/* 1 the first time flag f[i] is tested, then 0. */
static int first(uint8_t *f, int32_t i)
{
    if (f[i])
        return 0;
    f[i] = 1;
    return 1;
}

int32_t ind_kernel_slots(const smelt_plan *p, const kir_kernel *k, int32_t *slots)
{
    int32_t n = 0, nex = p->pool.nex;
    uint8_t *seen = calloc((size_t)p->nbufs + 1, 1), *visited = calloc((size_t)nex + 1, 1);
    int32_t *stack = malloc(sizeof(int32_t) * ((size_t)nex + 1));
    if (!seen || !visited || !stack)
        abort();
    for (int i = 0; i < k->nitems; i++) {
        int32_t sp = 0;
        if (first(visited, k->items[i].value))
            stack[sp++] = k->items[i].value;
        while (sp) {   /* each expression pushed once: sp <= nex */
            const kexpr *x = &p->pool.ex[stack[--sp]];
            if ((x->op == KE_LOAD || x->op == KE_GATHER) && first(seen, x->buf))
                slots[n++] = x->buf;
            for (int s = 0; s < 3; s++)
                if ((x->op == KE_OP || x->op == KE_GATHER) && x->src[s] >= 0 && first(visited, x->src[s]))
                    stack[sp++] = x->src[s];
        }
        if (k->items[i].kind != KI_REDUCE && first(seen, k->items[i].buf))
            slots[n++] = k->items[i].buf;
    }
    free(seen);
    free(visited);
    free(stack);
    return n;
}

