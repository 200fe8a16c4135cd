/* The double's communicators: a registry that tells its own handles from anything else a
 * test passes (those only get the recorded, scripted answer), creation, split, teardown,
 * and reduction operators, PreMulSum included. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakenccl/fake_internal.h"

#define FAKE_COMM_MAGIC 0x66616b65u

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm** reg;
static size_t reg_len, reg_cap;

struct ncclComm* fake_comm_find(ncclComm_t comm) {
  struct ncclComm* found = NULL;
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < reg_len && !found; i++)
    if (reg[i] == comm) found = comm;
  pthread_mutex_unlock(&reg_mu);
  return found;
}

static int reg_add(struct ncclComm* c) {
  pthread_mutex_lock(&reg_mu);
  if (reg_len == reg_cap) {
    size_t cap = reg_cap ? 2 * reg_cap : 16;
    struct ncclComm** r = realloc(reg, cap * sizeof(*r));
    if (!r) {
      pthread_mutex_unlock(&reg_mu);
      return -1;
    }
    reg = r;
    reg_cap = cap;
  }
  reg[reg_len++] = c;
  pthread_mutex_unlock(&reg_mu);
  return 0;
}

static void reg_remove(struct ncclComm* c) {
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < reg_len; i++)
    if (reg[i] == c) reg[i] = reg[--reg_len];
  pthread_mutex_unlock(&reg_mu);
}

static ncclResult_t comm_alloc(struct ncclComm** out, int nranks, int rank, const char* name) {
  if (nranks < 1 || nranks > FAKE_MAX_RANKS || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  struct ncclComm* c = calloc(1, sizeof(*c));
  if (!c) return ncclSystemError;
  c->magic = FAKE_COMM_MAGIC;
  c->nranks = nranks;
  c->rank = rank;
  c->blocking = 1;
  snprintf(c->name, sizeof(c->name), "%s", name);
  if (reg_add(c) != 0) {
    free(c);
    return ncclSystemError;
  }
  *out = c;
  return ncclSuccess;
}

/* The segment is named from the id bytes the double owns, so every rank finds the same one. */
ncclResult_t fake_comm_new(struct ncclComm** out, int nranks, int rank, const ncclUniqueId* id) {
  char name[96] = "/fakenccl-";
  size_t len = strlen(name);
  for (int i = 0; i < FAKE_ID_BYTES; i++, len += 2)
    snprintf(name + len, sizeof(name) - len, "%02x", (unsigned char)id->internal[i]);
  return comm_alloc(out, nranks, rank, name);
}

void fake_comm_free(struct ncclComm* c) {
  reg_remove(c);
  fake_segment_unmap(c);
  c->magic = 0;
  free(c);
}

/* Makes and connects rank `me` of an `n`-rank child of p, in a segment named from a hash of
 * `tag`, which every member derives alike. */
static ncclResult_t make_child(struct ncclComm* p, const char* kind, const char* tag, int n, int me,
                               ncclComm_t* newcomm) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char* s = tag; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  char name[64];
  snprintf(name, sizeof(name), "/fakenccl-%s-%016llx", kind, (unsigned long long)h);
  struct ncclComm* c;
  ncclResult_t rc = comm_alloc(&c, n, me, name);
  if (rc != ncclSuccess) return rc;
  c->blocking = p->blocking;
  rc = fake_comm_connect(c);
  if (rc != ncclSuccess) {
    fake_comm_free(c);
    return rc;
  }
  *newcomm = c;
  return ncclSuccess;
}

/* Ranks announce (color, key) in the parent's segment; members of one color are ordered by
 * key, then parent rank, as NCCL orders them. */
ncclResult_t fake_comm_split(struct ncclComm* p, int color, int key, ncclComm_t* newcomm) {
  *fake_info(p, p->rank) = (struct fake_rank_info){color, key};
  ncclResult_t rc = fake_barrier_wait(&p->seg->barrier);
  if (rc != ncclSuccess) return rc;
  int n = 0, me = 0;
  for (int r = 0; r < p->nranks; r++) {
    struct fake_rank_info* o = fake_info(p, r);
    if (o->color != color) continue;
    n++;
    if (o->key < key || (o->key == key && r < p->rank)) me++;
  }
  rc = fake_barrier_wait(&p->seg->barrier); /* the infos may be overwritten after this */
  int seq = p->splits++;
  if (rc != ncclSuccess) return rc;
  *newcomm = NULL;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  char tag[160]; /* parent, split number, color */
  snprintf(tag, sizeof(tag), "%s/%d/%d", p->name, seq, color);
  return make_child(p, "split", tag, n, me, newcomm);
}

ncclResult_t fake_comm_shrink(struct ncclComm* p, const int* exclude, int nexclude, ncclComm_t* newcomm) {
  int me = p->rank;
  for (int i = 0; i < nexclude; i++) me -= exclude[i] < p->rank;
  char tag[160]; /* parent, shrink number, then the excluded ranks while they fit */
  int len = snprintf(tag, sizeof(tag), "%s/%d", p->name, p->shrinks++);
  for (int i = 0; i < nexclude && len > 0 && (size_t)len < sizeof(tag); i++)
    len += snprintf(tag + len, sizeof(tag) - (size_t)len, "/%d", exclude[i]);
  return make_child(p, "shrink", tag, p->nranks - nexclude, me, newcomm);
}

static double as_type_f(ncclDataType_t t, double v) {
  unsigned char tmp[8];
  fake_store_f(t, tmp, 0, v);
  return fake_load_f(t, tmp, 0);
}

ncclResult_t fake_redop_resolve(struct ncclComm* c, ncclRedOp_t op, ncclDataType_t dtype,
                                struct fake_redop* out) {
  memset(out, 0, sizeof(*out));
  int is_float = fake_dtype_is_float(dtype);
  switch (op) {
    case ncclSum:
      out->combine = FAKE_SUM;
      return ncclSuccess;
    case ncclProd:
      out->combine = FAKE_PROD;
      return ncclSuccess;
    case ncclMin:
      out->combine = FAKE_MIN;
      return ncclSuccess;
    case ncclMax:
      out->combine = FAKE_MAX;
      return ncclSuccess;
    case ncclAvg:
      /* as NCCL: floating types pre-multiply by 1/n in the type, integers divide the sum */
      out->combine = FAKE_SUM;
      if (is_float) {
        out->premul = 1;
        out->scalar_f = as_type_f(dtype, 1.0 / c->nranks);
      } else {
        out->post_div = 1;
      }
      return ncclSuccess;
    default:
      break;
  }
  if ((int)op < ncclNumOps || (int)op >= ncclNumOps + FAKE_MAX_USER_OPS) return ncclInvalidArgument;
  struct fake_user_op* u = &c->ops[op - ncclNumOps];
  if (!u->in_use || u->dtype != dtype) return ncclInvalidArgument;
  const void* s = u->residence == ncclScalarHostImmediate ? u->scalar : u->scalar_ptr;
  out->combine = FAKE_SUM;
  out->premul = 1;
  fake_device_work(1); /* a device-resident scalar: read as NCCL's kernel reads it */
  if (is_float)
    out->scalar_f = fake_load_f(dtype, s, 0);
  else
    out->scalar_u = fake_load_u(dtype, s, 0);
  fake_device_work(0);
  return ncclSuccess;
}
