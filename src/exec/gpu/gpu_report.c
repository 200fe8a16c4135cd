/* Kernel failure records in words (gpu_report.h). */
#include "exec/gpu/gpu_report.h"

#include <inttypes.h>
#include <stdio.h>

#include "plan/plan.h"

static const char* wait_name(uint32_t what) {
  switch (what) {
    case SHUNT_GPU_WAIT_PACKET:
      return "packet flag at scratch byte";
    case SHUNT_GPU_WAIT_SIGNAL:
      return "signal";
    case SHUNT_GPU_WAIT_BARRIER:
      return "barrier";
    case SHUNT_GPU_WAIT_SEMAPHORE:
      return "semaphore";
    case SHUNT_GPU_WAIT_FIFO:
      return "room in the trigger FIFO at position";
    case SHUNT_GPU_WAIT_FLUSH:
      return "proxy completion of FIFO position";
    default:
      return "nothing (the world was already broken when the run started)";
  }
}

uint32_t shunt_gpu_error_read(const struct shunt_gpu_error* rec, struct shunt_gpu_error* e) {
  /* The kernel writes the fields, then publishes the code after a system fence. */
  uint32_t code = __atomic_load_n(&rec->code, __ATOMIC_ACQUIRE);
  if (code == 0) return 0;
  const volatile struct shunt_gpu_error* src = rec;
  e->code = code;
  e->what = src->what;
  e->rank = src->rank;
  e->block = src->block;
  e->thread = src->thread;
  e->op = src->op;
  e->chan_type = src->chan_type;
  e->peer = src->peer;
  e->ordinal = src->ordinal;
  e->pad_ = 0;
  e->awaited = src->awaited;
  e->seen = src->seen;
  e->where = src->where;
  return code;
}

void shunt_gpu_error_format(const struct shunt_gpu_error* ep, uint32_t rank, const struct shunt_program* p,
                            char* err, size_t len) {
  if (!err || !len) return;
  struct shunt_gpu_error e = *ep;
  char pos[96] = "";
  if (p && p->magic == SHUNT_PROG_MAGIC && e.block < p->nblocks) {
    const struct shunt_prog_block* b = &shunt_prog_blocks(p)[e.block];
    if (e.op < b->nops) {
      const struct shunt_prog_op* o = &shunt_prog_ops(p)[b->first_op + e.op];
      if (o->json_inner >= 0)
        snprintf(pos, sizeof(pos), " ops[%u].ops[%d] (%s)", o->json_op, o->json_inner,
                 shunt_op_name((enum shunt_op_type)o->type));
      else
        snprintf(pos, sizeof(pos), " ops[%u] (%s)", o->json_op, shunt_op_name((enum shunt_op_type)o->type));
    } else {
      snprintf(pos, sizeof(pos), " (end of run: draining the proxy)");
    }
  } else {
    snprintf(pos, sizeof(pos), " op %u", e.op);
  }
  char detail[128] = "";
  switch (e.what) {
    case SHUNT_GPU_WAIT_SIGNAL:
      snprintf(detail, sizeof(detail), " on %s channel #%u to rank %u",
               e.chan_type == SHUNT_CHAN_PORT ? "port" : "memory", e.ordinal, e.peer);
      break;
    case SHUNT_GPU_WAIT_BARRIER:
    case SHUNT_GPU_WAIT_SEMAPHORE:
      snprintf(detail, sizeof(detail), " %u", e.ordinal);
      break;
    case SHUNT_GPU_WAIT_PACKET:
    case SHUNT_GPU_WAIT_FIFO:
    case SHUNT_GPU_WAIT_FLUSH:
      snprintf(detail, sizeof(detail), " %" PRIu64, e.where);
      break;
    default:
      break;
  }
  snprintf(err, len, "%s: rank %u block %u thread %u%s: waits on %s%s: awaited %" PRIu64 ", seen %" PRIu64,
           e.code == SHUNT_GPU_ERR_TIMEOUT ? "timeout" : "aborted", rank, e.block, e.thread, pos,
           wait_name(e.what), detail, e.awaited, e.seen);
}
