/* File descriptors handed to other processes of this host over a Unix socket (SCM_RIGHTS): how
 * peers get the descriptor of a VMM allocation they import (gpu_vmm.h), as NCCL and FlashInfer
 * pass theirs. pidfd_getfd(2) would need the right to trace the owner, which Yama's
 * ptrace_scope=1 (Ubuntu's default) and Docker's default seccomp profile refuse between sibling
 * ranks; and a pid means nothing in another PID namespace. A ticket names the owner by an
 * abstract socket name random per process, so it means the same in every process that shares
 * the network namespace.
 *
 * Promises:
 * - shunt_fdpass_offer serves fd to whoever presents the ticket it fills, until withdrawn. The
 *   first offer of a process creates its socket and the one thread answering on it; nothing is
 *   created before. The caller keeps fd open until it withdraws the offer.
 * - The thread answers only a process of the same user (SO_PEERCRED) that presents a ticket
 *   offered and not withdrawn (its 64-bit key random too); each answer is one connection, the
 *   descriptor duplicated into the taker by the kernel.
 * - shunt_fdpass_take returns a descriptor of the taker's own (to close), or a negative code
 *   (util/status.h) with why: SHUNT_E_PEER for the owner gone, the offer withdrawn, no answer
 *   within 10 s, or the socket not reachable (another network namespace); the socket's code
 *   when none could be made.
 * - A child made by fork(2) starts with no offers and no socket (the thread is not copied).
 * Private to src/exec/gpu. */
#ifndef SHUNT_EXEC_GPU_FDPASS_H
#define SHUNT_EXEC_GPU_FDPASS_H

#include <stddef.h>
#include <stdint.h>

#define SHUNT_FDPASS_NAME 40 /* bytes of a socket name, NUL included */

struct shunt_fdpass_ticket {
  uint64_t key;
  char name[SHUNT_FDPASS_NAME];
};

/* 0, or SHUNT_E_SYSTEM (SHUNT_E_NOMEM) with a message (no socket or thread could be made). */
int shunt_fdpass_offer(int fd, struct shunt_fdpass_ticket* t, char* err, size_t len);
void shunt_fdpass_withdraw(const struct shunt_fdpass_ticket* t);
int shunt_fdpass_take(const struct shunt_fdpass_ticket* t, char* err, size_t len);

#endif
