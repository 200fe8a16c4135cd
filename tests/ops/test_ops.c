/* Element-level op semantics shared by the host and GPU backends (src/exec/ops). */
#include "common/check.h"
#include "exec/ops/dtype.h"
#include "ops/test_ops.h"

int main(void) {
  check_failures += test_conv();
  check_failures += test_reduce();
  check_failures += test_packet();
  CHECK_DONE();
}
