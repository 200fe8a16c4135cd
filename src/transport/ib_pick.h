/* Which NIC port a rank's verbs transport uses.
 *
 * Promises:
 * - SHUNT_IB_HCA takes NCCL_IB_HCA's syntax: a comma list of `name[:port]`, each name a
 *   prefix of a device name unless the list starts with `=` (exact names), the whole list an
 *   exclusion when it starts with `^` (`^=` both). A malformed list is an error with the reason.
 * - Among active ports of devices the list allows, a rank with a PCI device (a GPU) takes the
 *   one closest to it in the PCI tree read from sysfs (fewest hops to a common bridge); ties,
 *   and ranks without a device, are spread by an index (the rank on its host). Every
 *   candidate and the choice are logged at INFO (NET).
 * - The GID index is SHUNT_IB_GID_INDEX when set, else on Ethernet (RoCE) the first IPv4-mapped
 *   GID, else 0. */
#ifndef SHUNT_TRANSPORT_IB_PICK_H
#define SHUNT_TRANSPORT_IB_PICK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHUNT_IB_HCA_MAX 32

struct shunt_ib_hca_spec {
  bool exclude, exact;
  uint32_t n;
  struct {
    char name[64];
    int port; /* -1: any */
  } e[SHUNT_IB_HCA_MAX];
};

/* s NULL or empty: every device. */
int shunt_ib_hca_parse(const char* s, struct shunt_ib_hca_spec* out, char* err, size_t len);
bool shunt_ib_hca_match(const struct shunt_ib_hca_spec* s, const char* dev, int port);

/* Hops from a and b (resolved sysfs device paths, "/sys/devices/pci0000:00/0000:00:01.0/...")
 * to their closest common PCI ancestor, summed; devices under different root complexes are
 * SHUNT_IB_FAR apart. */
#define SHUNT_IB_FAR 1000
int shunt_ib_pci_hops(const char* a, const char* b);

/* The resolved sysfs path of a NIC (from its ibdev_path) or of a PCI bus id
 * ("0000:17:00.0", under sysfs_root, normally "/sys"); 0 on success. */
int shunt_ib_nic_path(const char* ibdev_path, char* out, size_t len);
int shunt_ib_bus_path(const char* sysfs_root, const char* busid, char* out, size_t len);

struct shunt_ibv;
struct ibv_context;

struct shunt_ib_port {
  struct ibv_context* ctx; /* opened; the caller closes it */
  char dev[64];
  uint8_t port;
  uint8_t link_layer; /* IBV_LINK_LAYER_* */
  uint8_t mtu;        /* enum ibv_mtu, active */
  uint16_t lid;
  int gid_index;
  uint8_t gid[16];
};

/* Opens the chosen device. gpu: the resolved sysfs path of the rank's PCI device
 * (shunt_ib_bus_path; NULL: none); spread: its index on its host. Returns 0, or -1 with the
 * reason (no device, none allowed, none active, no GID). */
int shunt_ib_pick(const struct shunt_ibv* ibv, const char* gpu, uint32_t spread, struct shunt_ib_port* out,
                  char* err, size_t len);

#endif
