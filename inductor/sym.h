/* Symbolic sizes: integer expressions over symbols (dynamic shapes).
 *
 * A symbol s<k> stands for one size that varies between calls (a dynamic
 * dimension of a graph input). Expressions over symbols and integer
 * constants are interned in a sym_table (one per traced graph): equal
 * expressions have equal ids, because every expression is kept in one
 * canonical form:
 *
 *   - a polynomial with integer coefficients over atoms, terms ordered
 *     (its constant last), like terms merged, zero terms dropped;
 *   - atoms: symbols, and the operations a polynomial cannot express,
 *     floor division, modulo, min and max (their operands canonical,
 *     min/max's ordered by id).
 *
 * So s0*s1 // s1 is s0, (2*s0 + 4) // 2 is s0 + 2, s0 - s0 is 0, and a
 * reshape's -1 (numel / product of the other sizes) comes out as the
 * symbol it stands for. Division and modulo follow Python (floor) and are
 * only simplified where the result is exact for every value of the
 * symbols; otherwise they stay atoms, evaluated per call.
 *
 * Every constructor returns an expression id (>= 0) or -1 when the form
 * would exceed the table's limits (SYM_MAX_TERMS terms, SYM_MAX_DEG atoms
 * a term), a coefficient overflows, or memory runs out; the caller then
 * treats the size as a constant (it specialises). Constructors never
 * fail on a division by a zero constant: they give -1 and the caller
 * decides (the tracer raises eager's error).
 */
#ifndef SMELT_SYM_H
#define SMELT_SYM_H

#include <stddef.h>
#include <stdint.h>

#define SYM_MAX_TERMS 16
#define SYM_MAX_DEG 6
#define SYM_MAX_VARS 32

typedef enum sym_op {
    SYM_CONST,      /* c */
    SYM_VAR,        /* symbol number c */
    SYM_ADD,        /* a + b: a a sum (or term), b a term (the constant last) */
    SYM_MUL,        /* a * b: a product of atoms times an atom (a monomial) */
    SYM_SCALE,      /* c * a: a a monomial, c not 0 or 1 */
    SYM_FLOORDIV,   /* a // b (floor) */
    SYM_MOD,        /* a % b (sign of b, as Python) */
    SYM_MIN,        /* min(a, b) */
    SYM_MAX         /* max(a, b) */
} sym_op;

typedef struct sym_node {
    uint8_t op;
    int32_t a, b;
    int64_t c;
} sym_node;

typedef struct sym_table {
    sym_node *e; int32_t n, cap;
    int32_t *hash; int32_t hcap;   /* open addressing, -1 empty; a power of two */
    int32_t nvars;                 /* symbols s0 .. s<nvars-1> in use */
    int64_t var_min;               /* every symbol is at least this (simplifies min/max); INT64_MIN: no
                                      bound known (sym_table_init) */
} sym_table;

void sym_table_init(sym_table *t);
void sym_table_clear(sym_table *t);
/* A copy of src into dst (initialised or cleared): 0 or -1 (memory). */
int sym_table_copy(sym_table *dst, const sym_table *src);

int32_t sym_const(sym_table *t, int64_t c);
int32_t sym_var(sym_table *t, int k);            /* 0 <= k < SYM_MAX_VARS */
int32_t sym_add(sym_table *t, int32_t a, int32_t b);
int32_t sym_sub(sym_table *t, int32_t a, int32_t b);
int32_t sym_mul(sym_table *t, int32_t a, int32_t b);
int32_t sym_floordiv(sym_table *t, int32_t a, int32_t b);
int32_t sym_mod(sym_table *t, int32_t a, int32_t b);
int32_t sym_min(sym_table *t, int32_t a, int32_t b);
int32_t sym_max(sym_table *t, int32_t a, int32_t b);

/* 1 with *c when expression e is the constant c, else 0. */
int sym_is_const(const sym_table *t, int32_t e, int64_t *c);
/* 1 with *lb a lower bound of e's value for every value of its symbols
 * (each >= var_min), 0 when none is known. */
int sym_lower_bound(const sym_table *t, int32_t e, int64_t *lb);
/* Bit k set when symbol k occurs in e. */
uint32_t sym_vars_of(const sym_table *t, int32_t e);

/* The value of e when symbol k is vals[k]: 0 with *out, or -1 on an
 * overflow or a division by zero. */
int sym_eval(const sym_table *t, int32_t e, const int64_t *vals, int64_t *out);

/* e as text ("s0*s1 + 2", "(s0 + 1)//2", "min(s0, 64)") into buf (always
 * NUL-terminated); the length it needed. */
size_t sym_print(const sym_table *t, int32_t e, char *buf, size_t len);

/* A relation between two expressions, checked per call (a guard on
 * symbols): a op b with op one of Python's comparisons (Py_LT .. Py_GE:
 * 0 <, 1 <=, 2 ==, 3 !=, 4 >, 5 >=). */
typedef struct sym_rel {
    uint8_t op;
    int32_t a, b;
} sym_rel;

/* 1 holds, 0 fails, -1 cannot be evaluated (overflow, division by zero:
 * the caller treats it as failing). */
int sym_rel_check(const sym_table *t, const sym_rel *r, const int64_t *vals);
/* "s0 >= 2" */
size_t sym_rel_print(const sym_table *t, const sym_rel *r, char *buf, size_t len);

#endif
