/* Fibers: the threadblocks of one host run, all on the calling thread. A block that waits
 * hands the thread to the next one instead of spinning against it for a core, so a rank is
 * one thread however many blocks its plan has, and nothing is started per run.
 *
 * Promises: shunt_fibers_start prepares n fibers, fiber i to run fn(arg, i) on a stack of its
 * own (kept by the set between runs; the set grows to the largest n asked for). Each
 * shunt_fibers_resume(set, i) runs fiber i until it calls shunt_fibers_yield or fn returns,
 * and says which. A fiber that returned is never resumed; a run ends once every fiber has
 * returned. One run at a time per set, driven by one thread; a fiber runs only on the thread
 * that resumes it. Works under AddressSanitizer and ThreadSanitizer (their fiber hooks). A
 * stack overflow hits a guard page (a crash, never silent corruption). */
#ifndef SHUNT_TRANSPORT_FIBER_H
#define SHUNT_TRANSPORT_FIBER_H

#include <stdbool.h>
#include <stdint.h>

struct shunt_fibers;

struct shunt_fibers* shunt_fibers_create(void);
void shunt_fibers_free(struct shunt_fibers* s);

/* 0, or SHUNT_E_NOMEM when the stacks cannot be had (SHUNT_E_SYSTEM when getcontext
 * failed); nothing of the run has started. */
int shunt_fibers_start(struct shunt_fibers* s, uint32_t n, void (*fn)(void* arg, uint32_t i), void* arg);
/* true once fiber i has returned. */
bool shunt_fibers_resume(struct shunt_fibers* s, uint32_t i);
/* Inside fiber i of s: back to the thread's resume call. */
void shunt_fibers_yield(struct shunt_fibers* s);

/* Under ThreadSanitizer, a fiber's yield orders nothing: what it did before the yield is not
 * taken as done before what the next resumed fiber does, so fibers that should have
 * synchronised (through atomics) and did not are reported as a race, as threads would be.
 * Resuming a fiber still orders the resuming thread's work before it. Nothing elsewhere. */
void shunt_fibers_unordered(struct shunt_fibers* s);

/* How the set switches: "x86_64" (its own few instructions) or "ucontext". */
const char* shunt_fibers_kind(void);

#endif
