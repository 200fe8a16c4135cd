/* The network table and SHUNT_NET's choice (net.h). */
#include "transport/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/env.h"
#include "util/log.h"
#include "util/status.h"

extern const struct shunt_net_ops shunt_net_ib;     /* net_ib.c */
extern const struct shunt_net_ops shunt_net_socket; /* net_socket.c */

/* The table, in order of preference: under auto the first row every rank has carries the port
 * channels; each row's name is a value of SHUNT_NET. */
static const struct shunt_net_ops* const rows[] = {&shunt_net_ib, &shunt_net_socket};

#define SHUNT_NET_ROWS ((uint32_t)(sizeof(rows) / sizeof(rows[0])))
_Static_assert(SHUNT_NET_ROWS <= SHUNT_NET_ROWS_MAX, "the network table outgrew SHUNT_NET_ROWS_MAX");

size_t shunt_nets_card_bytes(void) {
  return SHUNT_NET_ROWS * SHUNT_NET_CARD_BYTES;
}

static int read_kind(void) {
  const char* names[SHUNT_NET_ROWS + 1] = {"auto"};
  for (size_t i = 0; i < SHUNT_NET_ROWS; i++) names[i + 1] = rows[i]->name;
  return shunt_env_choice("SHUNT_NET", NULL, names, (int)SHUNT_NET_ROWS + 1, 0);
}

static bool allowed(int kind, uint32_t row) {
  return kind == 0 || (uint32_t)kind == row + 1;
}

static const char* kind_name(int kind) {
  return kind == 0 ? "auto" : rows[kind - 1]->name;
}

int shunt_nets_open(const struct shunt_net_ep_config* c, struct shunt_nets* n, void* cards, char* err,
                    size_t len) {
  memset(n, 0, sizeof(*n));
  memset(cards, 0, shunt_nets_card_bytes());
  n->kind = read_kind();
  for (uint32_t i = 0; i < SHUNT_NET_ROWS; i++) {
    if (!allowed(n->kind, i)) continue;
    char why[256];
    int rc = rows[i]->open(c, &n->ep[i], (char*)cards + (size_t)i * SHUNT_NET_CARD_BYTES, why, sizeof(why));
    if (rc == SHUNT_OK) continue;
    n->ep[i] = NULL;
    if (n->kind != 0) {
      snprintf(err, len, "SHUNT_NET=%s: %s", rows[i]->name, why);
      return rc;
    }
    if (i + 1 == SHUNT_NET_ROWS) {
      snprintf(err, len, "%s", why);
      return rc;
    }
    SHUNT_INFO(SHUNT_NET, "rank %u: no %s transport (%s)", c->rank, rows[i]->says, why);
  }
  return 0;
}

static const void* card_at(const void* cards, size_t stride, uint32_t r, uint32_t row) {
  return (const char*)cards + (size_t)r * stride + (size_t)row * SHUNT_NET_CARD_BYTES;
}

/* The first allowed row every rank has; why: "" or, under auto, the rank that lacked the
 * first one, for the INFO line. */
static uint32_t pick(int kind, const void* cards, size_t stride, uint32_t nranks, char* why, size_t len) {
  why[0] = 0;
  for (uint32_t i = 0; i < SHUNT_NET_ROWS; i++) {
    if (!allowed(kind, i)) continue;
    uint32_t lacking = nranks;
    for (uint32_t r = 0; r < nranks && lacking == nranks; r++)
      if (!rows[i]->usable(card_at(cards, stride, r, i))) lacking = r;
    if (lacking == nranks) return i;
    if (kind == 0 && !why[0]) snprintf(why, len, "; rank %u has no %s transport", lacking, rows[i]->says);
  }
  return SHUNT_NET_ROWS;
}

int shunt_nets_connect(struct shunt_nets* n, const struct shunt_net_ep_config* c, const bool* remote,
                       const void* cards, size_t stride, char (*where)[64], char* err, size_t len) {
  char why[64];
  uint32_t row = pick(n->kind, cards, stride, c->nranks, why, sizeof(why));
  for (uint32_t i = 0; i < SHUNT_NET_ROWS; i++)
    if (i != row && n->ep[i]) {
      rows[i]->close(n->ep[i]);
      n->ep[i] = NULL;
    }
  if (row == SHUNT_NET_ROWS) {
    snprintf(err, len, "SHUNT_NET=%s: a rank has no such transport", kind_name(n->kind));
    return SHUNT_E_NET;
  }
  const struct shunt_net_ops* ops = rows[row];
  SHUNT_INFO(SHUNT_NET, "rank %u (host %u of %u): %sport channels to other hosts use %s (SHUNT_NET=%s%s)",
             c->rank, c->at.node, c->at.nnodes, c->device ? "GPU " : "",
             c->device ? ops->device_says : ops->says, kind_name(n->kind), why);
  for (uint32_t r = 0; where && r < c->nranks; r++)
    if (remote[r]) ops->where(card_at(cards, stride, r, row), where[r], sizeof(where[r]));
  SHUNT_TRY(ops->connect(n->ep[row], remote, card_at(cards, stride, 0, row), stride, err, len));
  n->ops = ops;
  n->chosen = n->ep[row];
  n->row = row;
  return 0;
}

void shunt_nets_leave(struct shunt_nets* n) {
  if (n && n->ops) n->ops->leave(n->chosen);
}

void shunt_nets_close(struct shunt_nets* n) {
  if (!n) return;
  for (uint32_t i = 0; i < SHUNT_NET_ROWS; i++)
    if (n->ep[i]) {
      rows[i]->leave(n->ep[i]);
      rows[i]->close(n->ep[i]);
      n->ep[i] = NULL;
    }
  n->ops = NULL;
  n->chosen = NULL;
}
