/* The GPU proxy's port-channel counts from ranks of another host as a kernel sees them while
 * they are written: over a row that hands arrivals to the proxy (TCP), the receiving side
 * raises the channel's count in mapped host memory (transport/gpu_fifo.h), and a kernel waiting
 * for count k takes any value >= k as its own and then copies the data filed under it. A value
 * seen half written must therefore never exceed the count being written: 255 -> 256 torn as
 * 0x1ff would let waits up to 511 pass before their data arrived (the reason the count is one
 * aligned 8-byte store, not a copy).
 *
 * A watcher thread reads the count as the kernel would (one 8-byte acquire load) while the
 * proxy's receiving callback raises it past several byte carries, the kernel's side marking
 * each record copied; it fails on any value above the number of signals begun, or a final
 * count other than the signals sent. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/check.h"
#include "fakecuda/fake_cuda_api.h"
#include "transport/cu.h"
#include "exec/gpu/gpu_abi.h"
#include "transport/gpu_fifo.h"
#include "transport/gpu_proxy.h"
#include "transport/net.h"

int cuDevicePrimaryCtxRelease_v2(int dev);

#define SIGNALS 32768 /* 128 carries out of the low byte */
#define PEER 1
#define ORDINALS 2

static atomic_ullong begun; /* signals whose write has started */
static atomic_int stop;
static const uint64_t* counter; /* device memory (open to the host under the leniency) */
static long reads, above;
static atomic_int seen_above;
static uint64_t worst_seen, worst_begun;

static void* watch(void* arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    uint64_t v = __atomic_load_n(counter, __ATOMIC_ACQUIRE);
    uint64_t b = atomic_load(&begun);
    reads++;
    if (v > b) {
      if (!above) worst_seen = v, worst_begun = b;
      above++;
      atomic_store(&seen_above, 1);
    }
  }
  return NULL;
}

int main(void) {
  char err[256];
  const struct shunt_cu* cu = shunt_cu(err, sizeof(err));
  if (!cu) {
    fprintf(stderr, "no driver: %s\n", err);
    return 1;
  }
  fc_handle ctx = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  const uint64_t bytes = 4096, port_off = 1024;
  unsigned long long region = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&region, bytes), 0);
  static char zeros[4096];
  CHECK_EQ_INT(cuMemcpyHtoD_v2(region, zeros, bytes), 0);
  struct shunt_gpu_fifo* fifo = calloc(1, sizeof(*fifo));
  char* peers[2] = {(char*)(uintptr_t)region, (char*)(uintptr_t)region};
  bool remote[2] = {false, true};
  struct shunt_gpu_proxy_config pc = {.cu = cu,
                                      .ctx = (CUcontext)ctx,
                                      .rank = 0,
                                      .nranks = 2,
                                      .fifo = fifo,
                                      .peer = peers,
                                      .remote = remote,
                                      .region = (char*)(uintptr_t)region,
                                      .abort_off = 0,
                                      .port_off = port_off,
                                      .ordinals = ORDINALS};
  struct shunt_gpu_proxy* p = NULL;
  if (!fifo || shunt_gpu_proxy_new(&pc, &p, err, sizeof(err)) != 0) {
    fprintf(stderr, "proxy: %s\n", fifo ? err : "out of memory");
    return 1;
  }
  /* The receiving side's callbacks, as the socket row calls them for a flag from PEER. */
  struct shunt_net_ep_config nc = {.rank = 0, .nranks = 2, .bytes = bytes};
  shunt_gpu_proxy_net_callbacks(p, &nc);
  /* A row that hands arrivals on: the count lives in mapped host memory (gpu_fifo.h), whose
   * device view is its host address (unified addressing, as the stand-in gives). */
  static const struct shunt_net_ops arrivals = {.name = "test", .hands_arrivals = true};
  CHECK_EQ_INT(shunt_gpu_proxy_set_net(p, &arrivals, NULL, err, sizeof(err)), 0);
  struct shunt_gpu_kargs k;
  shunt_gpu_proxy_kargs(p, &k);
  const uint16_t ord = 1;
  counter = &k.xin[PEER * ORDINALS + ord].count;
  pthread_t w;
  CHECK_EQ_INT(pthread_create(&w, NULL, watch, NULL), 0);
  uint64_t n = 0;
  /* Until a value above the count is seen: a failing run ends there. */
  while (n < SIGNALS && !atomic_load(&seen_above)) {
    atomic_store(&begun, ++n);
    /* As the kernel's waits would: every earlier record copied, so none is held back. */
    __atomic_store_n(&k.xin[PEER * ORDINALS + ord].copied, n - 1, __ATOMIC_RELEASE);
    nc.signal(nc.ctx, PEER, ord);
  }
  atomic_store(&stop, 1);
  pthread_join(w, NULL);
  uint64_t final = 0;
  final = __atomic_load_n(counter, __ATOMIC_ACQUIRE);
  CHECK_EQ_INT(final, n);
  CHECK(!shunt_gpu_proxy_failed(p));
  CHECK_MSG(above == 0, "%ld of %ld reads saw a count above the signals begun (first: %llu with %llu begun)",
            above, reads, (unsigned long long)worst_seen, (unsigned long long)worst_begun);
  shunt_gpu_proxy_free(p);
  cuMemFree_v2(region);
  free(fifo);
  CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(0), 0);
  if (check_failures) return 1;
  printf("proxy counts: %d signals, %ld reads by a watcher, none above the count being written\n", SIGNALS,
         reads);
  return 0;
}
