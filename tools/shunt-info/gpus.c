/* shunt-info's GPU lines: the CUDA driver, each device, peer access between them and whether
 * they are shared through MPS. The driver is opened at run time, as libshunt opens it, so the
 * tool runs (and says so) where there is none. The signatures are cuda.h's ABI. */
#include "gpus.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

enum { ATTR_COMPUTE_MODE = 20, ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76, ATTR_MPS_ENABLED = 133 };
enum { MAX_LISTED = 16 };

struct driver {
  int (*Init)(unsigned);
  int (*DriverGetVersion)(int*);
  int (*DeviceGetCount)(int*);
  int (*DeviceGet)(int*, int);
  int (*DeviceGetName)(char*, int, int);
  int (*DeviceGetAttribute)(int*, int, int);
  int (*DeviceCanAccessPeer)(int*, int, int);
};

static int open_driver(struct driver* d) {
  static const char* const names[] = {
      "cuInit",          "cuDriverGetVersion",   "cuDeviceGetCount",     "cuDeviceGet",
      "cuDeviceGetName", "cuDeviceGetAttribute", "cuDeviceCanAccessPeer"};
  _Static_assert(sizeof(names) / sizeof(names[0]) == sizeof(struct driver) / sizeof(void (*)(void)),
                 "one name per call of struct driver");
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("CUDA driver: none (libcuda.so.1 cannot be loaded): calls on device buffers cannot be made\n");
    return -1;
  }
  void** slots = (void**)d;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (!(slots[i] = dlsym(h, names[i]))) {
      printf("CUDA driver: libcuda.so.1 lacks %s\n", names[i]);
      return -1;
    }
  return 0;
}

static const char* mode_name(int mode) {
  switch (mode) {
    case 0:
      return "default";
    case 2:
      return "prohibited";
    case 3:
      return "exclusive process";
    default:
      return "unknown";
  }
}

/* Whether contexts on the device go through MPS, as the driver says (CUDA 12.4 and later); older
 * drivers: whether an MPS control daemon listens on its pipe. */
static void report_mps(const struct driver* d, int dev) {
  int on = 0;
  if (d->DeviceGetAttribute(&on, ATTR_MPS_ENABLED, dev) == 0) {
    printf("MPS:         %s\n", on ? "on: processes share each GPU through it"
                                   : "off: ranks sharing a GPU must be threads of one process");
    return;
  }
  const char* dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (!dir || !*dir) dir = "/tmp/nvidia-mps";
  char path[4096];
  snprintf(path, sizeof(path), "%s/control", dir);
  struct stat st;
  if (stat(path, &st) == 0 && S_ISFIFO(st.st_mode))
    printf("MPS:         control daemon running (%s): processes share each GPU through it\n", path);
  else
    printf("MPS:         not running (no %s): ranks sharing a GPU must be threads of one process\n", path);
}

void shunt_info_gpus(void) {
  struct driver d;
  if (open_driver(&d) != 0) return;
  int rc = d.Init(0), version = 0, n = 0;
  d.DriverGetVersion(&version);
  if (rc != 0) {
    printf("CUDA driver: %d.%d, cuInit failed (error %d)\n", version / 1000, version % 1000 / 10, rc);
    return;
  }
  if (d.DeviceGetCount(&n) != 0) n = 0;
  printf("CUDA driver: %d.%d, %d GPU%s\n", version / 1000, version % 1000 / 10, n, n == 1 ? "" : "s");
  int dev[MAX_LISTED];
  int listed = n < MAX_LISTED ? n : MAX_LISTED;
  for (int i = 0; i < listed; i++) {
    char name[128] = "?", cc[16] = "sm_?";
    int major = 0, minor = 0, mode = -1;
    d.DeviceGet(&dev[i], i);
    d.DeviceGetName(name, sizeof(name), dev[i]);
    if (d.DeviceGetAttribute(&major, ATTR_CC_MAJOR, dev[i]) == 0 &&
        d.DeviceGetAttribute(&minor, ATTR_CC_MINOR, dev[i]) == 0)
      snprintf(cc, sizeof(cc), "sm_%d%d", major, minor);
    if (d.DeviceGetAttribute(&mode, ATTR_COMPUTE_MODE, dev[i]) != 0) mode = -1;
    printf("GPU %d:%*s%s, %s, compute mode %s\n", i, i < 10 ? 7 : 6, "", name, cc, mode_name(mode));
  }
  if (listed > 1) {
    int pairs = 0, yes = 0;
    printf("peer access:");
    for (int a = 0; a < listed; a++)
      for (int b = 0; b < listed; b++) {
        if (a == b) continue;
        int can = 0;
        d.DeviceCanAccessPeer(&can, dev[a], dev[b]);
        pairs++;
        yes += can != 0;
        if (!can) printf(" %d->%d no,", a, b);
      }
    printf(" %d of %d ordered pairs can reach each other's memory\n", yes, pairs);
  }
  if (listed > 0) report_mps(&d, dev[0]);
}
