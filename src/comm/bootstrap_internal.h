/* The state of one bootstrap communicator, shared by its rendezvous, its connections and its
 * collectives. Not part of the bootstrap's interface. */
#ifndef SHUNT_COMM_BOOTSTRAP_INTERNAL_H
#define SHUNT_COMM_BOOTSTRAP_INTERNAL_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/bootstrap.h"
#include "comm/bootstrap_wire.h"

#define BOOT_PENDING 16 /* incoming connections that have not said who they are */

/* A message that arrived before anyone asked for it. */
struct boot_msg {
  struct boot_msg* next;
  uint32_t type;
  int32_t tag;
  size_t len;
  unsigned char data[];
};

/* An incoming connection and the message being read from it. */
struct boot_in {
  int fd;            /* -1: none */
  int64_t deadline;  /* while unidentified: when it must have greeted */
  size_t hgot, bgot; /* header and payload bytes read so far */
  struct shunt_boot_hdr h;
  struct boot_msg* body; /* payload being read, NULL while reading a header */
};

struct boot_peer {
  int out;                      /* the connection this rank opened to the peer, -1 until first send */
  int out_broken;               /* a send failed midway: the stream cannot be trusted */
  struct boot_in in;            /* the connection the peer opened to this rank */
  int gone;                     /* the peer closed its connection or broke the protocol */
  struct boot_msg *head, *tail; /* arrived, not yet received, in arrival order */
};

struct shunt_bootstrap {
  int rank, nranks;
  uint64_t key;
  int timeout_s;
  int lfd;                       /* listening, for the communicator's life */
  struct shunt_wire_addr self;   /* where lfd listens */
  struct shunt_wire_addr* table; /* every rank's listening address, NULL until init finished */
  int root_fd;                   /* between init_start and init_finish */
  int64_t root_deadline;
  struct boot_peer* peers;
  struct boot_in pending[BOOT_PENDING];
  uint32_t coll_seq; /* tags the collectives, called in the same order on every rank */
  struct pollfd* pfd;
  int* pfd_who;
  /* fds are only replaced under lock, so that abort (any thread) never shuts down a reused
   * number; the owning thread reads them without it. */
  pthread_mutex_t lock;
  atomic_int aborted;
};

/* A new communicator's state: no connections yet, listening on lfd (taken over). */
struct shunt_bootstrap* shunt_boot_new(int rank, int nranks, uint64_t key, int timeout_s, int lfd,
                                       const struct sockaddr_storage* self, char* err, size_t errlen);

/* Sends one message of (type, tag) to peer (itself included) before the deadline, reading
 * whatever arrives meanwhile. */
int shunt_boot_send(struct shunt_bootstrap* b, int peer, uint32_t type, int32_t tag, const void* data,
                    size_t len, int64_t deadline, char* err, size_t errlen);
/* Receives the first message of (type, tag) from peer, which must be exactly len bytes. */
int shunt_boot_recv(struct shunt_bootstrap* b, int peer, uint32_t type, int32_t tag, void* data, size_t len,
                    int64_t deadline, char* err, size_t errlen);

/* Closes and frees every connection and queued message. */
void shunt_boot_close_links(struct shunt_bootstrap* b);

int64_t shunt_boot_deadline(const struct shunt_bootstrap* b);

/* Fills err and WARNs it (prefixed with the rank); returns code (a SHUNT_E_*, util/status.h). */
int shunt_boot_fail(const struct shunt_bootstrap* b, int code, char* err, size_t errlen, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
