/* Symbolic sizes: interned integer expressions in a canonical polynomial
 * form (see sym.h). Arithmetic goes through sym_poly, a small expanded
 * polynomial: operands are unpacked into one, combined, normalised and
 * packed back into interned nodes. */
#include "sym.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- the table ---------- */

void sym_table_init(sym_table *t)
{
    memset(t, 0, sizeof *t);
    t->var_min = INT64_MIN;
}

void sym_table_clear(sym_table *t)
{
    free(t->e);
    free(t->hash);
    sym_table_init(t);
}

int sym_table_copy(sym_table *dst, const sym_table *src)
{
    sym_table c = {0};
    c.n = c.cap = src->n;
    c.hcap = src->hcap;
    c.nvars = src->nvars;
    c.var_min = src->var_min;
    if (src->n) {
        c.e = malloc(sizeof *c.e * (size_t)src->n);
        c.hash = malloc(sizeof *c.hash * (size_t)src->hcap);
        if (!c.e || !c.hash) {
            free(c.e);
            free(c.hash);
            return -1;
        }
        memcpy(c.e, src->e, sizeof *c.e * (size_t)src->n);
        memcpy(c.hash, src->hash, sizeof *c.hash * (size_t)src->hcap);
    }
    sym_table_clear(dst);
    *dst = c;
    return 0;
}

static uint64_t node_hash(const sym_node *x)
{
    uint64_t h = 1469598103934665603ull;
    uint64_t v[4] = { x->op, (uint64_t)(uint32_t)x->a, (uint64_t)(uint32_t)x->b, (uint64_t)x->c };
    for (int i = 0; i < 4; i++) {
        h ^= v[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

static int grow_hash(sym_table *t)
{
    int32_t cap = t->hcap ? 2 * t->hcap : 64;
    int32_t *h = malloc(sizeof *h * (size_t)cap);
    if (!h)
        return -1;
    for (int32_t i = 0; i < cap; i++)
        h[i] = -1;
    for (int32_t i = 0; i < t->n; i++) {
        uint64_t k = node_hash(&t->e[i]) & (uint64_t)(cap - 1);
        while (h[k] >= 0)
            k = (k + 1) & (uint64_t)(cap - 1);
        h[k] = i;
    }
    free(t->hash);
    t->hash = h;
    t->hcap = cap;
    return 0;
}

static int32_t intern(sym_table *t, uint8_t op, int32_t a, int32_t b, int64_t c)
{
    sym_node x = { .op = op, .a = a, .b = b, .c = c };
    if (2 * (t->n + 1) > t->hcap && grow_hash(t) < 0)
        return -1;
    uint64_t k = node_hash(&x) & (uint64_t)(t->hcap - 1);
    for (; t->hash[k] >= 0; k = (k + 1) & (uint64_t)(t->hcap - 1)) {
        const sym_node *y = &t->e[t->hash[k]];
        if (y->op == op && y->a == a && y->b == b && y->c == c)
            return t->hash[k];
    }
    if (t->n == t->cap) {
        int32_t cap = t->cap ? 2 * t->cap : 32;
        sym_node *e = realloc(t->e, sizeof *e * (size_t)cap);
        if (!e)
            return -1;
        t->e = e;
        t->cap = cap;
    }
    t->e[t->n] = x;
    t->hash[k] = t->n;
    return t->n++;
}

int32_t sym_const(sym_table *t, int64_t c)
{
    return intern(t, SYM_CONST, -1, -1, c);
}

int32_t sym_var(sym_table *t, int k)
{
    if (k < 0 || k >= SYM_MAX_VARS)
        return -1;
    if (k >= t->nvars)
        t->nvars = k + 1;
    return intern(t, SYM_VAR, -1, -1, k);
}

int sym_is_const(const sym_table *t, int32_t e, int64_t *c)
{
    if (e < 0 || e >= t->n || t->e[e].op != SYM_CONST)
        return 0;
    *c = t->e[e].c;
    return 1;
}

uint32_t sym_vars_of(const sym_table *t, int32_t e)
{
    if (e < 0 || e >= t->n)
        return 0;
    const sym_node *x = &t->e[e];
    switch (x->op) {
    case SYM_CONST: return 0;
    case SYM_VAR: return 1u << x->c;
    case SYM_SCALE: return sym_vars_of(t, x->a);
    default: return sym_vars_of(t, x->a) | sym_vars_of(t, x->b);
    }
}

/* ---------- polynomials ---------- */

typedef struct sym_term {
    int64_t coef;
    int natoms;
    int32_t atom[SYM_MAX_DEG];   /* ascending */
} sym_term;

typedef struct sym_poly {
    int n;
    sym_term t[SYM_MAX_TERMS];
} sym_poly;

/* Appends monomial m's atoms (a MUL chain or one atom) to term x. */
static int monomial_atoms(const sym_table *t, int32_t m, sym_term *x)
{
    const sym_node *n = &t->e[m];
    if (n->op == SYM_MUL)
        return monomial_atoms(t, n->a, x) < 0 ? -1 : monomial_atoms(t, n->b, x);
    if (x->natoms == SYM_MAX_DEG)
        return -1;
    x->atom[x->natoms++] = m;
    return 0;
}

static int term_of(const sym_table *t, int32_t e, sym_term *x)
{
    const sym_node *n = &t->e[e];
    x->natoms = 0;
    x->coef = 1;
    if (n->op == SYM_CONST) {
        x->coef = n->c;
        return 0;
    }
    if (n->op == SYM_SCALE) {
        x->coef = n->c;
        n = &t->e[n->a];
        e = (int32_t)(n - t->e);
    }
    return monomial_atoms(t, e, x);
}

static int to_poly(const sym_table *t, int32_t e, sym_poly *p)
{
    p->n = 0;
    if (e < 0 || e >= t->n)
        return -1;
    /* ADD chains: left-nested, the last term outermost */
    int32_t terms[SYM_MAX_TERMS];
    int nt = 0;
    while (t->e[e].op == SYM_ADD) {
        if (nt == SYM_MAX_TERMS)
            return -1;
        terms[nt++] = t->e[e].b;
        e = t->e[e].a;
    }
    if (nt == SYM_MAX_TERMS)
        return -1;
    terms[nt++] = e;
    for (int i = nt - 1; i >= 0; i--)
        if (term_of(t, terms[i], &p->t[p->n++]) < 0)
            return -1;
    return 0;
}

static int atoms_cmp(const sym_term *a, const sym_term *b)
{
    /* constants last; then by degree (higher first), then atom ids */
    if (a->natoms != b->natoms) {
        if (!a->natoms || !b->natoms)
            return a->natoms ? -1 : 1;
        return a->natoms > b->natoms ? -1 : 1;
    }
    for (int i = 0; i < a->natoms; i++)
        if (a->atom[i] != b->atom[i])
            return a->atom[i] < b->atom[i] ? -1 : 1;
    return 0;
}

static int term_qcmp(const void *x, const void *y)
{
    return atoms_cmp(x, y);
}

static int int_qcmp(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* Sorts atoms within terms and terms, merges like terms, drops zeros. */
static int normalise(sym_poly *p)
{
    for (int i = 0; i < p->n; i++)
        qsort(p->t[i].atom, (size_t)p->t[i].natoms, sizeof(int32_t), int_qcmp);
    qsort(p->t, (size_t)p->n, sizeof p->t[0], term_qcmp);
    int k = 0;
    for (int i = 0; i < p->n; i++) {
        if (k && atoms_cmp(&p->t[k - 1], &p->t[i]) == 0) {
            if (__builtin_add_overflow(p->t[k - 1].coef, p->t[i].coef, &p->t[k - 1].coef))
                return -1;
        } else {
            p->t[k++] = p->t[i];
        }
    }
    int m = 0;
    for (int i = 0; i < k; i++)
        if (p->t[i].coef != 0)
            p->t[m++] = p->t[i];
    p->n = m;
    return 0;
}

static int32_t from_poly(sym_table *t, sym_poly *p)
{
    if (normalise(p) < 0)
        return -1;
    if (p->n == 0)
        return sym_const(t, 0);
    int32_t acc = -1;
    for (int i = 0; i < p->n; i++) {
        const sym_term *x = &p->t[i];
        int32_t term;
        if (!x->natoms) {
            term = sym_const(t, x->coef);
        } else {
            term = x->atom[0];
            for (int j = 1; j < x->natoms && term >= 0; j++)
                term = intern(t, SYM_MUL, term, x->atom[j], 0);
            if (term >= 0 && x->coef != 1)
                term = intern(t, SYM_SCALE, term, -1, x->coef);
        }
        if (term < 0)
            return -1;
        acc = acc < 0 ? term : intern(t, SYM_ADD, acc, term, 0);
        if (acc < 0)
            return -1;
    }
    return acc;
}

static int poly_add(sym_poly *r, const sym_poly *a, const sym_poly *b, int64_t bscale)
{
    if (a->n + b->n > SYM_MAX_TERMS * 2)
        return -1;
    sym_term tmp[SYM_MAX_TERMS * 2];
    int n = 0;
    for (int i = 0; i < a->n; i++)
        tmp[n++] = a->t[i];
    for (int i = 0; i < b->n; i++) {
        tmp[n] = b->t[i];
        if (__builtin_mul_overflow(tmp[n].coef, bscale, &tmp[n].coef))
            return -1;
        n++;
    }
    /* merge in a bigger buffer, then check the limit */
    for (int i = 0; i < n; i++)
        qsort(tmp[i].atom, (size_t)tmp[i].natoms, sizeof(int32_t), int_qcmp);
    qsort(tmp, (size_t)n, sizeof tmp[0], term_qcmp);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k && atoms_cmp(&tmp[k - 1], &tmp[i]) == 0) {
            if (__builtin_add_overflow(tmp[k - 1].coef, tmp[i].coef, &tmp[k - 1].coef))
                return -1;
        } else {
            tmp[k++] = tmp[i];
        }
    }
    r->n = 0;
    for (int i = 0; i < k; i++)
        if (tmp[i].coef) {
            if (r->n == SYM_MAX_TERMS)
                return -1;
            r->t[r->n++] = tmp[i];
        }
    return 0;
}

static int poly_mul(sym_poly *r, const sym_poly *a, const sym_poly *b)
{
    sym_poly acc = { 0 };
    for (int i = 0; i < a->n; i++) {
        sym_poly row = { 0 };
        for (int j = 0; j < b->n; j++) {
            const sym_term *x = &a->t[i], *y = &b->t[j];
            sym_term z;
            if (x->natoms + y->natoms > SYM_MAX_DEG || __builtin_mul_overflow(x->coef, y->coef, &z.coef))
                return -1;
            z.natoms = 0;
            for (int k = 0; k < x->natoms; k++)
                z.atom[z.natoms++] = x->atom[k];
            for (int k = 0; k < y->natoms; k++)
                z.atom[z.natoms++] = y->atom[k];
            if (row.n == SYM_MAX_TERMS)
                return -1;
            row.t[row.n++] = z;
        }
        sym_poly next;
        if (poly_add(&next, &acc, &row, 1) < 0)
            return -1;
        acc = next;
    }
    *r = acc;
    return 0;
}

int32_t sym_add(sym_table *t, int32_t a, int32_t b)
{
    sym_poly x, y, r;
    if (to_poly(t, a, &x) < 0 || to_poly(t, b, &y) < 0 || poly_add(&r, &x, &y, 1) < 0)
        return -1;
    return from_poly(t, &r);
}

int32_t sym_sub(sym_table *t, int32_t a, int32_t b)
{
    sym_poly x, y, r;
    if (to_poly(t, a, &x) < 0 || to_poly(t, b, &y) < 0 || poly_add(&r, &x, &y, -1) < 0)
        return -1;
    return from_poly(t, &r);
}

int32_t sym_mul(sym_table *t, int32_t a, int32_t b)
{
    sym_poly x, y, r;
    if (to_poly(t, a, &x) < 0 || to_poly(t, b, &y) < 0 || poly_mul(&r, &x, &y) < 0)
        return -1;
    return from_poly(t, &r);
}

static int64_t floordiv64(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static int64_t mod64(int64_t a, int64_t b)
{
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0)))
        m += b;
    return m;
}

/* x / y when y (one term) divides every term of x exactly: 1 with *q, 0
 * when it does not, -1 on an error. */
static int exact_div(const sym_poly *x, const sym_term *y, sym_poly *q)
{
    if (y->coef == 0)
        return 0;
    q->n = 0;
    for (int i = 0; i < x->n; i++) {
        const sym_term *a = &x->t[i];
        if (a->coef % y->coef != 0 || (a->coef == INT64_MIN && y->coef == -1))
            return 0;
        sym_term z = { .coef = a->coef / y->coef, .natoms = 0 };
        bool used[SYM_MAX_DEG] = { false };
        int found = 0;
        for (int k = 0; k < y->natoms; k++)
            for (int j = 0; j < a->natoms; j++)
                if (!used[j] && a->atom[j] == y->atom[k]) {
                    used[j] = true;
                    found++;
                    break;
                }
        if (found != y->natoms)
            return 0;
        for (int j = 0; j < a->natoms; j++)
            if (!used[j])
                z.atom[z.natoms++] = a->atom[j];
        q->t[q->n++] = z;
    }
    return 1;
}

/* a / b when b is one term dividing every term of a exactly: 1 with *q,
 * 0 when it is not, -1 on an error. */
static int exact_quotient(sym_table *t, int32_t a, int32_t b, int32_t *q)
{
    sym_poly x, y, z;
    if (to_poly(t, a, &x) < 0 || to_poly(t, b, &y) < 0)
        return -1;
    if (y.n != 1)
        return 0;
    int r = exact_div(&x, &y.t[0], &z);
    if (r <= 0)
        return r;
    return (*q = from_poly(t, &z)) < 0 ? -1 : 1;
}

static int32_t ordered(sym_table *t, uint8_t op, int32_t a, int32_t b)
{
    return intern(t, op, a < b ? a : b, a < b ? b : a, 0);
}

int32_t sym_floordiv(sym_table *t, int32_t a, int32_t b)
{
    int64_t ca = 0, cb = 0;
    int ka = sym_is_const(t, a, &ca), kb = sym_is_const(t, b, &cb);
    if (a < 0 || b < 0 || (kb && cb == 0))
        return -1;
    if (ka && kb)
        return ca == INT64_MIN && cb == -1 ? -1 : sym_const(t, floordiv64(ca, cb));
    if (kb && cb == 1)
        return a;
    if (a == b)
        return sym_const(t, 1);
    int32_t q;
    int r = exact_quotient(t, a, b, &q);
    return r < 0 ? -1 : r ? q : intern(t, SYM_FLOORDIV, a, b, 0);
}

int32_t sym_mod(sym_table *t, int32_t a, int32_t b)
{
    int64_t ca = 0, cb = 0;
    int ka = sym_is_const(t, a, &ca), kb = sym_is_const(t, b, &cb);
    if (a < 0 || b < 0 || (kb && cb == 0))
        return -1;
    if (ka && kb)
        return sym_const(t, cb == -1 ? 0 : mod64(ca, cb));
    if (kb && (cb == 1 || cb == -1))
        return sym_const(t, 0);
    if (a == b)
        return sym_const(t, 0);
    int32_t q;
    int r = exact_quotient(t, a, b, &q);
    return r < 0 ? -1 : r ? sym_const(t, 0) : intern(t, SYM_MOD, a, b, 0);
}

int sym_lower_bound(const sym_table *t, int32_t e, int64_t *lb)
{
    if (e < 0 || e >= t->n)
        return 0;
    const sym_node *n = &t->e[e];
    int64_t a, b;
    switch (n->op) {
    case SYM_CONST: *lb = n->c; return 1;
    case SYM_VAR: *lb = t->var_min; return t->var_min != INT64_MIN;
    case SYM_SCALE:
        return n->c > 0 && sym_lower_bound(t, n->a, &a) && a >= 0 && !__builtin_mul_overflow(a, n->c, lb);
    case SYM_MUL:
        return sym_lower_bound(t, n->a, &a) && a >= 0 && sym_lower_bound(t, n->b, &b) && b >= 0 &&
               !__builtin_mul_overflow(a, b, lb);
    case SYM_ADD:
        return sym_lower_bound(t, n->a, &a) && sym_lower_bound(t, n->b, &b) && !__builtin_add_overflow(a, b, lb);
    case SYM_MIN:
        if (!sym_lower_bound(t, n->a, &a) || !sym_lower_bound(t, n->b, &b))
            return 0;
        *lb = a < b ? a : b;
        return 1;
    case SYM_MAX: {
        int ka = sym_lower_bound(t, n->a, &a), kb = sym_lower_bound(t, n->b, &b);
        if (!ka && !kb)
            return 0;
        *lb = !ka ? b : !kb ? a : a > b ? a : b;
        return 1;
    }
    case SYM_FLOORDIV:
        if (t->e[n->b].op != SYM_CONST || t->e[n->b].c <= 0 || !sym_lower_bound(t, n->a, &a))
            return 0;
        *lb = floordiv64(a, t->e[n->b].c);
        return 1;
    case SYM_MOD:
        if (t->e[n->b].op != SYM_CONST || t->e[n->b].c <= 0)
            return 0;
        *lb = 0;
        return 1;
    default: return 0;
    }
}

static int32_t minmax(sym_table *t, int32_t a, int32_t b, int is_max)
{
    if (a < 0 || b < 0)
        return -1;
    if (a == b)
        return a;
    int64_t d, lb;
    int32_t diff = sym_sub(t, a, b);
    if (diff >= 0 && sym_is_const(t, diff, &d))
        return (d >= 0) == !!is_max ? a : b;
    /* a constant that the other side never falls below */
    if (sym_is_const(t, b, &d) && sym_lower_bound(t, a, &lb) && lb >= d)
        return is_max ? a : b;
    if (sym_is_const(t, a, &d) && sym_lower_bound(t, b, &lb) && lb >= d)
        return is_max ? b : a;
    return ordered(t, is_max ? SYM_MAX : SYM_MIN, a, b);
}

int32_t sym_min(sym_table *t, int32_t a, int32_t b)
{
    return minmax(t, a, b, 0);
}

int32_t sym_max(sym_table *t, int32_t a, int32_t b)
{
    return minmax(t, a, b, 1);
}

/* ---------- evaluation and printing ---------- */

int sym_eval(const sym_table *t, int32_t e, const int64_t *vals, int64_t *out)
{
    if (e < 0 || e >= t->n)
        return -1;
    const sym_node *n = &t->e[e];
    int64_t a = 0, b = 0;
    switch (n->op) {
    case SYM_CONST:
        *out = n->c;
        return 0;
    case SYM_VAR:
        *out = vals[n->c];
        return 0;
    case SYM_SCALE:
        return sym_eval(t, n->a, vals, &a) < 0 || __builtin_mul_overflow(a, n->c, out) ? -1 : 0;
    default:
        break;
    }
    if (sym_eval(t, n->a, vals, &a) < 0 || sym_eval(t, n->b, vals, &b) < 0)
        return -1;
    switch (n->op) {
    case SYM_ADD: return __builtin_add_overflow(a, b, out) ? -1 : 0;
    case SYM_MUL: return __builtin_mul_overflow(a, b, out) ? -1 : 0;
    case SYM_FLOORDIV:
        if (b == 0 || (a == INT64_MIN && b == -1))
            return -1;
        *out = floordiv64(a, b);
        return 0;
    case SYM_MOD:
        if (b == 0)
            return -1;
        *out = b == -1 ? 0 : mod64(a, b);
        return 0;
    case SYM_MIN: *out = a < b ? a : b; return 0;
    case SYM_MAX: *out = a > b ? a : b; return 0;
    default: return -1;
    }
}

typedef struct pbuf {
    char *s;
    size_t len, used;
} pbuf;

static void put(pbuf *p, const char *fmt, long long v, int with_v)
{
    size_t room = p->used < p->len ? p->len - p->used : 0;
    int k = with_v ? snprintf(room ? p->s + p->used : NULL, room, fmt, v)
                   : snprintf(room ? p->s + p->used : NULL, room, "%s", fmt);
    if (k > 0)
        p->used += (size_t)k;
}

static void pr(const sym_table *t, int32_t e, pbuf *p, int paren);

static void pr_atom_or_prod(const sym_table *t, int32_t e, pbuf *p)
{
    const sym_node *n = &t->e[e];
    if (n->op == SYM_MUL) {
        pr_atom_or_prod(t, n->a, p);
        put(p, "*", 0, 0);
        pr(t, n->b, p, 1);
    } else {
        pr(t, e, p, 1);
    }
}

/* paren: wrap a sum or a division in parentheses (an operand) */
static void pr(const sym_table *t, int32_t e, pbuf *p, int paren)
{
    if (e < 0 || e >= t->n) {
        put(p, "?", 0, 0);
        return;
    }
    const sym_node *n = &t->e[e];
    switch (n->op) {
    case SYM_CONST: put(p, "%lld", (long long)n->c, 1); return;
    case SYM_VAR: put(p, "s%lld", (long long)n->c, 1); return;
    case SYM_MUL: pr_atom_or_prod(t, e, p); return;
    case SYM_SCALE:
        if (n->c == -1)
            put(p, "-", 0, 0);
        else
            put(p, "%lld*", (long long)n->c, 1);
        pr_atom_or_prod(t, n->a, p);
        return;
    case SYM_ADD: {
        if (paren)
            put(p, "(", 0, 0);
        pr(t, n->a, p, 0);
        const sym_node *b = &t->e[n->b];
        int64_t neg = b->op == SYM_CONST ? b->c : b->op == SYM_SCALE ? b->c : 1;
        if (neg < 0 && neg != INT64_MIN) {
            put(p, " - ", 0, 0);
            if (b->op == SYM_CONST) {
                put(p, "%lld", (long long)-neg, 1);
            } else {
                if (neg != -1)
                    put(p, "%lld*", (long long)-neg, 1);
                pr_atom_or_prod(t, b->a, p);
            }
        } else {
            put(p, " + ", 0, 0);
            pr(t, n->b, p, 0);
        }
        if (paren)
            put(p, ")", 0, 0);
        return;
    }
    case SYM_FLOORDIV:
    case SYM_MOD:
        if (paren)
            put(p, "(", 0, 0);
        pr(t, n->a, p, 1);
        put(p, n->op == SYM_MOD ? " % " : "//", 0, 0);
        pr(t, n->b, p, 1);
        if (paren)
            put(p, ")", 0, 0);
        return;
    case SYM_MIN:
    case SYM_MAX:
        put(p, n->op == SYM_MIN ? "min(" : "max(", 0, 0);
        pr(t, n->a, p, 0);
        put(p, ", ", 0, 0);
        pr(t, n->b, p, 0);
        put(p, ")", 0, 0);
        return;
    default:
        put(p, "?", 0, 0);
    }
}

size_t sym_print(const sym_table *t, int32_t e, char *buf, size_t len)
{
    pbuf p = { buf, len, 0 };
    if (len)
        buf[0] = 0;
    pr(t, e, &p, 0);
    if (len)
        buf[p.used < len ? p.used : len - 1] = 0;
    return p.used;
}

int sym_rel_check(const sym_table *t, const sym_rel *r, const int64_t *vals)
{
    int64_t a, b;
    if (sym_eval(t, r->a, vals, &a) < 0 || sym_eval(t, r->b, vals, &b) < 0)
        return -1;
    switch (r->op) {
    case 0: return a < b;
    case 1: return a <= b;
    case 2: return a == b;
    case 3: return a != b;
    case 4: return a > b;
    case 5: return a >= b;
    default: return -1;
    }
}

size_t sym_rel_print(const sym_table *t, const sym_rel *r, char *buf, size_t len)
{
    static const char *ops[6] = { " < ", " <= ", " == ", " != ", " > ", " >= " };
    pbuf p = { buf, len, 0 };
    if (len)
        buf[0] = 0;
    pr(t, r->a, &p, 0);
    put(&p, r->op < 6 ? ops[r->op] : " ? ", 0, 0);
    pr(t, r->b, &p, 0);
    if (len)
        buf[p.used < len ? p.used : len - 1] = 0;
    return p.used;
}
