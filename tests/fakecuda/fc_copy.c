/* Copies as a copy engine makes them (fake_cuda.h): CUDA promises nothing about the order in
 * which the bytes of one copy land, nor that an aligned word lands whole (cuMemcpy's
 * documentation gives no atomicity; a copy engine writes in bursts and PCIe may split them).
 * So one copy lands in shuffled pieces: a small one byte by byte, with a pause halfway that
 * lets a watching thread see it half done; a large one in shuffled segments. A copy is whole
 * when it returns, and the stream's next operation starts after it (release ordering), as a
 * later copy on a stream lands after an earlier one. Leniency "copy-words": aligned 4- and
 * 8-byte words land whole (the old model). */
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "fake_cuda.h"

#define SMALL 64    /* at most this many bytes: byte-wise */
#define SEGMENTS 16 /* a larger copy: this many shuffled pieces */

static uint64_t next_rand(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void words(void* dst, const void* src, size_t n) {
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if ((d | s | n) % 8 == 0) {
    for (size_t i = 0; i < n; i += 8)
      __atomic_store_n((uint64_t*)(d + i), __atomic_load_n((const uint64_t*)(s + i), __ATOMIC_RELAXED),
                       __ATOMIC_RELEASE);
  } else if ((d | s | n) % 4 == 0) {
    for (size_t i = 0; i < n; i += 4)
      __atomic_store_n((uint32_t*)(d + i), __atomic_load_n((const uint32_t*)(s + i), __ATOMIC_RELAXED),
                       __ATOMIC_RELEASE);
  } else {
    memcpy(dst, src, n);
  }
}

/* order[0..n) = 0..n-1 in a random order (Fisher-Yates); n <= 256. */
static void shuffled(unsigned char* order, size_t n, uint64_t* seed) {
  for (size_t i = 0; i < n; i++) order[i] = (unsigned char)i;
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = next_rand(seed) % (i + 1);
    unsigned char t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

void fc_copy(void* dst, const void* src, size_t n) {
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (n == 0) return;
  if (!(d + n <= s || s + n <= d)) { /* overlapping: undefined for the driver; kept simple */
    memmove(dst, src, n);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    return;
  }
  if (fc_lenient("copy-words")) {
    words(dst, src, n);
    return;
  }
  static __thread uint64_t seed;
  if (!seed) seed = (uint64_t)(uintptr_t)&seed | 1u;
  volatile unsigned char* out = dst;
  const unsigned char* in = src;
  if (n <= SMALL) {
    /* Every byte once, in a shuffled order, half of them before a pause. */
    unsigned char order[SMALL];
    shuffled(order, n, &seed);
    for (size_t i = 0; i < n; i++) {
      if (i == n / 2 && n > 1) sched_yield();
      out[order[i]] = in[order[i]];
    }
  } else {
    size_t seg = (n + SEGMENTS - 1) / SEGMENTS, nseg = (n + seg - 1) / seg;
    unsigned char order[SEGMENTS];
    shuffled(order, nseg, &seed);
    for (size_t k = 0; k < nseg; k++) {
      size_t lo = order[k] * seg, len = lo + seg <= n ? seg : n - lo;
      /* A piece's first bytes one at a time: no word of it lands whole by chance. */
      size_t head = len < 8 ? len : 8;
      for (size_t i = head; i-- > 0;) out[lo + i] = in[lo + i];
      memcpy((char*)dst + lo + head, (const char*)src + lo + head, len - head);
    }
  }
  __atomic_thread_fence(__ATOMIC_RELEASE);
}
