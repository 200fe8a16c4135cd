/* What a world must hold to run a set of call shapes (verify.h: verify_world_needs), for both
 * runners: the host backend's (cmd_verify.c) and the CPU-built kernel's (verify_kcpu.c). */
#include <string.h>

#include "exec/split.h"
#include "verify.h"

void verify_world_needs(const struct vopts* o, const struct shunt_plan* plan, const struct shape* shapes,
                        unsigned nshapes, struct verify_needs* n) {
  memset(n, 0, sizeof(*n));
  for (unsigned k = 0; k < nshapes; k++) {
    struct shunt_call_shape cs = {shapes[k].in,
                                  shapes[k].out,
                                  shapes[k].dt,
                                  shapes[k].op,
                                  (enum shunt_pkt_type)o->pkt,
                                  0,
                                  false,
                                  false};
    struct shunt_split sp;
    char why[256];
    if (!shunt_split_call(plan, &cs, &sp, why, sizeof(why))) continue;
    if (sp.scratch > n->scratch) n->scratch = sp.scratch;
    if (sp.in_need > n->stage_in) n->stage_in = sp.in_need;
    if (sp.out_need > n->stage_out) n->stage_out = sp.out_need;
    if (shapes[k].in > n->max_in) n->max_in = shapes[k].in;
    if (shapes[k].out > n->max_out) n->max_out = shapes[k].out;
    if (sp.tail_bytes > n->tail) n->tail = sp.tail_bytes;
  }
}
