/* util/status.h: the first failure's code and line travel up unchanged through SHUNT_TRY, and
 * SHUNT_TRY_AT puts the caller's context in front of the line, cut to the buffer. */
#include <string.h>

#include "common/check.h"
#include "util/status.h"

/* The bottom layer: a system call that failed with ECONNRESET. */
static int bottom(char* err, size_t len) {
  SHUNT_FAIL(shunt_errno_status(ECONNRESET), "recv from rank 3: connection reset");
}

static int middle(char* err, size_t len) {
  SHUNT_TRY(bottom(err, len));
  return SHUNT_OK;
}

static int top(char* err, size_t len) {
  SHUNT_TRY_AT(middle(err, len), "world of %u ranks", 4u);
  return SHUNT_OK;
}

static int fine(char* err, size_t len) {
  (void)err, (void)len;
  return SHUNT_OK;
}

static int untouched(char* err, size_t len) {
  SHUNT_TRY_AT(fine(err, len), "never said");
  return SHUNT_OK;
}

int main(void) {
  char err[128] = "";
  CHECK_EQ_INT(top(err, sizeof(err)), SHUNT_E_PEER);
  CHECK_MSG(!strcmp(err, "world of 4 ranks: recv from rank 3: connection reset"), "%s", err);

  /* Cut at the buffer, still terminated. */
  char small[24] = "";
  CHECK_EQ_INT(top(small, sizeof(small)), SHUNT_E_PEER);
  CHECK_MSG(!strcmp(small, "world of 4 ranks: recv "), "%s", small);

  /* No words wanted: the code still travels. */
  CHECK_EQ_INT(top(NULL, 0), SHUNT_E_PEER);

  char ok[16] = "kept";
  CHECK_EQ_INT(untouched(ok, sizeof(ok)), SHUNT_OK);
  CHECK_MSG(!strcmp(ok, "kept"), "%s", ok);

  CHECK_EQ_INT(shunt_errno_status(ETIMEDOUT), SHUNT_E_TIMEOUT);
  CHECK_EQ_INT(shunt_errno_status(ENOMEM), SHUNT_E_NOMEM);
  CHECK_EQ_INT(shunt_errno_status(EHOSTUNREACH), SHUNT_E_NET);
  CHECK_EQ_INT(shunt_errno_status(EMFILE), SHUNT_E_SYSTEM);
  CHECK_MSG(!strcmp(shunt_status_name(SHUNT_E_ABORTED), "aborted"), "%s", shunt_status_name(SHUNT_E_ABORTED));
  return check_failures ? 1 : 0;
}
