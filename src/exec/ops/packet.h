/* LL packets (docs/plan-format.md §7): layouts, packing, polling, sizes and flags.
 *
 * LL16 packet (16 bytes, 16-aligned): data1:u32, flag1:u32, data2:u32, flag2:u32. Packet i of a
 *   range carries data bytes [8i, 8i+8): data1 the first word, data2 the second. Valid when
 *   flag1 == flag2 == the expected flag.
 * LL8 packet (8 bytes, 8-aligned): data:u32, flag:u32. Packet i carries data bytes [4i, 4i+4).
 * Both double the footprint: data offset x lives at packet offset 2x, n data bytes take 2n.
 *
 * Packet memory is handled as 64-bit words (data in the low half, flag in the high half, which is
 * the memory order above on a little-endian machine) so that each data word travels with its flag
 * in one indivisible store: a reader that sees the expected flag in a word also sees that word's
 * data. Memory is touched only through four hooks, which a backend may define before including
 * this file:
 *   SHUNT_PKT_STORE16(p, lo, hi)   store words lo, hi at the 16-byte packet p
 *   SHUNT_PKT_LOAD16(p, lo, hi)    load them (lvalues lo, hi)
 *   SHUNT_PKT_STORE8(p, w)         store word w at the 8-byte packet p
 *   SHUNT_PKT_LOAD8(p, w)          load it
 *   SHUNT_PKT_RELAX()              between two polls of a packet that has not arrived
 * Defaults: on the device one volatile 16- or 8-byte access (st/ld.volatile.v4.u32, .v2.u32); on
 * the host, relaxed 64-bit atomic accesses per word (threads and processes of the host backend
 * share these pages), and no relaxation.
 *
 * Flags: flag 0 and 0xffffffff are never used, so zero-filled (or 0xff-filled) packet memory never
 * holds a valid packet. Executions of a communicator number its epochs 0, 1, 2...; epoch e uses
 * flag 1 + (e + SHUNT_PKT_FLAG_START - 1) mod (2^32 - 2), the same on every rank that counts the
 * same executions. The sequence
 * has even length, so flag parity alternates across the wrap as well, and with a double scratch
 * buffer consecutive executions always use different halves (§7.4: flag odd -> offset 0, flag
 * even -> the upper half). */
#ifndef SHUNT_EXEC_OPS_PACKET_H
#define SHUNT_EXEC_OPS_PACKET_H

#include "exec/ops/dtype.h"

#if defined(__cplusplus)
#define SHUNT_ALIGNAS(n) alignas(n)
#else
#define SHUNT_ALIGNAS(n) _Alignas(n)
#endif

#define SHUNT_LL16_BYTES 16
#define SHUNT_LL16_PAYLOAD 8
#define SHUNT_LL8_BYTES 8
#define SHUNT_LL8_PAYLOAD 4

/* w[0] = data1 | flag1 << 32, w[1] = data2 | flag2 << 32. */
struct shunt_ll16 {
  SHUNT_ALIGNAS(16) uint64_t w[2];
};
/* w = data | flag << 32. */
struct shunt_ll8 {
  SHUNT_ALIGNAS(8) uint64_t w;
};

/* ---- Memory hooks ----------------------------------------------------------------------------- */

#if !defined(SHUNT_PKT_STORE16)
#if defined(__CUDA_ARCH__)
#define SHUNT_PKT_STORE16(p, lo, hi)                                                         \
  asm volatile("st.volatile.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"((unsigned)(lo)),   \
               "r"((unsigned)((lo) >> 32)), "r"((unsigned)(hi)), "r"((unsigned)((hi) >> 32)) \
               : "memory")
#else
#define SHUNT_PKT_STORE16(p, lo, hi)                      \
  do {                                                    \
    __atomic_store_n(&(p)->w[0], (lo), __ATOMIC_RELAXED); \
    __atomic_store_n(&(p)->w[1], (hi), __ATOMIC_RELAXED); \
  } while (0)
#endif
#endif

#if !defined(SHUNT_PKT_LOAD16)
#if defined(__CUDA_ARCH__)
#define SHUNT_PKT_LOAD16(p, lo, hi)                           \
  do {                                                        \
    unsigned a_, b_, c_, d_;                                  \
    asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];" \
                 : "=r"(a_), "=r"(b_), "=r"(c_), "=r"(d_)     \
                 : "l"(p)                                     \
                 : "memory");                                 \
    (lo) = (uint64_t)a_ | (uint64_t)b_ << 32;                 \
    (hi) = (uint64_t)c_ | (uint64_t)d_ << 32;                 \
  } while (0)
#else
#define SHUNT_PKT_LOAD16(p, lo, hi)                       \
  do {                                                    \
    (lo) = __atomic_load_n(&(p)->w[0], __ATOMIC_RELAXED); \
    (hi) = __atomic_load_n(&(p)->w[1], __ATOMIC_RELAXED); \
  } while (0)
#endif
#endif

#if !defined(SHUNT_PKT_STORE8)
#if defined(__CUDA_ARCH__)
#define SHUNT_PKT_STORE8(p, v)                                                                               \
  asm volatile("st.volatile.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"((unsigned)(v)), "r"((unsigned)((v) >> 32)) \
               : "memory")
#else
#define SHUNT_PKT_STORE8(p, v) __atomic_store_n(&(p)->w, (v), __ATOMIC_RELAXED)
#endif
#endif

#if !defined(SHUNT_PKT_LOAD8)
#if defined(__CUDA_ARCH__)
#define SHUNT_PKT_LOAD8(p, v)                                                                    \
  do {                                                                                           \
    unsigned a_, b_;                                                                             \
    asm volatile("ld.volatile.v2.u32 {%0, %1}, [%2];" : "=r"(a_), "=r"(b_) : "l"(p) : "memory"); \
    (v) = (uint64_t)a_ | (uint64_t)b_ << 32;                                                     \
  } while (0)
#else
#define SHUNT_PKT_LOAD8(p, v) ((v) = __atomic_load_n(&(p)->w, __ATOMIC_RELAXED))
#endif
#endif

#if !defined(SHUNT_PKT_RELAX)
#define SHUNT_PKT_RELAX() ((void)0)
#endif

/* ---- Packing (values only) --------------------------------------------------------------------- */

SHUNT_HD uint64_t shunt_pkt_word(uint32_t data, uint32_t flag) {
  return (uint64_t)data | (uint64_t)flag << 32;
}
SHUNT_HD uint32_t shunt_pkt_word_data(uint64_t w) {
  return (uint32_t)w;
}
SHUNT_HD uint32_t shunt_pkt_word_flag(uint64_t w) {
  return (uint32_t)(w >> 32);
}

/* An LL16 packet is complete when both of its words carry the flag. */
SHUNT_HD int shunt_ll16_complete(uint64_t lo, uint64_t hi, uint32_t flag) {
  return shunt_pkt_word_flag(lo) == flag && shunt_pkt_word_flag(hi) == flag;
}

/* The 8-byte payload of a complete LL16 packet, in data memory order. */
SHUNT_HD uint64_t shunt_ll16_payload(uint64_t lo, uint64_t hi) {
  return (uint64_t)shunt_pkt_word_data(lo) | (uint64_t)shunt_pkt_word_data(hi) << 32;
}

/* ---- One packet in memory ---------------------------------------------------------------------- */

/* Writes the 8 data bytes `payload` (data memory order) stamped with flag. */
SHUNT_HD void shunt_ll16_put(struct shunt_ll16* p, uint64_t payload, uint32_t flag) {
  uint64_t lo = shunt_pkt_word((uint32_t)payload, flag), hi = shunt_pkt_word((uint32_t)(payload >> 32), flag);
  SHUNT_PKT_STORE16(p, lo, hi);
}

/* One look: 1 and *payload when p carries flag, else 0. */
SHUNT_HD int shunt_ll16_try(const struct shunt_ll16* p, uint32_t flag, uint64_t* payload) {
  uint64_t lo, hi;
  SHUNT_PKT_LOAD16(p, lo, hi);
  if (!shunt_ll16_complete(lo, hi, flag)) return 0;
  *payload = shunt_ll16_payload(lo, hi);
  return 1;
}

/* Polls up to max_polls times (at least once): 1 and *payload once p carries flag, 0 if it never
 * did. */
SHUNT_HD int shunt_ll16_wait(const struct shunt_ll16* p, uint32_t flag, uint64_t max_polls,
                             uint64_t* payload) {
  for (uint64_t i = 0;; i++) {
    if (shunt_ll16_try(p, flag, payload)) return 1;
    if (i + 1 >= max_polls) return 0;
    SHUNT_PKT_RELAX();
  }
}

SHUNT_HD void shunt_ll8_put(struct shunt_ll8* p, uint32_t payload, uint32_t flag) {
  uint64_t w = shunt_pkt_word(payload, flag);
  SHUNT_PKT_STORE8(p, w);
}

SHUNT_HD int shunt_ll8_try(const struct shunt_ll8* p, uint32_t flag, uint32_t* payload) {
  uint64_t w;
  SHUNT_PKT_LOAD8(p, w);
  if (shunt_pkt_word_flag(w) != flag) return 0;
  *payload = shunt_pkt_word_data(w);
  return 1;
}

SHUNT_HD int shunt_ll8_wait(const struct shunt_ll8* p, uint32_t flag, uint64_t max_polls, uint32_t* payload) {
  for (uint64_t i = 0;; i++) {
    if (shunt_ll8_try(p, flag, payload)) return 1;
    if (i + 1 >= max_polls) return 0;
    SHUNT_PKT_RELAX();
  }
}

/* ---- Ranges (one thread; a parallel backend splits by packet index) ----------------------------
 * pkt_bytes is SHUNT_LL16_BYTES or SHUNT_LL8_BYTES (the values of enum shunt_pkt_type). Data
 * sizes and offsets must be multiples of the payload. */

SHUNT_HD int shunt_pkt_payload(int pkt_bytes) {
  return pkt_bytes == SHUNT_LL16_BYTES  ? SHUNT_LL16_PAYLOAD
         : pkt_bytes == SHUNT_LL8_BYTES ? SHUNT_LL8_PAYLOAD
                                        : 0;
}

/* Bytes of packet memory for n data bytes, and the packet offset of data offset x: both twice the
 * data figure, for LL16 and LL8 alike. */
SHUNT_HD uint64_t shunt_pkt_bytes(uint64_t data_bytes) {
  return 2 * data_bytes;
}
SHUNT_HD uint64_t shunt_pkt_offset(uint64_t data_offset) {
  return 2 * data_offset;
}

/* Whether a data range (offset, bytes) can travel as packets of this type. */
SHUNT_HD int shunt_pkt_range_ok(int pkt_bytes, uint64_t data_offset, uint64_t data_bytes) {
  int pl = shunt_pkt_payload(pkt_bytes);
  return pl && data_offset % (uint64_t)pl == 0 && data_bytes % (uint64_t)pl == 0;
}

/* Writes nbytes of data as packets stamped with flag at pkts (packet i at pkts + i*pkt_bytes).
 * Returns 0, or -1 for a bad type or a size that is not a whole number of payloads. */
SHUNT_HD int shunt_pkt_write(int pkt_bytes, void* pkts, const void* data, uint64_t nbytes, uint32_t flag) {
  if (!shunt_pkt_range_ok(pkt_bytes, 0, nbytes)) return -1;
  if (pkt_bytes == SHUNT_LL16_BYTES) {
    for (uint64_t i = 0; i < nbytes / SHUNT_LL16_PAYLOAD; i++) {
      uint64_t v;
      memcpy(&v, (const char*)data + i * SHUNT_LL16_PAYLOAD, 8);
      shunt_ll16_put((struct shunt_ll16*)pkts + i, v, flag);
    }
  } else {
    for (uint64_t i = 0; i < nbytes / SHUNT_LL8_PAYLOAD; i++) {
      uint32_t v;
      memcpy(&v, (const char*)data + i * SHUNT_LL8_PAYLOAD, 4);
      shunt_ll8_put((struct shunt_ll8*)pkts + i, v, flag);
    }
  }
  return 0;
}

/* Waits for nbytes of data carried by packets with flag and stores the payloads to data, polling
 * each packet up to max_polls times. Returns 0 when all arrived; 1 when one did not, with *stuck
 * (if not NULL) set to the data offset of that packet and the payloads before it stored; -1 for
 * a bad type or size. */
SHUNT_HD int shunt_pkt_read(int pkt_bytes, void* data, const void* pkts, uint64_t nbytes, uint32_t flag,
                            uint64_t max_polls, uint64_t* stuck) {
  if (!shunt_pkt_range_ok(pkt_bytes, 0, nbytes)) return -1;
  uint64_t pl = (uint64_t)shunt_pkt_payload(pkt_bytes);
  for (uint64_t i = 0; i < nbytes / pl; i++) {
    int ok;
    if (pkt_bytes == SHUNT_LL16_BYTES) {
      uint64_t v = 0;
      ok = shunt_ll16_wait((const struct shunt_ll16*)pkts + i, flag, max_polls, &v);
      if (ok) memcpy((char*)data + i * pl, &v, 8);
    } else {
      uint32_t v = 0;
      ok = shunt_ll8_wait((const struct shunt_ll8*)pkts + i, flag, max_polls, &v);
      if (ok) memcpy((char*)data + i * pl, &v, 4);
    }
    if (!ok) {
      if (stuck) *stuck = i * pl;
      return 1;
    }
  }
  return 0;
}

/* ---- Flags and the double-scratch half ---------------------------------------------------------- */

#define SHUNT_PKT_FLAG_FIRST 1u
#define SHUNT_PKT_FLAG_LAST 0xfffffffeu
#define SHUNT_PKT_FLAG_PERIOD 0xfffffffeull /* distinct flags, an even number */

/* The first execution's flag. Not 1: plans without packets write scratch of their own
 * (shunt_scratch_at), but a packet plan may leave plain words in its part too, and a word whose
 * upper half equals the flag reads as a packet. Small integers are common data; this pattern is
 * rare (as float32 a NaN with a payload, which arithmetic never produces; as two 16-bit floats,
 * one of them a NaN), and the flags of the next 4.7 million executions stay such patterns. Odd:
 * the first execution uses the lower half. */
#define SHUNT_PKT_FLAG_START 0x7fb7e1d3u

/* The flag of a communicator's execution number `epoch` (0 for its first). */
SHUNT_HD uint32_t shunt_pkt_flag_for_epoch(uint64_t epoch) {
  return (uint32_t)((epoch + (SHUNT_PKT_FLAG_START - SHUNT_PKT_FLAG_FIRST)) % SHUNT_PKT_FLAG_PERIOD) +
         SHUNT_PKT_FLAG_FIRST;
}

/* The flag after `flag`; 0 (no execution yet) is followed by the first flag. What a kernel does to
 * the communicator's device-resident flag once per execution. */
SHUNT_HD uint32_t shunt_pkt_flag_next(uint32_t flag) {
  return (flag == 0 || flag >= SHUNT_PKT_FLAG_LAST) ? SHUNT_PKT_FLAG_FIRST : flag + 1;
}

/* Offset of the scratch half an execution with `flag` uses (§7.4): with a double scratch buffer of
 * scratch_bytes in all, 0 for odd flags and scratch_bytes/2 for even ones; 0 without. */
SHUNT_HD uint64_t shunt_pkt_half(uint32_t flag, uint64_t scratch_bytes, int double_scratch) {
  return (double_scratch && (flag & 1u) == 0) ? scratch_bytes / 2 : 0;
}

/* A world's scratch (world_bytes per rank, as shunt_lower_scratch_need sizes it) is two parts:
 * packet plans run in the lower one, every other plan in the upper one. A word that a plan
 * without packets leaves in scratch is user data, any bit pattern, and would read as a packet
 * whenever its upper half equals a later execution's flag: the parts never share a byte, so no
 * such word is ever polled. Within its part an execution uses the double-scratch half its flag
 * selects (§7.4). The offset of the scratch an execution with `flag` uses: */
SHUNT_HD uint64_t shunt_scratch_at(uint32_t flag, uint64_t world_bytes, int packets, int double_scratch) {
  uint64_t part = world_bytes / 2;
  return (packets ? 0 : part) + shunt_pkt_half(flag, part, double_scratch);
}

/* The scratch bytes one execution may use in a world scratch of world_bytes. */
SHUNT_HD uint64_t shunt_scratch_cap(uint64_t world_bytes, int double_scratch) {
  return double_scratch ? world_bytes / 4 : world_bytes / 2;
}

#endif
