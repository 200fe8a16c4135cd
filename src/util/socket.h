/* TCP helpers for the bootstrap and the socket transport: choosing the interface, listening, connecting,
 * moving exact byte counts before a deadline, and the fixed wire form of an address.
 *
 * Promises: every socket is close-on-exec; no call blocks past its deadline (times are
 * milliseconds of shunt_sock_now_ms, a monotonic clock); nothing raises SIGPIPE. A failure is a
 * SHUNT_E_* code (util/status.h) with its line in err: SHUNT_E_TIMEOUT at the deadline,
 * SHUNT_E_PEER when the other end refused, closed or reset, SHUNT_E_NET when no interface or
 * route serves, SHUNT_E_SYSTEM (or the code of its errno) when a system call failed. */
#ifndef SHUNT_UTIL_SOCKET_H
#define SHUNT_UTIL_SOCKET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* An IPv4 or IPv6 address and port in 20 bytes, the same on every host. */
struct shunt_wire_addr {
  uint16_t family;  /* AF_INET or AF_INET6 */
  uint16_t port;    /* network order */
  uint8_t addr[16]; /* IPv4 in the first 4 bytes */
};

void shunt_wire_from_sockaddr(struct shunt_wire_addr* w, const struct sockaddr_storage* a);
/* 0, or SHUNT_E_INVALID when w is not an IPv4 or IPv6 address. */
int shunt_wire_to_sockaddr(const struct shunt_wire_addr* w, struct sockaddr_storage* a);

/* Whether interface `name` passes a SHUNT_SOCKET_IFNAME filter (NCCL_SOCKET_IFNAME syntax: a
 * comma list of name prefixes; a leading ^ excludes the listed names, = asks for exact names). */
int shunt_sock_ifname_matches(const char* name, const char* filter);

/* The address to listen on, port 0: the first up interface that SHUNT_SOCKET_IFNAME admits
 * (IPv4 before IPv6, link-local IPv6 skipped). Loopback is used only when the filter names it
 * or when nothing else qualifies. Without a filter docker* bridges are skipped, as NCCL does. */
int shunt_sock_pick_addr(struct sockaddr_storage* addr, char* err, size_t errlen);

/* A non-blocking listening socket on addr (port 0: any); fills in the port. The fd, or a
 * (negative) SHUNT_E_* code. */
int shunt_sock_listen(struct sockaddr_storage* addr, char* err, size_t errlen);

/* Accepts one pending connection on a non-blocking listening socket: a non-blocking fd, or -1
 * when none is waiting (errno EAGAIN) or on error. */
int shunt_sock_accept(int lfd);

/* Connects, retrying refused connections until the deadline. A non-blocking fd, or a
 * (negative) SHUNT_E_* code. */
int shunt_sock_connect(const struct sockaddr_storage* addr, int64_t deadline_ms, char* err, size_t errlen);

/* A non-blocking connect: the fd (connection under way), or a (negative) SHUNT_E_* code ... */
int shunt_sock_connect_start(const struct sockaddr_storage* addr, char* err, size_t errlen);
/* ... and, once the fd polls writable, its outcome: 0 connected, else the errno. */
int shunt_sock_connect_result(int fd);

/* Sends or receives exactly n bytes on a non-blocking fd before the deadline: 0, or a
 * SHUNT_E_* code with the reason in err. */
int shunt_sock_send(int fd, const void* buf, size_t n, int64_t deadline_ms, char* err, size_t errlen);
int shunt_sock_recv(int fd, void* buf, size_t n, int64_t deadline_ms, char* err, size_t errlen);

int64_t shunt_sock_now_ms(void);

/* "a.b.c.d:port" or "[v6]:port". */
const char* shunt_sock_str(const struct sockaddr_storage* addr, char* buf, size_t len);
/* The remote end of a connected socket, as shunt_sock_str writes it ("?" when unknown). */
const char* shunt_sock_peer_str(int fd, char* buf, size_t len);

#endif
