/* Lowering: chunk offsets, tbg slices, packet doubling, pipeline data, refusal reasons, the
 * program cache, and an alltoall call's split and strided head. */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "exec/lower.h"
#include "exec/split.h"
#include "plan/parse.h"

/* Two ranks, LL, double scratch; rank 0 block 0: copy (tbg 1 of 3), ppkt into the peer's
 * scratch, a pipeline of one put into the peer's scratch. Rank 1 mirrors rank 0. */
#define GPU(ID, PEER)                                                                                      \
  "{\"id\":" #ID                                                                                           \
  ",\"input_chunks\":2,\"output_chunks\":2,\"scratch_chunks\":4,"                                          \
  "\"channels\":[{\"channel_type\":\"memory\",\"connected_to\":[" #PEER                                    \
  "]}],"                                                                                                   \
  "\"remote_buffers\":[{\"rank\":" #PEER                                                                   \
  ",\"type\":\"s\",\"access_channel_types\":[\"memory\"]}],"                                               \
  "\"threadblocks\":[{\"id\":0,\"channels\":[{\"channel_type\":\"memory\",\"channel_ids\":[0]}],"          \
  "\"remote_buffer_refs\":[{\"access_channel_type\":\"memory\",\"remote_buffer_ids\":[0]}],\"ops\":["      \
  "{\"name\":\"copy\",\"src_buff\":[{\"type\":\"i\",\"index\":1,\"size\":1}],"                             \
  "\"dst_buff\":[{\"type\":\"o\",\"index\":1,\"size\":1}],\"tbg_info\":{\"tb_id\":1,\"tbg_size\":3}},"     \
  "{\"name\":\"ppkt\",\"channel_type\":\"memory\",\"src_buff\":[{\"type\":\"i\",\"index\":0,\"size\":1}]," \
  "\"dst_buff\":[{\"buffer_id\":0,\"index\":1,\"size\":1}]},"                                              \
  "{\"name\":\"pipeline\",\"iter_context\":{\"unit_size\":128,\"num_chunks\":NUMCHUNKS},\"ops\":["         \
  "{\"name\":\"put\",\"channel_type\":\"memory\",\"src_buff\":[{\"type\":\"o\",\"index\":0,\"size\":1}],"  \
  "\"dst_buff\":[{\"buffer_id\":0,\"index\":2,\"size\":1}]}]}]}]}"

static const char* plan_text =
    "{\"name\":\"lower_test\",\"collective\":\"allreduce\",\"protocol\":\"LL\",\"inplace\":false,"
    "\"reuse_resources\":false,\"num_threads_per_block\":256,\"use_double_scratch_buffer\":true,"
    "\"buffer_alignment\":16,\"min_message_size\":256,\"max_message_size\":1048576,\"gpus\":[" GPU(
        0, 1) "," GPU(1, 0) "]}";

/* The plan above as `collective` (NULL: allreduce). */
static struct shunt_plan* load_as(int num_chunks, const char* collective) {
  char* t = malloc(strlen(plan_text) + 64);
  char* o = t;
  for (const char* s = plan_text; *s;) {
    if (!strncmp(s, "NUMCHUNKS", 9)) {
      o += sprintf(o, "%d", num_chunks);
      s += 9;
    } else if (collective && !strncmp(s, "\"allreduce\"", 11)) {
      o += sprintf(o, "\"%s\"", collective);
      s += 11;
    } else {
      *o++ = *s++;
    }
  }
  *o = 0;
  struct shunt_plan_errors errs = {0};
  struct shunt_plan* p = shunt_plan_parse(t, strlen(t), "lower_test.json", &errs);
  char buf[1200];
  for (uint32_t i = 0; i < errs.n; i++)
    fprintf(stderr, "%s\n", shunt_plan_error_format(&errs.v[i], buf, sizeof(buf)));
  shunt_plan_errors_free(&errs);
  free(t);
  return p;
}

static struct shunt_plan* load(int num_chunks) {
  return load_as(num_chunks, NULL);
}

/* Alltoall (one chunk per block here): a call of 1000 bytes per block splits into a head of 992
 * and a padded tail; the head keeps both buffers' blocks 1000 bytes apart. */
static void test_alltoall(void) {
  struct shunt_plan* p = load_as(1, "alltoall");
  CHECK(p != NULL);
  if (!p) return;
  char why[512];
  struct shunt_call_shape call = {2000, 2000, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, SHUNT_PKT_LL16, 0, false};
  struct shunt_split sp;
  CHECK_MSG(shunt_split_call(p, &call, &sp, why, sizeof(why)), "%s", why);
  CHECK_EQ_INT(sp.quantum, 16);
  CHECK_EQ_INT(sp.head, 992);
  CHECK_EQ_INT(sp.rest, 8);
  CHECK_EQ_INT(sp.head_shape.in_bytes, 2000);
  CHECK_EQ_INT(sp.head_shape.out_bytes, 2000);
  CHECK_EQ_INT(sp.head_shape.out_stride, 992);
  CHECK_EQ_INT(sp.tail_shape.in_bytes, 32);
  CHECK_EQ_INT(sp.tail_shape.out_bytes, 32);
  CHECK_EQ_INT(shunt_split_slices(p), 2);
  CHECK_EQ_INT(shunt_split_in_slices(p), 2);
  CHECK_MSG(shunt_split_check(p, &call, why, sizeof(why)), "%s", why);
  /* A head of 512 bytes per 1024-byte block: chunk 512, chunk 1 (block 1) at 1024. */
  struct shunt_call_shape h = {2048, 2048, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, SHUNT_PKT_LL16, 512, true};
  struct shunt_program* g = shunt_lower(p, 0, &h, why, sizeof(why));
  CHECK_MSG(g != NULL, "%s", why);
  if (g) {
    CHECK_EQ_INT(g->chunk_bytes, 512);
    CHECK_EQ_INT(g->out_stride, 1024);
    CHECK_EQ_INT(g->in_bytes, 2048); /* the real buffers: what staging copies */
    const struct shunt_prog_op* ops = shunt_prog_ops(g);
    const struct shunt_prog_ref* r = shunt_prog_refs(g);
    /* copy i[1] -> o[1], tbg slice 1 of 3 (176 bytes at 176): both in block 1. */
    CHECK_EQ_INT(r[ops[0].ref].off, 1024 + 176);
    CHECK_EQ_INT(r[ops[0].ref + 1].off, 1024 + 176);
    /* scratch is not cut into blocks: the ppkt's remote chunk 1 holds packets at 2 x 512. */
    CHECK_EQ_INT(r[ops[1].ref + 1].off, 2 * 512);
    shunt_program_free(g);
  }
  /* A head as wide as its blocks is no head. */
  h.out_stride = 1024;
  CHECK(!shunt_lower_check_call(p, -1, &h, why, sizeof(why)));
  CHECK_STR_CONTAINS(why, "does not fit 2 blocks");
  shunt_plan_free(p);
}

int main(void) {
  struct shunt_plan* p = load(1);
  CHECK(p != NULL);
  if (!p) CHECK_DONE();
  char why[512];
  struct shunt_call_shape s = {1024, 1024, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, SHUNT_PKT_LL16, 0, false};
  struct shunt_program* g = shunt_lower(p, 0, &s, why, sizeof(why));
  CHECK_MSG(g != NULL, "%s", why);
  if (g) {
    CHECK_EQ_INT(g->nblocks, 1);
    CHECK_EQ_INT(g->nops, 4);
    CHECK_EQ_INT(g->chunk_bytes, 512);
    CHECK_EQ_INT(g->scratch_bytes, 512 * 4 * 2); /* one half: chunks x packet doubling */
    CHECK_EQ_INT(g->remote_access, 0);           /* only scratch is reached remotely */
    const struct shunt_prog_op* ops = shunt_prog_ops(g);
    const struct shunt_prog_ref* r = shunt_prog_refs(g);
    /* copy: chunk 1 = [512, 1024); tbg slice 1 of 3 over 32 units of 16: units 11..22. */
    CHECK_EQ_INT(ops[0].type, SHUNT_OP_COPY);
    CHECK_EQ_INT(r[ops[0].ref].off, 512 + 176);
    CHECK_EQ_INT(r[ops[0].ref].bytes, 176);
    CHECK_EQ_INT(r[ops[0].ref + 1].off, 512 + 176);
    /* ppkt: the remote scratch entry at chunk 1 holds packets at 2 x 512. */
    CHECK_EQ_INT(ops[1].type, SHUNT_OP_PPKT);
    CHECK_EQ_INT(r[ops[1].ref].off, 0);
    CHECK_EQ_INT(r[ops[1].ref].flags, 0);
    CHECK_EQ_INT(r[ops[1].ref + 1].off, 1024);
    CHECK_EQ_INT(r[ops[1].ref + 1].bytes, 512);
    CHECK_EQ_INT(r[ops[1].ref + 1].flags, SHUNT_PREF_PACKETS);
    CHECK_EQ_INT(r[ops[1].ref + 1].kind, SHUNT_PREF_REMOTE);
    CHECK_EQ_INT(r[ops[1].ref + 1].slot, 1);
    CHECK_EQ_INT(r[ops[1].ref + 1].buf, SHUNT_BUF_SCRATCH);
    /* pipeline: ceil(1 chunk x 512 / 128) = 4 iterations over one inner op. */
    CHECK_EQ_INT(ops[2].type, SHUNT_OP_PIPELINE);
    CHECK_EQ_INT(ops[2].a, 4);
    CHECK_EQ_INT(ops[2].b, 1);
    CHECK_EQ_INT(ops[2].unit, 128);
    CHECK_EQ_INT(ops[3].type, SHUNT_OP_PUT);
    CHECK_EQ_INT(ops[3].json_op, 2);
    CHECK_EQ_INT(ops[3].json_inner, 0);
    CHECK_EQ_INT(r[ops[3].ref + 1].off, 1024); /* data, not packets: chunk 2 */
    CHECK_EQ_INT(r[ops[3].ref + 1].flags, 0);
    shunt_program_free(g);
  }
  CHECK_EQ_INT(shunt_lower_scratch_need(p, 1024, 1024), 512 * 4 * 2 * 2);

  /* Refusals, each with its reason. */
  CHECK(!shunt_lower_check(p, -1, 1000, 1000, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, why, sizeof(why)));
  CHECK_STR_CONTAINS(why, "not multiples of buffer_alignment 16");
  CHECK(!shunt_lower_check(p, -1, 272, 272, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, why, sizeof(why)));
  CHECK_STR_CONTAINS(why, "does not split into 2 chunks");
  CHECK(!shunt_lower_check(p, -1, 128, 128, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, why, sizeof(why)));
  CHECK_STR_CONTAINS(why, "outside the plan's range [256, 1048576]");
  CHECK(!shunt_lower_check(p, -1, 1024, 2048, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, why, sizeof(why)));
  CHECK_STR_CONTAINS(why, "chunk sizes differ");
  CHECK(!shunt_lower_check(p, 5, 1024, 1024, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, why, sizeof(why)));
  CHECK_STR_CONTAINS(why, "rank 5");
  CHECK(!shunt_lower_check(p, -1, 1024, 1024, SHUNT_DT_FLOAT32, SHUNT_REDOP_OTHER, why, sizeof(why)));
  CHECK_STR_CONTAINS(why, "not computed");
  CHECK(shunt_lower_check(p, -1, 1024, 1024, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, why, sizeof(why)));
  CHECK(shunt_lower_check(p, 1, 1024, 1024, SHUNT_DT_INT8, SHUNT_REDOP_MAX, why, sizeof(why)));

  /* The cache hands out one program per shape and keeps it valid after destruction. */
  struct shunt_lower_cache* c = shunt_lower_cache_create(1);
  const struct shunt_program* a = shunt_lower_cache_get(c, p, 0, &s, why, sizeof(why));
  const struct shunt_program* b = shunt_lower_cache_get(c, p, 0, &s, why, sizeof(why));
  CHECK(a != NULL && a == b);
  struct shunt_call_shape s2 = s;
  s2.in_bytes = s2.out_bytes = 2048;
  const struct shunt_program* d = shunt_lower_cache_get(c, p, 0, &s2, why, sizeof(why)); /* evicts a */
  CHECK(d != NULL && d != a);
  if (d) CHECK_EQ_INT(d->chunk_bytes, 1024);
  shunt_lower_cache_destroy(c);
  if (a) CHECK_EQ_INT(a->chunk_bytes, 512);
  shunt_lower_cache_release(NULL, a);
  shunt_lower_cache_release(NULL, b);
  shunt_lower_cache_release(NULL, d);
  shunt_plan_free(p);

  /* A pipeline covering 2 chunks leaves the 1-chunk put with empty windows. */
  p = load(2);
  CHECK(p != NULL);
  if (p) {
    CHECK(!shunt_lower_check(p, -1, 1024, 1024, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, why, sizeof(why)));
    CHECK_STR_CONTAINS(why, "pipeline window 7 (offset 896) is empty");
    shunt_plan_free(p);
  }
  test_alltoall();
  CHECK_DONE();
}
