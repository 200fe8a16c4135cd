/* Taking triggers from the FIFO (gpu_fifo.h). */
#include "transport/gpu_fifo.h"

#include <string.h>

bool shunt_gpu_fifo_take(struct shunt_gpu_fifo* f, uint64_t pos, struct shunt_gpu_slot* out) {
  struct shunt_gpu_slot* sl = &f->slots[pos % SHUNT_GPU_FIFO_SLOTS];
  if (__atomic_load_n(&sl->seq, __ATOMIC_ACQUIRE) != pos + 1) return false;
  memcpy(out, sl, sizeof(*out));
  __atomic_store_n(&f->consumed, pos + 1, __ATOMIC_RELEASE);
  return true;
}
