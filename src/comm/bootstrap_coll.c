/* The bootstrap's collectives and split, built on its point-to-point messages: a ring for
 * allgather, a binomial tree for broadcast, dissemination for the barrier. Each collective
 * takes the next sequence number as its tag, so that messages of successive collectives
 * never mix. See bootstrap.h. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "comm/bootstrap_internal.h"
#include "util/status.h"

static int32_t next_tag(struct shunt_bootstrap* b) {
  return (int32_t)(b->coll_seq++ & 0x7fffffffu);
}

/* Ring allgather among `members` (parent ranks, NULL: every rank in order); slot i of buf
 * belongs to members[i], and `me` is this rank's index. */
static int ring_allgather(struct shunt_bootstrap* b, const int* members, int n, int me, void* buf, size_t bytes,
                          char* err, size_t errlen) {
  int32_t tag = next_tag(b);
  if (bytes > SHUNT_BOOTSTRAP_MAX_MSG)
    return shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen,
                           "allgather of %zu bytes per rank exceeds the bootstrap's limit", bytes);
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  if (members) {
    next = members[next];
    prev = members[prev];
  }
  int64_t deadline = shunt_boot_deadline(b);
  char* slots = buf;
  /* Step s passes on the slot that arrived in step s-1 (this rank's own at s = 0). */
  for (int s = 0; s < n - 1; s++) {
    int out = (me - s + n) % n, in = (me - s - 1 + n) % n;
    SHUNT_TRY(shunt_boot_send(b, next, SHUNT_BOOT_COLL, tag, slots + (size_t)out * bytes, bytes, deadline,
                              err, errlen));
    SHUNT_TRY(shunt_boot_recv(b, prev, SHUNT_BOOT_COLL, tag, slots + (size_t)in * bytes, bytes, deadline, err,
                              errlen));
  }
  return 0;
}

int shunt_bootstrap_allgather(struct shunt_bootstrap* b, void* buf, size_t bytes, char* err, size_t errlen) {
  return ring_allgather(b, NULL, b->nranks, b->rank, buf, bytes, err, errlen);
}

int shunt_bootstrap_bcast(struct shunt_bootstrap* b, void* buf, size_t bytes, int root, char* err,
                          size_t errlen) {
  int32_t tag = next_tag(b);
  int n = b->nranks;
  if (root < 0 || root >= n)
    return shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen, "broadcast root %d is not a rank", root);
  int64_t deadline = shunt_boot_deadline(b);
  int vr = (b->rank - root + n) % n, mask = 1;
  /* Receive from the rank that differs in the lowest set bit, then pass on below it. */
  for (; mask < n; mask <<= 1)
    if (vr & mask) {
      int from = (vr - mask + root) % n;
      SHUNT_TRY(shunt_boot_recv(b, from, SHUNT_BOOT_COLL, tag, buf, bytes, deadline, err, errlen));
      break;
    }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n)
      SHUNT_TRY(shunt_boot_send(b, (vr + mask + root) % n, SHUNT_BOOT_COLL, tag, buf, bytes, deadline, err,
                                errlen));
  return 0;
}

int shunt_bootstrap_barrier(struct shunt_bootstrap* b, char* err, size_t errlen) {
  int32_t tag = next_tag(b);
  int n = b->nranks;
  int64_t deadline = shunt_boot_deadline(b);
  for (int d = 1; d < n; d <<= 1) {
    SHUNT_TRY(shunt_boot_send(b, (b->rank + d) % n, SHUNT_BOOT_COLL, tag, NULL, 0, deadline, err, errlen));
    SHUNT_TRY(
        shunt_boot_recv(b, (b->rank - d + n) % n, SHUNT_BOOT_COLL, tag, NULL, 0, deadline, err, errlen));
  }
  return 0;
}

/* What every rank tells the others in a split. */
struct split_card {
  int32_t color, key;
  uint64_t nonce;              /* this rank's share of the child's key */
  struct shunt_wire_addr addr; /* where it listens for the child; family 0: it could not */
  int32_t pad;
};

struct member {
  int32_t key, rank;
};

static int by_key_then_rank(const void* a, const void* b) {
  const struct member *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static uint64_t mix(uint64_t h, uint64_t v) { /* splitmix64 step */
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

/* Builds this rank's child from the gathered cards: members of its color in (key, rank)
 * order, the listening addresses they sent, and a key that all of them derive alike. */
static int make_child(struct shunt_bootstrap* b, const struct split_card* cards, int lfd,
                      const struct sockaddr_storage* self, struct shunt_bootstrap** child, char* err,
                      size_t errlen) {
  int color = cards[b->rank].color, n = 0;
  struct member* m = malloc((size_t)b->nranks * sizeof(*m));
  struct shunt_wire_addr* table = NULL;
  if (!m) {
    close(lfd);
    return shunt_boot_fail(b, SHUNT_E_NOMEM, err, errlen, "out of memory splitting");
  }
  for (int p = 0; p < b->nranks; p++)
    if (cards[p].color == color) m[n++] = (struct member){cards[p].key, p};
  qsort(m, (size_t)n, sizeof(*m), by_key_then_rank);
  uint64_t key = mix(b->key, (uint64_t)(uint32_t)color);
  int me = -1, bad = -1;
  for (int i = 0; i < n; i++) {
    key = mix(key, cards[m[i].rank].nonce);
    if (m[i].rank == b->rank) me = i;
    if (cards[m[i].rank].addr.family == 0 && bad < 0) bad = m[i].rank;
  }
  if (bad >= 0) {
    free(m);
    close(lfd);
    return shunt_boot_fail(b, SHUNT_E_PEER, err, errlen, "rank %d could not listen for the child of color %d",
                           bad, color);
  }
  struct shunt_bootstrap* c = shunt_boot_new(me, n, key ? key : 1, b->timeout_s, lfd, self, err, errlen);
  if (c) table = malloc((size_t)n * sizeof(*table));
  if (!c || !table) {
    free(m);
    shunt_bootstrap_destroy(c);
    return shunt_boot_fail(b, SHUNT_E_NOMEM, err, errlen, "out of memory for a child of %d ranks", n);
  }
  for (int i = 0; i < n; i++) table[i] = cards[m[i].rank].addr;
  c->table = table;
  free(m);
  *child = c;
  return 0;
}

/* Where this rank listens for a child it will belong to: fills card's addr and nonce and
 * returns the listening fd, or leaves addr.family 0 and returns a (negative) SHUNT_E_* code with
 * the reason WARNed. */
static int listen_for_child(struct shunt_bootstrap* b, struct split_card* card, struct sockaddr_storage* self) {
  int lfd = -1;
  memset(self, 0, sizeof(*self));
  char why[160] = "", msg[200];
  if (shunt_sock_pick_addr(self, why, sizeof(why)) == 0 && (lfd = shunt_sock_listen(self, why, sizeof(why))) >= 0 &&
      getrandom(&card->nonce, sizeof(card->nonce), 0) == (ssize_t)sizeof(card->nonce)) {
    shunt_wire_from_sockaddr(&card->addr, self);
    return lfd;
  }
  if (lfd >= 0) close(lfd);
  return shunt_boot_fail(b, SHUNT_E_NET, msg, sizeof(msg), "cannot listen for the child: %s",
                         why[0] ? why : "no random bytes");
}

int shunt_bootstrap_split(struct shunt_bootstrap* b, int color, int key, struct shunt_bootstrap** child,
                          char* err, size_t errlen) {
  *child = NULL;
  if (color < 0) color = SHUNT_SPLIT_NOCOLOR;
  struct split_card* cards = calloc((size_t)b->nranks, sizeof(*cards));
  if (!cards) return shunt_boot_fail(b, SHUNT_E_NOMEM, err, errlen, "out of memory splitting");
  struct split_card* mine = &cards[b->rank];
  mine->color = color;
  mine->key = key;
  /* Listen for the child before telling the others where. */
  struct sockaddr_storage self;
  int lfd = color >= 0 ? listen_for_child(b, mine, &self) : -1;
  int rc = shunt_bootstrap_allgather(b, cards, sizeof(*cards), err, errlen);
  if (rc == 0 && color >= 0) {
    rc = make_child(b, cards, lfd, &self, child, err, errlen);
    lfd = -1; /* make_child took it */
  }
  if (lfd >= 0) close(lfd);
  free(cards);
  return rc;
}

int shunt_bootstrap_shrink(struct shunt_bootstrap* b, const int* exclude, int nexclude,
                           struct shunt_bootstrap** child, char* err, size_t errlen) {
  *child = NULL;
  int n = b->nranks;
  char* gone = calloc((size_t)n, 1);
  int* members = calloc((size_t)n, sizeof(*members));
  struct split_card* cards = calloc((size_t)n, sizeof(*cards));
  struct split_card* sub = calloc((size_t)n, sizeof(*sub));
  int rc = SHUNT_OK, lfd = -1;
  if (!gone || !members || !cards || !sub) {
    rc = shunt_boot_fail(b, SHUNT_E_NOMEM, err, errlen, "out of memory shrinking");
    goto out;
  }
  for (int i = 0; i < nexclude; i++) {
    if (exclude[i] < 0 || exclude[i] >= n) {
      rc = shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen, "excluded rank %d is not a rank of %d",
                           exclude[i], n);
      goto out;
    }
    gone[exclude[i]] = 1;
  }
  if (gone[b->rank]) {
    rc = shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen, "this rank is in the exclusion list");
    goto out;
  }
  int nm = 0, me = 0;
  for (int r = 0; r < n; r++)
    if (!gone[r]) {
      if (r == b->rank) me = nm;
      members[nm++] = r;
    }
  /* Survivors only: the excluded ranks may be gone, so nothing may wait on them. */
  struct sockaddr_storage self;
  sub[me].color = 0;
  sub[me].key = b->rank;
  lfd = listen_for_child(b, &sub[me], &self);
  if ((rc = ring_allgather(b, members, nm, me, sub, sizeof(*sub), err, errlen)) != SHUNT_OK) goto out;
  for (int r = 0; r < n; r++) cards[r].color = SHUNT_SPLIT_NOCOLOR;
  for (int i = 0; i < nm; i++) cards[members[i]] = sub[i];
  rc = make_child(b, cards, lfd, &self, child, err, errlen);
  lfd = -1;
out:
  if (lfd >= 0) close(lfd);
  free(gone);
  free(members);
  free(cards);
  free(sub);
  return rc;
}
