/* Host identity, process token, online CPUs (host.h). */
#include "util/host.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "util/env.h"

static uint64_t fnv1a(const void* p, size_t n, uint64_t h) {
  const unsigned char* b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

uint64_t shunt_host_identity(void) {
  const char* forced = shunt_env_str("SHUNT_HOSTID", NULL);
  if (forced) return fnv1a(forced, strlen(forced), 0xcbf29ce484222325ull);
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  uint64_t h = fnv1a(name, strlen(name), 0xcbf29ce484222325ull);
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    char id[64] = "";
    if (fgets(id, sizeof(id), f)) h = fnv1a(id, strlen(id), h);
    fclose(f);
  }
  return h;
}

/* Drawn once; written before pthread_once returns to any caller. */
static uint64_t token;
static pthread_once_t token_once = PTHREAD_ONCE_INIT;

static void draw_token(void) {
  uint64_t t = 0;
  if (getrandom(&t, sizeof(t), 0) != (ssize_t)sizeof(t)) {
    /* No entropy source: the pid, the time and an address still differ between processes. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    t = fnv1a(&ts, sizeof(ts), (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)&t);
  }
  token = t ? t : 1;
}

uint64_t shunt_process_token(void) {
  pthread_once(&token_once, draw_token);
  return token;
}

int shunt_hosts_rpn(const uint64_t* host, int n) {
  int nodes = 0;
  for (int r = 0; r < n; r++) {
    int first = 1;
    for (int q = 0; q < r && first; q++) first = host[q] != host[r];
    nodes += first;
  }
  if (!nodes || n % nodes) return 0;
  /* Consecutive groups of n / nodes ranks, each group's host differing from the one before:
   * with exactly `nodes` distinct hosts, no host can hold two groups. */
  int rpn = n / nodes;
  for (int r = 1; r < n; r++)
    if ((host[r] == host[r - 1]) != (r % rpn != 0)) return 0;
  return rpn;
}

long shunt_online_cpus(void) {
  static _Atomic long cpus; /* read once: a reason for a global */
  long n = atomic_load_explicit(&cpus, memory_order_relaxed);
  if (!n) {
    n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    atomic_store_explicit(&cpus, n, memory_order_relaxed);
  }
  return n;
}
