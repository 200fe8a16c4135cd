/* GPU world: regions, their peers (CUDA IPC on this host: transport/cuda_ipc.h; verbs to other
 * hosts: transport/ib_ep.h), the proxy (transport/gpu_proxy.h), program upload, failure
 * reports. */
#include "exec/gpu/gpu_world.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/cu.h"
#include "exec/gpu/gpu_kernels.h"
#include "exec/gpu/gpu_region.h"
#include "exec/gpu/gpu_report.h"
#include "exec/gpu/gpu_residency.h"
#include "exec/gpu/gpu_run.h"
#include "exec/gpu/gpu_steps.h"
#include "plan/plan.h"
#include "transport/backoff.h"
#include "transport/cuda_ipc.h"
#include "transport/gpu_proxy.h"
#include "transport/ib_pick.h"
#include "transport/mem.h"
#include "transport/net.h"
#include "transport/peers.h"
#include "transport/world.h"
#include "util/env.h"
#include "util/host.h"
#include "util/log.h"

struct shunt_gpu_world {
  uint32_t rank, nranks;
  int device;
  const struct shunt_cu* cu;
  CUcontext ctx; /* the device's primary context (the runtime's, so user streams belong to it) */
  bool retained; /* ctx is retained by this world: released with it */
  struct shunt_gpu_kernels fns;
  struct shunt_gpu_world_config cfg;
  struct shunt_world_exchange bs;
  struct shunt_gpu_layout lay;
  char* region;                    /* own region (device) */
  char** peer;                     /* [nranks]: every region as this process sees it */
  struct shunt_gpu_fifo* fifo;     /* host view (mapped pinned memory) */
  struct shunt_gpu_fifo* fifo_dev; /* device view */
  uint64_t timeout_ns;
  uint32_t sharing; /* ranks of this world on this rank's GPU, this one included */
  CUstream pstream; /* the world's own stream: set-up copies */
  /* Launches of one world are ordered whatever stream they come on (as NCCL orders a
   * communicator's work): each waits for the event the previous one recorded. */
  pthread_mutex_t launch_mu;
  CUevent last;
  /* Memory of destroyed programs, their device copies and pinned sources: cuMemFree and
   * cuMemFreeHost synchronize the device, and a peer's kernel on the same GPU may be waiting;
   * freed when the world goes (collective, every kernel done). */
  pthread_mutex_t grave_mu;
  struct grave {
    void* dev;
    void* host;
  } * grave;
  size_t ngrave, grave_cap;
  /* Serves the kernel's port triggers to ranks of other hosts (transport/gpu_proxy.h); NULL in
   * a world on one host, whose kernels move every port channel's data themselves and so never
   * push a trigger (gpu_xctx.cuh). */
  struct shunt_gpu_proxy* proxy;
  /* Ranks of other hosts: reached only through the verbs endpoint. Their entries of the
   * kernel's peer table hold this rank's own region, so that nothing the kernel writes through
   * them (the abort words) leaves this rank; the proxy turns a trigger's address back into an
   * offset. */
  bool* remote; /* [nranks] */
  /* The region's allocation: lay.total, or whole 2 MiB pages across hosts, where a NIC
   * registers it by its dma-buf (which wants page-aligned ranges). */
  uint64_t alloc_bytes;
  struct shunt_peers reach; /* the peers mapped, the network (transport/peers.h) */
  /* A wait for this rank's launches failed: its kernels may still use the world's device
   * memory and mappings, which are then never freed (a leak, rather than memory reused under a
   * running kernel). */
  bool unsettled;
};

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

/* Where the counters raised by port channels start in every region. */
static uint64_t port_off(const struct shunt_gpu_world* w) {
  return w->lay.inbound + (uint64_t)shunt_gpu_sem_index(w->nranks, SHUNT_CHAN_PORT, 0, 0) * sizeof(uint64_t);
}

/* ---- Creation ---------------------------------------------------------------------------------- */

/* Closes this rank's mappings of its peers' regions (its own kernels are done with them). */
static void unmap_peers(struct shunt_gpu_world* w) {
  if (!w->cu || !w->ctx) return;
  struct shunt_cu_guard g = shunt_cu_enter(w->cu, w->ctx, 0);
  shunt_peers_unmap(&w->reach);
  shunt_cu_leave(&g);
}

struct shunt_gpu_remains {
  const struct shunt_cu* cu;
  CUcontext ctx;
  int device;
  bool retained, keep_region;
  char* region;
  struct shunt_gpu_fifo* fifo;
  struct grave* grave;
  size_t ngrave;
};

static void free_graves(const struct shunt_cu* cu, struct grave* grave, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (grave[i].dev) cu->MemFree(DP(grave[i].dev));
    if (grave[i].host) cu->MemFreeHost(grave[i].host);
  }
}

/* keep_region: the region stays allocated (see shunt_gpu_world_release). held: what a replayed
 * graph touches (region, FIFO, programs, the context's retain) moves into *held instead of
 * being freed (left NULL when the world keeps everything, or without room for the record, when
 * it is kept for good). */
static void release(struct shunt_gpu_world* w, bool keep_region, struct shunt_gpu_remains** held) {
  if (!w) return;
  /* The proxy thread stops before the endpoints it drives, and their threads (the socket
   * transport's receiver writes into the proxy's mapped host memory) before that memory; the
   * queue pairs go before the memory they write from and into. */
  const struct shunt_cu* cu = w->cu;
  if (held) *held = NULL;
  if (held && cu && w->ctx && !w->unsettled) {
    struct shunt_gpu_remains* rem = calloc(1, sizeof(*rem));
    if (rem) {
      *rem = (struct shunt_gpu_remains){cu,        w->ctx,  w->device, w->retained, keep_region,
                                        w->region, w->fifo, w->grave,  w->ngrave};
      w->region = NULL;
      w->fifo = NULL;
      w->grave = NULL;
      w->ngrave = 0;
      w->retained = false;
      *held = rem;
    } else {
      w->unsettled = true;
    }
  }
  /* Relaxed: another thread capturing in global mode neither fails these frees and
   * synchronizations nor is invalidated by them. */
  struct shunt_cu_guard g = shunt_cu_enter(w->ctx ? cu : NULL, w->ctx, 1);
  shunt_gpu_proxy_stop(w->proxy);
  shunt_peers_close_net(&w->reach);
  shunt_gpu_proxy_free(w->proxy);
  if (cu && w->ctx && w->unsettled) {
    SHUNT_WARN("rank %u: the GPU world's memory is kept: a kernel may still use it", w->rank);
  } else if (cu && w->ctx) {
    if (w->pstream) cu->StreamSynchronize(w->pstream);
    unmap_peers(w);
    if (w->region && !keep_region) cu->MemFree(DP(w->region));
    free_graves(cu, w->grave, w->ngrave);
    if (w->last) cu->EventDestroy(w->last);
    if (w->fifo) cu->MemFreeHost(w->fifo);
    if (w->pstream) cu->StreamDestroy(w->pstream);
  }
  shunt_cu_leave(&g);
  /* The world's retain of the primary context goes last, after everything made in it; an
   * unsettled world keeps it too, with its memory. */
  if (w->retained && !w->unsettled) cu->DevicePrimaryCtxRelease(w->device);
  free(w->grave);
  pthread_mutex_destroy(&w->launch_mu);
  pthread_mutex_destroy(&w->grave_mu);
  shunt_peers_free(&w->reach, true); /* unmapped above, or kept with the memory */
  free(w->peer);
  free(w->remote);
  free(w);
}

void shunt_gpu_remains_free(struct shunt_gpu_remains* r) {
  if (!r) return;
  struct shunt_cu_guard g = shunt_cu_enter(r->cu, r->ctx, 1);
  if (r->region && !r->keep_region) r->cu->MemFree(DP(r->region));
  free_graves(r->cu, r->grave, r->ngrave);
  if (r->fifo) r->cu->MemFreeHost(r->fifo);
  shunt_cu_leave(&g);
  /* A region kept for peers keeps the context's retain with it. */
  if (r->retained && !r->keep_region) r->cu->DevicePrimaryCtxRelease(r->device);
  free(r->grave);
  free(r);
}

/* This process is a client of an MPS server on dev, as the driver says (a control pipe left
 * on disk, or a daemon this process did not connect to, says nothing about this process's
 * contexts). A driver that cannot tell counts as no MPS. */
static bool mps_active(const struct shunt_cu* cu, int dev) {
  int on = 0;
  return cu->DeviceGetAttribute(&on, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev) == CUDA_SUCCESS && on;
}

static int world_create(struct shunt_gpu_world* w, const struct shunt_gpu_world_config* cfg, char* err,
                        size_t len);

/* The device's part of creation, in its primary context; 0 or an error code (err set). */
static int local_setup(struct shunt_gpu_world* w, int dev, char* err, size_t len) {
  const struct shunt_cu* cu = w->cu;
  CUresult e = CUDA_SUCCESS;
  const char* what = NULL;
#define TRY(x) \
  if (!what && (e = (x)) != CUDA_SUCCESS) what = #x
  TRY(cu->DevicePrimaryCtxRetain(&w->ctx, dev));
  w->retained = !what;
  if (!what) cu->CtxSetCurrent(w->ctx);
  if (!what) SHUNT_TRY(shunt_gpu_kernels_get(cu, dev, &w->fns, err, len));
  TRY(cu->StreamCreate(&w->pstream, CU_STREAM_NON_BLOCKING));
  TRY(cu->EventCreate(&w->last, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr region = 0;
  TRY(cu->MemAlloc(&region, w->alloc_bytes));
  w->region = (char*)(uintptr_t)region;
  TRY(cu->MemsetD8Async(region, 0, w->lay.total, w->pstream));
  TRY(cu->StreamSynchronize(w->pstream));
  TRY(cu->MemHostAlloc((void**)&w->fifo, sizeof(*w->fifo),
                       CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  if (!what) memset(w->fifo, 0, sizeof(*w->fifo));
  CUdeviceptr fifo_dev = 0;
  TRY(cu->MemHostGetDevicePointer(&fifo_dev, w->fifo, 0));
  w->fifo_dev = (struct shunt_gpu_fifo*)(uintptr_t)fifo_dev;
#undef TRY
  if (!what) return SHUNT_OK;
  shunt_setf(err, len, "rank %u: CUDA setup on device %d: %s: %s", w->rank, dev, what, shunt_cu_error(e));
  return e == CUDA_ERROR_OUT_OF_MEMORY ? SHUNT_E_NOMEM : SHUNT_E_CUDA;
}

int shunt_gpu_world_create(uint32_t rank, uint32_t nranks, const struct shunt_gpu_world_config* cfg,
                           const struct shunt_world_exchange* bs, struct shunt_gpu_world** out, char* err,
                           size_t len) {
  if (err && len) err[0] = 0;
  *out = NULL;
  if (nranks == 0 || rank >= nranks || nranks > 65535 || !cfg || !bs) {
    shunt_setf(err, len, "rank %u of %u is not valid", rank, nranks);
    return SHUNT_E_INVALID;
  }
  struct shunt_gpu_world* w = calloc(1, sizeof(*w));
  if (!w) {
    shunt_setf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  w->rank = rank;
  w->nranks = nranks;
  w->cfg = *cfg;
  w->bs = *bs;
  w->cu = shunt_cu(NULL, 0);
  pthread_mutex_init(&w->launch_mu, NULL);
  pthread_mutex_init(&w->grave_mu, NULL);
  /* Relaxed capture mode: a world made or grown by a call that is being captured (a size larger
   * than any before) allocates and synchronizes its own stream; in the thread's global mode
   * that would fail and invalidate the caller's capture. */
  struct shunt_cu_guard g = shunt_cu_enter(w->cu, NULL, 1);
  int rc = world_create(w, cfg, err, len);
  if (rc != 0) release(w, false, NULL); /* its frees and synchronizations in relaxed mode too */
  shunt_cu_leave(&g);
  if (rc != 0) return rc;
  *out = w;
  return SHUNT_OK;
}

/* This rank's own part: the device, its region and FIFO, the proxy where the world spans hosts;
 * 0 or an error code. */
static int local_part(struct shunt_gpu_world* w, const struct shunt_gpu_world_config* cfg, char* err,
                      size_t len) {
  const struct shunt_cu* cu = w->cu;
  uint64_t tmo = cfg->timeout_ms
                     ? cfg->timeout_ms
                     : (uint64_t)shunt_env_int("SHUNT_GPU_TIMEOUT", 0, 0, INT64_MAX / 1000000000) * 1000u;
  w->timeout_ns = tmo * 1000000ull; /* 0: no bound */
  shunt_gpu_region_layout(&w->lay, w->nranks, cfg->scratch_bytes, cfg->input_bytes, cfg->output_bytes);
  w->peer = calloc(w->nranks, sizeof(*w->peer));
  w->remote = calloc(w->nranks, sizeof(*w->remote));
  w->alloc_bytes =
      w->bs.at.nnodes > 1 ? (w->lay.total + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1) : w->lay.total;
  w->device = cfg->device;
  if (!cu) {
    shunt_cu(err, len);
    return SHUNT_E_CUDA;
  }
  if (!w->peer || !w->remote) {
    shunt_setf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  if (w->device < 0 && cu->CtxGetDevice(&w->device) != CUDA_SUCCESS) {
    shunt_setf(err, len, "rank %u: no CUDA device given and no current context to take it from", w->rank);
    return SHUNT_E_CUDA;
  }
  int rc = local_setup(w, w->device, err, len);
  if (rc != 0 || w->bs.at.nnodes <= 1) return rc;
  struct shunt_gpu_proxy_config pc = {.cu = cu,
                                      .ctx = w->ctx,
                                      .rank = w->rank,
                                      .nranks = w->nranks,
                                      .fifo = w->fifo,
                                      .peer = w->peer,
                                      .remote = w->remote,
                                      .region = w->region,
                                      .abort_off = shunt_gpu_abort_offset(&w->lay),
                                      .port_off = port_off(w),
                                      .ordinals = SHUNT_GPU_ORDINALS};
  return shunt_gpu_proxy_new(&pc, &w->proxy, err, len);
}

/* Ranks sharing this GPU (gpu_residency.h): their blocks must all be resident together, and
 * kernels of different processes run together only under MPS. */
static int count_sharing(struct shunt_gpu_world* w, const struct shunt_peers* p, char* err, size_t len) {
  const struct shunt_cuda_peer* me = shunt_peers_mem_card(p, w->rank);
  w->sharing = 0;
  for (uint32_t r = 0; r < w->nranks; r++) {
    const struct shunt_cuda_peer* c = shunt_peers_mem_card(p, r);
    if (c->hostid != me->hostid || strcmp(c->busid, me->busid) != 0) continue;
    w->sharing++;
    if (c->proc != me->proc && !mps_active(w->cu, w->device)) {
      shunt_setf(err, len,
                 "ranks %u and %u share GPU %s from different processes: without MPS their kernels are "
                 "time-sliced, never concurrent, and would wait for each other forever; run them as threads "
                 "of one process, start MPS, or give each rank its own GPU",
                 w->rank, r, me->busid);
      return SHUNT_E_INVALID;
    }
  }
  return SHUNT_OK;
}

/* Every peer reached: the kernel's peer table (a rank of another host's entry holds this
 * rank's own region: see `remote`), the proxy's endpoint, the proxy started (across hosts). */
static int gpu_ready(void* ctx, const struct shunt_peers* p, char* err, size_t len) {
  struct shunt_gpu_world* w = ctx;
  const struct shunt_cu* cu = w->cu;
  for (uint32_t r = 0; r < w->nranks; r++) {
    w->peer[r] = p->base[r] ? p->base[r] : w->region;
    w->remote[r] = p->remote[r];
  }
  SHUNT_TRY(count_sharing(w, p, err, len));
  uint64_t* table = malloc((size_t)w->nranks * sizeof(uint64_t));
  if (!table) SHUNT_FAIL(SHUNT_E_NOMEM, "out of memory");
  for (uint32_t r = 0; r < w->nranks; r++) table[r] = (uint64_t)(uintptr_t)w->peer[r];
  const char* call = "cuMemcpyHtoDAsync(peer table upload)";
  CUresult e = cu->MemcpyHtoDAsync(DP(w->region + w->lay.peers), table, (size_t)w->nranks * sizeof(uint64_t),
                                   w->pstream);
  if (e == CUDA_SUCCESS) {
    call = "cuStreamSynchronize(peer table upload)";
    e = cu->StreamSynchronize(w->pstream);
  }
  free(table);
  if (e != CUDA_SUCCESS) SHUNT_FAIL(SHUNT_E_CUDA, "%s: %s", call, shunt_cu_error(e));
  if (!w->proxy) return SHUNT_OK;
  if (p->nets.ops) SHUNT_TRY(shunt_gpu_proxy_set_net(w->proxy, p->nets.ops, p->nets.chosen, err, len));
  return shunt_gpu_proxy_start(w->proxy, err, len);
}

static void gpu_unready(void* ctx) {
  struct shunt_gpu_world* w = ctx;
  shunt_gpu_proxy_stop(w->proxy);
}

/* The region for the network: registered for verbs by its dma-buf when the driver gives one,
 * the NIC chosen near the GPU (gpu: room for its sysfs path). */
static void net_prepare(struct shunt_gpu_world* w, struct shunt_net_ep_config* nc, char* gpu,
                        size_t gpu_len) {
  const struct shunt_cu* cu = w->cu;
  char busid[32];
  gpu[0] = 0;
  if (cu->DeviceGetPCIBusId(busid, sizeof(busid), w->device) != CUDA_SUCCESS ||
      shunt_ib_bus_path("/sys", busid, gpu, gpu_len) != 0)
    gpu[0] = 0;
  int fd = -1;
  if (cu->MemGetHandleForAddressRange &&
      cu->MemGetHandleForAddressRange(&fd, DP(w->region), w->alloc_bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                                      0) != CUDA_SUCCESS)
    fd = -1;
  nc->region = w->region;
  nc->bytes = w->alloc_bytes;
  nc->device = true;
  nc->dmabuf_fd = fd;
  nc->gpu = gpu[0] ? gpu : NULL;
  nc->port_off = port_off(w);
  nc->ordinals = SHUNT_GPU_ORDINALS;
  shunt_gpu_proxy_net_callbacks(w->proxy, nc);
}

static int world_create(struct shunt_gpu_world* w, const struct shunt_gpu_world_config* cfg, char* err,
                        size_t len) {
  int rc = local_part(w, cfg, err, len);
  uint64_t sizes[3] = {cfg->scratch_bytes, cfg->input_bytes, cfg->output_bytes};
  struct shunt_peers_config pc = {.rank = w->rank,
                                  .nranks = w->nranks,
                                  .bs = &w->bs,
                                  .what = "GPU region",
                                  .sizes = sizes,
                                  .sizes_bytes = sizeof(sizes),
                                  .mem = &shunt_mem_cuda_ipc,
                                  .env = {w->cu, w->device},
                                  .region = w->region,
                                  .bytes = w->alloc_bytes,
                                  .net = {.dmabuf_fd = -1},
                                  .ctx = w,
                                  .ready = gpu_ready,
                                  .unready = gpu_unready};
  char gpu[4096];
  if (rc == 0 && w->bs.at.nnodes > 1) net_prepare(w, &pc.net, gpu, sizeof(gpu));
  /* Every rank takes part, also one whose own part failed. */
  int prc = shunt_peers_setup(&pc, rc == 0, &w->reach, err, len);
  if (pc.net.dmabuf_fd >= 0) close(pc.net.dmabuf_fd); /* the registration holds what it needs */
  return rc != SHUNT_OK ? rc : prc;
}

static void destroy(struct shunt_gpu_world* w, struct shunt_gpu_remains** held) {
  if (!w) return;
  /* A failed wait marks the world unsettled: release keeps its memory. */
  /* No peer may still touch this region (its kernels or its proxy) once we free it: this
   * rank's launches complete (their peers' parts are already enqueued), then every rank's. */
  shunt_gpu_world_quiesce(w);
  shunt_gpu_proxy_stop(w->proxy);
  shunt_peers_leave(&w->reach); /* peers' teardown then logs nothing */
  /* Every rank unmaps its peers' regions before any rank frees its own. */
  unmap_peers(w);
  w->bs.oob.barrier(w->bs.oob.ctx);
  release(w, false, held);
}

void shunt_gpu_world_destroy(struct shunt_gpu_world* w) {
  destroy(w, NULL);
}

int shunt_gpu_world_quiesce(struct shunt_gpu_world* w) {
  if (!w || !w->cu || !w->last) return SHUNT_OK;
  /* Relaxed: an event synchronize in the thread's global mode would fail while another thread
   * captures (and invalidate that capture), and the memory freed next would still be in use. */
  struct shunt_cu_guard g = shunt_cu_enter(w->cu, w->ctx, 1);
  CUresult e = w->cu->EventSynchronize(w->last);
  shunt_cu_leave(&g);
  if (e == CUDA_SUCCESS) return SHUNT_OK;
  if (!w->unsettled)
    SHUNT_WARN("rank %u: waiting for the last launch on the GPU world failed: %s", w->rank,
               shunt_cu_error(e));
  w->unsettled = true;
  return SHUNT_E_CUDA;
}

bool shunt_gpu_world_drained(struct shunt_gpu_world* w) {
  if (!w || !w->cu || !w->last) return true;
  /* Relaxed: a query in the thread's global mode would invalidate another thread's capture. */
  struct shunt_cu_guard g = shunt_cu_enter(w->cu, w->ctx, 1);
  CUresult e = w->cu->EventQuery(w->last);
  shunt_cu_leave(&g);
  return e == CUDA_SUCCESS;
}

void shunt_gpu_world_release(struct shunt_gpu_world* w) {
  if (!w) return;
  /* This rank's last launch has completed before its memory goes: every wait of it is
   * satisfied. Its peers' kernels may still write its region, though: a kernel of a peer that
   * goes on (a later call this rank never joins, an abort, a timeout) writes its contribution
   * and, giving up, the abort word into every peer's region, and on a GPU a write to freed
   * memory is a sticky fault that ends that peer's process. Without a collective step (the
   * peers may be gone, or driven by this very thread) nothing tells when they are done, so the
   * region of a world with peers stays allocated until the process exits: a communicator's
   * staging and scratch per non-collective teardown, where the alternative is a peer's crash.
   * Everything else goes; the collective path (shunt_gpu_world_destroy) frees it all. */
  shunt_gpu_world_quiesce(w);
  release(w, w->nranks > 1, NULL);
}

struct shunt_gpu_remains* shunt_gpu_world_end_held(struct shunt_gpu_world* w, bool collective) {
  if (!w) return NULL;
  struct shunt_gpu_remains* r = NULL;
  /* This rank's eager launches end first, untouched by the abort; from then on only a graph's
   * replay can start a kernel here, and it returns at its start. */
  shunt_gpu_world_quiesce(w);
  shunt_gpu_world_abort(w);
  if (collective)
    destroy(w, &r);
  else
    release(w, w->nranks > 1, &r);
  return r;
}

/* ---- Accessors ---------------------------------------------------------------------------------- */

bool shunt_gpu_world_spans(const struct shunt_gpu_world* w) {
  return w->reach.spans;
}

bool shunt_gpu_world_fits(const struct shunt_gpu_world* w, uint32_t rpn, uint32_t* a, uint32_t* b) {
  return !shunt_gpu_world_spans(w) || shunt_nodes_fit(w->reach.node_of, w->nranks, rpn, a, b);
}

bool shunt_gpu_world_broken(const struct shunt_gpu_world* w) {
  const volatile struct shunt_gpu_error* e = &w->fifo->error;
  return e->code != 0 || w->fifo->abort != 0 || (w->proxy && shunt_gpu_proxy_failed(w->proxy));
}

void shunt_gpu_world_kargs(const struct shunt_gpu_world* w, struct shunt_gpu_kargs* k) {
  shunt_gpu_kargs_world(k, w->region, &w->lay, w->fifo_dev, w->timeout_ns, w->rank, w->nranks);
  if (w->proxy) shunt_gpu_proxy_kargs(w->proxy, k);
}

char* shunt_gpu_world_stage(const struct shunt_gpu_world* w, unsigned buf) {
  return w->region + (buf == 0 ? w->lay.input : w->lay.output);
}
int shunt_gpu_world_device(const struct shunt_gpu_world* w) {
  return w->device;
}
const struct shunt_cu* shunt_gpu_world_cu(const struct shunt_gpu_world* w) {
  return w->cu;
}
const struct shunt_gpu_kernels* shunt_gpu_world_fns(const struct shunt_gpu_world* w) {
  return &w->fns;
}
struct CUctx_st* shunt_gpu_world_ctx(const struct shunt_gpu_world* w) {
  return w->ctx;
}
struct CUstream_st* shunt_gpu_world_stream(const struct shunt_gpu_world* w) {
  return w->pstream;
}

int shunt_gpu_world_check(struct shunt_gpu_world* w, const struct shunt_program* p, char* err, size_t len) {
  if (err && len) err[0] = 0;
  if (!w) return SHUNT_E_INVALID;
  int proxy = w->proxy ? shunt_gpu_proxy_failed(w->proxy) : 0;
  if (proxy) {
    shunt_setf(err, len, "%s", shunt_gpu_proxy_msg(w->proxy));
    return proxy;
  }
  struct shunt_gpu_error e;
  if (shunt_gpu_error_read(&w->fifo->error, &e) == 0) return SHUNT_OK;
  shunt_gpu_error_format(&e, w->rank, p, err, len);
  if (e.code == SHUNT_GPU_ERR_TIMEOUT) return SHUNT_E_TIMEOUT;
  /* A thread that gave up because another had: this rank's own abort word is up only when its
   * communicator was aborted (its proxy's failures are reported above); else a peer gave up. */
  return __atomic_load_n(&w->fifo->abort, __ATOMIC_ACQUIRE) ? SHUNT_E_ABORTED : SHUNT_E_PEER;
}

uint32_t shunt_gpu_world_failure(const struct shunt_gpu_world* w, struct shunt_gpu_error* e) {
  memset(e, 0, sizeof(*e));
  return w ? shunt_gpu_error_read(&w->fifo->error, e) : 0;
}

static bool capturing(const struct shunt_cu* cu, CUstream stream) {
  int st = CU_STREAM_CAPTURE_STATUS_NONE;
  return cu->StreamIsCapturing(stream, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool shunt_gpu_world_expect(struct shunt_gpu_world* w, struct CUstream_st* stream) {
  bool graph = capturing(w->cu, stream);
  shunt_gpu_proxy_expect(w->proxy, graph);
  return graph;
}

void shunt_gpu_world_unexpect(struct shunt_gpu_world* w, bool graph) {
  shunt_gpu_proxy_unexpect(w->proxy, graph);
}

int shunt_gpu_world_order_begin(struct shunt_gpu_world* w, CUstream stream, char* err, size_t len) {
  pthread_mutex_lock(&w->launch_mu);
  if (capturing(w->cu, stream)) return 0;
  CUresult e = w->cu->StreamWaitEvent(stream, w->last, 0);
  if (e == CUDA_SUCCESS) return 0;
  pthread_mutex_unlock(&w->launch_mu);
  SHUNT_FAIL(SHUNT_E_CUDA, "cuStreamWaitEvent(ordering after the previous launch): %s", shunt_cu_error(e));
}

int shunt_gpu_world_order_end(struct shunt_gpu_world* w, CUstream stream, bool enqueued, char* err,
                              size_t len) {
  CUresult e = CUDA_SUCCESS;
  if (enqueued && !capturing(w->cu, stream)) e = w->cu->EventRecord(w->last, stream);
  pthread_mutex_unlock(&w->launch_mu);
  if (e == CUDA_SUCCESS) return 0;
  SHUNT_FAIL(SHUNT_E_CUDA, "cuEventRecord(recording the launch): %s", shunt_cu_error(e));
}

/* No CUDA call: the word lives in mapped host memory (gpu_fifo.h), so the abort lands whatever
 * another thread holds the context lock for and whatever shares a hardware queue. */
int shunt_gpu_world_abort(struct shunt_gpu_world* w) {
  if (!w || !w->fifo) return SHUNT_E_INVALID;
  __atomic_store_n(&w->fifo->abort, 1u, __ATOMIC_RELEASE);
  return SHUNT_OK;
}

/* ---- Programs ------------------------------------------------------------------------------------ */

static int prog_create(struct shunt_gpu_world* w, const struct shunt_program* p, uint32_t max_threads,
                       struct shunt_gpu_prog** out, char* err, size_t len);

int shunt_gpu_prog_create(struct shunt_gpu_world* w, const struct shunt_program* p, uint32_t max_threads,
                          struct shunt_gpu_prog** out, char* err, size_t len) {
  if (err && len) err[0] = 0;
  *out = NULL;
  if (!w) {
    shunt_setf(err, len, "no world");
    return SHUNT_E_INVALID;
  }
  /* Relaxed capture mode: another thread capturing a graph in global mode must neither make
   * this allocation fail nor be invalidated by it. */
  struct shunt_cu_guard g = shunt_cu_enter(w->cu, w->ctx, 1);
  int rc = prog_create(w, p, max_threads, out, err, len);
  shunt_cu_leave(&g);
  return rc;
}

struct capacity_ctx {
  const struct shunt_gpu_world* w;
  uint32_t smem;
};
static int capacity(void* ctx, uint32_t threads, uint32_t* blocks) {
  const struct capacity_ctx* c = ctx;
  return shunt_gpu_coresident_blocks(c->w->cu, &c->w->fns, c->w->device, threads, c->smem, blocks);
}

static int prog_create(struct shunt_gpu_world* w, const struct shunt_program* p, uint32_t max_threads,
                       struct shunt_gpu_prog** out, char* err, size_t len) {
  const struct shunt_cu* cu = w->cu;
  if (!shunt_gpu_prog_fits(p, w->rank, w->nranks, &w->lay, err, len)) return SHUNT_E_INVALID;
  /* Every block of every rank on this GPU resident at once (gpu_residency.h). */
  struct capacity_ctx cc = {w, shunt_gpu_prog_smem(p)};
  char why[256];
  uint32_t threads = shunt_gpu_pick_threads(p->nblocks, w->sharing, p->nthreads, max_threads, capacity, &cc,
                                            why, sizeof(why));
  if (!threads) {
    shunt_setf(err, len, "device %d: %s", w->device, why);
    return SHUNT_E_UNFIT;
  }
  struct shunt_gpu_prog* gp = calloc(1, sizeof(*gp));
  if (!gp) {
    shunt_setf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  uint64_t prog_bytes = (p->total_bytes + 15u) / 16u * 16u;
  uint64_t bytes = prog_bytes + (uint64_t)p->nsems * sizeof(long long);
  CUdeviceptr d = 0;
  char* pinned = NULL;
  /* An allocation takes the context lock but waits for no kernel; the upload itself waits for
   * the first launch (shunt_gpu_prog_upload). */
  CUresult e = cu->MemAlloc(&d, bytes);
  if (e == CUDA_SUCCESS) e = cu->MemHostAlloc((void**)&pinned, bytes, CU_MEMHOSTALLOC_PORTABLE);
  if (e != CUDA_SUCCESS) {
    if (d) cu->MemFree(d);
    free(gp);
    shunt_setf(err, len, "program allocation: %s", shunt_cu_error(e));
    return e == CUDA_ERROR_OUT_OF_MEMORY ? SHUNT_E_NOMEM : SHUNT_E_CUDA;
  }
  /* The device copy's image, in pinned memory: the upload is then a plain asynchronous copy. */
  memcpy(pinned, p, p->total_bytes);
  memset(pinned + p->total_bytes, 0, prog_bytes - p->total_bytes);
  memcpy(pinned + prog_bytes, shunt_prog_sem_init(p), (size_t)p->nsems * sizeof(long long));
  gp->pinned = pinned;
  gp->bytes = bytes;
  gp->host = p;
  gp->world = w;
  gp->dev = (struct shunt_program*)(uintptr_t)d;
  gp->sems = (long long*)(uintptr_t)(d + prog_bytes);
  gp->threads = threads;
  gp->smem = cc.smem;
  gp->port_used = shunt_gpu_uses_port(p);
  *out = gp;
  return SHUNT_OK;
}

int shunt_gpu_prog_upload(struct shunt_gpu_prog* gp, CUstream stream, bool capturing, char* err, size_t len) {
  if (gp->uploaded) return SHUNT_OK;
  struct shunt_gpu_world* w = gp->world;
  const struct shunt_cu* cu = w->cu;
  CUstream s = capturing ? w->pstream : stream;
  /* From pinned memory: for a pageable source the driver may wait on the host for the stream's
   * earlier work before it stages the bytes, and that work (this world's previous kernel) may
   * wait for peers whose threads wait for this one. Relaxed: during another thread's global
   * capture neither the copy nor the synchronize of a capture's upload may fail or break it. */
  struct shunt_cu_guard g = shunt_cu_enter(cu, w->ctx, 1);
  const char* call = "cuMemcpyHtoDAsync(program)";
  CUresult e = cu->MemcpyHtoDAsync(DP(gp->dev), gp->pinned, gp->bytes, s);
  if (e == CUDA_SUCCESS && capturing) {
    call = "cuStreamSynchronize(program upload)";
    e = cu->StreamSynchronize(s);
  }
  shunt_cu_leave(&g);
  if (e != CUDA_SUCCESS) SHUNT_FAIL(SHUNT_E_CUDA, "%s: %s", call, shunt_cu_error(e));
  gp->uploaded = true;
  return SHUNT_OK;
}

void shunt_gpu_prog_destroy(struct shunt_gpu_prog* gp) {
  if (!gp) return;
  struct shunt_gpu_world* w = gp->world;
  pthread_mutex_lock(&w->grave_mu);
  if (w->ngrave == w->grave_cap) {
    size_t cap = w->grave_cap ? 2 * w->grave_cap : 16;
    struct grave* g = realloc(w->grave, cap * sizeof(*g));
    if (g) w->grave = g, w->grave_cap = cap;
  }
  if (w->ngrave < w->grave_cap) {
    w->grave[w->ngrave++] = (struct grave){gp->dev, gp->pinned};
    gp->dev = NULL;
    gp->pinned = NULL;
  }
  pthread_mutex_unlock(&w->grave_mu);
  /* Out of memory for the list: freed now, as before (it may wait for running kernels). */
  if (gp->dev) {
    struct shunt_cu_guard g = shunt_cu_enter(w->cu, w->ctx, 1);
    w->cu->MemFree(DP(gp->dev));
    w->cu->MemFreeHost(gp->pinned);
    shunt_cu_leave(&g);
  }
  free(gp);
}
