/* nvcc builds the ops headers for the host and for every device architecture the project targets:
 * one kernel touches each family of functions so that all of them are instantiated. */
#include "exec/ops/dtype.h"
#include "exec/ops/packet.h"
#include "exec/ops/reduce.h"

__global__ void shunt_ops_compile_kernel(const struct shunt_red* r, const unsigned char* a,
                                         const unsigned char* b, unsigned char* out, struct shunt_ll16* p16,
                                         struct shunt_ll8* p8, uint32_t flag, size_t nbytes) {
  size_t sz = shunt_dtype_size(r->ty);
  size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * sz;
  if (sz == 0 || i + sz > nbytes) return;
  uint64_t x = shunt_pre_elem(r, shunt_dtype_load(a + i, r->ty));
  uint64_t y = shunt_dtype_load(b + i, r->ty);
  shunt_dtype_store(out + i, r->ty, shunt_post_elem(r, shunt_reduce_elem(r, x, y)));
  if (threadIdx.x == 0) {
    shunt_reduce_buf(out, a, b, sz, r);
    shunt_reduce_pre_buf(out, out, a, sz, r);
    shunt_pre_buf(out, out, sz, r);
    shunt_post_buf(out, out, sz, r);
    shunt_copy_buf(out, a, sz);
    uint64_t w =
        shunt_reduce_w64(r, x, y) + shunt_reduce_w32(r, (uint32_t)x, (uint32_t)y) + shunt_pre_w64(r, x);
    float f =
        shunt_f16_to_f32((uint16_t)w) + shunt_bf16_to_f32((uint16_t)w) + shunt_fp8_to_f32((uint8_t)w, 0);
    w += shunt_f32_to_f16(f) + shunt_f32_to_bf16(f) + shunt_f32_to_fp8(f, 1) +
         shunt_f16_to_fp8((uint16_t)w, 0);
    w += shunt_add_f16_sw((uint16_t)w, 1) + shunt_mul_bf16_sw((uint16_t)w, 2) + shunt_f32_to_e4m3_sw(f);
    struct shunt_red q;
    shunt_red_init(&q, SHUNT_REDOP_AVG, r->ty, (int)(w & 7) + 1);
    w += q.arg + (uint64_t)shunt_red_init_premulsum(&q, r->ty, a);
    shunt_ll16_put(p16, w, flag);
    shunt_ll8_put(p8, (uint32_t)w, flag);
    uint64_t v = 0;
    uint32_t u = 0;
    if (shunt_ll16_wait(p16, flag, 4, &v) && shunt_ll8_wait(p8, flag, 4, &u)) out[0] = (unsigned char)(v + u);
    shunt_pkt_write(SHUNT_LL16_BYTES, p16 + 1, a, 8, shunt_pkt_flag_next(flag));
    shunt_pkt_read(SHUNT_LL8_BYTES, out, p8 + 1, 4, shunt_pkt_flag_for_epoch(w), 2, &v);
    out[1] = (unsigned char)shunt_pkt_half(flag, nbytes, 1);
  }
}

/* The host pass compiles the same functions with the host compiler. */
int shunt_ops_compile_host(const struct shunt_red* r, const void* a, const void* b, void* out,
                           size_t nbytes) {
  return shunt_reduce_buf(out, a, b, nbytes, r) + shunt_pre_buf(out, out, nbytes, r) +
         shunt_post_buf(out, out, nbytes, r);
}
