/* Text helpers for shunt-plan output. */
#ifndef SHUNT_PLAN_TOOL_FMT_H
#define SHUNT_PLAN_TOOL_FMT_H

#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"

/* "o[2+1]", "rb3(r1:s)[0+2]", "sw0(o)[1+1]", with tbg slicing as "/tb1of2". */
const char* fmt_ref(const struct shunt_plan_ref* r, char* buf, size_t len);

#endif
