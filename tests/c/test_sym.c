/* Symbolic size expressions (inductor/sym.c): canonical forms (equal
 * expressions intern to one id), exact simplifications, evaluation against
 * Python's integer semantics on random values, printing, relations. */
#define _POSIX_C_SOURCE 200809L
#include "inductor/sym.h"
#include "tests/c/testutil.h"

#include <string.h>

static int64_t py_floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t py_mod(int64_t a, int64_t b)
{
    int64_t m = a % b;
    return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
}

static void expect_text(sym_table *t, int32_t e, const char *want)
{
    char buf[128];
    sym_print(t, e, buf, sizeof buf);
    CHECK(strcmp(buf, want) == 0, "printed '%s', want '%s'", buf, want);
}

/* A random expression tree and its value computed directly. */
static int32_t random_expr(sym_table *t, const int64_t *v, int depth, int64_t *val, int *ok)
{
    int k = depth <= 0 ? (int)(rnd() % 2) : (int)(rnd() % 9);
    if (k == 0) {
        int64_t c = (int64_t)(rnd() % 13) - 4;
        *val = c;
        return sym_const(t, c);
    }
    if (k == 1) {
        int s = (int)(rnd() % 3);
        *val = v[s];
        return sym_var(t, s);
    }
    int64_t a, b;
    int32_t x = random_expr(t, v, depth - 1, &a, ok), y = random_expr(t, v, depth - 1, &b, ok);
    if (x < 0 || y < 0) {
        *ok = 0;
        return -1;
    }
    switch (k) {
    case 2: case 3: *val = a + b; return sym_add(t, x, y);
    case 4: *val = a - b; return sym_sub(t, x, y);
    case 5: *val = a * b; return sym_mul(t, x, y);
    case 6:
        if (b == 0) { *val = a; return x; }
        *val = py_floordiv(a, b);
        return sym_floordiv(t, x, y);
    case 7:
        if (b == 0) { *val = a; return x; }
        *val = py_mod(a, b);
        return sym_mod(t, x, y);
    default:
        if (rnd() % 2) { *val = a < b ? a : b; return sym_min(t, x, y); }
        *val = a > b ? a : b;
        return sym_max(t, x, y);
    }
}

int main(void)
{
    sym_table t;
    sym_table_init(&t);
    int32_t s0 = sym_var(&t, 0), s1 = sym_var(&t, 1), c2 = sym_const(&t, 2), c4 = sym_const(&t, 4);

    /* canonical forms */
    CHECK(sym_add(&t, s0, s1) == sym_add(&t, s1, s0), "a + b == b + a");
    CHECK(sym_mul(&t, s0, s1) == sym_mul(&t, s1, s0), "a * b == b * a");
    int32_t p = sym_mul(&t, sym_add(&t, s0, c2), s1);
    int32_t q = sym_add(&t, sym_mul(&t, s0, s1), sym_mul(&t, c2, s1));
    CHECK(p == q, "(s0 + 2)*s1 expands to s0*s1 + 2*s1");
    int64_t c;
    CHECK(sym_is_const(&t, sym_sub(&t, p, q), &c) && c == 0, "p - p == 0");
    CHECK(sym_floordiv(&t, sym_mul(&t, s0, s1), s1) == s0, "s0*s1 // s1 == s0");
    int32_t twice = sym_add(&t, sym_mul(&t, c2, s0), c4);
    CHECK(sym_floordiv(&t, twice, c2) == sym_add(&t, s0, c2), "(2*s0 + 4)//2 == s0 + 2");
    CHECK(sym_is_const(&t, sym_mod(&t, twice, c2), &c) && c == 0, "(2*s0 + 4) %% 2 == 0");
    int32_t numel = sym_mul(&t, sym_mul(&t, s0, s1), sym_const(&t, 768));
    int32_t others = sym_mul(&t, s0, sym_const(&t, 768));
    CHECK(sym_floordiv(&t, numel, others) == s1, "reshape's -1: s0*s1*768 // (s0*768) == s1");
    CHECK(sym_floordiv(&t, s0, c2) != sym_floordiv(&t, s1, c2), "different atoms");
    CHECK(sym_floordiv(&t, s0, c2) == sym_floordiv(&t, s0, c2), "atoms interned");
    CHECK(sym_min(&t, s0, sym_add(&t, s0, c2)) == s0, "min(s0, s0 + 2) == s0");
    CHECK(sym_max(&t, s0, sym_add(&t, s0, c2)) == sym_add(&t, s0, c2), "max(s0, s0 + 2)");
    CHECK(sym_min(&t, s0, s1) == sym_min(&t, s1, s0), "min ordered");
    CHECK(sym_floordiv(&t, s0, sym_const(&t, 0)) == -1, "division by a zero constant");
    CHECK(sym_vars_of(&t, q) == 3u && sym_vars_of(&t, c2) == 0u, "vars_of");

    /* bounds: with every symbol >= 2, min/max against small constants fold */
    int64_t lb;
    CHECK(sym_lower_bound(&t, q, &lb) == 0, "no bound on the symbols: none on s0*s1 + 2*s1");
    t.var_min = 2;
    CHECK(sym_lower_bound(&t, q, &lb) == 1 && lb == 8, "var_min 2: s0*s1 + 2*s1 >= 8");
    CHECK(sym_max(&t, s0, sym_const(&t, 0)) == s0, "max(s0, 0) == s0 when s0 >= 2");
    CHECK(sym_min(&t, sym_const(&t, 1), s1) == sym_const(&t, 1), "min(1, s1) == 1 when s1 >= 2");
    CHECK(sym_min(&t, s0, sym_const(&t, 512)) != s0, "min(s0, 512) stays");
    CHECK(sym_lower_bound(&t, sym_sub(&t, s0, c4), &lb) == 0 || lb <= -2, "s0 - 4 has no bound >= 0");
    t.var_min = INT64_MIN;

    /* printing */
    expect_text(&t, q, "s0*s1 + 2*s1");
    expect_text(&t, sym_sub(&t, s0, c4), "s0 - 4");
    expect_text(&t, sym_sub(&t, c4, s0), "-s0 + 4");
    expect_text(&t, sym_floordiv(&t, sym_add(&t, s0, sym_const(&t, 1)), c2), "(s0 + 1)//2");
    expect_text(&t, sym_min(&t, s0, sym_const(&t, 64)), "min(s0, 64)");

    /* evaluation */
    int64_t vals[3] = { 7, 3, -5 }, out;
    CHECK(sym_eval(&t, q, vals, &out) == 0 && out == 7 * 3 + 2 * 3, "eval");
    int32_t big = sym_mul(&t, sym_mul(&t, s0, s0), sym_mul(&t, s0, s0));
    int64_t huge[3] = { INT64_C(1) << 20, 1, 1 };
    CHECK(sym_eval(&t, big, huge, &out) == -1, "overflow is an error");
    int32_t dz = sym_floordiv(&t, s0, s1);
    int64_t zero[3] = { 5, 0, 0 };
    CHECK(sym_eval(&t, dz, zero, &out) == -1, "division by zero at run time is an error");
    sym_rel r = { .op = 5, .a = s0, .b = c2 };
    CHECK(sym_rel_check(&t, &r, vals) == 1, "7 >= 2");
    vals[0] = 1;
    CHECK(sym_rel_check(&t, &r, vals) == 0, "1 >= 2 fails");
    char buf[64];
    sym_rel_print(&t, &r, buf, sizeof buf);
    CHECK(strcmp(buf, "s0 >= 2") == 0, "relation printed '%s'", buf);

    /* random trees: whatever form they take, the value is Python's */
    int agree = 0, tried = 0;
    for (int it = 0; it < 4000; it++) {
        int64_t v[3] = { (int64_t)(rnd() % 40), (int64_t)(rnd() % 40) - 10, (int64_t)(rnd() % 9) + 1 };
        int64_t want, got;
        int ok = 1;
        int32_t e = random_expr(&t, v, 4, &want, &ok);
        if (!ok || e < 0)
            continue;   /* beyond the table's limits: the caller specialises */
        tried++;
        if (sym_eval(&t, e, v, &got) == 0 && got == want)
            agree++;
        else
            CHECK(0, "random expression %d: got %lld want %lld", it, (long long)got, (long long)want);
    }
    CHECK(tried > 3000 && agree == tried, "random expressions: %d of %d", agree, tried);

    /* a copy evaluates the same */
    sym_table u;
    sym_table_init(&u);
    CHECK(sym_table_copy(&u, &t) == 0 && sym_eval(&u, q, vals, &out) == 0 && out == 1 * 3 + 2 * 3, "copy");
    CHECK(sym_add(&u, s1, s0) == sym_add(&t, s0, s1), "copy keeps the intern table");
    sym_table_clear(&u);
    sym_table_clear(&t);
    (void)now_s;
    printf("sym: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail != 0;
}
