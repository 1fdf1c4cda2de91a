/* smelt's cache of oneDNN primitives (used by matmul.c and conv.c).
 *
 * A set-associative LRU cache of reference-counted entries looked up by
 * key bytes. Each cache has one mutex; a caller holds a reference to an
 * entry while it runs the entry's primitives, so an entry evicted (or
 * cleared) meanwhile is destroyed only when the last reference goes.
 *
 * An entry is the owner's struct with a kern_primcache_entry as its first
 * member and its key (compared bytewise, so without padding bytes, unused
 * parts zeroed) as another member:
 *
 *     typedef struct my_entry { kern_primcache_entry ce; my_key key; ... } my_entry;
 *     static void *my_create(const void *key);   // calloc, copy key, build
 *     static void my_destroy(void *entry);       // destroy primitives, free
 *     static kern_primcache_entry *g_slots[SETS * WAYS];
 *     static kern_primcache g_cache =
 *         KERN_PRIMCACHE_INIT(g_slots, SETS, WAYS, my_entry, key, my_create, my_destroy);
 */
#ifndef SMELT_KERN_PRIMCACHE_H
#define SMELT_KERN_PRIMCACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* The cache's part of an entry; the cache owns it once create returns. */
typedef struct kern_primcache_entry {
    uint64_t hash, last_use;
    int refs;                /* the cache's reference plus one per caller */
} kern_primcache_entry;

/* create: a new entry for key (its header zeroed, its key member a copy of
 * key), or NULL if out of memory; an entry whose primitives oneDNN could
 * not make is still an entry (the owner records the fallback in it).
 * destroy: frees an entry made by create. Both run under the cache's
 * mutex. slots: sets * ways pointers, NULL where empty. */
typedef struct kern_primcache {
    int sets, ways;
    size_t key_off, key_size;
    void *(*create)(const void *key);
    void (*destroy)(void *entry);
    kern_primcache_entry **slots;
    pthread_mutex_t mu;      /* guards slots, every entry's header, tick */
    uint64_t tick;
} kern_primcache;

/* A static initialiser for a cache of `type` entries keyed by member key. */
#define KERN_PRIMCACHE_INIT(slots, sets, ways, type, key, create, destroy)               \
    {(sets), (ways), offsetof(type, key), sizeof(((type *)0)->key), (create), (destroy), \
     (slots), PTHREAD_MUTEX_INITIALIZER, 0}

/* The entry for key (c->key_size bytes) with a reference held for the
 * caller, made by c->create on a miss (evicting the set's least recently
 * used entry when the set is full); NULL if out of memory. */
void *kern_primcache_get(kern_primcache *c, const void *key);

/* Drops the caller's reference to entry (from kern_primcache_get). */
void kern_primcache_release(kern_primcache *c, void *entry);

/* Drops the cache's reference to every entry; entries still in use live
 * until their callers release them. */
void kern_primcache_clear(kern_primcache *c);

#endif
