/* diskcache.h — compiled code kept on disk across processes (diskcache.c).
 *
 * An entry is a list of blobs stored under a key (bytes chosen by the
 * caller: inductor/plancache.c stores a compiled plan — its record, kernel
 * names and object files — under the graph's canonical serialisation and
 * everything that changes the code: smelt's code version and build, LLVM's
 * version, the target CPU and its features, vector width, optimisation level).
 *
 * Location: $SMELT_CACHE_DIR, else $XDG_CACHE_HOME/smelt, else
 * ~/.cache/smelt; created with mode 0700. Before reading or writing, the
 * directory must be owned by the current user and not writable by group or
 * others, and must not be a symlink; otherwise a warning is reported once
 * (through the log hook) and the cache is off for the process. Files are
 * opened without following symlinks. SMELT_CACHE_DIR set to an empty
 * string, or SMELT_DISABLE_CACHE=1, turns the cache off.
 *
 * Entry file: header (magic, format version, total length, checksum of the
 * payload, the full key for comparison), then the blobs. Writes go to a
 * temporary file in the same directory, then rename: concurrent writers of
 * one entry leave one whole entry. Temporary files older than 10 minutes
 * (left by a process killed mid-write) are deleted when the directory is
 * opened and whenever it is scanned; younger ones never. A truncated,
 * corrupt or mismatched entry is treated as a miss and deleted. Size
 * bound: SMELT_CACHE_MAX_MB (default 1024; a value that is not a positive
 * number warns once, through the log hook, and the default is used);
 * after a write, least-recently-used entries (by access time, which a hit
 * refreshes) are deleted until the total fits.
 *
 * All functions are thread-safe and never raise: failures are misses (and,
 * for the unexpected ones, a log line).
 */
#ifndef SMELT_DISKCACHE_H
#define SMELT_DISKCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ind_blob {
    uint8_t *data;
    size_t len;
} ind_blob;

/* 0 and *blobs (malloc'd; free with ind_dcache_free) on a hit; 1 on a miss
 * or when the cache is off. */
int ind_dcache_get(const uint8_t *key, size_t keylen, ind_blob **blobs, int *nblobs);
void ind_dcache_free(ind_blob *blobs, int nblobs);

/* Stores blobs under key (replacing an entry with that key). */
void ind_dcache_put(const uint8_t *key, size_t keylen, const ind_blob *blobs, int nblobs);

/* Statistics since the process started, and the directory's contents. */
typedef struct ind_dcache_stats {
    int64_t hits, misses, writes, evictions, corrupt;
    int64_t entries, bytes;   /* on disk now */
    int enabled;              /* 0 when off (unsafe directory, disabled) */
    char dir[1024];
} ind_dcache_stats;
void ind_dcache_info(ind_dcache_stats *out);

/* Deletes every entry and stale temporary file (never a write in
 * progress), resets nothing else. */
void ind_dcache_clear(void);

/* Where log lines go (category "cache": hits and misses with their key
 * hash; "warning": the directory is unsafe, SMELT_CACHE_MAX_MB is not a
 * positive number). NULL: nowhere. Set by the Python extension at import. */
typedef void (*ind_dcache_log_fn)(int warning, const char *line);
void ind_dcache_set_log(ind_dcache_log_fn fn);
/* Hands a "cache" line (not a warning) to the log hook. */
void ind_dcache_note(const char *line);

#endif
