/* backend.c — the table of back ends and the choice of one (backend.h). */
#include "backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ind_backend *const table[IND_NBACKENDS] = { &ind_backend_cpu, &ind_backend_spirv, &ind_backend_cuda };

static _Atomic(ind_backend_log_fn) log_fn;

void ind_backend_set_log(ind_backend_log_fn fn) { log_fn = fn; }

void ind_backend_note(int warning, const char *line)
{
    ind_backend_log_fn fn = log_fn;
    if (fn)
        fn(warning, line);
}

const ind_backend *ind_backend_named(const char *name)
{
    for (int i = 0; i < IND_NBACKENDS; i++)
        if (!strcmp(table[i]->name, name))
            return table[i];
    return NULL;
}

const ind_backend *ind_backend_of(int id)
{
    return id >= 0 && id < IND_NBACKENDS ? table[id] : NULL;
}

/* Names whose fallback was logged (once each); a short list. */
static pthread_mutex_t logged_mu = PTHREAD_MUTEX_INITIALIZER;
static char logged[8][32];

static void log_once(const char *name, const char *line)
{
    pthread_mutex_lock(&logged_mu);
    int seen = 0, free_at = -1;
    for (int i = 0; i < 8; i++) {
        seen |= !strncmp(logged[i], name, sizeof logged[i] - 1) && logged[i][0];
        if (!logged[i][0] && free_at < 0)
            free_at = i;
    }
    if (!seen && free_at >= 0)
        snprintf(logged[free_at], sizeof logged[free_at], "%s", name);
    pthread_mutex_unlock(&logged_mu);
    if (!seen)
        ind_backend_note(1, line);
}

const ind_backend *ind_backend_select(const smelt_compile_opts *o, char *why, size_t n)
{
    const char *name = o && o->backend ? o->backend : getenv("SMELT_BACKEND");
    char reason[384] = "";
    if (why && n)
        why[0] = 0;
    if (!name || !*name || !strcmp(name, "cpu"))
        return &ind_backend_cpu;
    const ind_backend *be = ind_backend_named(name);
    if (be && be->device_memory && !(o && o->backend))
        snprintf(reason, sizeof reason, "its graphs are the ones whose tensors are on its device, not chosen by "
                 "SMELT_BACKEND");
    else if (be && be->available(reason, sizeof reason))
        return be;
    char line[512];
    if (!be)
        snprintf(reason, sizeof reason, "no back end is named %.40s (known: cpu, spirv, cuda)", name);
    snprintf(line, sizeof line, "backend %.40s not available (%s): compiling for the CPU", name, reason);
    log_once(name, line);
    if (why && n)
        snprintf(why, n, "%s", reason);
    return &ind_backend_cpu;
}
