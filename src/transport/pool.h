/* Worker threads kept between runs: a run of n jobs that must all run at once (threadblocks
 * wait on each other) starts none of its own.
 *
 * Promises: shunt_pool_run runs fn(arg, i) for every i < n, each on a thread of its own, all
 * concurrently, and returns once every one has returned; the pool grows to the largest n asked
 * for and its threads sleep (blocked, not spinning) between runs. One run at a time per pool
 * (the caller serialises, as one communicator's calls are). shunt_pool_free stops and joins the
 * threads; it must not overlap a run. A thread that cannot be started makes the run return -1
 * before any job ran. */
#ifndef SHUNT_TRANSPORT_POOL_H
#define SHUNT_TRANSPORT_POOL_H

#include <stdint.h>

struct shunt_pool;

struct shunt_pool* shunt_pool_create(void);
int shunt_pool_run(struct shunt_pool* p, uint32_t n, void (*fn)(void* arg, uint32_t i), void* arg);
void shunt_pool_free(struct shunt_pool* p);

#endif
