/* smelt logging channels (SMELT_LOGS), shared by every pyext component.
 *
 * SMELT_LOGS is a comma-separated list of channel names ("all" = every
 * channel), parsed once when smelt._C is initialised. Messages go to the
 * Python logger "smelt.<channel>" at INFO level; python/smelt configures
 * the handler. The mask is process-wide.
 */
#ifndef SMELT_PYEXT_LOG_H
#define SMELT_PYEXT_LOG_H

typedef enum pyext_log_channel {
    PYEXT_LOG_GRAPH,          /* captured graphs, as printed by smelt_graph_print */
    PYEXT_LOG_GUARDS,         /* guard trees built for a frame */
    PYEXT_LOG_RECOMPILES,     /* why a cached entry did not match */
    PYEXT_LOG_GRAPH_BREAKS,   /* frames run eagerly, with file:line and reason */
    PYEXT_LOG_OUTPUT_CODE,    /* fused kernels and LLVM IR */
    PYEXT_LOG_ASM,            /* generated assembly */
    PYEXT_LOG_CACHE,          /* disk cache hits, misses, writes */
    PYEXT_LOG_PERF,           /* compile-time breakdown */
    PYEXT_LOG_AOT,            /* compiled backward: forward/backward split, saved values, both graphs */
    PYEXT_LOG_DYNAMIC,        /* dynamic shapes: sizes made symbolic and why, guards on symbols, plans per size */
    PYEXT_LOG_BACKEND,        /* the back end each plan compiles for, its device, fallbacks to the CPU */
    PYEXT_LOG_DYNAMO,         /* torch.compile(backend="smelt"): each FX graph Dynamo hands over, its fallbacks */
    PYEXT_LOG_NCHANNELS
} pyext_log_channel;

/* Parses SMELT_LOGS into the mask. Unknown names raise a Python
 * UserWarning; returns -1 (exception set) only if the warning was turned
 * into an error. GIL held. */
int pyext_log_init(void);

/* Drops the cached loggers (module teardown). GIL held. */
void pyext_log_fini(void);

/* 1 if the channel is enabled. Needs no GIL. */
int pyext_log_on(pyext_log_channel ch);

/* "graph", "output_code", ... */
const char *pyext_log_channel_name(pyext_log_channel ch);

/* Logs text on the channel's logger if the channel is on. GIL held; never
 * raises (a failing logger is reported as unraisable) and preserves any
 * exception already set. */
void pyext_log_write(pyext_log_channel ch, const char *text);

/* A compiled function's device code (a back end other than the CPU's): its
 * source on output_code (CUDA C, SPIR-V disassembly), its assembly on asm
 * (PTX). The plan keeps them when either channel is on. GIL held. */
struct smelt_plan;
void pyext_log_device_code(const struct smelt_plan *plan);

#endif
