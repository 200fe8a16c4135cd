/* Fibers on x86-64 switch with a few instructions of their own (callee-saved registers, the
 * SSE and x87 control words, the stack pointer): a switch costs nanoseconds, where
 * swapcontext makes a system call (the signal mask) each way. Other machines, and builds that
 * define SHUNT_FIBER_UCONTEXT (the tests run both), use ucontext. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "transport/fiber.h"
#include "util/status.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) && !defined(SHUNT_FIBER_UCONTEXT)
#define FIB_ASM 1
#else
#define FIB_ASM 0
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define FIB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FIB_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FIB_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FIB_TSAN 1
#endif
#endif
#ifdef FIB_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef FIB_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* The set's own bookkeeping (which fiber runs, where the resuming thread's context is) is
 * outside ThreadSanitizer's view: with unordered yields it would otherwise see the resuming
 * thread and its fibers race on it, which they never do, since they take turns. */
#ifdef FIB_TSAN
#define FIB_UNWATCHED __attribute__((no_sanitize("thread")))
#else
#define FIB_UNWATCHED
#endif

/* Sanitized code has larger frames; the pages are only committed where touched. */
#if defined(FIB_ASAN) || defined(FIB_TSAN)
#define STACK_BYTES (1024u * 1024u)
#else
#define STACK_BYTES (256u * 1024u)
#endif

struct ctx {
#if FIB_ASM
  void* sp;
#else
  ucontext_t uc;
#endif
  const void* bottom; /* the usable stack, for AddressSanitizer */
  size_t size;
#ifdef FIB_TSAN
  void* tsan;
#endif
};

struct fiber {
  struct shunt_fibers* set;
  uint32_t index;
  bool done;
  char* map; /* guard page, then the stack */
  size_t map_len;
  struct ctx c;
};

struct shunt_fibers {
  uint32_t cap;
  struct fiber** f; /* each its own allocation: a running fiber's record never moves */
  void (*fn)(void*, uint32_t);
  void* arg;
  uint32_t cur;
  struct ctx main;      /* the thread that resumes */
  bool yield_unordered; /* ThreadSanitizer: a yield orders nothing (shunt_fibers_unordered) */
};

#if FIB_ASM
/* shunt_fiber_swap(save, to): pushes the callee-saved state on this stack, stores the stack
 * pointer in *save, loads `to` and pops the state found there. A new fiber's stack holds
 * such a state whose return address is shunt_fiber_boot, which calls shunt_fiber_entry with
 * the fiber (kept in r12). */
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl shunt_fiber_swap\n"
    ".hidden shunt_fiber_swap\n"
    ".type shunt_fiber_swap, @function\n"
    "shunt_fiber_swap:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size shunt_fiber_swap, .-shunt_fiber_swap\n"
    ".p2align 4\n"
    ".globl shunt_fiber_boot\n"
    ".hidden shunt_fiber_boot\n"
    ".type shunt_fiber_boot, @function\n"
    "shunt_fiber_boot:\n"
    "  movq %r12, %rdi\n"
    "  call shunt_fiber_entry\n"
    "  ud2\n"
    ".size shunt_fiber_boot, .-shunt_fiber_boot\n");
__attribute__((visibility("hidden"))) void shunt_fiber_swap(void** save, void* to);
__attribute__((visibility("hidden"))) void shunt_fiber_boot(void);
__attribute__((visibility("hidden"), used, noreturn)) void shunt_fiber_entry(struct fiber* f);
#else
static void uc_entry(unsigned hi, unsigned lo);
#endif

/* From the running context to `to`; `dying`: the running context never runs again; `order`:
 * ThreadSanitizer takes what the running context did as done before what `to` does next. */
FIB_UNWATCHED static void go(struct ctx* from, struct ctx* to, bool dying, const void** from_bottom,
                             size_t* from_size, bool order) {
#ifdef FIB_ASAN
  void* fake = NULL;
  __sanitizer_start_switch_fiber(dying ? NULL : &fake, to->bottom, to->size);
#else
  (void)dying;
#endif
#ifdef FIB_TSAN
  __tsan_switch_to_fiber(to->tsan, order ? 0 : __tsan_switch_to_fiber_no_sync);
#else
  (void)order;
#endif
#if FIB_ASM
  shunt_fiber_swap(&from->sp, to->sp);
#else
  swapcontext(&from->uc, &to->uc);
#endif
#ifdef FIB_ASAN
  __sanitizer_finish_switch_fiber(fake, from_bottom, from_size);
#else
  (void)from_bottom, (void)from_size;
#endif
}

FIB_UNWATCHED __attribute__((noreturn)) static void fiber_run(struct fiber* f) {
  struct shunt_fibers* s = f->set;
#ifdef FIB_ASAN
  /* First entry: learn the resuming thread's stack, to switch back to it. */
  __sanitizer_finish_switch_fiber(NULL, &s->main.bottom, &s->main.size);
#endif
  s->fn(s->arg, f->index);
  f->done = true;
#ifdef FIB_TSAN
  /* Taken when the fiber's record is freed (fiber_free), as a thread's end is at its join. */
  __tsan_release(f);
#endif
  go(&f->c, &s->main, true, NULL, NULL, !s->yield_unordered);
  abort(); /* a fiber that returned is never resumed */
}

#if FIB_ASM
void shunt_fiber_entry(struct fiber* f) {
  fiber_run(f);
}
#else
static void uc_entry(unsigned hi, unsigned lo) {
  fiber_run((struct fiber*)(((uintptr_t)hi << 32) | lo));
}

/* Apart from the caller's loop: getcontext returns twice as far as the compiler knows. */
__attribute__((noinline)) static int uc_make(struct fiber* f) {
  if (getcontext(&f->c.uc) != 0) return -1;
  f->c.uc.uc_stack.ss_sp = (void*)f->c.bottom;
  f->c.uc.uc_stack.ss_size = f->c.size;
  f->c.uc.uc_link = NULL;
  uintptr_t p = (uintptr_t)f;
  makecontext(&f->c.uc, (void (*)(void))uc_entry, 2, (unsigned)(p >> 32), (unsigned)(p & 0xffffffffu));
  return 0;
}
#endif

struct shunt_fibers* shunt_fibers_create(void) {
  return calloc(1, sizeof(struct shunt_fibers));
}

static void fiber_free(struct fiber* f) {
  if (!f) return;
#ifdef FIB_ASAN
  /* The frames' redzones stay marked after the fiber's last run, and AddressSanitizer does not
   * clear marks at munmap: memory mapped here later (a peer's shared region) would read as a
   * stack overflow. */
  __asan_unpoison_memory_region(f->c.bottom, f->c.size);
#endif
#ifdef FIB_TSAN
  __tsan_acquire(f);
  if (f->c.tsan) __tsan_destroy_fiber(f->c.tsan);
#endif
  if (f->map) munmap(f->map, f->map_len);
  free(f);
}

void shunt_fibers_free(struct shunt_fibers* s) {
  if (!s) return;
  for (uint32_t i = 0; i < s->cap; i++) fiber_free(s->f[i]);
  free(s->f);
  free(s);
}

static struct fiber* fiber_new(struct shunt_fibers* s, uint32_t i) {
  struct fiber* f = calloc(1, sizeof(*f));
  if (!f) return NULL;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  f->map_len = STACK_BYTES + page;
  f->map = mmap(NULL, f->map_len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (f->map == MAP_FAILED || mprotect(f->map, page, PROT_NONE) != 0) {
    if (f->map != MAP_FAILED) munmap(f->map, f->map_len);
    free(f);
    return NULL;
  }
  f->set = s;
  f->index = i;
  f->c.bottom = f->map + page;
  f->c.size = STACK_BYTES;
  return f;
}

static int grow(struct shunt_fibers* s, uint32_t n) {
  if (n <= s->cap) return 0;
  struct fiber** nf = realloc(s->f, n * sizeof(*nf));
  if (!nf) return SHUNT_E_NOMEM;
  s->f = nf;
  for (uint32_t i = s->cap; i < n; i++) {
    if (!(nf[i] = fiber_new(s, i))) {
      s->cap = i;
      return SHUNT_E_NOMEM;
    }
  }
  s->cap = n;
  return 0;
}

int shunt_fibers_start(struct shunt_fibers* s, uint32_t n, void (*fn)(void* arg, uint32_t i), void* arg) {
  if (!s) return SHUNT_E_NOMEM; /* shunt_fibers_create had none */
  SHUNT_TRY(grow(s, n));
  s->fn = fn;
  s->arg = arg;
#if FIB_ASM
  uint32_t csr[2];
  __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
#endif
  for (uint32_t i = 0; i < n; i++) {
    struct fiber* f = s->f[i];
    f->done = false;
#if FIB_ASM
    char* top = (char*)f->c.bottom + f->c.size;
    /* The state shunt_fiber_swap pops: control words, r15, r14, r13, r12 (the fiber), rbx,
     * rbp, then the return address. After the return the stack pointer is 16-byte aligned,
     * as the ABI wants it before a call. */
    uint64_t* sp = (uint64_t*)(void*)(((uintptr_t)top - 128) & ~(uintptr_t)15);
    memset(sp, 0, 8 * sizeof(*sp));
    memcpy(&sp[0], &csr[0], 4);
    memcpy((char*)&sp[0] + 4, &csr[1], 4);
    sp[4] = (uint64_t)(uintptr_t)f;
    sp[7] = (uint64_t)(uintptr_t)shunt_fiber_boot;
    f->c.sp = sp;
#else
    if (uc_make(f) != 0) return SHUNT_E_SYSTEM;
#endif
#ifdef FIB_TSAN
    /* One sanitizer context per fiber for the set's life: making one is costly, and a run
     * starts only after the last one ended. */
    if (!f->c.tsan) f->c.tsan = __tsan_create_fiber(0);
#endif
  }
  return 0;
}

void shunt_fibers_unordered(struct shunt_fibers* s) {
  s->yield_unordered = true;
}

FIB_UNWATCHED bool shunt_fibers_resume(struct shunt_fibers* s, uint32_t i) {
  struct fiber* f = s->f[i];
  if (f->done) return true;
  s->cur = i;
#ifdef FIB_TSAN
  s->main.tsan = __tsan_get_current_fiber();
#endif
  go(&s->main, &f->c, false, NULL, NULL, true);
  return f->done;
}

FIB_UNWATCHED void shunt_fibers_yield(struct shunt_fibers* s) {
  struct fiber* f = s->f[s->cur];
  go(&f->c, &s->main, false, &s->main.bottom, &s->main.size, !s->yield_unordered);
}

const char* shunt_fibers_kind(void) {
  return FIB_ASM ? "x86_64" : "ucontext";
}
