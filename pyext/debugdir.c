/* debugdir.c — SMELT_DEBUG_DIR (see debugdir.h). Folders are created with
 * mode 0700 (they hold the program's structure); an existing folder name
 * gets a numeric suffix so several compiles of one graph are all kept. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "debugdir.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int pyext_debug_dir_on(void)
{
    const char *d = getenv("SMELT_DEBUG_DIR");
    return d && *d;
}

/* Writes text to dir/file; 0 or -1. */
static int write_file(const char *dir, const char *file, const char *text)
{
    if (!text || !*text)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    size_t n = strlen(text);
    int rc = fwrite(text, 1, n, f) == n ? 0 : -1;
    if (fclose(f))
        rc = -1;
    return rc;
}

/* Creates a fresh folder for name/hash under root into out; 0 or -1. */
static int make_folder(const char *root, const char *name, uint64_t hash, char *out, size_t n)
{
    if (mkdir(root, 0700) && errno != EEXIST)
        return -1;
    char safe[128];
    size_t k = 0;
    for (const char *c = name; *c && k + 1 < sizeof safe; c++)   /* qualnames: <locals>, dots */
        safe[k++] = (*c == '/' || *c == '<' || *c == '>' || *c == ' ') ? '_' : *c;
    safe[k] = 0;
    for (int i = 0; i < 1000; i++) {
        if (i)
            snprintf(out, n, "%s/%s-%016llx-%d", root, safe, (unsigned long long)hash, i);
        else
            snprintf(out, n, "%s/%s-%016llx", root, safe, (unsigned long long)hash);
        if (!mkdir(out, 0700))
            return 0;
        if (errno != EEXIST)
            return -1;
    }
    return -1;
}

void pyext_debug_dump(const char *name, const smelt_graph *g, const char *guards, const smelt_plan *plan,
                      double trace_ms, double compile_ms)
{
    if (!pyext_debug_dir_on())
        return;
    char dir[4096];
    if (make_folder(getenv("SMELT_DEBUG_DIR"), name, smelt_graph_hash(g), dir, sizeof dir)) {
        char line[512];
        snprintf(line, sizeof line, "SMELT_DEBUG_DIR: cannot create a folder for %s: %s", name, strerror(errno));
        pyext_log_write(PYEXT_LOG_PERF, line);
        return;
    }
    char *graph = smelt_graph_print(g);
    char timings[512] = "";
    if (plan) {
        smelt_compile_times t;
        smelt_plan_compile_times(plan, &t);
        snprintf(timings, sizeof timings,
                 "trace_ms %.3f\nlower_ms %.3f\ncodegen_ms %.3f\nload_ms %.3f\ncompile_ms %.3f\n"
                 "kernels %d\nexterns %d\nfunctions_generated %d\narena_bytes %lld\nbackend %s\n",
                 trace_ms, t.lower_ms, t.codegen_ms, t.load_ms, compile_ms, smelt_plan_num_kernels(plan),
                 smelt_plan_num_externs(plan), t.generated, (long long)smelt_plan_arena_bytes(plan),
                 smelt_plan_backend(plan));
    }
    int rc = write_file(dir, "graph.txt", graph) | write_file(dir, "guards.txt", guards) |
             write_file(dir, "timings.txt", timings);
    const char *be = plan ? smelt_plan_backend(plan) : "";
    int spirv = !strcmp(be, "spirv"), cuda = !strcmp(be, "cuda");
    if (plan)   /* the SPIR-V back end's "ir" is spirv-dis's text; CUDA's: CUDA C, its "asm" PTX */
        rc |= write_file(dir, "kernels.txt", smelt_plan_code(plan, "kernels")) |
              write_file(dir, spirv ? "code.spvasm" : cuda ? "code.cu" : "code.ll", smelt_plan_code(plan, "ir")) |
              write_file(dir, cuda ? "code.ptx" : "code.s", smelt_plan_code(plan, "asm")) |
              write_file(dir, "launch.txt", smelt_plan_code(plan, "launch"));
    free(graph);
    if (rc) {
        char line[4200];
        snprintf(line, sizeof line, "SMELT_DEBUG_DIR: could not write every file in %s", dir);
        pyext_log_write(PYEXT_LOG_PERF, line);
    }
}
