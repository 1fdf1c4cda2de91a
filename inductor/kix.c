/* kix.c — index expressions and scalar expressions of the kernel IR.
 *
 * Both arenas hash-cons: building the same expression twice yields the same
 * id, so identical subexpressions are shared and equality is id equality.
 * Index expressions are simplified on construction through a linear form
 * over "atoms" (variables, divisions, remainders) with value ranges, which
 * turns view chains such as flatten-then-unflatten back into plain
 * variables and contiguous strided access into affine expressions.
 */
#include "kix.h"

#include <stdlib.h>
#include <string.h>

#define LIN_MAX 24

typedef struct lin {
    int64_t c0;
    int n;
    int32_t atom[LIN_MAX];
    int64_t coef[LIN_MAX];
} lin;

static void *grow(void *p, int32_t *cap, int32_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    int32_t nc = *cap ? *cap * 2 : 256;
    while (nc < need)
        nc *= 2;
    void *q = realloc(p, (size_t)nc * elem);
    if (!q)
        abort();
    *cap = nc;
    return q;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* Rebuilds table *t (size *cap) for n entries hashed by hf. */
typedef uint64_t (*hash_fn)(const kir_pool *P, int32_t id);

static void rehash(const kir_pool *P, int32_t **t, int32_t *cap, int32_t n, hash_fn hf)
{
    int32_t nc = *cap ? *cap * 2 : 1024;
    int32_t *nt = malloc(sizeof(int32_t) * (size_t)nc);
    if (!nt)
        abort();
    memset(nt, 0xff, sizeof(int32_t) * (size_t)nc);
    for (int32_t id = 0; id < n; id++) {
        uint64_t h = hf(P, id);
        for (int32_t s = (int32_t)(h & (uint64_t)(nc - 1));; s = (s + 1) & (nc - 1))
            if (nt[s] < 0) {
                nt[s] = id;
                break;
            }
    }
    free(*t);
    *t = nt;
    *cap = nc;
}

static uint64_t ix_hash(const kir_pool *P, int32_t id)
{
    const kix *k = &P->ix[id];
    uint64_t h = mix(mix(mix(k->op, (uint64_t)k->a), (uint64_t)k->b), (uint64_t)k->c);
    return mix(mix(h, (uint64_t)k->lo), (uint64_t)k->hi);
}

static int ix_equal(const kix *o, const kix *k)
{
    return o->op == k->op && o->a == k->a && o->b == k->b && o->c == k->c &&
           o->lo == k->lo && o->hi == k->hi;
}

static int32_t ix_intern(kir_pool *P, kix k)
{
    if (2 * (P->nix + 1) > P->chix)
        rehash(P, &P->hix, &P->chix, P->nix, ix_hash);
    P->ix = grow(P->ix, &P->cix, P->nix + 1, sizeof(kix));
    P->ix[P->nix] = k;   /* staged at the end to hash it */
    uint64_t h = ix_hash(P, P->nix);
    int32_t s = (int32_t)(h & (uint64_t)(P->chix - 1));
    for (; P->hix[s] >= 0; s = (s + 1) & (P->chix - 1))
        if (ix_equal(&P->ix[P->hix[s]], &k))
            return P->hix[s];
    P->hix[s] = P->nix;
    return P->nix++;
}

int32_t kix_const(kir_pool *P, int64_t c)
{
    return ix_intern(P, (kix){ .op = KIX_CONST, .a = -1, .b = -1, .c = c, .lo = c, .hi = c });
}

int32_t kix_var(kir_pool *P, int var, int64_t size)
{
    if (size == 1)
        return kix_const(P, 0);
    /* a size-0 var never runs; give it the range of a single point */
    return ix_intern(P, (kix){ .op = KIX_VAR, .a = -1, .b = -1, .c = var, .lo = 0,
                               .hi = size > 0 ? size - 1 : 0 });
}

/* Appends coef*e (e any kix) to the linear form. */
static void lin_add(const kir_pool *P, lin *L, int32_t e, int64_t coef)
{
    const kix *k = &P->ix[e];
    if (coef == 0)
        return;
    switch (k->op) {
    case KIX_CONST: L->c0 += coef * k->c; return;
    case KIX_ADD: lin_add(P, L, k->a, coef); lin_add(P, L, k->b, coef); return;
    case KIX_MUL: lin_add(P, L, k->a, coef * k->c); return;
    default: break;
    }
    for (int i = 0; i < L->n; i++)
        if (L->atom[i] == e) {
            L->coef[i] += coef;
            return;
        }
    if (L->n == LIN_MAX)
        abort();   /* deeper than any view chain smelt builds */
    L->atom[L->n] = e;
    L->coef[L->n++] = coef;
}

static void lin_drop(lin *L, int i)
{
    L->atom[i] = L->atom[L->n - 1];
    L->coef[i] = L->coef[L->n - 1];
    L->n--;
}

/* Folds c*K*(x/(A*K)) + c*((x/A)%K) == c*(x/A) (A = 1: c*K*(x/K) +
 * c*(x%K) == c*x) until no such pair is left, then drops zero terms. */
static int fold_pair(const kir_pool *P, lin *L, int i, int j)
{
    const kix *d = &P->ix[L->atom[i]], *m = &P->ix[L->atom[j]];
    if (d->op != KIX_DIV || m->op != KIX_MOD || L->coef[j] == 0 || L->coef[i] != L->coef[j] * m->c)
        return 0;
    int32_t y = m->a, x = y;
    int64_t A = 1;
    if (P->ix[y].op == KIX_DIV) {
        x = P->ix[y].a;
        A = P->ix[y].c;
    }
    if (!((x == d->a && A * m->c == d->c) || (y == d->a && m->c == d->c)))
        return 0;
    int64_t c = L->coef[j];
    lin_drop(L, i > j ? i : j);
    lin_drop(L, i > j ? j : i);
    lin_add(P, L, y, c);
    return 1;
}

static void lin_fold(const kir_pool *P, lin *L)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < L->n && !changed; i++)
            for (int j = 0; j < L->n && !changed; j++)
                changed = i != j && fold_pair(P, L, i, j);
    }
    for (int i = L->n - 1; i >= 0; i--)
        if (L->coef[i] == 0)
            lin_drop(L, i);
}

static void lin_range(const kir_pool *P, const lin *L, int64_t *lo, int64_t *hi)
{
    *lo = *hi = L->c0;
    for (int i = 0; i < L->n; i++) {
        const kix *k = &P->ix[L->atom[i]];
        int64_t a = L->coef[i] * k->lo, b = L->coef[i] * k->hi;
        *lo += a < b ? a : b;
        *hi += a < b ? b : a;
    }
}

/* An atom's form without its numbers (which variables, under which
 * operations): terms ordered by it come out in the same order whatever
 * the sizes, so a kernel reading its sizes from a table (param_sizes) is
 * the same kernel for every size. */
static uint64_t form_key(const kir_pool *P, int32_t id)
{
    const kix *k = &P->ix[id];
    switch (k->op) {
    case KIX_VAR:
        return mix(1, (uint64_t)k->c);
    case KIX_ADD:
        return mix(mix(5, form_key(P, k->a)), form_key(P, k->b));
    case KIX_CONST:
        return 0;
    default:
        return mix((uint64_t)k->op + 1, form_key(P, k->a));
    }
}

typedef struct term {
    uint64_t key;
    int64_t c;            /* the atom's own number (a divisor), then its id: ties */
    int32_t atom;
    int64_t coef;
} term;

static int cmp_term(const void *x, const void *y)
{
    const term *a = x, *b = y;
    if (a->key != b->key)
        return (a->key > b->key) - (a->key < b->key);
    if (a->c != b->c)
        return (a->c > b->c) - (a->c < b->c);
    return (a->atom > b->atom) - (a->atom < b->atom);
}

/* Canonical tree for a linear form: terms sorted by their atoms' forms,
 * constant last. */
static int32_t lin_build(kir_pool *P, lin *L)
{
    lin_fold(P, L);
    term t[LIN_MAX];
    for (int i = 0; i < L->n; i++)
        t[i] = (term){ .key = form_key(P, L->atom[i]), .c = P->ix[L->atom[i]].c, .atom = L->atom[i],
                       .coef = L->coef[i] };
    qsort(t, (size_t)L->n, sizeof t[0], cmp_term);
    int32_t acc = -1;
    for (int i = 0; i < L->n; i++) {
        int32_t a = t[i].atom;
        const kix *ak = &P->ix[a];
        int32_t tm = a;
        if (t[i].coef != 1) {
            int64_t x = t[i].coef * ak->lo, y = t[i].coef * ak->hi;
            tm = ix_intern(P, (kix){ .op = KIX_MUL, .a = a, .b = -1, .c = t[i].coef,
                                       .lo = x < y ? x : y, .hi = x < y ? y : x });
        }
        if (acc < 0) {
            acc = tm;
        } else {
            const kix *l = &P->ix[acc], *r = &P->ix[tm];
            acc = ix_intern(P, (kix){ .op = KIX_ADD, .a = acc, .b = tm, .c = 0,
                                      .lo = l->lo + r->lo, .hi = l->hi + r->hi });
        }
    }
    if (acc < 0)
        return kix_const(P, L->c0);
    if (L->c0) {
        const kix *l = &P->ix[acc];
        int32_t c = kix_const(P, L->c0);
        acc = ix_intern(P, (kix){ .op = KIX_ADD, .a = acc, .b = c, .c = 0,
                                  .lo = l->lo + L->c0, .hi = l->hi + L->c0 });
    }
    return acc;
}

int32_t kix_add(kir_pool *P, int32_t a, int32_t b)
{
    lin L = { 0 };
    lin_add(P, &L, a, 1);
    lin_add(P, &L, b, 1);
    return lin_build(P, &L);
}

int32_t kix_mul(kir_pool *P, int32_t a, int64_t c)
{
    lin L = { 0 };
    lin_add(P, &L, a, c);
    return lin_build(P, &L);
}

static int64_t floordiv64(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* Splits L into q (terms divisible by K, scaled down) and r (the rest plus
 * the constant's remainder). */
static void lin_split(const lin *L, int64_t K, lin *q, lin *r)
{
    memset(q, 0, sizeof *q);
    memset(r, 0, sizeof *r);
    q->c0 = floordiv64(L->c0, K);
    r->c0 = L->c0 - q->c0 * K;
    for (int i = 0; i < L->n; i++) {
        lin *d = (L->coef[i] % K == 0) ? q : r;
        d->atom[d->n] = L->atom[i];
        d->coef[d->n++] = (d == q) ? L->coef[i] / K : L->coef[i];
    }
}

static int32_t divmod(kir_pool *P, int32_t a, int64_t K, int is_mod);

/* x/K and x%K when some c > 1 divides K and every term of x, except a
 * part R with range [0, c): x = c*y + R gives x/K = y/(K/c) and
 * x%K = c*(y%(K/c)) + R. The largest such c is used; -1 if none. */
static int32_t divide_through(kir_pool *P, const lin *L, int64_t K, int is_mod)
{
    int64_t best = 1;
    lin y, r;
    for (int i = 0; i < L->n; i++) {
        int64_t c = L->coef[i];
        if (c <= best || K % c)
            continue;
        lin q, rr;
        lin_split(L, c, &q, &rr);
        int64_t lo, hi;
        lin_range(P, &rr, &lo, &hi);
        if (lo >= 0 && hi < c) {
            best = c;
            y = q;
            r = rr;
        }
    }
    if (best == 1)
        return -1;
    int32_t yi = lin_build(P, &y), ri = lin_build(P, &r);
    if (!is_mod)
        return divmod(P, yi, K / best, 0);
    return kix_add(P, kix_mul(P, divmod(P, yi, K / best, 1), best), ri);
}

static int32_t divmod(kir_pool *P, int32_t a, int64_t K, int is_mod)
{
    if (K == 1)
        return is_mod ? kix_const(P, 0) : a;
    const kix *k = &P->ix[a];
    if (k->lo >= 0 && k->hi < K)
        return is_mod ? a : kix_const(P, 0);
    lin L = { 0 }, q, r;
    lin_add(P, &L, a, 1);
    lin_split(&L, K, &q, &r);
    int64_t rlo, rhi;
    lin_range(P, &r, &rlo, &rhi);
    int32_t base = a, head = -1;
    if (rlo >= 0 && (q.n || q.c0)) {
        base = lin_build(P, &r);
        head = lin_build(P, &q);
        const kix *b = &P->ix[base];
        if (b->hi < K)
            return is_mod ? base : head;
    }
    if (k->lo >= 0) {
        int32_t t = divide_through(P, &L, K, is_mod);
        if (t >= 0)
            return t;
    }
    const kix *b = &P->ix[base];
    int32_t node = ix_intern(P, (kix){ .op = is_mod ? KIX_MOD : KIX_DIV, .a = base, .b = -1,
                                       .c = K, .lo = is_mod ? 0 : b->lo / K,
                                       .hi = is_mod ? (b->hi < K - 1 ? b->hi : K - 1) : b->hi / K });
    if (is_mod || head < 0)
        return node;
    return kix_add(P, head, node);
}

int32_t kix_div(kir_pool *P, int32_t a, int64_t K) { return divmod(P, a, K, 0); }
int32_t kix_mod(kir_pool *P, int32_t a, int64_t K) { return divmod(P, a, K, 1); }

int kix_uses_var(const kir_pool *P, int32_t e, int var)
{
    const kix *k = &P->ix[e];
    switch (k->op) {
    case KIX_CONST: return 0;
    case KIX_VAR: return k->c == var;
    case KIX_ADD: return kix_uses_var(P, k->a, var) || kix_uses_var(P, k->b, var);
    default: return kix_uses_var(P, k->a, var);
    }
}

int64_t kix_coef(const kir_pool *P, int32_t e, int var)
{
    const kix *k = &P->ix[e];
    switch (k->op) {
    case KIX_CONST: return 0;
    case KIX_VAR: return k->c == var;
    case KIX_ADD: {
        int64_t a = kix_coef(P, k->a, var), b = kix_coef(P, k->b, var);
        return (a == KIX_NONAFFINE || b == KIX_NONAFFINE) ? KIX_NONAFFINE : a + b;
    }
    case KIX_MUL: {
        int64_t a = kix_coef(P, k->a, var);
        return a == KIX_NONAFFINE ? a : a * k->c;
    }
    default: return kix_uses_var(P, k->a, var) ? KIX_NONAFFINE : 0;
    }
}

static int64_t dbits(double f)
{
    int64_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static uint64_t ex_hash(const kir_pool *P, int32_t id)
{
    const kexpr *e = &P->ex[id];
    uint64_t h = mix(mix(mix(e->op, e->dtype), e->cdtype), e->gop);
    for (int k = 0; k < 3; k++)
        h = mix(h, (uint64_t)e->src[k]);
    h = mix(mix(mix(mix(h, (uint64_t)e->gnode), (uint64_t)e->buf), (uint64_t)e->ix), (uint64_t)e->phase);
    return mix(mix(h, (uint64_t)dbits(e->f)), (uint64_t)e->i);
}

static int ex_equal(const kexpr *o, const kexpr *e)
{
    return o->op == e->op && o->dtype == e->dtype && o->cdtype == e->cdtype && o->gop == e->gop &&
           o->src[0] == e->src[0] && o->src[1] == e->src[1] && o->src[2] == e->src[2] &&
           o->gnode == e->gnode && o->buf == e->buf && o->ix == e->ix && o->phase == e->phase &&
           dbits(o->f) == dbits(e->f) && o->i == e->i;
}

int32_t kexpr_intern(kir_pool *P, kexpr e)
{
    if (2 * (P->nex + 1) > P->chex)
        rehash(P, &P->hex, &P->chex, P->nex, ex_hash);
    P->ex = grow(P->ex, &P->cex, P->nex + 1, sizeof(kexpr));
    P->ex[P->nex] = e;   /* staged at the end to hash it */
    uint64_t h = ex_hash(P, P->nex);
    int32_t s = (int32_t)(h & (uint64_t)(P->chex - 1));
    for (; P->hex[s] >= 0; s = (s + 1) & (P->chex - 1))
        if (ex_equal(&P->ex[P->hex[s]], &e))
            return P->hex[s];
    P->hex[s] = P->nex;
    return P->nex++;
}

kexpr kexpr_blank(kexpr_op op, smelt_dtype dt)
{
    return (kexpr){ .op = (uint8_t)op, .dtype = (uint8_t)dt, .cdtype = (uint8_t)dt,
                    .src = { -1, -1, -1 }, .gnode = -1, .buf = -1, .ix = -1, .phase = -1 };
}

/* Copies an array of n elements of size sz into a new allocation of cap
 * elements (NULL stays NULL). */
static void *dup_array(const void *a, size_t n, size_t cap, size_t sz)
{
    if (!a)
        return NULL;
    void *b = malloc((cap ? cap : 1) * sz);
    if (!b)
        abort();
    memcpy(b, a, n * sz);
    return b;
}

void kir_pool_copy(kir_pool *dst, const kir_pool *src)
{
    *dst = *src;
    dst->ix = dup_array(src->ix, (size_t)src->nix, (size_t)src->cix, sizeof(kix));
    dst->ex = dup_array(src->ex, (size_t)src->nex, (size_t)src->cex, sizeof(kexpr));
    dst->hix = dup_array(src->hix, (size_t)src->chix, (size_t)src->chix, sizeof(int32_t));
    dst->hex = dup_array(src->hex, (size_t)src->chex, (size_t)src->chex, sizeof(int32_t));
}

void kir_pool_free(kir_pool *P)
{
    free(P->ix);
    free(P->ex);
    free(P->hix);
    free(P->hex);
    memset(P, 0, sizeof *P);
}
