/* The stand-in's machine (fake_cuda.h): bus ids of physical devices and what each pair of
 * them can do, shared by the driver and the NVML stand-in (both link this file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_cuda.h"

/* With FAKECUDA_VISIBLE set the test's processes share one machine's devices (domain 0);
 * otherwise each process's devices are its own (the pid as the domain). */
static unsigned domain(void) {
  const char* v = getenv("FAKECUDA_VISIBLE");
  return v && *v ? 0u : (unsigned)getpid() & 0xffffu;
}

void fc_bus_id(int phys, char* buf, size_t len) {
  snprintf(buf, len, "%04x:%02x:00.0", domain(), phys + 1);
}

int fc_bus_physical(const char* id) {
  unsigned dom = 0, bus = 0;
  if (!id || sscanf(id, "%x:%x:", &dom, &bus) != 2 || dom != domain() || bus < 1 || bus > FC_MAX_DEVICES)
    return -1;
  return (int)bus - 1;
}

/* Whether knob (FAKECUDA_PEER_ATOMICS or FAKECUDA_PEER_ACCESS: "A-B:V[,A-B:V...]", physical
 * devices, either order) sets pair (a, b); 1 unless it says 0. */
static int pair_knob(const char* knob, int a, int b) {
  const char* v = getenv(knob);
  for (const char* p = v; p && *p;) {
    int x = -1, y = -1, val = 1, n = 0;
    if (sscanf(p, "%d-%d:%d%n", &x, &y, &val, &n) != 3) break;
    if ((x == a && y == b) || (x == b && y == a)) return val != 0;
    p += n;
    if (*p == ',') p++;
  }
  return 1;
}

int fc_peer_atomics(int a, int b) {
  return a != b && fc_peer_access(a, b) && pair_knob("FAKECUDA_PEER_ATOMICS", a, b);
}
int fc_peer_access(int a, int b) {
  return a != b && pair_knob("FAKECUDA_PEER_ACCESS", a, b);
}
