/* Parser: the seed plan, every field, and one clear error per kind of bad input. */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "plan/check.h"
#include "plan/parse.h"
#include "plan_test_util.h"

/* Parses text, expects failure with one error whose path and reason contain the given text. */
static void expect_parse_error(const char* text, const char* path, const char* reason) {
  struct shunt_plan_errors e = {0};
  struct shunt_plan* p = shunt_plan_parse(text, strlen(text), "t.json", &e);
  CHECK_MSG(p == NULL, "expected a parse error for path %s", path);
  CHECK_EQ_INT(e.n, 1);
  if (e.n) {
    CHECK_STR_CONTAINS(e.v[0].file, "t.json");
    if (path) CHECK_STR_CONTAINS(e.v[0].path, path);
    CHECK_STR_CONTAINS(e.v[0].reason, reason);
  }
  shunt_plan_free(p);
  shunt_plan_errors_free(&e);
}

static struct shunt_plan* parse_ok(const char* text) {
  struct shunt_plan_errors e = {0};
  struct shunt_plan* p = shunt_plan_parse(text, strlen(text), "t.json", &e);
  CHECK_MSG(p != NULL, "parse failed: %s %s", e.n ? e.v[0].path : "", e.n ? e.v[0].reason : "");
  shunt_plan_errors_free(&e);
  return p;
}

static void test_seed(void) {
  struct shunt_plan_errors e = {0};
  struct shunt_plan* p = shunt_plan_load_file(SEED_PLAN, &e);
  CHECK(p != NULL);
  if (!p) return;
  CHECK_STR_CONTAINS(p->name, "transfer_pack");
  CHECK_EQ_INT(p->coll, SHUNT_COLL_ALLGATHER);
  CHECK(p->ll && p->inplace && p->use_double_scratch_buffer && !p->reuse_resources);
  CHECK(p->max_message_size == UINT64_MAX); /* exact, not through a double */
  CHECK_EQ_INT(p->ngpus, 2);
  CHECK_EQ_INT(p->gpus[1].nthreadblocks, 3);
  const struct shunt_plan_op* o = &p->gpus[0].threadblocks[0].ops[0];
  CHECK_EQ_INT(o->type, SHUNT_OP_PPKT);
  CHECK_EQ_INT(o->channel_type, SHUNT_CHAN_MEMORY);
  CHECK_EQ_INT(o->dst[0].kind, SHUNT_REF_REMOTE);
  CHECK_EQ_INT(o->dst[0].peer, 1);
  CHECK_EQ_INT(o->dst[0].type, SHUNT_BUF_SCRATCH);
  CHECK_EQ_INT(o->dst[0].global, 0);
  CHECK_EQ_INT(p->gpus[0].channels[SHUNT_CHAN_MEMORY][0].peer, 1);
  CHECK_EQ_INT(p->gpus[0].remote_buffers[0].type_index[SHUNT_CHAN_MEMORY], 0);
  CHECK_EQ_INT(p->gpus[0].remote_buffers[0].type_index[SHUNT_CHAN_PORT], -1);
  CHECK_EQ_INT(shunt_plan_check(p, NULL, &e), 0);
  CHECK_EQ_INT(shunt_plan_check_races(p, &e), 0);
  for (uint32_t i = 0; i < e.n; i++) fprintf(stderr, "unexpected: %s: %s\n", e.v[i].path, e.v[i].reason);
  shunt_plan_free(p);
  shunt_plan_errors_free(&e);
}

static void test_fields(void) {
  /* A plan with every op field: pipeline, tbg, switch channels, port channels, reduce_op. */
  const char* text =
      "{\"name\":\"f\",\"collective\":\"allreduce\",\"protocol\":\"Simple\",\"inplace\":true,\"gpus\":["
      "{\"id\":0,\"input_chunks\":2,\"output_chunks\":2,\"scratch_chunks\":0,"
      " \"channels\":[{\"channel_type\":\"switch\",\"buffer_type\":\"i\",\"rank_groups\":[{\"size\":2,"
      "\"ranks\":[0,1]}]},"
      "  {\"channel_type\":\"port\",\"connected_to\":[1,1]}],"
      " \"remote_buffers\":[{\"rank\":1,\"type\":\"o\",\"access_channel_types\":[\"memory\",\"port\"]}],"
      " \"threadblocks\":[{\"id\":0,\"channels\":[{\"channel_type\":\"switch\",\"channel_ids\":[0]},"
      "  {\"channel_type\":\"port\",\"channel_ids\":[1,0],\"buff\":\"x\"}],"
      "  \"remote_buffer_refs\":[{\"access_channel_type\":\"port\",\"remote_buffer_ids\":[0]}],"
      "  \"ops\":[{\"name\":\"pipeline\",\"iter_context\":{\"unit_size\":1048576,\"num_chunks\":1},\"ops\":["
      "   {\"name\":\"glres\",\"src_buff\":[{\"switch_channel_id\":0,\"index\":0,\"size\":1}],"
      "    "
      "\"dst_buff\":[{\"switch_channel_id\":0,\"index\":0,\"size\":1}],\"tbg_info\":{\"tb_id\":1,\"tbg_"
      "size\":4},"
      "    \"reduce_op\":\"max\"}]},"
      "   "
      "{\"name\":\"pws\",\"channel_type\":\"port\",\"channel_ids\":[0],\"src_buff\":[{\"type\":\"i\","
      "\"index\":1,\"size\":1}],"
      "    \"dst_buff\":[{\"buffer_id\":0,\"index\":1,\"size\":1}]},"
      "   {\"name\":\"barrier\",\"barrier_id\":3,\"num_threadblocks\":1}]}]},"
      "{\"id\":1,\"input_chunks\":2,\"output_chunks\":2,\"scratch_chunks\":0,\"channels\":[],\"remote_"
      "buffers\":[],"
      " \"threadblocks\":[]}]}";
  struct shunt_plan* p = parse_ok(text);
  if (!p) return;
  CHECK(p->num_threads_per_block == 1024 && p->buffer_alignment == 16 && p->min_message_size == 0);
  const struct shunt_plan_gpu* g = &p->gpus[0];
  CHECK_EQ_INT(g->nchannels[SHUNT_CHAN_SWITCH], 1);
  CHECK_EQ_INT(g->channels[SHUNT_CHAN_SWITCH][0].nranks, 2);
  CHECK_EQ_INT(g->channels[SHUNT_CHAN_SWITCH][0].buffer_type, SHUNT_BUF_INPUT);
  CHECK_EQ_INT(g->nchannels[SHUNT_CHAN_PORT], 2);
  CHECK_EQ_INT(g->channels[SHUNT_CHAN_PORT][1].peer_ordinal, 1);
  CHECK_EQ_INT(g->remote_buffers[0].type_index[SHUNT_CHAN_PORT], 0);
  const struct shunt_plan_threadblock* tb = &g->threadblocks[0];
  CHECK_EQ_INT(tb->nops, 3);
  CHECK_EQ_INT(tb->nops_flat, 4);
  const struct shunt_plan_op* pl = &tb->ops[0];
  CHECK_EQ_INT(pl->type, SHUNT_OP_PIPELINE);
  CHECK(pl->unit_size == 1048576 && pl->num_chunks == 1 && pl->nops == 1);
  CHECK_EQ_INT(pl->ops[0].type, SHUNT_OP_GLRES);
  CHECK(pl->ops[0].has_tbg && pl->ops[0].tbg_id == 1 && pl->ops[0].tbg_size == 4);
  CHECK_EQ_INT(pl->ops[0].src[0].kind, SHUNT_REF_SWITCH);
  CHECK_EQ_INT(pl->ops[0].src[0].global, 0);
  CHECK_EQ_INT(p->reduce_op, SHUNT_PLAN_REDOP_MAX);
  const struct shunt_plan_op* pws = &tb->ops[1];
  CHECK_EQ_INT(pws->channel_global[0], 1); /* local table [1, 0] */
  CHECK_EQ_INT(pws->dst[0].peer, 1);
  CHECK_EQ_INT(pws->dst[0].type, SHUNT_BUF_OUTPUT);
  CHECK(tb->ops[2].has_barrier && tb->ops[2].barrier_id == 3);
  shunt_plan_free(p);
}

static void test_errors(void) {
  expect_parse_error("", NULL, "empty file");
  expect_parse_error("   \n", NULL, "empty file");
  char* base = base_plan(NULL);
  /* Truncated: half a plan. */
  char* half = strdup(base);
  half[strlen(half) / 2] = '\0';
  expect_parse_error(half, NULL, "invalid JSON");
  free(half);
  /* Trailing garbage. */
  size_t bl = strlen(base);
  char* trail = malloc(bl + 8);
  snprintf(trail, bl + 8, "%s xyz", base);
  expect_parse_error(trail, NULL, "after the top-level value");
  free(trail);
  /* Deep nesting. */
  size_t depth = 100000;
  char* deep = malloc(2 * depth + 1);
  memset(deep, '[', depth);
  memset(deep + depth, ']', depth);
  deep[2 * depth] = '\0';
  expect_parse_error(deep, NULL, "nesting");
  free(deep);
  expect_parse_error("[1, 2]", NULL, "not a JSON object");

  /* Numbers out of range. */
  char* s = edit(strdup(base), "\"min_message_size\": 0", "\"min_message_size\": -1", 1);
  expect_parse_error(s, "min_message_size", "negative");
  free(s);
  s = edit(strdup(base), "\"max_message_size\": 18446744073709551615",
           "\"max_message_size\": 18446744073709551616", 1);
  expect_parse_error(s, "max_message_size", "out of range");
  free(s);
  s = edit(strdup(base), "\"max_message_size\": 18446744073709551615", "\"max_message_size\": 1e30", 1);
  expect_parse_error(s, "max_message_size", "expected an integer");
  free(s);
  s = edit(strdup(base), "\"input_chunks\": 2", "\"input_chunks\": 4294967296", 2);
  expect_parse_error(s, "gpus[1].input_chunks", "out of range");
  free(s);
  s = edit(strdup(base), "\"index\": 0, \"size\": 1}]", "\"index\": 2.5, \"size\": 1}]", 1);
  expect_parse_error(s, "gpus[0].threadblocks[0].ops[0].dst_buff[0].index", "expected an integer");
  free(s);
  s = edit(strdup(base), "\"channel_ids\": [0], \"channel_type\": \"memory\"},",
           "\"channel_ids\": [-3], \"channel_type\": \"memory\"},", 3);
  expect_parse_error(s, "gpus[1].threadblocks[0].ops[2].channel_ids[0]", "negative");
  free(s);

  /* Duplicate keys are rejected. */
  s = edit(strdup(base), "\"name\": \"base\"", "\"name\": \"base\", \"name\": \"other\"", 1);
  expect_parse_error(s, "name", "duplicate key");
  free(s);
  s = edit(strdup(base), "{\"name\": \"nop\"}", "{\"name\": \"nop\", \"name\": \"nop\"}", 2);
  expect_parse_error(s, "gpus[0].threadblocks[0].ops[4].name", "duplicate key");
  free(s);

  /* Wrong types, missing keys, unknown names. */
  s = edit(strdup(base), "\"inplace\": false", "\"inplace\": \"no\"", 1);
  expect_parse_error(s, "inplace", "expected a boolean, got a string");
  free(s);
  s = edit(strdup(base), "\"collective\": \"allreduce\", ", "", 1);
  expect_parse_error(s, "collective", "missing required key");
  free(s);
  s = edit(strdup(base), "{\"name\": \"re\"", "{\"name\": \"reduce\"", 2);
  expect_parse_error(s, "gpus[1].threadblocks[0].ops[5].name", "unknown op 'reduce'");
  free(s);
  s = edit(strdup(base), "{\"name\": \"re\"", "{\"name\": \"glre\"", 1);
  expect_parse_error(s, "gpus[0].threadblocks[0].ops[5].name", "glre");
  free(s);
  s = edit(strdup(base), "\"type\": \"i\", \"index\": 1", "\"type\": \"x\", \"index\": 1", 1);
  expect_parse_error(s, "gpus[0].threadblocks[0].ops[0].src_buff[0].type", "unknown buffer type");
  free(s);
  s = edit(strdup(base), "\"channel_type\": \"memory\", \"connected_to\"",
           "\"channel_type\": \"nvlink\", \"connected_to\"", 1);
  expect_parse_error(s, "gpus[0].channels[0].channel_type", "unknown channel type");
  free(s);
  s = edit(strdup(base), "\"index\": 0, \"size\": 1}]", "\"index\": 0, \"size\": 1, \"type\": \"s\"}]", 1);
  expect_parse_error(s, "gpus[0].threadblocks[0].ops[0].dst_buff[0]", "exactly one of");
  free(s);
  s = edit(strdup(base), "{\"name\": \"nop\"}", "{\"name\": \"nop\", \"iter_context\": {}}", 1);
  expect_parse_error(s, "gpus[0].threadblocks[0].ops[1].iter_context", "only a pipeline");
  free(s);

  /* Unknown extra keys are ignored. */
  s = edit(strdup(base), "\"name\": \"base\"", "\"name\": \"base\", \"comment\": [1, {\"x\": 2}]", 1);
  s = edit(s, "{\"name\": \"nop\"}", "{\"name\": \"nop\", \"debug\": \"x\"}", 1);
  struct shunt_plan* p = parse_ok(s);
  shunt_plan_free(p);
  free(s);

  /* Legacy format. */
  const char* legacy =
      "{\"name\":\"old\",\"collective\":\"allreduce\",\"protocol\":\"LL\",\"inplace\":true,\"gpus\":[{\"id\":"
      "0,"
      "\"inputChunks\":2,\"outputChunks\":2,\"scratchChunks\":0,\"chunkGroups\":1,\"threadblocks\":[],"
      "\"channels\":[]}]}";
  expect_parse_error(legacy, "gpus[0]", "legacy MSCCL++ plan format");
  s = edit(strdup(base), "{\"name\": \"nop\"}", "{\"name\": \"nop\", \"i_buff\": {\"src\": \"i\"}}", 1);
  expect_parse_error(s, "gpus[0].threadblocks[0].ops[1]",
                     "legacy MSCCL++ plan format (v0.7 or older; key 'i_buff')");
  free(s);
  free(base);
}

int main(void) {
  test_seed();
  test_fields();
  test_errors();
  CHECK_DONE();
}
