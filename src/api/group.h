/* Group semantics: work that must not block on other ranks before the outermost
 * ncclGroupEnd of the calling thread.
 *
 * Promises: the group depth is per thread; nesting works and only the outermost end runs
 * the queue. Jobs run in the order they were queued within each lane; a lane is one
 * communicator (or one pending init). When a group holds several lanes, each runs in its own
 * thread, so one thread may drive several communicators whose work waits on each other (as
 * nccl-tests does). Outside a group, enqueue runs the job at once in the calling thread. */
#ifndef SHUNT_API_GROUP_H
#define SHUNT_API_GROUP_H

#include <nccl.h>

typedef ncclResult_t (*shunt_job_fn)(void* arg);

/* Queues fn(arg) on `lane` (NULL: a lane of its own) or runs it now outside a group.
 * free_arg (may be NULL) releases arg after the job ran or was dropped. */
ncclResult_t shunt_group_enqueue(const void* lane, shunt_job_fn fn, void* arg, void (*free_arg)(void*));

/* Depth of the calling thread's group nesting. */
int shunt_group_depth(void);

void shunt_group_begin(void);
/* Leaves one level; at the outermost level runs the queue and returns its first error, or
 * ncclInProgress when a job (returning ncclInProgress) left work running in the background. */
ncclResult_t shunt_group_finish(void);

#endif
