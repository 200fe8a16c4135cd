/* NVML (libnvidia-ml.so.1), loaded at run time for what the CUDA driver cannot answer: the
 * peer capabilities of two GPUs named by PCI bus id, one of which this process may not see
 * (CUDA_VISIBLE_DEVICES set per rank).
 *
 * Promises: 1 when NVML reports native peer atomics between the two devices, 0 when it reports
 * none, -1 when it cannot tell (no NVML, an unknown bus id, an error). libshunt has no link
 * dependency on NVML; the library is opened once and kept. Safe from any thread. */
#ifndef SHUNT_TRANSPORT_NVML_H
#define SHUNT_TRANSPORT_NVML_H

int shunt_nvml_peer_atomics(const char* busid_a, const char* busid_b);

#endif
