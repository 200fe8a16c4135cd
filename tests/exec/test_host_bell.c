/* Rank bells (transport/host_bell.h): a sleeper is woken by a ring long before its timeout,
 * between threads and between processes sharing the memory; a ring before the sleeper's last
 * look is not lost; a bell nobody armed is not rung. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "transport/backoff.h"
#include "transport/host_bell.h"

#define LONG_NS 4000000000L /* a sleep that only a lost ring would let run out */

struct shared {
  struct shunt_host_sleepers host;
  struct shunt_rank_bell bell;
  _Atomic uint32_t data;
};

/* Sleeps until data is set, with the arm / last look / wait protocol; returns the ns taken. */
static uint64_t sleep_until_data(struct shared* s) {
  uint64_t t0 = shunt_now_ns();
  while (!atomic_load(&s->data)) {
    uint32_t seen = shunt_rank_bell_arm(&s->host, &s->bell);
    if (!atomic_load(&s->data)) shunt_rank_bell_wait(&s->bell, seen, LONG_NS);
    shunt_rank_bell_disarm(&s->host, &s->bell);
  }
  return shunt_now_ns() - t0;
}

static void publish_and_ring(struct shared* s) {
  atomic_store(&s->data, 1);
  if (shunt_host_sleepers_any(&s->host)) shunt_rank_bell_ring(&s->bell);
}

static void* ringer(void* arg) {
  struct shared* s = arg;
  /* Until the sleeper is armed (or a while has passed: then the ring meets no sleeper and the
   * sleeper's last look must see the data). */
  for (int i = 0; i < 2000 && !atomic_load(&s->bell.armed); i++) usleep(100);
  usleep(2000);
  publish_and_ring(s);
  return NULL;
}

static struct shared* shared_map(void) {
  struct shared* s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(s != MAP_FAILED);
  if (s == MAP_FAILED) exit(1);
  atomic_init(&s->host.n, 0);
  atomic_init(&s->bell.word, 0);
  atomic_init(&s->bell.armed, 0);
  atomic_init(&s->data, 0);
  return s;
}

static void test_threads(void) {
  for (int round = 0; round < 20; round++) {
    struct shared* s = shared_map();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, ringer, s) == 0);
    uint64_t ns = sleep_until_data(s);
    pthread_join(t, NULL);
    CHECK_MSG(ns < LONG_NS / 4, "round %d: the sleeper woke after %llu ns: the ring was lost", round,
              (unsigned long long)ns);
    CHECK_EQ_INT(atomic_load(&s->host.n), 0);
    CHECK_EQ_INT(atomic_load(&s->bell.armed), 0);
    munmap(s, sizeof(*s));
  }
}

/* The sleeper in a child process, the ringer here: the futex word is shared, not private. */
static void test_processes(void) {
  struct shared* s = shared_map();
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) _exit(sleep_until_data(s) < LONG_NS / 4 ? 0 : 1);
  ringer(s);
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "the sleeping process was not woken by the ring (status %d)", st);
  munmap(s, sizeof(*s));
}

/* Nobody armed: a ring leaves the word alone (no system call was needed). */
static void test_idle_ring(void) {
  struct shared* s = shared_map();
  publish_and_ring(s);
  shunt_rank_bell_ring(&s->bell);
  CHECK_EQ_INT(atomic_load(&s->bell.word), 0);
  uint32_t seen = shunt_rank_bell_arm(&s->host, &s->bell);
  CHECK(shunt_host_sleepers_any(&s->host));
  shunt_rank_bell_ring(&s->bell);
  CHECK(atomic_load(&s->bell.word) != seen);
  shunt_rank_bell_disarm(&s->host, &s->bell);
  CHECK(!shunt_host_sleepers_any(&s->host));
  munmap(s, sizeof(*s));
}

int main(void) {
  test_idle_ring();
  test_threads();
  test_processes();
  CHECK_DONE();
}
