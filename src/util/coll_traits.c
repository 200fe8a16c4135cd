/* The collectives' rows and the rules derived from them (util/coll_traits.h). */
#include "util/coll_traits.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "util/status.h"

/* Indexed by enum shunt_coll. */
static const struct shunt_coll_traits rows[SHUNT_COLL_COUNT] = {
    [SHUNT_COLL_OTHER] = {SHUNT_COLL_OTHER, "other", false, false, SHUNT_LAYOUT_FLAT, SHUNT_ROOT_NONE,
                          SHUNT_REF_NONE},
    [SHUNT_COLL_ALLREDUCE] = {SHUNT_COLL_ALLREDUCE, "allreduce", true, true, SHUNT_LAYOUT_FLAT,
                              SHUNT_ROOT_NONE, SHUNT_REF_REDUCED},
    [SHUNT_COLL_ALLGATHER] = {SHUNT_COLL_ALLGATHER, "allgather", true, false, SHUNT_LAYOUT_GATHER,
                              SHUNT_ROOT_NONE, SHUNT_REF_GATHERED},
    [SHUNT_COLL_REDUCESCATTER] = {SHUNT_COLL_REDUCESCATTER, "reducescatter", true, true, SHUNT_LAYOUT_SCATTER,
                                  SHUNT_ROOT_NONE, SHUNT_REF_REDUCED_MINE},
    [SHUNT_COLL_ALLTOALL] = {SHUNT_COLL_ALLTOALL, "alltoall", true, false, SHUNT_LAYOUT_BLOCKS,
                             SHUNT_ROOT_NONE, SHUNT_REF_TRANSPOSED},
    [SHUNT_COLL_BROADCAST] = {SHUNT_COLL_BROADCAST, "broadcast", true, false, SHUNT_LAYOUT_FLAT,
                              SHUNT_ROOT_SENDS, SHUNT_REF_ROOT_INPUT},
    /* MSCCL++'s DSL writes send/receive plans; shunt lists them and never selects them. */
    [SHUNT_COLL_REDUCE] = {SHUNT_COLL_REDUCE, "reduce", true, true, SHUNT_LAYOUT_FLAT, SHUNT_ROOT_RECEIVES,
                           SHUNT_REF_REDUCED_ROOT},
    [SHUNT_COLL_SENDRECV] = {SHUNT_COLL_SENDRECV, "sendrecv", false, false, SHUNT_LAYOUT_FLAT,
                             SHUNT_ROOT_NONE, SHUNT_REF_NONE},
};

const struct shunt_coll_traits* shunt_coll_traits(enum shunt_coll c) {
  return (unsigned)c < SHUNT_COLL_COUNT ? &rows[c] : &rows[SHUNT_COLL_OTHER];
}

enum shunt_coll shunt_coll_by_name(const char* s) {
  for (unsigned k = 0; k < SHUNT_COLL_COUNT; k++)
    if (k != SHUNT_COLL_OTHER && strcmp(s, rows[k].name) == 0) return rows[k].coll;
  return SHUNT_COLL_OTHER;
}

bool shunt_coll_in_sliced(enum shunt_coll c) {
  enum shunt_coll_layout l = shunt_coll_layout(c);
  return l == SHUNT_LAYOUT_SCATTER || l == SHUNT_LAYOUT_BLOCKS;
}

bool shunt_coll_out_sliced(enum shunt_coll c) {
  enum shunt_coll_layout l = shunt_coll_layout(c);
  return l == SHUNT_LAYOUT_GATHER || l == SHUNT_LAYOUT_BLOCKS;
}

uint64_t shunt_coll_in_units(enum shunt_coll c, uint64_t nranks) {
  return shunt_coll_in_sliced(c) ? nranks : 1;
}

uint64_t shunt_coll_out_units(enum shunt_coll c, uint64_t nranks) {
  return shunt_coll_out_sliced(c) ? nranks : 1;
}

uint64_t shunt_coll_size(enum shunt_coll c, uint64_t in_bytes, uint64_t out_bytes) {
  return shunt_coll_layout(c) == SHUNT_LAYOUT_GATHER ? out_bytes : in_bytes;
}

uint64_t shunt_coll_size_units(enum shunt_coll c, uint64_t nranks) {
  return shunt_coll_layout(c) == SHUNT_LAYOUT_GATHER ? nranks : shunt_coll_in_units(c, nranks);
}

uint64_t shunt_coll_unit(enum shunt_coll c, uint64_t nranks, uint64_t in_bytes, uint64_t out_bytes) {
  if (!shunt_coll_in_sliced(c)) return in_bytes;
  if (!shunt_coll_out_sliced(c)) return out_bytes;
  return nranks ? in_bytes / nranks : 0; /* one block */
}

bool shunt_coll_sizes_fit(enum shunt_coll c, const char* name, uint64_t nranks, uint64_t in, uint64_t out,
                          char* reason, size_t len) {
  switch (shunt_coll_layout(c)) {
    case SHUNT_LAYOUT_FLAT:
      if (in != out)
        SHUNT_REFUSE("%s needs equal input and output sizes (%" PRIu64 " vs %" PRIu64 ")", name, in, out);
      break;
    case SHUNT_LAYOUT_GATHER:
      if (out != in * nranks)
        SHUNT_REFUSE("%s needs output = %" PRIu64 " x input (%" PRIu64 " vs %" PRIu64 ")", name, nranks, out,
                     in);
      break;
    case SHUNT_LAYOUT_SCATTER:
      if (in != out * nranks)
        SHUNT_REFUSE("%s needs input = %" PRIu64 " x output (%" PRIu64 " vs %" PRIu64 ")", name, nranks, in,
                     out);
      break;
    case SHUNT_LAYOUT_BLOCKS:
      if (in != out || !nranks || in % nranks)
        SHUNT_REFUSE("%s needs equal input and output sizes of whole blocks per rank (%" PRIu64 " vs %" PRIu64
                     " for %" PRIu64 " ranks)",
                     name, in, out, nranks);
      break;
  }
  return true;
}

const char* shunt_coll_chunk_rule(enum shunt_coll c, uint64_t nranks, uint64_t in_chunks,
                                  uint64_t out_chunks) {
  if (!shunt_coll_served(c)) return NULL;
  switch (shunt_coll_layout(c)) {
    case SHUNT_LAYOUT_GATHER:
      return out_chunks != in_chunks * nranks ? "output_chunks == input_chunks * ranks" : NULL;
    case SHUNT_LAYOUT_SCATTER:
      return in_chunks != out_chunks * nranks ? "input_chunks == output_chunks * ranks" : NULL;
    default: /* one unit, or a block per rank, on both sides */
      return in_chunks != out_chunks ? "input_chunks == output_chunks" : NULL;
  }
}

bool shunt_coll_inplace(enum shunt_coll c, const void* send, const void* recv, uint32_t rank, uint64_t unit) {
  uintptr_t at = (uintptr_t)rank * (uintptr_t)unit;
  switch (shunt_coll_layout(c)) {
    case SHUNT_LAYOUT_GATHER:
      return (uintptr_t)send == (uintptr_t)recv + at;
    case SHUNT_LAYOUT_SCATTER:
      return (uintptr_t)recv == (uintptr_t)send + at;
    default:
      return send == recv;
  }
}

bool shunt_coll_out_in_input(enum shunt_coll c) {
  return shunt_coll_in_sliced(c) && !shunt_coll_out_sliced(c);
}

uint64_t shunt_coll_view_at(enum shunt_coll c, uint32_t rank, uint64_t unit) {
  return shunt_coll_in_sliced(c) != shunt_coll_out_sliced(c) ? (uint64_t)rank * unit : 0;
}

void shunt_coll_place(enum shunt_coll c, uint32_t rank, uint64_t unit, bool inplace, char* in_buf,
                      char* out_buf, char** in, char** out) {
  *in = in_buf;
  *out = out_buf;
  if (!inplace) return;
  if (shunt_coll_out_in_input(c))
    *out = in_buf + shunt_coll_view_at(c, rank, unit);
  else
    *in = out_buf + shunt_coll_view_at(c, rank, unit);
}

void shunt_coll_root_bind(enum shunt_coll c, uint32_t rank, uint32_t root, const void** send, void** recv,
                          bool* inplace) {
  enum shunt_coll_root r = shunt_coll_traits(c)->root;
  if (r == SHUNT_ROOT_NONE || rank == root) return;
  if (r == SHUNT_ROOT_SENDS) {
    *send = *recv;
    *inplace = true;
  } else {
    *recv = NULL;
    *inplace = false;
  }
}

bool shunt_coll_root_overlap(enum shunt_coll c, const void* in, const void* out, uint64_t in_bytes,
                             uint64_t out_bytes) {
  if (!shunt_coll_rooted(c) || shunt_coll_layout(c) != SHUNT_LAYOUT_FLAT || !in || !out || in == out)
    return false;
  const char *i = in, *o = out;
  return i < o + out_bytes && o < i + in_bytes;
}
