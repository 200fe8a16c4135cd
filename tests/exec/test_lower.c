/* Lowering: chunk offsets, tbg slices, packet doubling, pipeline data, refusal reasons, the
 * program cache, an alltoall call's split and strided head, and the block barriers a plan left
 * out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "exec/lower.h"
#include "exec/split.h"
#include "plan/parse.h"

/* Two ranks, LL, double scratch; rank 0 block 0: copy (tbg 1 of 3), ppkt into the peer's
 * scratch (packets at chunk 2), a pipeline of one put into the peer's scratch (data at chunk 1,
 * clear of those packets). Rank 1 mirrors rank 0. */
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
  "\"dst_buff\":[{\"buffer_id\":0,\"index\":2,\"size\":1}]},"                                              \
  "{\"name\":\"pipeline\",\"iter_context\":{\"unit_size\":128,\"num_chunks\":NUMCHUNKS},\"ops\":["         \
  "{\"name\":\"put\",\"channel_type\":\"memory\",\"src_buff\":[{\"type\":\"o\",\"index\":0,\"size\":1}],"  \
  "\"dst_buff\":[{\"buffer_id\":0,\"index\":1,\"size\":1}]}]}]}]}"

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

/* One rank of a 2-rank LL reducescatter whose block 0 runs `ops` (both ranks alike). */
static struct shunt_program* lower_rs(const char* ops) {
  char gpu[2][1500], t[4000];
  for (int r = 0; r < 2; r++)
    snprintf(gpu[r], sizeof(gpu[r]),
             "{\"id\":%d,\"input_chunks\":2,\"output_chunks\":1,\"scratch_chunks\":4,\"channels\":[],"
             "\"remote_buffers\":[],\"threadblocks\":[{\"id\":0,\"channels\":[],\"ops\":[%s]}]}",
             r, ops);
  snprintf(t, sizeof(t),
           "{\"name\":\"rs\",\"collective\":\"reducescatter\",\"protocol\":\"LL\",\"inplace\":false,"
           "\"reuse_resources\":false,\"num_threads_per_block\":256,\"use_double_scratch_buffer\":false,"
           "\"buffer_alignment\":16,\"min_message_size\":0,\"max_message_size\":1073741824,\"gpus\":[%s,%s]}",
           gpu[0], gpu[1]);
  struct shunt_plan_errors errs = {0};
  struct shunt_plan* p = shunt_plan_parse(t, strlen(t), "rs.json", &errs);
  shunt_plan_errors_free(&errs);
  CHECK(p != NULL);
  if (!p) return NULL;
  char why[512];
  struct shunt_call_shape s = {2048, 1024, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, SHUNT_PKT_LL16, 0, false, false};
  struct shunt_program* g = shunt_lower(p, 0, &s, why, sizeof(why));
  CHECK_MSG(g != NULL, "%s", why);
  shunt_plan_free(p);
  return g;
}

#define E(T, I) "{\"type\":\"" T "\",\"index\":" #I ",\"size\":1}"
#define HALF ",\"tbg_info\":{\"tb_id\":1,\"tbg_size\":2}"
#define RECPKT                                                                                          \
  "{\"name\":\"recpkt\",\"src_buff\":[" E("i", 0) "," E("s", 0) "],\"dst_buff\":[" E("i", 0) "," E("s", \
                                                                                                   2) "]}"
#define UPKT "{\"name\":\"upkt\",\"src_buff\":[" E("s", 2) "],\"dst_buff\":[" E("i", 0) "]" HALF "}"
#define REPKT \
  "{\"name\":\"repkt\",\"src_buff\":[" E("i", 0) "," E("s", 1) "],\"dst_buff\":[" E("i", 0) "]" HALF "}"
#define COPY(S, D, T) "{\"name\":\"copy\",\"src_buff\":[" E(S, 0) "],\"dst_buff\":[" E(D, 0) "]" T "}"

/* The block barriers a plan left out (plan/check.h, shunt_plan_block_syncs) are added where
 * the hazard is, inside pipeline bodies too, and nowhere else. */
static void test_added_barriers(void) {
  /* recpkt over the chunk, then repkt over its second half: other threads' bytes. */
  struct shunt_program* g = lower_rs(RECPKT "," REPKT);
  if (g) {
    const struct shunt_prog_op* ops = shunt_prog_ops(g);
    CHECK_EQ_INT(shunt_prog_blocks(g)[0].nops, 3);
    CHECK_EQ_INT(ops[0].type, SHUNT_OP_RECPKT);
    CHECK_EQ_INT(ops[1].type, SHUNT_OP_NOP);
    CHECK_EQ_INT(ops[1].json_op, 1);
    CHECK_EQ_INT(ops[2].type, SHUNT_OP_REPKT);
    shunt_program_free(g);
  }
  /* MSCCL++'s DSL shape: the unpack of the recpkt's own packets orders it; nothing added. */
  g = lower_rs(RECPKT "," UPKT "," REPKT);
  if (g) {
    CHECK_EQ_INT(shunt_prog_blocks(g)[0].nops, 3);
    CHECK_EQ_INT(shunt_prog_ops(g)[1].type, SHUNT_OP_UPKT);
    shunt_program_free(g);
  }
  /* Inside a pipeline: the body grows by the barrier and the pipeline op counts it. */
  g = lower_rs("{\"name\":\"pipeline\",\"iter_context\":{\"unit_size\":1024,\"num_chunks\":1},\"ops\":[" COPY(
      "i", "s", "") "," COPY("s", "o", HALF) "]}");
  if (g) {
    const struct shunt_prog_op* ops = shunt_prog_ops(g);
    CHECK_EQ_INT(shunt_prog_blocks(g)[0].nops, 4);
    CHECK_EQ_INT(ops[0].type, SHUNT_OP_PIPELINE);
    CHECK_EQ_INT(ops[0].b, 3);
    CHECK_EQ_INT(ops[2].type, SHUNT_OP_NOP);
    CHECK_EQ_INT(ops[2].json_inner, 1);
    shunt_program_free(g);
  }
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
  struct shunt_call_shape call = {2000, 2000, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, SHUNT_PKT_LL16, 0, false, false};
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
  CHECK_EQ_INT(sp.out_slices, 2);
  CHECK_EQ_INT(sp.in_slices, 2);
  CHECK_EQ_INT(sp.unit, 1000);
  /* Both sides' padded tails (2 slices of a quantum each), and the head's sizes are the world's
   * staging needs (larger than the tail's). */
  CHECK_EQ_INT(sp.tail_bytes, 2 * 16 + 2 * 16);
  CHECK_EQ_INT(sp.in_need, 2000);
  CHECK_EQ_INT(sp.out_need, 2000);
  CHECK(sp.scratch >= shunt_lower_scratch_need(p, 992 * 2, 992 * 2));
  struct shunt_split again;
  CHECK_MSG(shunt_split_check(p, &call, &again, why, sizeof(why)), "%s", why);
  CHECK_EQ_INT(again.scratch, sp.scratch);
  /* A head of 512 bytes per 1024-byte block: chunk 512, chunk 1 (block 1) at 1024. */
  struct shunt_call_shape h = {2048, 2048, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, SHUNT_PKT_LL16, 512, true, false};
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
    /* scratch is not cut into blocks: the ppkt's remote chunk 2 holds packets at 2 x 1024. */
    CHECK_EQ_INT(r[ops[1].ref + 1].off, 2 * 1024);
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
  struct shunt_call_shape s = {1024, 1024, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, SHUNT_PKT_LL16, 0, false, false};
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
    /* ppkt: the remote scratch entry at chunk 2 holds packets at 2 x 1024. */
    CHECK_EQ_INT(ops[1].type, SHUNT_OP_PPKT);
    CHECK_EQ_INT(r[ops[1].ref].off, 0);
    CHECK_EQ_INT(r[ops[1].ref].flags, 0);
    CHECK_EQ_INT(r[ops[1].ref + 1].off, 2048);
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
    CHECK_EQ_INT(r[ops[3].ref + 1].off, 512); /* data, not packets: chunk 1 */
    CHECK_EQ_INT(r[ops[3].ref + 1].flags, 0);
    shunt_program_free(g);
  }
  /* chunks x packet doubling x double scratch, twice: the packet plans' part and the others'. */
  CHECK_EQ_INT(shunt_lower_scratch_need(p, 1024, 1024), 512 * 4 * 2 * 2 * 2);

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
  test_added_barriers();
  test_alltoall();
  CHECK_DONE();
}
