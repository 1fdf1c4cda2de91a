/* smelt thread pool: splits a range of work items across worker threads.
 *
 * One process-wide pool of pthreads, created lazily on first use and sized
 * by kern_set_num_threads (default: what the caller sets at module init,
 * i.e. torch.get_num_threads()). The calling thread takes part in the work.
 */
#ifndef SMELT_KERN_THREADPOOL_H
#define SMELT_KERN_THREADPOOL_H

#include <stdint.h>

/* Work on items [begin, end). Called concurrently on disjoint ranges. */
typedef void (*kern_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Runs fn over [0, n) split into at most num_threads contiguous chunks of at
 * least `grain` items each (grain < 1 counts as 1); n <= grain runs inline on
 * the calling thread. Returns after every chunk is done. Re-entrant calls
 * from inside fn run inline (no deadlock). Safe to call from any thread;
 * concurrent callers are serialised. */
void kern_parallel_for(int64_t n, int64_t grain, kern_range_fn fn, void *ctx);

void kern_set_num_threads(int n);   /* n >= 1; takes effect on the next call */
int kern_get_num_threads(void);

/* Joins the workers (for module teardown / fork safety). Idempotent. */
void kern_threadpool_shutdown(void);

#endif
