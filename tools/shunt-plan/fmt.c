#include "fmt.h"

#include <inttypes.h>
#include <stdio.h>

const char* fmt_ref(const struct shunt_plan_ref* r, char* buf, size_t len) {
  switch (r->kind) {
    case SHUNT_REF_LOCAL:
      snprintf(buf, len, "%s[%u+%u]", shunt_buf_type_name(r->type), r->index, r->size);
      break;
    case SHUNT_REF_REMOTE:
      if (r->global >= 0)
        snprintf(buf, len, "rb%d(r%d:%s)[%u+%u]", r->global, r->peer, shunt_buf_type_name(r->type), r->index,
                 r->size);
      else
        snprintf(buf, len, "buffer_id%u(?)[%u+%u]", r->id, r->index, r->size);
      break;
    case SHUNT_REF_SWITCH:
      if (r->global >= 0)
        snprintf(buf, len, "sw%d(%s)[%u+%u]", r->global, shunt_buf_type_name(r->type), r->index, r->size);
      else
        snprintf(buf, len, "switch%u(?)[%u+%u]", r->id, r->index, r->size);
      break;
  }
  return buf;
}
