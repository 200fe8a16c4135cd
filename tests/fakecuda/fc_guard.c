/* Device memory is not host memory (fake_cuda.h): the pages of every device allocation are
 * inaccessible, and only a host thread acting for the device (a stream's worker running a copy
 * or a kernel, a synchronous copy) gets them opened, a window at a time, by this SIGSEGV
 * handler; they are closed again when that operation ends. A host thread's access to device
 * memory, and a device access outside every allocation (a guard page, freed memory, memory
 * its exporter freed), end the process with a message, as the test's crash.
 *
 * Why not per-thread page rights: this CPU has no protection keys, and a second view of the
 * same pages for device threads would need every pointer a kernel reads (tables in device
 * memory included) translated. A window a device thread opened is open to every thread until
 * the operation ends: a host access then goes unseen (a false negative), never a false crash. */
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_cuda.h"

#define MAX_OPEN 64

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sigaction old_segv, old_bus;

/* Per host thread: how deep inside device work it is, the device it acts for (-1: any, as the
 * NCCL double's), and the windows it opened. */
static __thread int depth;
static __thread int acting = -1;
static __thread struct fc_window opened[MAX_OPEN];
static __thread int nopened;

static void say(const char* msg) {
  size_t n = strlen(msg);
  while (n > 0) {
    ssize_t w = write(2, msg, n);
    if (w <= 0) break;
    msg += w;
    n -= (size_t)w;
  }
}

/* The message, then where the access was made, then the end. */
static void die(const char* msg) {
  say(msg);
  void* frames[32];
  int n = backtrace(frames, 32);
  backtrace_symbols_fd(frames, n, 2);
  abort();
}

static void fault(int sig, siginfo_t* si, void* uc) {
  uintptr_t a = (uintptr_t)si->si_addr;
  struct fc_window w;
  int at = fc_mem_fault_open(a, acting, depth > 0 && sig == SIGSEGV, &w);
  char msg[512];
  if (depth > 0) {
    if (at == FC_AT_DATA && sig == SIGSEGV) {
      if (nopened == MAX_OPEN) {
        /* Closed early, they fault open again if still in use. */
        fc_mem_close(opened, nopened);
        nopened = 0;
      }
      opened[nopened++] = w;
      return; /* the access is made again, now allowed */
    }
    const char* why = at == FC_AT_GUARD ? "a guard page next to a device allocation"
                      : at == FC_AT_CLOSED
                          ? "memory mapped (cuMemMap) without access granted to this device (cuMemSetAccess)"
                      : at == FC_AT_DATA ? "memory of a device allocation that its exporter freed"
                                         : "an address outside every device allocation";
    snprintf(msg, sizeof(msg),
             "fakecuda: device fault: a kernel or copy of device %d accessed 0x%llx, %s "
             "(CUDA_ERROR_ILLEGAL_ADDRESS: on a GPU the context is lost for good); aborting\n",
             acting, (unsigned long long)a, why);
    die(msg);
  }
  if (at != FC_AT_NONE) {
    snprintf(msg, sizeof(msg),
             "fakecuda: host access to device memory at 0x%llx (%s of device allocation 0x%llx, %llu bytes, "
             "device %d): the host reaches device memory only through the driver's copies; aborting\n",
             (unsigned long long)a, at == FC_AT_DATA ? "inside" : "a guard page", (unsigned long long)w.base,
             (unsigned long long)w.bytes, w.device);
    die(msg);
  }
  /* Not ours: the handler before this one (or the default action) takes the access again. */
  sigaction(sig, sig == SIGSEGV ? &old_segv : &old_bus, NULL);
  (void)uc;
}

static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = fault;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &old_segv);
  sigaction(SIGBUS, &sa, &old_bus);
}

void fc_guard_install(void) {
  pthread_once(&once, install);
}

void fc_device_enter(int device) {
  if (depth++ == 0) acting = device;
}

void fc_device_leave(void) {
  if (--depth > 0) return;
  fc_mem_close(opened, nopened);
  nopened = 0;
  acting = -1;
}

/* For test doubles that act for the device on a host thread (the NCCL double computes its
 * collectives there): device memory is open to the calling thread until the matching end. */
FC_EXPORT void fakecuda_device_begin(void);
FC_EXPORT void fakecuda_device_end(void);
void fakecuda_device_begin(void) {
  fc_device_enter(-1); /* the double reaches every rank's memory, whatever its device */
}
void fakecuda_device_end(void) {
  fc_device_leave();
}
