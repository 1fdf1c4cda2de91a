/* smelt's cache of oneDNN primitives (see primcache.h for the contract). */
#include "primcache.h"

#include <string.h>

/* FNV-1a over the n key bytes at p. */
static uint64_t key_hash(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The ways of the set hash h maps to. */
static kern_primcache_entry **set_of(const kern_primcache *c, uint64_t h)
{
    return c->slots + (size_t)(h % (uint64_t)c->sets) * (size_t)c->ways;
}

static const void *entry_key(const kern_primcache *c, const kern_primcache_entry *e)
{
    return (const char *)e + c->key_off;
}

/* Drops one reference to e; caller holds c->mu. */
static void release_locked(kern_primcache *c, kern_primcache_entry *e)
{
    if (--e->refs == 0)
        c->destroy(e);
}

/* Puts e in its set, evicting the least recently used entry if the set is
 * full. Caller holds c->mu. */
static void insert_locked(kern_primcache *c, kern_primcache_entry *e)
{
    kern_primcache_entry **set = set_of(c, e->hash);
    int victim = 0;
    for (int w = 0; w < c->ways; w++) {
        if (!set[w]) {
            victim = w;
            break;
        }
        if (set[w]->last_use < set[victim]->last_use)
            victim = w;
    }
    if (set[victim])
        release_locked(c, set[victim]);
    set[victim] = e;
}

void *kern_primcache_get(kern_primcache *c, const void *key)
{
    uint64_t h = key_hash(key, c->key_size);
    kern_primcache_entry **set = set_of(c, h), *e = NULL;
    pthread_mutex_lock(&c->mu);
    for (int w = 0; w < c->ways && !e; w++)
        if (set[w] && set[w]->hash == h && memcmp(entry_key(c, set[w]), key, c->key_size) == 0)
            e = set[w];
    if (!e && (e = c->create(key))) {
        e->hash = h, e->refs = 1;
        insert_locked(c, e);
    }
    if (e) {
        e->refs++;
        e->last_use = ++c->tick;
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

void kern_primcache_release(kern_primcache *c, void *entry)
{
    pthread_mutex_lock(&c->mu);
    release_locked(c, entry);
    pthread_mutex_unlock(&c->mu);
}

void kern_primcache_clear(kern_primcache *c)
{
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->sets * c->ways; i++)
        if (c->slots[i]) {
            release_locked(c, c->slots[i]);
            c->slots[i] = NULL;
        }
    pthread_mutex_unlock(&c->mu);
}
