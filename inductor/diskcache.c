/* diskcache.c — compiled plans and their code on disk across processes (see
 * diskcache.h for the contract).
 *
 * The directory is opened once (O_DIRECTORY | O_NOFOLLOW) and checked, and
 * re-checked through that descriptor before every operation; every file
 * operation is relative to it (openat, renameat, unlinkat), so replacing the
 * path later cannot redirect the cache. Files this cache writes:
 *   <32 hex digits: two 64-bit hashes of the key>.entry   entries
 *   tmp-<pid>-<counter>-<ns>                              writes in progress
 * A temporary file older than DC_STALE_TMP_S is debris of a killed writer:
 * deleted when the directory is opened and at every scan (eviction after
 * each write, cache_info, clear); younger ones are never touched.
 *
 * Entry file layout (integers little-endian):
 *    0  magic "SMELTDC\n"
 *    8  u32 format version (DC_VERSION)
 *   12  u32 number of blobs
 *   16  u64 total file length
 *   24  u64 key length
 *   32  u64 checksum (dc_hash, seed 0) of bytes 40..end
 *   40  the key, then one u64 length per blob, then the blobs' bytes
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "diskcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DC_MAGIC "SMELTDC\n"
#define DC_VERSION 1u
#define DC_HEADER 40
#define DC_SUFFIX ".entry"
#define DC_NAME_LEN (32 + sizeof DC_SUFFIX - 1)
#define DC_TMP "tmp-"
#define DC_MAX_FILE ((uint64_t)1 << 31)   /* a larger entry file is corrupt */
#define DC_MAX_BLOBS 4096u
#define DC_RESCAN_WRITES 256             /* writes between scans at most (dc.est_bytes) */
#define DC_LOW_WATER_DIV 4               /* eviction frees a quarter of the bound (dc_evict) */
#define DC_STALE_TMP_S 600                /* older temporary files are debris (dc_stale_tmp) */

/* Process-wide state. fd, max_bytes, dir and the init_* texts are written
 * once, in dc_init. */
static struct {
    int fd;                       /* the directory, -1 if never opened */
    atomic_int enabled;
    atomic_int warned;
    atomic_int init_reported;
    char init_bad[160];           /* why the directory is unusable, or "" */
    char init_note[160];          /* a log line from dc_init, or "" */
    char init_warn[200];          /* a warning from dc_init, or "" */
    atomic_uint tmp_counter;
    _Atomic int64_t hits, misses, writes, evictions, corrupt;
    _Atomic(ind_dcache_log_fn) log;
    int64_t max_bytes;
    /* The directory's size as this process last scanned it plus what it
     * wrote since (-1: not scanned yet): a write scans the directory (and
     * evicts) only when that estimate passes max_bytes or after
     * DC_RESCAN_WRITES writes, so writing stays O(1) in the number of
     * entries (a scan stats every file). */
    _Atomic int64_t est_bytes;
    atomic_int since_scan;
    char dir[1024];
} dc = { .fd = -1, .est_bytes = -1 };
static pthread_once_t dc_once = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------ */
/* logging                                                            */

void ind_dcache_set_log(ind_dcache_log_fn fn) { atomic_store(&dc.log, fn); }

/* Formats a line for the log hook (warning: 1 for the "unsafe" warning). */
static void dc_log(int warning, const char *fmt, ...)
{
    ind_dcache_log_fn fn = atomic_load(&dc.log);
    if (!fn)
        return;
    char line[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fn(warning, line);
}

void ind_dcache_note(const char *line) { dc_log(0, "%s", line); }

/* Turns the cache off for the process, warning (once) why. */
static void dc_off(const char *what)
{
    atomic_store(&dc.enabled, 0);
    if (atomic_exchange(&dc.warned, 1) == 0)
        dc_log(1, "smelt disk cache off: %s %s; compiled code is kept in memory only "
                  "(make it a directory owned by you with mode 0700, or set SMELT_CACHE_DIR)",
               dc.dir, what);
}

/* ------------------------------------------------------------------ */
/* hashing and byte order                                             */

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull

static uint64_t rotl64(uint64_t x, int r) { return x << r | x >> (64 - r); }

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t get32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

static uint64_t mix64(uint64_t acc, uint64_t v) { return rotl64(acc + v * P2, 31) * P1; }

/* A 64-bit hash of p[0..n) (four multiply-rotate lanes over 32-byte
 * blocks, then the tail, then an avalanche). Not cryptographic: it detects
 * damage and names entries; the full key is compared on every hit. */
static uint64_t dc_hash(const uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t a[4] = { seed + P1 + P2, seed + P2, seed, seed - P1 };
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++)
            a[l] = mix64(a[l], get64(p + i + 8 * l));
    uint64_t h = rotl64(a[0], 1) + rotl64(a[1], 7) + rotl64(a[2], 12) + rotl64(a[3], 18) + n;
    for (; i + 8 <= n; i += 8)
        h = rotl64(h ^ mix64(0, get64(p + i)), 27) * P1 + P3;
    for (; i < n; i++)
        h = rotl64(h ^ p[i] * P3, 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ h >> 32;
}

/* The entry file name of a key: 128 bits of hash in hex, then DC_SUFFIX. */
static void dc_name(const uint8_t *key, size_t keylen, char name[DC_NAME_LEN + 1])
{
    snprintf(name, DC_NAME_LEN + 1, "%016llx%016llx" DC_SUFFIX,
             (unsigned long long)dc_hash(key, keylen, 0), (unsigned long long)dc_hash(key, keylen, 1));
}

static int is_entry_name(const char *s)
{
    if (strlen(s) != DC_NAME_LEN || strcmp(s + 32, DC_SUFFIX) != 0)
        return 0;
    for (int i = 0; i < 32; i++)
        if (!(s[i] >= '0' && s[i] <= '9') && !(s[i] >= 'a' && s[i] <= 'f'))
            return 0;
    return 1;
}

/* ------------------------------------------------------------------ */
/* the directory                                                      */

/* The cache directory's path into out; 0, 1 if the cache is disabled
 * (SMELT_CACHE_DIR empty, SMELT_DISABLE_CACHE set) or there is no home, 2
 * if the path is too long. */
static int dc_path(char *out, size_t cap)
{
    const char *off = getenv("SMELT_DISABLE_CACHE"), *env = getenv("SMELT_CACHE_DIR");
    if (off && *off && strcmp(off, "0") != 0)
        return 1;
    if (env)
        return !*env ? 1 : snprintf(out, cap, "%s", env) >= (int)cap ? 2 : 0;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/')   /* the XDG spec ignores relative paths */
        return snprintf(out, cap, "%s/smelt", xdg) >= (int)cap ? 2 : 0;
    struct passwd pw, *res = NULL;
    char buf[4096];
    if ((!home || !*home) && getpwuid_r(geteuid(), &pw, buf, sizeof buf, &res) == 0 && res)
        home = pw.pw_dir;
    if (!home || !*home)
        return 1;
    return snprintf(out, cap, "%s/.cache/smelt", home) >= (int)cap ? 2 : 0;
}

/* mkdir -p with mode 0700 for each directory it creates. */
static void dc_mkdirs(const char *path)
{
    char p[sizeof dc.dir];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0700);
            *s = '/';
        }
    mkdir(p, 0700);
}

/* NULL if the open directory is safe to use, else what is wrong. */
static const char *dc_unsafe(int fd, char *buf, size_t cap)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return snprintf(buf, cap, "cannot be examined (%s)", strerror(errno)), buf;
    if (!S_ISDIR(st.st_mode))
        return "is not a directory";
    if (st.st_uid != geteuid())
        return snprintf(buf, cap, "is owned by uid %u, not by the current user (uid %u)", (unsigned)st.st_uid,
                        (unsigned)geteuid()), buf;
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return snprintf(buf, cap, "is writable by group or others (mode %04o)", (unsigned)(st.st_mode & 07777)), buf;
    return NULL;
}

/* SMELT_CACHE_MAX_MB (a positive number, fractions allowed) in bytes;
 * 1024 MB if unset. Any other value (empty, not a number, zero, negative,
 * nan, inf, too large) also gives 1024 MB, and init_warn says so. */
static int64_t dc_max_bytes(void)
{
    const char *s = getenv("SMELT_CACHE_MAX_MB");
    char *end = NULL;
    if (!s)
        return (int64_t)1024 << 20;
    double mb = strtod(s, &end);
    if (end == s || *end || !(mb > 0) || !isfinite(mb) || mb > 1e12) {
        snprintf(dc.init_warn, sizeof dc.init_warn,
                 "SMELT_CACHE_MAX_MB=%.80s%s is not a positive number of megabytes; the disk cache uses the "
                 "default bound, 1024 MB", s[0] ? s : "''", strlen(s) > 80 ? "..." : "");
        mb = 1024.0;
    }
    return (int64_t)(mb * 1048576.0);
}

struct dc_file;
static int dc_scan(int dfd, struct dc_file **files, int *nfiles, int64_t *total, int *stale);

/* Once per process: finds, creates, opens and checks the directory, and
 * deletes stale temporary files (a process killed mid-write). Logs
 * nothing (the log hook may wait for a lock held by a thread waiting for
 * this): what to report goes to init_bad and init_note. */
static void dc_init(void)
{
    char why[160];
    dc.max_bytes = dc_max_bytes();
    int none = dc_path(dc.dir, sizeof dc.dir);
    if (none) {
        dc.dir[0] = 0;
        if (none == 2)
            snprintf(dc.init_note, sizeof dc.init_note, "disk cache off: the directory's path is too long");
        return;
    }
    dc_mkdirs(dc.dir);
    dc.fd = open(dc.dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dc.fd < 0) {
        struct stat st;
        int link = lstat(dc.dir, &st) == 0 && S_ISLNK(st.st_mode);
        snprintf(why, sizeof why, "cannot be opened (%s)", strerror(errno));
        snprintf(dc.init_bad, sizeof dc.init_bad, "%s", link ? "is a symbolic link" : why);
        return;
    }
    const char *bad = dc_unsafe(dc.fd, why, sizeof why);
    int stale = 0;
    if (bad)
        snprintf(dc.init_bad, sizeof dc.init_bad, "%s", bad);
    else if (dc_scan(dc.fd, NULL, NULL, NULL, &stale) == 0 && stale)
        snprintf(dc.init_note, sizeof dc.init_note, "disk cache: deleted %d stale temporary files", stale);
    atomic_store(&dc.enabled, !bad);
}

/* The directory's descriptor, or -1 if the cache is off (checked again
 * now: permissions changed since are noticed). */
static int dc_dir(void)
{
    char why[160];
    pthread_once(&dc_once, dc_init);
    if (!atomic_exchange(&dc.init_reported, 1)) {
        if (dc.init_note[0])
            dc_log(0, "%s", dc.init_note);
        if (dc.init_warn[0])
            dc_log(1, "%s", dc.init_warn);
        if (dc.init_bad[0])
            dc_off(dc.init_bad);
    }
    if (!atomic_load(&dc.enabled))
        return -1;
    const char *bad = dc_unsafe(dc.fd, why, sizeof why);
    if (bad) {
        dc_off(bad);
        return -1;
    }
    return dc.fd;
}

/* ------------------------------------------------------------------ */
/* entries                                                            */

/* The entry file for blobs under key (DC_HEADER layout); malloc'd, its
 * length in *len; NULL if out of memory or too large. */
static uint8_t *dc_encode(const uint8_t *key, size_t keylen, const ind_blob *blobs, int nblobs, size_t *len)
{
    size_t n = DC_HEADER + keylen + 8 * (size_t)nblobs;
    for (int b = 0; b < nblobs; b++)
        n += blobs[b].len;
    uint8_t *buf = n <= DC_MAX_FILE && nblobs >= 0 && (unsigned)nblobs <= DC_MAX_BLOBS ? malloc(n) : NULL;
    if (!buf)
        return NULL;
    uint8_t *o = buf + DC_HEADER;
    memcpy(o, key, keylen);
    o += keylen;
    for (int b = 0; b < nblobs; b++, o += 8)
        put64(o, blobs[b].len);
    for (int b = 0; b < nblobs; o += blobs[b].len, b++)
        memcpy(o, blobs[b].data, blobs[b].len);
    memcpy(buf, DC_MAGIC, 8);
    put32(buf + 8, DC_VERSION);
    put32(buf + 12, (uint32_t)nblobs);
    put64(buf + 16, n);
    put64(buf + 24, keylen);
    put64(buf + 32, dc_hash(buf + DC_HEADER, n - DC_HEADER, 0));
    *len = n;
    return buf;
}

/* Checks the header, checksum and key of an entry file's bytes buf[0..n).
 * NULL if they are whole and match key, else what is wrong. */
static const char *dc_check(const uint8_t *buf, size_t n, const uint8_t *key, size_t keylen)
{
    if (n < DC_HEADER || memcmp(buf, DC_MAGIC, 8) != 0)
        return n < DC_HEADER ? "truncated header" : "bad magic";
    if (get32(buf + 8) != DC_VERSION)
        return "other format version";
    if (get64(buf + 16) != n)
        return get64(buf + 16) > n ? "truncated" : "trailing bytes";
    if (get64(buf + 32) != dc_hash(buf + DC_HEADER, n - DC_HEADER, 0))
        return "checksum mismatch";
    if (get64(buf + 24) != keylen || memcmp(buf + DC_HEADER, key, keylen) != 0)
        return "key mismatch";
    return NULL;
}

/* The blobs of a checked entry (buf, n): 0 and malloc'd blobs, or what is
 * wrong with the blob table. */
static const char *dc_decode(const uint8_t *buf, size_t n, size_t keylen, ind_blob **blobs, int *nblobs)
{
    uint32_t nb = get32(buf + 12);
    size_t tab = DC_HEADER + keylen, off = tab + 8 * (size_t)nb;
    if (nb > DC_MAX_BLOBS || off > n)
        return "bad blob table";
    for (uint32_t b = 0; b < nb; b++) {
        uint64_t l = get64(buf + tab + 8 * b);
        if (l > n - off)
            return "bad blob table";
        off += l;
    }
    if (off != n)
        return "bad blob table";
    ind_blob *out = calloc(nb + 1, sizeof *out);
    if (!out)
        return "out of memory";
    off = tab + 8 * (size_t)nb;
    for (uint32_t b = 0; b < nb; b++) {
        out[b].len = get64(buf + tab + 8 * b);
        if (!(out[b].data = malloc(out[b].len + 1))) {
            ind_dcache_free(out, (int)b);
            return "out of memory";
        }
        memcpy(out[b].data, buf + off, out[b].len);
        off += out[b].len;
    }
    *blobs = out;
    *nblobs = (int)nb;
    return NULL;
}

/* Reads an open entry file whole into *buf (malloc'd, length *n). NULL,
 * or what is wrong (then *buf is NULL). */
static const char *dc_read(int fd, const struct stat *st, uint8_t **buf, size_t *n)
{
    *buf = NULL;
    if (!S_ISREG(st->st_mode) || st->st_uid != geteuid())
        return !S_ISREG(st->st_mode) ? "not a regular file" : "not owned by the current user";
    if ((uint64_t)st->st_size > DC_MAX_FILE)
        return "too large";
    size_t len = (size_t)st->st_size, got = 0;
    uint8_t *b = malloc(len + 1);
    if (!b)
        return "out of memory";
    while (got < len) {
        ssize_t r = pread(fd, b + got, len - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(b);
            return r < 0 ? "read error" : "truncated";
        }
        got += (size_t)r;
    }
    *buf = b;
    *n = len;
    return NULL;
}

/* Deletes the bad entry `name` (if it is still the file st describes: a
 * writer may have replaced it with a good one meanwhile) and counts it. */
static void dc_discard(int dfd, const char *name, const struct stat *st, const char *why)
{
    struct stat now;
    if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && (!st || (now.st_ino == st->st_ino &&
                                                                       now.st_dev == st->st_dev)))
        unlinkat(dfd, name, 0);
    atomic_fetch_add(&dc.corrupt, 1);
    dc_log(0, "disk cache: discarded entry %.32s: %s", name, why);
}

/* Loads the open entry file fd (called name) for key: NULL and the blobs
 * (*n: the file's length), or what is wrong with it (then it is discarded
 * unless it could not be examined). */
static const char *dc_load(int dfd, int fd, const char *name, const uint8_t *key, size_t keylen,
                           ind_blob **blobs, int *nblobs, size_t *n)
{
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0)
        return "cannot be examined";
    const char *why = dc_read(fd, &st, &buf, n);
    if (!why)
        why = dc_check(buf, *n, key, keylen);
    if (!why)
        why = dc_decode(buf, *n, keylen, blobs, nblobs);
    free(buf);
    if (why)
        dc_discard(dfd, name, &st, why);
    return why;
}

int ind_dcache_get(const uint8_t *key, size_t keylen, ind_blob **blobs, int *nblobs)
{
    char name[DC_NAME_LEN + 1];
    const char *why = "absent";
    size_t n = 0;
    *blobs = NULL;
    *nblobs = 0;
    int dfd = dc_dir();
    if (dfd < 0)
        return 1;
    dc_name(key, keylen, name);
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ELOOP)
        dc_discard(dfd, name, NULL, "a symbolic link");
    else if (fd < 0 && errno != ENOENT)
        dc_log(0, "disk cache: cannot open entry %.32s: %s", name, strerror(errno));
    if (fd >= 0) {
        why = dc_load(dfd, fd, name, key, keylen, blobs, nblobs, &n);
        if (!why)   /* a hit: the entry is now the most recently used */
            futimens(fd, (struct timespec[2]){ { 0, UTIME_NOW }, { 0, UTIME_OMIT } });
        close(fd);
    }
    atomic_fetch_add(why ? &dc.misses : &dc.hits, 1);
    if (why)
        dc_log(0, "disk cache miss %.32s", name);
    else
        dc_log(0, "disk cache hit %.32s (%d blobs, %zu bytes)", name, *nblobs, n);
    return why != NULL;
}

void ind_dcache_free(ind_blob *blobs, int nblobs)
{
    for (int i = 0; blobs && i < nblobs; i++)
        free(blobs[i].data);
    free(blobs);
}

/* Creates a new temporary file in the directory: its descriptor (name in
 * tmp), or -1. */
static int dc_tempfile(int dfd, char tmp[64])
{
    for (int attempt = 0; attempt < 8; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(tmp, 64, DC_TMP "%ld-%u-%ld", (long)getpid(), atomic_fetch_add(&dc.tmp_counter, 1),
                 (long)ts.tv_nsec);
        int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

/* Writes buf[0..n) to fd; 0, or -1 (errno set). */
static int dc_write_all(int fd, const uint8_t *buf, size_t n)
{
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w == 0 ? (errno = EIO, -1) : -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static void dc_evict(int dfd);

void ind_dcache_put(const uint8_t *key, size_t keylen, const ind_blob *blobs, int nblobs)
{
    char name[DC_NAME_LEN + 1], tmp[64];
    size_t n = 0;
    int dfd = dc_dir();
    uint8_t *buf = dfd < 0 ? NULL : dc_encode(key, keylen, blobs, nblobs, &n);
    if (!buf)
        return;
    dc_name(key, keylen, name);
    int fd = dc_tempfile(dfd, tmp), err = 0;
    if (fd < 0 || dc_write_all(fd, buf, n) != 0)
        err = errno;
    if (fd >= 0 && close(fd) != 0 && !err)
        err = errno;
    free(buf);
    if (!err && renameat(dfd, tmp, dfd, name) != 0)
        err = errno;
    if (err) {
        if (fd >= 0)
            unlinkat(dfd, tmp, 0);
        dc_log(0, "disk cache: cannot write entry %.32s: %s", name, strerror(err));
        return;
    }
    atomic_fetch_add(&dc.writes, 1);
    dc_log(0, "disk cache write %.32s (%d blobs, %zu bytes)", name, nblobs, n);
    int64_t est = atomic_load(&dc.est_bytes);
    if (est < 0 || est + (int64_t)n > dc.max_bytes || atomic_fetch_add(&dc.since_scan, 1) + 1 >= DC_RESCAN_WRITES)
        dc_evict(dfd);
    else
        atomic_fetch_add(&dc.est_bytes, (int64_t)n);
}

/* ------------------------------------------------------------------ */
/* the directory's contents: scanning, eviction, clearing             */

typedef struct dc_file {
    struct timespec atime;
    int64_t size;
    char name[DC_NAME_LEN + 1];
} dc_file;

/* Whether the temporary file `name` (st) is debris: a writer writes its
 * temporary file in one go and renames it at once (milliseconds; seconds
 * for the largest entries), so one untouched for DC_STALE_TMP_S was left
 * by a process that died mid-write. Younger ones may be another process's
 * write in progress and are never deleted. */
static int dc_stale_tmp(const char *name, const struct stat *st)
{
    return strncmp(name, DC_TMP, strlen(DC_TMP)) == 0 && time(NULL) - st->st_mtime > DC_STALE_TMP_S;
}

/* Appends the entry `name` (st) to the list *f (*n of them, room for
 * *cap); -1 if out of memory. */
static int dc_add(const char *name, const struct stat *st, dc_file **f, int *n, int *cap)
{
    if (*n == *cap) {
        dc_file *g = realloc(*f, (size_t)(*cap ? 2 * *cap : 64) * sizeof **f);
        if (!g)
            return -1;
        *f = g;
        *cap = *cap ? 2 * *cap : 64;
    }
    (*f)[*n] = (dc_file){ .atime = st->st_atim, .size = (int64_t)st->st_size };
    memcpy((*f)[*n].name, name, DC_NAME_LEN + 1);
    (*n)++;
    return 0;
}

/* Reads the directory: deletes stale temporary files (dc_stale_tmp; their
 * count in *stale) and, unless files is NULL, lists the entries (*files
 * malloc'd, *nfiles of them, *total bytes). -1 if the directory cannot be
 * read. */
static int dc_scan(int dfd, dc_file **files, int *nfiles, int64_t *total, int *stale)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);   /* own offset for readdir */
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    struct stat st;
    *stale = 0;
    if (files) {
        *files = NULL;
        *nfiles = 0;
        *total = 0;
    }
    if (!d) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        int tmp = strncmp(e->d_name, DC_TMP, strlen(DC_TMP)) == 0;
        if ((!tmp && (!files || !is_entry_name(e->d_name))) ||
            fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (tmp)
            *stale += dc_stale_tmp(e->d_name, &st) && unlinkat(dfd, e->d_name, 0) == 0;
        else if (dc_add(e->d_name, &st, files, &n, &cap) != 0)
            break;
    }
    closedir(d);
    for (int i = 0; files && i < n; i++)
        *total += (*files)[i].size;
    if (files)
        *nfiles = n;
    return 0;
}

/* Logs the stale temporary files a scan deleted. */
static void dc_note_stale(int stale)
{
    if (stale)
        dc_log(0, "disk cache: deleted %d stale temporary files", stale);
}

/* Oldest access first. */
static int by_atime(const void *a, const void *b)
{
    const dc_file *x = a, *y = b;
    if (x->atime.tv_sec != y->atime.tv_sec)
        return x->atime.tv_sec < y->atime.tv_sec ? -1 : 1;
    if (x->atime.tv_nsec != y->atime.tv_nsec)
        return x->atime.tv_nsec < y->atime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Deletes least-recently-used entries until the directory holds at most
 * three quarters of max_bytes: a directory left just under the bound would
 * be scanned again (every entry stat'ed and sorted) at the next write. */
static void dc_evict(int dfd)
{
    dc_file *f = NULL;
    int n = 0, gone = 0, stale = 0;
    int64_t total = 0, freed = 0;
    int bad = dc_scan(dfd, &f, &n, &total, &stale);
    dc_note_stale(stale);
    atomic_store(&dc.since_scan, 0);
    atomic_store(&dc.est_bytes, bad ? -1 : total);
    if (bad || total <= dc.max_bytes) {
        free(f);
        return;
    }
    qsort(f, (size_t)n, sizeof *f, by_atime);
    int64_t keep = dc.max_bytes - dc.max_bytes / DC_LOW_WATER_DIV;
    for (int i = 0; i < n && total - freed > keep; i++) {
        int ok = unlinkat(dfd, f[i].name, 0) == 0;
        if (ok || errno == ENOENT)   /* (or another process deleted it first) */
            freed += f[i].size;
        gone += ok;
    }
    free(f);
    atomic_store(&dc.est_bytes, total - freed);
    atomic_fetch_add(&dc.evictions, gone);
    dc_log(0, "disk cache: evicted %d entries (%lld bytes) to stay under %lld bytes", gone, (long long)freed,
           (long long)keep);
}

void ind_dcache_clear(void)
{
    dc_file *f = NULL;
    int n = 0, stale = 0, dfd = dc_dir();
    int64_t total = 0;
    if (dfd < 0 || dc_scan(dfd, &f, &n, &total, &stale) != 0)
        return;
    dc_note_stale(stale);
    for (int i = 0; i < n; i++)
        unlinkat(dfd, f[i].name, 0);
    free(f);
    atomic_store(&dc.est_bytes, -1);
    dc_log(0, "disk cache: cleared %d entries (%lld bytes)", n, (long long)total);
}

void ind_dcache_info(ind_dcache_stats *out)
{
    dc_file *f = NULL;
    int n = 0, stale = 0, dfd = dc_dir();
    int64_t total = 0;
    memset(out, 0, sizeof *out);
    if (dfd >= 0 && dc_scan(dfd, &f, &n, &total, &stale) == 0) {
        dc_note_stale(stale);
        atomic_store(&dc.est_bytes, total);
        out->entries = n;
        out->bytes = total;
    }
    free(f);
    out->hits = atomic_load(&dc.hits);
    out->misses = atomic_load(&dc.misses);
    out->writes = atomic_load(&dc.writes);
    out->evictions = atomic_load(&dc.evictions);
    out->corrupt = atomic_load(&dc.corrupt);
    out->enabled = dfd >= 0;
    snprintf(out->dir, sizeof out->dir, "%s", dc.dir);
}
