/* The check of calls back to back (plan/check.h, shunt_plan_check_races): a plan that lets a rank
 * finish a call without depending on another rank, write into a peer's buffers before it
 * depends on that peer, or write a peer's single scratch while the peer's reads of it are
 * ordered before nothing of the writer, is refused; the same plans with the dependence pass,
 * also where it runs through pipelines and semaphores between the blocks of a rank. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "plan/check.h"
#include "plan/parse.h"

#define HEAD(COLL, PROTO, DOUBLE)                                                                 \
  "{\"name\":\"x\",\"collective\":\"" COLL "\",\"protocol\":\"" PROTO                             \
  "\",\"inplace\":false,"                                                                         \
  "\"reuse_resources\":false,\"num_threads_per_block\":256,\"use_double_scratch_buffer\":" DOUBLE \
  ","                                                                                             \
  "\"buffer_alignment\":16,\"min_message_size\":0,\"max_message_size\":1048576,\"gpus\":["
#define MEM(IDS) "{\"channel_type\":\"memory\",\"channel_ids\":[" IDS "]}"
#define REFS(...) \
  "\"remote_buffer_refs\":[{\"access_channel_type\":\"memory\",\"remote_buffer_ids\":[" __VA_ARGS__ "]}]"
#define SYNC(OP, IDS) "{\"name\":\"" OP "\",\"channel_type\":\"memory\",\"channel_ids\":[" IDS "]}"
#define NOP "{\"name\":\"nop\"}"
#define L(T) "{\"type\":\"" T "\",\"index\":0,\"size\":1}"
#define R(B) "{\"buffer_id\":" #B ",\"index\":0,\"size\":1}"
#define PPKT(B) \
  "{\"name\":\"ppkt\",\"channel_type\":\"memory\",\"src_buff\":[" L("i") "],\"dst_buff\":[" R(B) "]}"
#define BARRIER "{\"name\":\"barrier\",\"barrier_id\":0,\"num_threadblocks\":2}"
/* A broadcast peer: signals the root, unpacks the root's packets. */
#define PEER(ID) \
  "{\"id\":" #ID ",\"input_chunks\":1,\"output_chunks\":1,\"scratch_chunks\":1,"                  \
  "\"channels\":[{\"channel_type\":\"memory\",\"connected_to\":[0]}],\"remote_buffers\":[],"       \
  "\"threadblocks\":[{\"id\":0,\"channels\":[" MEM("0") "],\"ops\":[" SYNC("signal", "0") ","      \
  "{\"name\":\"upkt\",\"src_buff\":[" L("s") "],\"dst_buff\":[" L("o") "]}]}]}"
/* The root of a 3-rank packet broadcast with the given threadblocks. */
#define ROOT(...)                                                                            \
  "{\"id\":0,\"input_chunks\":1,\"output_chunks\":1,\"scratch_chunks\":1,"                   \
  "\"channels\":[{\"channel_type\":\"memory\",\"connected_to\":[1,2]}],\"remote_buffers\":[" \
  "{\"rank\":1,\"type\":\"s\",\"access_channel_types\":[\"memory\"]},"                       \
  "{\"rank\":2,\"type\":\"s\",\"access_channel_types\":[\"memory\"]}],\"threadblocks\":[" __VA_ARGS__ "]}"
#define BCAST(...) HEAD("broadcast", "LL", "true") ROOT(__VA_ARGS__) "," PEER(1) "," PEER(2) "]}"

/* Root block k writes to peer k+1 after waiting for that peer alone (the shape that hung). */
static const char* per_peer = BCAST("{\"id\":0,\"channels\":[" MEM("0") "]," REFS("0") ",\"ops\":[" SYNC(
    "wait", "0") "," NOP "," PPKT(0) "]},"
                                     "{\"id\":1,\"channels\":[" MEM("1") "]," REFS("1") ",\"ops\":[" SYNC(
                                         "wait", "0") "," NOP "," PPKT(0) "]}");
/* The same with a device-wide barrier of the root's blocks between the waits and the writes. */
static const char* per_peer_barrier = BCAST("{\"id\":0,\"channels\":[" MEM("0") "]," REFS(
    "0") ",\"ops\":[" SYNC("wait",
                           "0") "," BARRIER
                                "," PPKT(0) "]},"
                                            "{\"id\":1,\"channels\":[" MEM("1") "]," REFS(
                                                "1") ",\"ops\":[" SYNC("wait", "0") "," BARRIER
                                                                                    "," PPKT(0) "]}");
/* One root block waits for both peers, then writes to both. */
static const char* all_peers =
    BCAST("{\"id\":0,\"channels\":[" MEM("0, 1") "]," REFS("0, 1") ",\"ops\":[" SYNC(
        "wait", "0, 1") "," NOP
                        ",{\"name\":\"ppkt\",\"channel_type\":\"memory\",\"src_buff\":[" L("i") "," L(
                            "i") "],\"dst_buff\":[" R(0) "," R(1) "]}]}");

/* Two ranks: rank 0 puts into rank 1's output, before or after it waits for rank 1's signal. */
#define PUT_OP \
  "{\"name\":\"put\",\"channel_type\":\"memory\",\"src_buff\":[" L("i") "],\"dst_buff\":[" R(0) "]}"
#define SIMPLE(R0OPS, R1OPS)                                                                          \
  HEAD("broadcast", "Simple", "false")                                                                \
  "{\"id\":0,\"input_chunks\":1,\"output_chunks\":1,\"scratch_chunks\":0,"                            \
  "\"channels\":[{\"channel_type\":\"memory\",\"connected_to\":[1]}],\"remote_buffers\":["            \
  "{\"rank\":1,\"type\":\"o\",\"access_channel_types\":[\"memory\"]}],\"threadblocks\":["             \
  "{\"id\":0,\"channels\":[" MEM("0") "]," REFS(                                                      \
      "0") ",\"ops\":[" R0OPS                                                                         \
           "]}]},"                                                                                    \
           "{\"id\":1,\"input_chunks\":1,\"output_chunks\":1,\"scratch_chunks\":0,"                   \
           "\"channels\":[{\"channel_type\":\"memory\",\"connected_to\":[0]}],\"remote_buffers\":[]," \
           "\"threadblocks\":[{\"id\":0,\"channels\":[" MEM("0") "],\"ops\":[" R1OPS "]}]}]}"
static const char* put_first = SIMPLE(PUT_OP "," NOP "," SYNC("signal", "0") "," SYNC("wait", "0"),
                                      SYNC("signal", "0") "," SYNC("wait", "0"));
static const char* wait_first = SIMPLE(SYNC("wait", "0") "," NOP "," PUT_OP "," NOP "," SYNC("signal", "0"),
                                       SYNC("signal", "0") "," SYNC("wait", "0"));

/* Two ranks exchange packets through a multicast (switch) channel bound to scratch: each packs
 * its input into its scratch slot, stores the packets to every member's slot and unpacks the
 * other's. Each hears from the other through the multicast packets alone. */
#define NVLS_GPU(ID, MINE, OTHER)                                                                            \
  "{\"id\":" #ID                                                                                             \
  ",\"input_chunks\":1,\"output_chunks\":2,\"scratch_chunks\":2,"                                            \
  "\"channels\":[{\"channel_type\":\"switch\",\"buffer_type\":\"s\",\"rank_groups\":[{\"size\":2,\"ranks\":" \
  "[0,"                                                                                                      \
  "1]}]}],\"remote_buffers\":[],\"threadblocks\":[{\"id\":0,\"channels\":[{\"channel_type\":\"switch\","     \
  "\"channel_ids\":[0]}],\"ops\":["                                                                          \
  "{\"name\":\"cpkt\",\"src_buff\":[" L(                                                                     \
      "i") "],\"dst_buff\":[{\"type\":\"s\",\"index\":" #MINE                                                \
           ",\"size\":1}]},{\"name\":\"nop\"},"                                                              \
           "{\"name\":\"gstorepkt\",\"src_buff\":[{\"type\":\"s\",\"index\":" #MINE                          \
           ",\"size\":1}],\"dst_buff\":[{\"switch_channel_id\":0,\"index\":" #MINE                           \
           ",\"size\":1}]},"                                                                                 \
           "{\"name\":\"upkt\",\"src_buff\":[{\"type\":\"s\",\"index\":" #OTHER                              \
           ",\"size\":1}],\"dst_buff\":[{\"type\":\"o\",\"index\":" #OTHER ",\"size\":1}]}]}]}"
static const char* nvls_packets =
    HEAD("allgather", "LL", "true") NVLS_GPU(0, 0, 1) "," NVLS_GPU(1, 1, 0) "]}";

/* Two ranks gather through a single scratch: each puts its input into the peer's scratch chunk 0,
 * a signal round publishes it, each copies it out. With nothing after that copy, the peer can
 * end its call and its next call's put overwrite the chunk while the copy still reads it. */
#define SCR_OP(OP, SRC, DST) "{\"name\":\"" OP "\",\"src_buff\":[" SRC "],\"dst_buff\":[" DST "]}"
#define SCR_L(T, I) "{\"type\":\"" T "\",\"index\":" #I ",\"size\":1}"
#define ROUND SYNC("signal", "0") "," SYNC("wait", "0")
#define SCR_PUT                                                                                           \
  "{\"name\":\"put\",\"channel_type\":\"memory\",\"src_buff\":[" L("i") "],\"dst_buff\":[" R(0) "]}," NOP \
                                                                                                "," ROUND \
                                                                                                "," NOP
#define SCR_GPU(ID, PEER, OPS)                                                           \
  "{\"id\":" #ID                                                                         \
  ",\"input_chunks\":1,\"output_chunks\":2,\"scratch_chunks\":2,"                        \
  "\"channels\":[{\"channel_type\":\"memory\",\"connected_to\":[" #PEER                  \
  "]}],\"remote_buffers\":["                                                             \
  "{\"rank\":" #PEER                                                                     \
  ",\"type\":\"s\",\"access_channel_types\":[\"memory\"]}],\"threadblocks\":["           \
  "{\"id\":0,\"channels\":[" MEM("0") "]," REFS("0") ",\"ops\":[" SCR_OP("copy", L("i"), \
                                                                         SCR_L("o", ID)) "," OPS "]}]}"
/* OPS(ME, PEER): the ops after each rank's copy of its own input. */
#define SCR_PLAN(DOUBLE, OPS) \
  HEAD("allgather", "Simple", DOUBLE) SCR_GPU(0, 1, OPS(0, 1)) "," SCR_GPU(1, 0, OPS(1, 0)) "]}"
#define COPY_OUT(PEER) SCR_OP("copy", SCR_L("s", 0), SCR_L("o", PEER))
#define OPEN_OPS(ME, PEER) SCR_PUT "," COPY_OUT(PEER)
#define CLOSED_OPS(ME, PEER) SCR_PUT "," COPY_OUT(PEER) "," NOP "," ROUND
#define OPENING_OPS(ME, PEER) ROUND "," NOP "," SCR_PUT "," COPY_OUT(PEER)
/* The last read is of chunk 1, which only the rank itself writes: no peer's put can reach it. */
#define OTHER_CHUNK_OPS(ME, PEER)       \
  SCR_OP("copy", L("i"), SCR_L("s", 1)) \
  "," SCR_PUT "," COPY_OUT(PEER) "," NOP "," ROUND "," NOP "," SCR_OP("copy", SCR_L("s", 1), SCR_L("o", ME))
static const char* scratch_open = SCR_PLAN("false", OPEN_OPS);
static const char* scratch_closed = SCR_PLAN("false", CLOSED_OPS);
static const char* scratch_opening = SCR_PLAN("false", OPENING_OPS);
static const char* scratch_double = SCR_PLAN("true", OPEN_OPS);
static const char* scratch_other_chunk = SCR_PLAN("false", OTHER_CHUNK_OPS);

/* The same round-trip with the put, the copy out and the closing round as the body of a pipeline:
 * each side's uses of the channel pair up iteration by iteration, so the closing round still
 * orders the copy before the peer's next put. */
#define PIPE(...) \
  "{\"name\":\"pipeline\",\"iter_context\":{\"unit_size\":4096,\"num_chunks\":1},\"ops\":[" __VA_ARGS__ "]}"
#define PIPE_OPEN_OPS(ME, PEER) PIPE(OPEN_OPS(ME, PEER))
#define PIPE_CLOSED_OPS(ME, PEER) PIPE(CLOSED_OPS(ME, PEER))
static const char* scratch_open_pipe = SCR_PLAN("false", PIPE_OPEN_OPS);
static const char* scratch_closed_pipe = SCR_PLAN("false", PIPE_CLOSED_OPS);

/* MSCCL++'s NVLS allreduce through a single scratch, at 2 ranks, three blocks a rank: block 0
 * copies the input into scratch, meets the peer (memory channel 0) and releases semaphore 0;
 * block 1 acquires it, load-reduce-stores chunk `rank` of both ranks' scratch (glres on a switch
 * channel), signals the peer on channel 1 and releases semaphore 1; block 2 acquires that, waits
 * for the peer's signal and copies the scratch out. The peer's glres of the next call comes after
 * its block 0's wait for this rank's next call: the semaphore carries that order. `pipe`: every
 * block's ops as a pipeline body, `unit1` the unit of block 1's (the others' 4096); `sem0`:
 * semaphore 0 used (without it the glres races with the copy out). */
static char nvls_buf[8192];
static size_t nvls_at;

static void add(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(nvls_buf + nvls_at, sizeof(nvls_buf) - nvls_at, fmt, ap);
  va_end(ap);
  nvls_at += n > 0 ? (size_t)n : 0;
  CHECK(nvls_at < sizeof(nvls_buf));
  if (nvls_at >= sizeof(nvls_buf)) nvls_at = sizeof(nvls_buf) - 1;
}

#define NVLS_COPY(FROM, K, TO)                                            \
  "{\"name\":\"copy\",\"src_buff\":[{\"type\":\"" FROM "\",\"index\":" #K \
  ",\"size\":1}],"                                                        \
  "\"dst_buff\":[{\"type\":\"" TO "\",\"index\":" #K ",\"size\":1}]}"
#define SEM(OP, ID) "{\"name\":\"sem_" OP "\",\"semaphore_ids\":[" #ID "]}"

static const char* nvls_scratch(bool pipe, unsigned unit1, bool sem0) {
  nvls_at = 0;
  add("%s", HEAD("allreduce", "Simple", "false"));
  for (int r = 0; r < 2; r++) {
    add("%s{\"id\":%d,\"input_chunks\":2,\"output_chunks\":2,\"scratch_chunks\":2,"
        "\"semaphores\":[{\"init_value\":0},{\"init_value\":0}],\"remote_buffers\":[],"
        "\"channels\":[{\"channel_type\":\"memory\",\"connected_to\":[%d,%d]},{\"channel_type\":\"switch\","
        "\"buffer_type\":\"s\",\"rank_groups\":[{\"size\":2,\"ranks\":[0,1]}]}],\"threadblocks\":[",
        r ? "," : "", r, 1 - r, 1 - r);
    for (int b = 0; b < 3; b++) {
      add("%s{\"id\":%d,\"channels\":[" MEM("%d") "%s],\"ops\":[", b ? "," : "", b, b ? 1 : 0,
          b == 1 ? ",{\"channel_type\":\"switch\",\"channel_ids\":[0]}" : "");
      if (pipe)
        add("{\"name\":\"pipeline\",\"iter_context\":{\"unit_size\":%u,\"num_chunks\":1},\"ops\":[",
            b == 1 ? unit1 : 4096u);
      if (b == 0)
        add(NVLS_COPY("i", 0, "s") "," NVLS_COPY("i", 1, "s") "," NOP "," ROUND "%s",
            sem0 ? "," NOP "," SEM("release", 0) : "");
      if (b == 1)
        add("%s{\"name\":\"glres\",\"channel_type\":\"switch\",\"src_buff\":[{\"switch_channel_id\":0,"
            "\"index\":%d,"
            "\"size\":1}],\"dst_buff\":[{\"switch_channel_id\":0,\"index\":%d,\"size\":1}]}," NOP
            "," SYNC("signal", "0") "," SEM("release", 1),
            sem0 ? SEM("acquire", 0) "," NOP "," : "", r, r);
      if (b == 2)
        add(SEM("acquire", 1) "," SYNC("wait", "0") "," NOP
                                                    "," NVLS_COPY("s", 0, "o") "," NVLS_COPY("s", 1, "o"));
      add("%s]}", pipe ? "]}" : "");
    }
    add("]}");
  }
  add("]}");
  return nvls_buf;
}

/* Runs both checks; returns the error count and whether one has `path` and `reason`. */
static unsigned run(const char* text, const char* path, const char* reason, bool* found, bool print) {
  struct shunt_plan_errors e = {0};
  struct shunt_plan* p = shunt_plan_parse(text, strlen(text), "step.json", &e);
  CHECK_MSG(p != NULL, "parse failed: %s: %s", e.n ? e.v[0].path : "", e.n ? e.v[0].reason : "");
  unsigned n = p ? shunt_plan_check(p, NULL, &e) + shunt_plan_check_races(p, &e) : 1;
  *found = false;
  for (uint32_t i = 0; i < e.n; i++) {
    if (path && !strcmp(e.v[i].path, path) && strstr(e.v[i].reason, reason)) *found = true;
    if (print) fprintf(stderr, "  got: %s: %s\n", e.v[i].path, e.v[i].reason);
  }
  shunt_plan_free(p);
  shunt_plan_errors_free(&e);
  return n;
}

static void expect_err(const char* text, const char* path, const char* reason, int line) {
  bool found;
  unsigned n = run(text, path, reason, &found, false);
  CHECK_MSG(n > 0 && found, "line %d: expected an error at %s containing '%s'", line, path, reason);
  if (!(n > 0 && found)) run(text, path, reason, &found, true);
}

static void expect_ok(const char* text, int line) {
  bool found;
  if (run(text, NULL, NULL, &found, false)) {
    CHECK_MSG(false, "line %d: expected no error", line);
    run(text, NULL, NULL, &found, true);
  }
}

int main(void) {
  /* Peer 2 hears from the root block that waited for peer 2 only: nothing of peer 1 reaches it. */
  expect_err(per_peer, "gpus[2]",
             "rank 2 can finish the call without depending, directly or through other ranks, on rank 1: "
             "it can run calls ahead of it",
             __LINE__);
  expect_err(per_peer, "gpus[1]", "rank 1 can finish the call without depending", __LINE__);
  expect_ok(per_peer_barrier, __LINE__);
  expect_ok(all_peers, __LINE__);
  expect_err(put_first, "gpus[0].threadblocks[0].ops[0].dst_buff[0]",
             "put writes rank 1's output before anything in this call depends on rank 1", __LINE__);
  expect_ok(wait_first, __LINE__);
  expect_ok(nvls_packets, __LINE__);
  expect_err(scratch_open, "gpus[0].threadblocks[0].ops[6]",
             "copy reads rank 0's single scratch, written by rank 1's put "
             "(gpus[1].threadblocks[0].ops[1].dst_buff[0], chunks [0, 1)), and comes before no op of rank 1",
             __LINE__);
  expect_err(scratch_open, "gpus[1].threadblocks[0].ops[6]", "copy reads rank 1's single scratch", __LINE__);
  expect_ok(scratch_closed, __LINE__);
  expect_ok(scratch_opening, __LINE__);
  expect_ok(scratch_double, __LINE__);
  expect_ok(scratch_other_chunk, __LINE__);
  expect_err(scratch_open_pipe, "gpus[0].threadblocks[0].ops[1].ops[5]", "copy reads rank 0's single scratch",
             __LINE__);
  expect_ok(scratch_closed_pipe, __LINE__);
  /* The NVLS plan, as its DSL writes it (in a pipeline) and with no pipeline. */
  expect_ok(nvls_scratch(true, 4096, true), __LINE__);
  expect_ok(nvls_scratch(false, 0, true), __LINE__);
  /* Without semaphore 0 the peer's glres of the next call waits for nothing of this rank. */
  expect_err(
      nvls_scratch(true, 4096, false), "gpus[0].threadblocks[2].ops[0].ops[4]",
      "copy reads rank 0's single scratch, written by rank 1's glres "
      "(gpus[1].threadblocks[1].ops[0].ops[0].dst_buff[0], chunks [1, 2)), and comes before no op of rank 1",
      __LINE__);
  expect_err(nvls_scratch(false, 0, false), "gpus[1].threadblocks[2].ops[3]",
             "copy reads rank 1's single scratch", __LINE__);
  /* A release and an acquire in pipelines of different iteration counts do not pair as nodes. */
  expect_err(nvls_scratch(true, 8192, true), "gpus[0].threadblocks[2].ops[0].ops[4]",
             "copy reads rank 0's single scratch", __LINE__);
  CHECK_DONE();
}
