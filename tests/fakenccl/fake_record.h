/* The double's recording of calls, shared by the generated functions (fake_nccl.c) and the
 * computing ones (fake_compute.c): every exported NCCL function records its name and the
 * bytes of each argument first, whatever it does next. */
#ifndef SHUNT_TEST_FAKE_RECORD_H
#define SHUNT_TEST_FAKE_RECORD_H

#include <nccl.h>
#include <stddef.h>

#include "common/pp.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

void fake_rec_begin(const char* name);
void fake_rec_arg(const void* p, size_t n);
void fake_rec_end(void);
/* The result the test chose with fake_set_result (ncclSuccess unless it chose otherwise). */
ncclResult_t fake_scripted(void);

#define FAKE_REC(a) fake_rec_arg(&(a), sizeof(a))
#define FAKE_RECORD(name, args)                \
  fake_rec_begin(#name);                       \
  PP_EACH(FAKE_REC, PP_SEMI, PP_UNPAREN args); \
  fake_rec_end()

#endif
