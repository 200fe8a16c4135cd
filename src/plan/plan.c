/* Names and op classes of the plan data model, and freeing a plan. */
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

#include "plan/arena.h"

static const char* const op_names[SHUNT_OP_COUNT] = {
    [SHUNT_OP_NOP] = "nop",
    [SHUNT_OP_BARRIER] = "barrier",
    [SHUNT_OP_SIGNAL] = "signal",
    [SHUNT_OP_WAIT] = "wait",
    [SHUNT_OP_RLXSIGNAL] = "rlxsignal",
    [SHUNT_OP_RLXWAIT] = "rlxwait",
    [SHUNT_OP_FLUSH] = "flush",
    [SHUNT_OP_PUT] = "put",
    [SHUNT_OP_PWS] = "pws",
    [SHUNT_OP_PWSF] = "pwsf",
    [SHUNT_OP_GET] = "get",
    [SHUNT_OP_COPY] = "copy",
    [SHUNT_OP_RE] = "re",
    [SHUNT_OP_RES] = "res",
    [SHUNT_OP_RRE] = "rre",
    [SHUNT_OP_RRES] = "rres",
    [SHUNT_OP_CPKT] = "cpkt",
    [SHUNT_OP_UPKT] = "upkt",
    [SHUNT_OP_PPKT] = "ppkt",
    [SHUNT_OP_RPPKT] = "rppkt",
    [SHUNT_OP_REPKT] = "repkt",
    [SHUNT_OP_RESPKT] = "respkt",
    [SHUNT_OP_RECPKT] = "recpkt",
    [SHUNT_OP_RECSPKT] = "recspkt",
    [SHUNT_OP_GLRES] = "glres",
    [SHUNT_OP_GSTORE] = "gstore",
    [SHUNT_OP_GSTOREPKT] = "gstorepkt",
    [SHUNT_OP_SEM_ACQUIRE] = "sem_acquire",
    [SHUNT_OP_SEM_RELEASE] = "sem_release",
    [SHUNT_OP_PIPELINE] = "pipeline",
};

const char* shunt_op_name(enum shunt_op_type t) {
  return (unsigned)t < SHUNT_OP_COUNT ? op_names[t] : "?";
}

const char* shunt_chan_type_name(enum shunt_chan_type t) {
  switch (t) {
    case SHUNT_CHAN_NONE:
      return "none";
    case SHUNT_CHAN_MEMORY:
      return "memory";
    case SHUNT_CHAN_PORT:
      return "port";
    case SHUNT_CHAN_SWITCH:
      return "switch";
  }
  return "?";
}

const char* shunt_buf_type_name(enum shunt_buf_type t) {
  switch (t) {
    case SHUNT_BUF_INPUT:
      return "i";
    case SHUNT_BUF_OUTPUT:
      return "o";
    case SHUNT_BUF_SCRATCH:
      return "s";
  }
  return "?";
}

const char* shunt_coll_name(enum shunt_coll c) {
  return (unsigned)c < SHUNT_COLL_COUNT ? shunt_coll_traits(c)->name : "?";
}

enum shunt_coll shunt_coll_of_name(const char* s) {
  return shunt_coll_by_name(s);
}

enum shunt_plan_redop shunt_plan_redop_for(enum shunt_redop op) {
  switch (op) {
    case SHUNT_REDOP_SUM:
    case SHUNT_REDOP_AVG:
    case SHUNT_REDOP_PREMULSUM:
      return SHUNT_PLAN_REDOP_SUM;
    case SHUNT_REDOP_PROD:
      return SHUNT_PLAN_REDOP_PROD;
    case SHUNT_REDOP_MIN:
      return SHUNT_PLAN_REDOP_MIN;
    case SHUNT_REDOP_MAX:
      return SHUNT_PLAN_REDOP_MAX;
    default:
      return SHUNT_PLAN_REDOP_NONE;
  }
}

const char* shunt_plan_redop_name(enum shunt_plan_redop r) {
  static const char* const names[] = {"none", "sum", "prod", "min", "max"};
  return (unsigned)r <= SHUNT_PLAN_REDOP_MAX ? names[r] : "?";
}

bool shunt_op_is_packet(enum shunt_op_type t) {
  switch (t) {
    case SHUNT_OP_CPKT:
    case SHUNT_OP_UPKT:
    case SHUNT_OP_PPKT:
    case SHUNT_OP_RPPKT:
    case SHUNT_OP_REPKT:
    case SHUNT_OP_RESPKT:
    case SHUNT_OP_RECPKT:
    case SHUNT_OP_RECSPKT:
    case SHUNT_OP_GSTOREPKT:
      return true;
    default:
      return false;
  }
}

bool shunt_op_is_sync(enum shunt_op_type t) {
  switch (t) {
    case SHUNT_OP_NOP:
    case SHUNT_OP_BARRIER:
    case SHUNT_OP_SIGNAL:
    case SHUNT_OP_WAIT:
    case SHUNT_OP_RLXSIGNAL:
    case SHUNT_OP_RLXWAIT:
    case SHUNT_OP_FLUSH:
    case SHUNT_OP_SEM_ACQUIRE:
    case SHUNT_OP_SEM_RELEASE:
      return true;
    default:
      return false;
  }
}

bool shunt_op_is_pipelined(enum shunt_op_type t) {
  switch (t) {
    case SHUNT_OP_PUT:
    case SHUNT_OP_PWS:
    case SHUNT_OP_PWSF:
    case SHUNT_OP_GET:
    case SHUNT_OP_COPY:
    case SHUNT_OP_RE:
    case SHUNT_OP_RES:
    case SHUNT_OP_RRE:
    case SHUNT_OP_RRES:
    case SHUNT_OP_GLRES:
    case SHUNT_OP_GSTORE:
      return true;
    default:
      return false;
  }
}

void shunt_plan_free(struct shunt_plan* p) {
  if (!p) return;
  shunt_arena_free(p->arena_);
}
