/* Static checks and the race checker: the base plan passes; each plan broken on purpose is
 * caught with the right JSON path and reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "plan/check.h"
#include "plan/parse.h"
#include "plan_test_util.h"

enum which { STATIC, RACES };

static void dump(const struct shunt_plan_errors* e) {
  for (uint32_t i = 0; i < e->n; i++) fprintf(stderr, "  got: %s: %s\n", e->v[i].path, e->v[i].reason);
}

/* Frees text. */
static void expect(char* text, enum which w, uint32_t max_tbs, const char* path, const char* reason,
                   int line) {
  struct shunt_plan_errors e = {0};
  struct shunt_plan* p = shunt_plan_parse(text, strlen(text), "broken.json", &e);
  CHECK_MSG(p != NULL, "line %d: parse failed: %s: %s", line, e.n ? e.v[0].path : "",
            e.n ? e.v[0].reason : "");
  if (p) {
    struct shunt_check_opts o = {.max_threadblocks = max_tbs};
    unsigned n = w == STATIC ? shunt_plan_check(p, &o, &e) : shunt_plan_check_races(p, &e);
    bool found = false;
    for (uint32_t i = 0; i < e.n; i++)
      if (strstr(e.v[i].path, path) && strstr(e.v[i].reason, reason) &&
          strcmp(e.v[i].file, "broken.json") == 0)
        found = true;
    CHECK_MSG(n > 0 && found, "line %d: expected an error at '%s' containing '%s'", line, path, reason);
    if (!found) dump(&e);
  }
  shunt_plan_free(p);
  shunt_plan_errors_free(&e);
  free(text);
}
#define EXPECT(text, path, reason) expect((text), STATIC, 0, (path), (reason), __LINE__)
#define EXPECT_RACE(text, path, reason) expect((text), RACES, 0, (path), (reason), __LINE__)

/* A pipeline of n nops followed by the text it replaces (the base plan's block 1 holds 3 more
 * ops). Returns a static buffer. */
static const char* pipeline_of(int n) {
  static char big[16384];
  int at = snprintf(big, sizeof(big),
                    "{\"name\": \"pipeline\", \"iter_context\": {\"unit_size\": 65536, "
                    "\"num_chunks\": 1}, \"ops\": [");
  for (int i = 0; i < n; i++)
    at += snprintf(big + at, sizeof(big) - at, "%s{\"name\": \"nop\"}", i ? "," : "");
  snprintf(big + at, sizeof(big) - at, "]}, {\"name\": \"sem_acquire\"");
  return big;
}

/* Frees text; the plan must pass both checks. */
static void expect_ok(char* text, int line) {
  struct shunt_plan_errors e = {0};
  struct shunt_plan* p = shunt_plan_parse(text, strlen(text), "ok.json", &e);
  CHECK_MSG(p != NULL, "line %d: parse failed", line);
  if (p) {
    unsigned n = shunt_plan_check(p, NULL, &e) + shunt_plan_check_races(p, &e);
    CHECK_MSG(n == 0, "line %d: expected no error, got %u", line, n);
    dump(&e);
  }
  shunt_plan_free(p);
  shunt_plan_errors_free(&e);
  free(text);
}
#define EXPECT_OK(text) expect_ok((text), __LINE__)

static char* B(void) {
  return base_plan(NULL);
}

static void test_base_passes(void) {
  char* s = B();
  struct shunt_plan_errors e = {0};
  struct shunt_plan* p = shunt_plan_parse(s, strlen(s), "base.json", &e);
  CHECK(p != NULL);
  if (p) {
    CHECK_EQ_INT(shunt_plan_check(p, NULL, &e), 0);
    CHECK_EQ_INT(shunt_plan_check_races(p, &e), 0);
    dump(&e);
  }
  shunt_plan_free(p);
  shunt_plan_errors_free(&e);
  free(s);
}

static void test_structure(void) {
  EXPECT(edit(B(), "{\"id\": 1, \"input", "{\"id\": 0, \"input", 1), "gpus[1].id",
         "does not match its position");
  EXPECT(edit(B(), "{\"id\": 1, \"channels\": []", "{\"id\": 5, \"channels\": []", 2),
         "gpus[1].threadblocks[1].id", "does not match");
  EXPECT(edit(edit(B(), "\"max_message_size\": 18446744073709551615", "\"max_message_size\": 10", 1),
              "\"min_message_size\": 0", "\"min_message_size\": 11", 1),
         "min_message_size", "greater");
  EXPECT(edit(B(), "\"output_chunks\": 2", "\"output_chunks\": 4", 0), "gpus[0].output_chunks",
         "input_chunks == output_chunks");
  EXPECT(edit(B(), "\"collective\": \"allreduce\"", "\"collective\": \"allgather\"", 1),
         "gpus[0].output_chunks", "output_chunks == input_chunks * ranks");
  EXPECT(
      edit(B(), "\"input_chunks\": 2, \"output_chunks\": 2", "\"input_chunks\": 0, \"output_chunks\": 0", 1),
      "gpus[0]", "both 0");
  EXPECT(edit(B(), "\"output_chunks\": 2", "\"output_chunks\": 3", 2), "gpus[1]", "differ from gpus[0]");
  EXPECT(edit(B(), "\"num_threads_per_block\": 1024", "\"num_threads_per_block\": 2048", 1),
         "num_threads_per_block", "allowed 1..1024");
  EXPECT(edit(B(), "\"buffer_alignment\": 16", "\"buffer_alignment\": 12", 1), "buffer_alignment",
         "multiple of 16");
  /* Threadblock count limit of the backend. */
  expect(B(), STATIC, 1, "gpus[0].threadblocks", "at most 1 co-resident", __LINE__);
}

static void test_refs(void) {
  /* Chunk index beyond the buffer: local input has 2 chunks. */
  EXPECT(edit(B(), "\"type\": \"i\", \"index\": 1, \"size\": 1}],",
              "\"type\": \"i\", \"index\": 2, \"size\": 1}],", 1),
         "gpus[0].threadblocks[0].ops[0].src_buff[0].index", "outside local buffer 'i'");
  /* Size beyond the end. */
  EXPECT(edit(B(), "\"type\": \"o\", \"index\": 1, \"size\": 1}",
              "\"type\": \"o\", \"index\": 1, \"size\": 2}", 1),
         "gpus[1].threadblocks[0].ops[5].dst_buff[0].index", "chunks [1, 3)");
  /* Remote scratch of the peer has 1 chunk. */
  EXPECT(edit(B(), "\"buffer_id\": 0, \"index\": 0, \"size\": 1",
              "\"buffer_id\": 0, \"index\": 1, \"size\": 1", 1),
         "gpus[0].threadblocks[0].ops[0].dst_buff[0].index", "outside remote buffer 's' of rank 1");
  EXPECT(edit(B(), "\"buffer_id\": 0, \"index\": 0, \"size\": 1",
              "\"buffer_id\": 0, \"index\": 0, \"size\": 0", 1),
         "dst_buff[0].size", "size 0");
  /* Channel id outside the threadblock's table. */
  EXPECT(edit(B(), "{\"name\": \"signal\", \"channel_ids\": [0]",
              "{\"name\": \"signal\", \"channel_ids\": [1]", 1),
         "gpus[0].threadblocks[0].ops[2].channel_ids[0]", "outside the threadblock's memory channels");
  /* The threadblock table names a channel the GPU does not declare. */
  EXPECT(edit(B(), "\"channel_ids\": [0]}],", "\"channel_ids\": [0, 4]}],", 1),
         "gpus[0].threadblocks[0].channels", "memory channel id 4 does not exist");
  /* Remote buffer id outside the table, and a table entry beyond the GPU's list. */
  EXPECT(edit(B(), "\"buffer_id\": 0", "\"buffer_id\": 2", 1), "ops[0].dst_buff[0].buffer_id",
         "outside the threadblock's memory remote_buffer_refs");
  EXPECT(edit(B(), "\"remote_buffer_ids\": [0]", "\"remote_buffer_ids\": [3]", 1),
         "gpus[0].threadblocks[0].remote_buffer_refs", "remote buffer id 3 does not exist");
  /* A remote buffer reached over a channel type the GPU has no channel of. */
  EXPECT(edit(B(), "\"access_channel_types\": [\"memory\"]",
              "\"access_channel_types\": [\"memory\", \"port\"]", 1),
         "gpus[0].remote_buffers[0]", "declares no port channel to rank 1");
  EXPECT(edit(B(), "\"access_channel_type\": \"memory\"", "\"access_channel_type\": \"port\"", 1),
         "gpus[0].threadblocks[0].remote_buffer_refs", "access_channel_types lack it");
  /* Peers. */
  EXPECT(edit(B(), "\"connected_to\": [1]", "\"connected_to\": [7]", 1),
         "gpus[0].channels[0].connected_to[0]", "peer 7 is not a rank");
  EXPECT(edit(B(), "\"connected_to\": [1]", "\"connected_to\": [0]", 1),
         "gpus[0].channels[0].connected_to[0]", "channel to itself");
  EXPECT(edit(B(), "\"rank\": 1, \"type\": \"s\"", "\"rank\": 9, \"type\": \"s\"", 1),
         "gpus[0].remote_buffers[0]", "rank 9 is not a rank");
  /* Operand kinds. */
  EXPECT(edit(B(), "\"dst_buff\": [{\"buffer_id\": 0, \"index\": 0, \"size\": 1}]",
              "\"dst_buff\": [{\"type\": \"o\", \"index\": 0, \"size\": 1}]", 1),
         "ops[0].dst_buff[0]", "put takes a remote buffer");
  EXPECT(edit(B(),
              "\"name\": \"re\", \"src_buff\": [{\"type\": \"i\", \"index\": 1, \"size\": 1}, {\"type\": "
              "\"s\", \"index\": 0, \"size\": 1}]",
              "\"name\": \"re\", \"src_buff\": []", 1),
         "ops[5].src_buff", "re takes at least 1 src_buff entries, not 0");
  EXPECT(
      edit(B(), "\"dst_buff\": [{\"buffer_id\": 0, \"index\": 0, \"size\": 1}], \"channel_type\": \"memory\"",
           "\"dst_buff\": [{\"buffer_id\": 0, \"index\": 0, \"size\": 1}]", 1),
      "ops[0].channel_type", "needs channel_type memory or port");
}

static void test_packets_and_limits(void) {
  /* A packet op in a Simple plan, and a packet read from a non-scratch buffer. */
  EXPECT(
      edit(B(), "{\"name\": \"sem_acquire\"",
           "{\"name\": \"cpkt\", \"src_buff\": [{\"type\": \"i\", \"index\": 0, \"size\": 1}], \"dst_buff\": "
           "[{\"type\": \"s\", \"index\": 0, \"size\": 1}]}, {\"name\": \"sem_acquire\"",
           1),
      "gpus[0].threadblocks[1].ops[0].name", "protocol is 'Simple', not LL");
  EXPECT(
      edit(edit(B(), "\"protocol\": \"Simple\"", "\"protocol\": \"LL\"", 1), "{\"name\": \"sem_acquire\"",
           "{\"name\": \"upkt\", \"src_buff\": [{\"type\": \"i\", \"index\": 0, \"size\": 1}], \"dst_buff\": "
           "[{\"type\": \"o\", \"index\": 0, \"size\": 1}]}, {\"name\": \"sem_acquire\"",
           1),
      "gpus[0].threadblocks[1].ops[0].src_buff[0]", "needs packets in scratch");
  /* 65 channel ids on one op (limit 64). */
  EXPECT(edit(B(), "{\"name\": \"signal\", \"channel_ids\": [0]",
              "{\"name\": \"signal\", \"channel_ids\": "
              "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
              "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]",
              1),
         "gpus[0].threadblocks[0].ops[2].channel_ids", "65 channel ids (limit 64");
  /* 65 channels in a threadblock table (limit 64). */
  EXPECT(edit(B(), "\"channel_ids\": [0]}],",
              "\"channel_ids\": "
              "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
              "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}],",
              1),
         "gpus[0].threadblocks[0].channels", "65 memory channels (limit 64");
  /* Ops in a block, counting a pipeline body: 256 (MSCCL++'s 32-rank alltoall ring plans need
   * 191) pass, 257 do not. */
  EXPECT_OK(edit(B(), "{\"name\": \"sem_acquire\"", pipeline_of(252), 1));
  EXPECT(edit(B(), "{\"name\": \"sem_acquire\"", pipeline_of(253), 1), "gpus[0].threadblocks[1].ops",
         "257 ops including pipeline bodies (limit 256)");
  EXPECT(edit(B(), "\"barrier_id\": 0", "\"barrier_id\": 16", 0), "gpus[0].threadblocks[0].ops[8].barrier_id",
         "barrier_id 16 (limit 16)");
  EXPECT(edit(B(), "{\"name\": \"sem_release\", \"semaphore_ids\": [0]}",
              "{\"name\": \"sem_release\", \"semaphore_ids\": [1]}", 1),
         "gpus[0].threadblocks[0].ops[7].semaphore_ids[0]", "semaphore 1 does not exist");
  /* A pipeline with unit_size 0. */
  EXPECT(edit(B(), "{\"name\": \"sem_acquire\"",
              "{\"name\": \"pipeline\", \"iter_context\": {\"unit_size\": 0, \"num_chunks\": 1}, \"ops\": "
              "[{\"name\": \"nop\"}]}, {\"name\": \"sem_acquire\"",
              1),
         "gpus[0].threadblocks[1].ops[0].iter_context.unit_size", "unit_size 0");
}

static void test_balance(void) {
  /* Rank 1 no longer waits: rank 0's signal on pair #0 is unmatched. */
  EXPECT(edit(B(), "{\"name\": \"wait\", \"channel_ids\": [0], \"channel_type\": \"memory\"},", "", 2),
         "gpus[0].threadblocks[0].ops[2].channel_ids",
         "memory channel pair #0 from rank 0 to rank 1: 2 signal(s) but 1 wait(s)");
  /* Two channels from rank 0 to 1 but only one back: a wait on the second is never signalled. */
  EXPECT(edit(edit(edit(B(), "\"connected_to\": [1]", "\"connected_to\": [1, 1]", 1),
                   "\"channel_ids\": [0]}],", "\"channel_ids\": [0, 1]}],", 1),
              "{\"name\": \"wait\", \"channel_ids\": [0]", "{\"name\": \"wait\", \"channel_ids\": [1]", 1),
         "", "memory channel pair #1 from rank 1 to rank 0: 0 signal(s) but 1 wait(s)");
  /* Semaphores: a release without an acquire. */
  EXPECT(edit(B(), "{\"name\": \"sem_acquire\", \"semaphore_ids\": [0]},", "", 1),
         "gpus[0].threadblocks[0].ops[7].semaphore_ids",
         "semaphore 0 of rank 0: 0 acquire(s) but 1 release(s)");
  /* Barriers: num_threadblocks 2 but only one block meets it. */
  EXPECT(edit(B(), ",    {\"name\": \"barrier\", \"barrier_id\": 0, \"num_threadblocks\": 2}]}]}", "]}]}", 2),
         "gpus[1].threadblocks[0].ops[8].num_threadblocks", "expects 2 threadblocks but 1 blocks");
  /* Ops naming two different reduce ops. */
  char* s = edit(B(), "\"dst_buff\": [{\"type\": \"o\", \"index\": 0, \"size\": 1}]",
                 "\"dst_buff\": [{\"type\": \"o\", \"index\": 0, \"size\": 1}], \"reduce_op\": \"min\"", 1);
  s = edit(s, "\"dst_buff\": [{\"type\": \"o\", \"index\": 1, \"size\": 1}]",
           "\"dst_buff\": [{\"type\": \"o\", \"index\": 1, \"size\": 1}], \"reduce_op\": \"max\"", 1);
  EXPECT(s, "gpus[1].threadblocks[0].ops[5].reduce_op", "reduce_op max conflicts with min");
}

/* The intra-block hazards of the base plan's shape: each is a note (the lowering adds a block
 * barrier before the op), not an error. */
static void expect_note(char* text, const char* path, const char* reason, int line) {
  struct shunt_plan_errors e = {0}, notes = {0};
  struct shunt_plan* p = shunt_plan_parse(text, strlen(text), "note.json", &e);
  CHECK_MSG(p != NULL, "line %d: parse failed", line);
  if (p) {
    /* These plans show one block's hazards: their ranks need not be kept in step (check_step). */
    shunt_plan_check_races(p, &e);
    unsigned races = 0;
    for (uint32_t i = 0; i < e.n; i++) races += strstr(e.v[i].reason, "back-to-back calls") == NULL;
    CHECK_MSG(races == 0, "line %d: a race where only a barrier is missing", line);
    dump(&e);
    shunt_plan_missing_barriers(p, &notes);
    bool found = false;
    for (uint32_t i = 0; i < notes.n; i++)
      if (strstr(notes.v[i].path, path) && strstr(notes.v[i].reason, reason)) found = true;
    if (path[0] == 0)
      CHECK_MSG(notes.n == 0, "line %d: expected no barrier to add, got %u", line, notes.n);
    else
      CHECK_MSG(found, "line %d: expected a barrier before '%s' for '%s'", line, path, reason);
    dump(&notes);
  }
  shunt_plan_free(p);
  shunt_plan_errors_free(&e);
  shunt_plan_errors_free(&notes);
  free(text);
}
#define EXPECT_NOTE(text, path, reason) expect_note((text), (path), (reason), __LINE__)
#define EXPECT_NO_NOTE(text) expect_note((text), "", "", __LINE__)

static void test_races(void) {
  /* put then signal with no nop: the signal may overtake other threads' writes. */
  EXPECT_NOTE(edit(B(), "{\"name\": \"nop\"},    {\"name\": \"signal\"", "{\"name\": \"signal\"", 0),
              "gpus[0].threadblocks[0].ops[1]", "signal publishes data that ops[0] wrote in other threads");
  /* wait then re with no nop. */
  EXPECT_NOTE(edit(B(), "{\"name\": \"nop\"},    {\"name\": \"re\"", "{\"name\": \"re\"", 0),
              "gpus[1].threadblocks[0].ops[4]", "re runs right after the wait at ops[3]");
  /* A copy reading, over its second half, what the previous op wrote: other threads. Over the
   * whole chunk each thread reads what it wrote itself. */
  const char* copy =
      "{\"name\": \"copy\", \"src_buff\": [{\"type\": \"o\", \"index\": 0, \"size\": 1}], "
      "\"dst_buff\": [{\"type\": \"i\", \"index\": 0, \"size\": 1}]%s}, {\"name\": \"nop\"},    "
      "{\"name\": \"sem_release\"";
  char sliced[512], whole[512];
  snprintf(sliced, sizeof(sliced), copy, ", \"tbg_info\": {\"tb_id\": 1, \"tbg_size\": 2}");
  snprintf(whole, sizeof(whole), copy, "");
  EXPECT_NOTE(edit(B(), "{\"name\": \"nop\"},    {\"name\": \"sem_release\"", sliced, 1),
              "gpus[0].threadblocks[0].ops[6]", "copy reads chunks that ops[5] wrote in other threads");
  EXPECT_NO_NOTE(edit(B(), "{\"name\": \"nop\"},    {\"name\": \"sem_release\"", whole, 1));
}

/* MSCCL++'s DSL reducescatter shape: a block reduces its peers' packets into its chunk (recpkt:
 * data and packets), then blocks of a thread-block group unpack their slice of those packets
 * (upkt) and add another rank's packets to it (repkt), with no nop in between. */
#define E(T, I) "{\"type\":\"" T "\",\"index\":" #I ",\"size\":1}"
#define TBG(K, G) ",\"tbg_info\":{\"tb_id\":" #K ",\"tbg_size\":" #G "}"
#define RECPKT(T)                                                                                   \
  "{\"name\":\"recpkt\",\"src_buff\":[" E("i", 0) "," E("s", 0) "],\"dst_buff\":[" E("i", 0) "," E( \
      "s", 2) "]" T "}"
#define UPKT(S, T) "{\"name\":\"upkt\",\"src_buff\":[" E("s", S) "],\"dst_buff\":[" E("i", 0) "]" T "}"
#define REPKT(T) \
  "{\"name\":\"repkt\",\"src_buff\":[" E("i", 0) "," E("s", 1) "],\"dst_buff\":[" E("i", 0) "]" T "}"

/* Two ranks with the same blocks (tb1 may be NULL). */
static char* rs_plan(const char* tb0, const char* tb1) {
  char gpu[2][2048];
  for (int r = 0; r < 2; r++)
    snprintf(gpu[r], sizeof(gpu[r]),
             "{\"id\":%d,\"input_chunks\":2,\"output_chunks\":1,\"scratch_chunks\":4,\"channels\":[],"
             "\"remote_buffers\":[],\"threadblocks\":[{\"id\":0,\"channels\":[],\"ops\":[%s]}%s%s%s]}",
             r, tb0, tb1 ? ",{\"id\":1,\"channels\":[],\"ops\":[" : "", tb1 ? tb1 : "", tb1 ? "]}" : "");
  char* t = malloc(5000);
  snprintf(t, 5000,
           "{\"name\":\"rs\",\"collective\":\"reducescatter\",\"protocol\":\"LL\",\"inplace\":true,"
           "\"reuse_resources\":false,\"num_threads_per_block\":256,\"use_double_scratch_buffer\":false,"
           "\"buffer_alignment\":16,\"min_message_size\":0,\"max_message_size\":1073741824,\"gpus\":[%s,%s]}",
           gpu[0], gpu[1]);
  return t;
}

static void test_block_hazards(void) {
  /* Safe: the upkt thread of each element waits for the packet the recpkt thread stored after
   * that element, and rewrites it with the same value; repkt's thread then reads its own write.
   * Block 1's slice 0 starts where the chunk does: the same threads as a whole-chunk op. */
  EXPECT_NO_NOTE(rs_plan(RECPKT("") "," UPKT(2, TBG(1, 2)) "," REPKT(TBG(1, 2)),
                         UPKT(2, TBG(0, 2)) "," REPKT(TBG(0, 2))));
  EXPECT_NO_NOTE(rs_plan(RECPKT(TBG(0, 2)) "," UPKT(2, TBG(1, 4)) "," REPKT(TBG(1, 4)), NULL));
  EXPECT_NO_NOTE(rs_plan(RECPKT("") "," REPKT(TBG(0, 2)), NULL));
  /* Without the unpack, repkt's threads read bytes other threads of the block wrote. */
  EXPECT_NOTE(rs_plan(RECPKT("") "," REPKT(TBG(1, 2)), NULL), "gpus[0].threadblocks[0].ops[1]",
              "repkt reads chunks that ops[0] wrote in other threads");
  /* Unpacking other packets than the recpkt wrote neither waits for its threads nor writes
   * its values. */
  EXPECT_NOTE(rs_plan(RECPKT("") "," UPKT(3, TBG(1, 2)) "," REPKT(TBG(1, 2)), NULL),
              "gpus[1].threadblocks[0].ops[1]", "upkt overwrites chunks that ops[0] wrote in other threads");
}

/* Two ranks whose block 0 runs `ops` with a port channel to the peer and the peer's scratch
 * reachable through it (remote buffer 0). */
static char* port_plan(const char* ops) {
  char gpu[2][1500];
  for (int r = 0; r < 2; r++)
    snprintf(gpu[r], sizeof(gpu[r]),
             "{\"id\":%d,\"input_chunks\":2,\"output_chunks\":2,\"scratch_chunks\":2,"
             "\"channels\":[{\"channel_type\":\"port\",\"connected_to\":[%d]}],"
             "\"remote_buffers\":[{\"rank\":%d,\"type\":\"s\",\"access_channel_types\":[\"port\"]}],"
             "\"threadblocks\":[{\"id\":0,\"channels\":[{\"channel_type\":\"port\",\"channel_ids\":[0]}],"
             "\"remote_buffer_refs\":[{\"access_channel_type\":\"port\",\"remote_buffer_ids\":[0]}],\"ops\":["
             "%s]}]}",
             r, 1 - r, 1 - r, ops);
  char* t = malloc(4000);
  snprintf(t, 4000,
           "{\"name\":\"port\",\"collective\":\"allreduce\",\"protocol\":\"Simple\",\"inplace\":false,"
           "\"reuse_resources\":false,\"num_threads_per_block\":256,\"use_double_scratch_buffer\":false,"
           "\"buffer_alignment\":16,\"min_message_size\":0,\"max_message_size\":1073741824,\"gpus\":[%s,%s]}",
           gpu[0], gpu[1]);
  return t;
}

/* A port put's source is read by the proxy (or copied by all threads in packets), not by the
 * threads that wrote it: the same entry start does not make it safe. */
static void test_port_reads(void) {
  const char* copy = "{\"name\":\"copy\",\"src_buff\":[" E("i", 0) "],\"dst_buff\":[" E("s", 0) "]}";
  const char* put = "{\"name\":\"put\",\"channel_type\":\"port\",\"channel_ids\":[0],\"src_buff\":[" E(
      "s", 0) "],\"dst_buff\":[{\"buffer_id\":0,\"index\":1,\"size\":1}]}";
  char ops[1024];
  snprintf(ops, sizeof(ops), "%s,%s", copy, put);
  EXPECT_NOTE(port_plan(ops), "gpus[0].threadblocks[0].ops[1]",
              "put reads chunks that ops[0] wrote in other threads");
  snprintf(ops, sizeof(ops), "%s,{\"name\":\"nop\"},%s", copy, put);
  EXPECT_NO_NOTE(port_plan(ops));
}

/* A real race across ranks stays an error: rank 0's block 0 reads rank 1's input chunk 0, which
 * rank 1's block 1 writes and publishes on channel 1, after waiting only on channel 0. */
static void test_cross_rank_race(void) {
  const char* t =
      "{\"name\":\"x\",\"collective\":\"allreduce\",\"protocol\":\"Simple\",\"inplace\":false,"
      "\"reuse_resources\":false,\"num_threads_per_block\":256,\"use_double_scratch_buffer\":false,"
      "\"buffer_alignment\":16,\"min_message_size\":0,\"max_message_size\":1073741824,\"gpus\":["
      "{\"id\":0,\"input_chunks\":2,\"output_chunks\":2,\"scratch_chunks\":0,"
      "\"channels\":[{\"channel_type\":\"memory\",\"connected_to\":[1,1]}],"
      "\"remote_buffers\":[{\"rank\":1,\"type\":\"i\",\"access_channel_types\":[\"memory\"]}],\"threadblocks\":["
      "{\"id\":0,\"channels\":[{\"channel_type\":\"memory\",\"channel_ids\":[0,1]}],"
      "\"remote_buffer_refs\":[{\"access_channel_type\":\"memory\",\"remote_buffer_ids\":[0]}],\"ops\":["
      "{\"name\":\"wait\",\"channel_type\":\"memory\",\"channel_ids\":[0]},{\"name\":\"nop\"},"
      "{\"name\":\"get\",\"channel_type\":\"memory\",\"src_buff\":[{\"buffer_id\":0,\"index\":0,\"size\":1}],"
      "\"dst_buff\":[" E("o", 0) "]}]},"
      "{\"id\":1,\"channels\":[{\"channel_type\":\"memory\",\"channel_ids\":[0,1]}],\"ops\":["
      "{\"name\":\"wait\",\"channel_type\":\"memory\",\"channel_ids\":[1]}]}]},"
      "{\"id\":1,\"input_chunks\":2,\"output_chunks\":2,\"scratch_chunks\":0,"
      "\"channels\":[{\"channel_type\":\"memory\",\"connected_to\":[0,0]}],\"remote_buffers\":[],\"threadblocks\":["
      "{\"id\":0,\"channels\":[{\"channel_type\":\"memory\",\"channel_ids\":[0,1]}],\"ops\":["
      "{\"name\":\"signal\",\"channel_type\":\"memory\",\"channel_ids\":[0]}]},"
      "{\"id\":1,\"channels\":[{\"channel_type\":\"memory\",\"channel_ids\":[0,1]}],\"ops\":["
      "{\"name\":\"copy\",\"src_buff\":[" E("i", 1) "],\"dst_buff\":[" E("i", 0) "]},{\"name\":\"nop\"},"
      "{\"name\":\"signal\",\"channel_type\":\"memory\",\"channel_ids\":[1]}]}]}]}";
  char* s = malloc(strlen(t) + 1);
  strcpy(s, t);
  EXPECT_RACE(
      s, "gpus[0].threadblocks[0].ops[2].src_buff[0]",
      "that its threadblock 1 writes (ops[0]) and publishes with a signal this threadblock does not wait "
      "for first");
}

int main(void) {
  test_base_passes();
  test_structure();
  test_refs();
  test_packets_and_limits();
  test_balance();
  test_races();
  test_block_hazards();
  test_port_reads();
  test_cross_rank_race();
  CHECK_DONE();
}
