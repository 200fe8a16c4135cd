/* shunt-info: what this build of shunt sees: its version, the real NCCL it forwards to, the plan
 * folder, and the GPUs (the CUDA driver, each device, peer access, MPS). */
#include <dirent.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpus.h"
#include "shunt/shunt.h"

static void report_plans(void) {
  const char* dir = getenv("SHUNT_PLAN_DIR");
  if (!dir || !*dir) dir = getenv("MSCCLPP_EXECUTION_PLAN_DIR");
  if (!dir || !*dir) {
    printf("plans:       SHUNT_PLAN_DIR is not set\n");
    return;
  }
  DIR* d = opendir(dir);
  if (!d) {
    printf("plans:       %s cannot be read\n", dir);
    return;
  }
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0) n++;
  }
  closedir(d);
  printf("plans:       %s (%d .json files)\n", dir, n);
}

int main(void) {
  printf("shunt:       %s\n", shuntVersion());
  const char* path = NULL;
  int version = 0;
  if (shuntRealNccl(&path, &version) == 0)
    printf("real NCCL:   %s (version %d)\n", path, version);
  else
    printf("real NCCL:   none: %s\n", path);
  report_plans();
  fflush(stdout);
  shunt_info_gpus();
  return 0;
}
