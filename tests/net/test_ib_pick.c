/* NIC choice: SHUNT_IB_HCA's syntax, PCI distance from a sysfs tree, and (with the verbs
 * stand-in, argv[1]) the port a rank picks among several devices. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/ib_pick.h"
#include "transport/ibv.h"

static int fails;
#define CHECK(c, ...)                                      \
  do {                                                     \
    if (!(c)) {                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fputc('\n', stderr);                                 \
      fails++;                                             \
    }                                                      \
  } while (0)

static void hca_cases(void) {
  struct shunt_ib_hca_spec s;
  char err[256];
  CHECK(shunt_ib_hca_parse(NULL, &s, err, sizeof(err)) == 0 && shunt_ib_hca_match(&s, "anything", 3),
        "unset");
  CHECK(shunt_ib_hca_parse("mlx5", &s, err, sizeof(err)) == 0, "%s", err);
  CHECK(shunt_ib_hca_match(&s, "mlx5_0", 1) && shunt_ib_hca_match(&s, "mlx5_12", 2), "prefix matches");
  CHECK(!shunt_ib_hca_match(&s, "mlx4_0", 1), "prefix excludes others");
  CHECK(shunt_ib_hca_parse("=mlx5_1:1,mlx5_3", &s, err, sizeof(err)) == 0 && s.exact && s.n == 2, "%s", err);
  CHECK(shunt_ib_hca_match(&s, "mlx5_1", 1) && !shunt_ib_hca_match(&s, "mlx5_1", 2), "port given");
  CHECK(!shunt_ib_hca_match(&s, "mlx5_10", 1), "exact: mlx5_10 is not mlx5_1");
  CHECK(shunt_ib_hca_match(&s, "mlx5_3", 2), "no port: any");
  CHECK(shunt_ib_hca_parse("^mlx5_0", &s, err, sizeof(err)) == 0 && s.exclude && !s.exact, "%s", err);
  CHECK(!shunt_ib_hca_match(&s, "mlx5_0", 1) && !shunt_ib_hca_match(&s, "mlx5_01", 1), "excluded by prefix");
  CHECK(shunt_ib_hca_match(&s, "mlx5_1", 1), "not excluded");
  CHECK(shunt_ib_hca_parse("^=mlx5_0", &s, err, sizeof(err)) == 0 && s.exclude && s.exact, "%s", err);
  CHECK(shunt_ib_hca_match(&s, "mlx5_01", 1) && !shunt_ib_hca_match(&s, "mlx5_0", 1), "exact exclusion");
  const char* bad[] = {"^", "=", "mlx5:0", "mlx5:x", "mlx5:1x", ":1", "a,", "a,,b", "has space"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = 0;
    CHECK(shunt_ib_hca_parse(bad[i], &s, err, sizeof(err)) != 0 && strstr(err, "SHUNT_IB_HCA"),
          "'%s' must be refused with a reason", bad[i]);
  }
}

static void mkdirs(const char* path) {
  char p[PATH_MAX];
  size_t n = strlen(path);
  if (n >= sizeof(p)) exit(2); /* the fake tree lies under /tmp: never this long */
  memcpy(p, path, n + 1);
  for (char* c = p + 1; *c; c++)
    if (*c == '/') {
      *c = 0;
      mkdir(p, 0755);
      *c = '/';
    }
  mkdir(p, 0755);
}

/* A fake sysfs: a GPU and nic_near under one bridge, nic_mid under another bridge of the same
 * root complex, nic_far under another root complex. */
static char root[PATH_MAX];
static void tree(void) {
  snprintf(root, sizeof(root), "/tmp/shunt-ibpick-XXXXXX");
  if (!mkdtemp(root)) exit(2);
  const char* devs[][2] = {
      {"gpu", "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"},
      {"nic_near", "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"},
      {"nic_mid", "devices/pci0000:00/0000:00:02.0/0000:05:00.0"},
      {"nic_far", "devices/pci0000:80/0000:80:01.0/0000:81:00.0"},
  };
  char p[PATH_MAX * 2], l[PATH_MAX * 2];
  for (size_t i = 0; i < 4; i++) {
    snprintf(p, sizeof(p), "%s/%s", root, devs[i][1]);
    mkdirs(p);
    if (i == 0) {
      snprintf(l, sizeof(l), "%s/bus/pci/devices", root);
      mkdirs(l);
      snprintf(l, sizeof(l), "%s/bus/pci/devices/0000:03:00.0", root);
    } else {
      snprintf(l, sizeof(l), "%s/class/infiniband/%s", root, devs[i][0]);
      mkdirs(l);
      snprintf(l, sizeof(l), "%s/class/infiniband/%s/device", root, devs[i][0]);
    }
    if (symlink(p, l) != 0) exit(2);
  }
}

static void pci_cases(char* gpu, size_t glen) {
  char nic[PATH_MAX], ib[PATH_MAX + 64];
  CHECK(shunt_ib_bus_path(root, "0000:03:00.0", gpu, glen) == 0, "GPU bus id resolves");
  CHECK(shunt_ib_bus_path(root, "0000:04:00.0", nic, sizeof(nic)) != 0, "no such bus id: not found");
  int hops[3];
  const char* names[] = {"nic_near", "nic_mid", "nic_far"};
  for (int i = 0; i < 3; i++) {
    snprintf(ib, sizeof(ib), "%s/class/infiniband/%s", root, names[i]);
    CHECK(shunt_ib_nic_path(ib, nic, sizeof(nic)) == 0, "%s resolves", names[i]);
    hops[i] = shunt_ib_pci_hops(gpu, nic);
  }
  CHECK(hops[0] == 4, "near: two bridges up from each side, got %d", hops[0]);
  CHECK(hops[1] == 6, "same root complex, other bridge: got %d", hops[1]);
  CHECK(hops[2] == SHUNT_IB_FAR, "another root complex is far, got %d", hops[2]);
  CHECK(shunt_ib_pci_hops(gpu, gpu) == 0, "itself");
}

/* With the stand-in: three devices, one down; who picks what. */
static void pick_cases(const char* gpu) {
  char err[256];
  const struct shunt_ibv* v = shunt_ibv_get(err, sizeof(err));
  CHECK(v != NULL, "stand-in loads: %s", err);
  if (!v) return;
  struct shunt_ib_port p;
  setenv("SHUNT_IB_HCA", "", 1);
  CHECK(shunt_ib_pick(v, gpu, 0, &p, err, sizeof(err)) == 0 && !strcmp(p.dev, "nic_near"),
        "closest to the GPU: %s", p.dev);
  if (p.ctx) v->close_device(p.ctx);
  CHECK(p.gid_index == 1 && p.gid[10] == 0xff && p.gid[11] == 0xff, "RoCE: the IPv4-mapped GID, got index %d",
        p.gid_index);
  setenv("SHUNT_IB_HCA", "^nic_near", 1);
  CHECK(shunt_ib_pick(v, gpu, 0, &p, err, sizeof(err)) == 0 && !strcmp(p.dev, "nic_mid"), "next closest: %s",
        p.dev);
  if (p.ctx) v->close_device(p.ctx);
  setenv("SHUNT_IB_HCA", "=nic_far:1", 1);
  CHECK(shunt_ib_pick(v, gpu, 0, &p, err, sizeof(err)) == 0 && !strcmp(p.dev, "nic_far") && p.port == 1,
        "named one: %s", p.dev);
  if (p.ctx) v->close_device(p.ctx);
  setenv("SHUNT_IB_HCA", "nic_far:2", 1);
  CHECK(shunt_ib_pick(v, gpu, 0, &p, err, sizeof(err)) != 0 && strstr(err, "SHUNT_IB_HCA=nic_far:2"),
        "no such port: refused with the setting named (%s)", err);
  setenv("SHUNT_IB_HCA", "", 1);
  /* No GPU: spread by index over the active ports (nic_mid down). */
  setenv("FAKEIBV_DOWN", "nic_mid", 1);
  CHECK(shunt_ib_pick(v, NULL, 0, &p, err, sizeof(err)) == 0 && !strcmp(p.dev, "nic_near"), "spread 0: %s",
        p.dev);
  if (p.ctx) v->close_device(p.ctx);
  CHECK(shunt_ib_pick(v, NULL, 1, &p, err, sizeof(err)) == 0 && !strcmp(p.dev, "nic_far"), "spread 1: %s",
        p.dev);
  if (p.ctx) v->close_device(p.ctx);
  setenv("SHUNT_IB_GID_INDEX", "0", 1);
  CHECK(shunt_ib_pick(v, NULL, 0, &p, err, sizeof(err)) == 0 && p.gid_index == 0, "GID index forced");
  if (p.ctx) v->close_device(p.ctx);
  unsetenv("SHUNT_IB_GID_INDEX");
  unsetenv("FAKEIBV_DOWN");
}

int main(int argc, char** argv) {
  hca_cases();
  tree();
  char gpu[PATH_MAX] = "";
  pci_cases(gpu, sizeof(gpu));
  if (argc > 1) {
    /* The stand-in reads these when its devices are listed and opened. */
    setenv("SHUNT_IB_LIB", argv[1], 1);
    setenv("FAKEIBV_DEVICES", "nic_near,nic_mid,nic_far", 1);
    setenv("FAKEIBV_SYSFS", root, 1);
    setenv("FAKEIBV_ADDR", "127.0.0.1", 1);
    pick_cases(gpu);
  }
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  if (fails)
    fprintf(stderr, "%d check(s) failed\n", fails);
  else
    printf("ib pick: all checks passed\n");
  return fails ? 1 : 0;
}
