/* An application linked against the real NCCL, run with libshunt preloaded: its calls bind
 * to shunt, and those that need no GPU give the real library's answers. */
#include <dlfcn.h>
#include <nccl.h>
#include <string.h>

#include "common/check.h"

int main(void) {
  Dl_info info;
  CHECK(dladdr((void*)&ncclGetVersion, &info) && strstr(info.dli_fname, "libshunt"));
  if (check_failures) {
    fprintf(stderr, "ncclGetVersion is not shunt's (LD_PRELOAD missing?): %s\n", info.dli_fname);
    CHECK_DONE();
  }
  int v = 0;
  CHECK_EQ_INT(ncclGetVersion(&v), ncclSuccess);

  /* The real library's own answer, asked directly. */
  void* real = dlopen(REAL_NCCL_PATH, RTLD_NOW | RTLD_NOLOAD);
  CHECK_MSG(real != NULL, "shunt should have loaded %s", REAL_NCCL_PATH);
  if (!real) CHECK_DONE();
  ncclResult_t (*real_version)(int*) = (ncclResult_t(*)(int*))dlsym(real, "ncclGetVersion");
  const char* (*real_errstr)(ncclResult_t) = (const char* (*)(ncclResult_t))dlsym(real, "ncclGetErrorString");
  CHECK(dladdr((void*)real_version, &info) && !strstr(info.dli_fname, "libshunt"));
  int rv = -1;
  real_version(&rv);
  CHECK_EQ_INT(v, rv);
  for (int r = 0; r <= 8; r++) CHECK(strcmp(ncclGetErrorString((ncclResult_t)r), real_errstr((ncclResult_t)r)) == 0);

  ncclUniqueId a, b;
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  CHECK_EQ_INT(ncclGetUniqueId(&a), ncclSuccess);
  CHECK_EQ_INT(ncclGetUniqueId(&b), ncclSuccess);
  CHECK_MSG(memcmp(&a, &b, 8) != 0, "two unique ids share their magic");
  CHECK_DONE();
}
