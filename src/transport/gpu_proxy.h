/* The GPU backend's proxy: one thread per rank of a world that spans hosts, serving its kernel's
 * port-channel triggers (transport/gpu_fifo.h), the way the host world's proxy serves its
 * fibers' (proxy.h). A world on one host has none: its kernels push no trigger.
 *
 * Promises:
 * - Triggers are served strictly in FIFO order. What reaches the proxy are triggers to ranks
 *   of other hosts and SYNCs (the kernel moves data to ranks of this host itself,
 *   gpu_xctx.cuh): a put and a signal through the network table's chosen row
 *   (transport/net.h), flushed before the next trigger, the data sent from the staging chunk
 *   the kernel filled in mapped pinned host memory (transport/gpu_fifo.h), then the FIFO's
 *   handled count published. A SYNC publishes completion (fifo->done).
 * - Where a network row hands arrivals to it (the socket row), the receiving side is the
 *   proxy's too: data that arrive are copied into the mirror in mapped host memory, and a
 *   flag's extents and count written after them with plain stores, which the kernel's wait
 *   reads (the protocol in transport/gpu_fifo.h).
 * - Neither side makes a CUDA call while serving: nothing a kernel waits for sits behind
 *   another stream in a shared hardware queue or behind the context lock.
 * - The proxy never blocks on anything but its own stream and its own writes, and is immune to
 *   other threads' stream capture. Idle with no execution pending (every launch it was told of
 *   has ended, none captured into a graph), it sleeps until the next launch.
 * - The kernel moves data to ranks of this host itself (gpu_xctx.cuh); what reaches the proxy
 *   are triggers to ranks of other hosts and SYNCs, and a SYNC synchronizes the proxy's stream
 *   only when copies were put on it.
 * - A failure (a CUDA call, an error completion) is recorded once with a message and raises
 *   this rank's abort (the FIFO's word in mapped host memory), from which the kernel raises
 *   every rank's abort word, so their kernels give up instead of waiting; a rank of another
 *   host learns of it from its own transport or timeout. */
#ifndef SHUNT_TRANSPORT_GPU_PROXY_H
#define SHUNT_TRANSPORT_GPU_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/cu.h"
#include "transport/gpu_fifo.h"

struct shunt_gpu_proxy;

struct shunt_gpu_proxy_config {
  const struct shunt_cu* cu;
  CUcontext ctx;
  uint32_t rank, nranks;
  struct shunt_gpu_fifo* fifo; /* host view */
  char* const* peer;           /* [nranks] every rank's region as this process sees it */
  const bool* remote;          /* [nranks] on another host: its peer entry is this rank's region */
  char* region;                /* this rank's region */
  uint64_t abort_off;          /* offset of the abort word (uint32) in every region */
  /* Offset of the port-channel counters in every region: the one raised by rank p's channel of
   * ordinal k is at port_off + 8 (p * ordinals + k). */
  uint64_t port_off;
  uint32_t ordinals;
};

/* Its stream and pinned memory, in cfg->ctx (current on the calling thread); not yet running. */
int shunt_gpu_proxy_new(const struct shunt_gpu_proxy_config* cfg, struct shunt_gpu_proxy** out, char* err,
                        size_t len);
/* Points a network endpoint's callbacks (failure, giving up, arrivals and flags) at p. */
struct shunt_net_ep_config;
struct shunt_net_ops;
void shunt_gpu_proxy_net_callbacks(struct shunt_gpu_proxy* p, struct shunt_net_ep_config* c);
/* The endpoint (a row of the network table, transport/net.h) that reaches the ranks of other
 * hosts; the caller keeps it, and closes it only after shunt_gpu_proxy_stop. */
/* Allocates the mirror and channel records when the row hands arrivals to the proxy;
 * SHUNT_E_NOMEM or SHUNT_E_CUDA with err when that memory cannot be had. */
int shunt_gpu_proxy_set_net(struct shunt_gpu_proxy* p, const struct shunt_net_ops* ops, void* ep, char* err,
                            size_t len);
/* The kernel arguments' views of the proxy's host memory (gpu_abi.h: xout, xin, xin_data). */
struct shunt_gpu_kargs;
void shunt_gpu_proxy_kargs(const struct shunt_gpu_proxy* p, struct shunt_gpu_kargs* k);
int shunt_gpu_proxy_start(struct shunt_gpu_proxy* p, char* err, size_t len);
/* Told before each launch of the exec kernel (graph: the launch is being captured), so that the
 * proxy is awake while an execution may push triggers and sleeps, costing no CPU, when none can;
 * unexpect takes back a launch that failed. NULL is fine. */
void shunt_gpu_proxy_expect(struct shunt_gpu_proxy* p, bool graph);
void shunt_gpu_proxy_unexpect(struct shunt_gpu_proxy* p, bool graph);
/* Whether it failed: 0, or the first failure's code (util/status.h: SHUNT_E_CUDA, SHUNT_E_PEER,
 * SHUNT_E_NET, ...); the message ("rank R proxy: ..."). */
int shunt_gpu_proxy_failed(struct shunt_gpu_proxy* p);
const char* shunt_gpu_proxy_msg(const struct shunt_gpu_proxy* p);
/* Stops the thread (before the endpoints it drives are closed); NULL is fine. */
void shunt_gpu_proxy_stop(struct shunt_gpu_proxy* p);
/* Stops it if running, drains its streams, frees; NULL is fine. */
void shunt_gpu_proxy_free(struct shunt_gpu_proxy* p);

#endif
