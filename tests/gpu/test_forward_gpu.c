/* The real NCCL on a GPU, reached through libshunt preloaded: one communicator per local
 * GPU made with ncclCommInitAll (whose internal ncclGetUniqueId call must stay inside NCCL),
 * an allreduce and an allgather checked on the host, then teardown. Exit 77 without a GPU. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

#define MAXDEV 8
#define COUNT 4096

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "no GPU: skipped\n");
    return 77;
  }
  if (ndev > MAXDEV) ndev = MAXDEV;
  Dl_info info;
  CHECK(dladdr((void*)&ncclAllReduce, &info) && strstr(info.dli_fname, "libshunt"));

  ncclComm_t comms[MAXDEV];
  CHECK_EQ_INT(ncclCommInitAll(comms, ndev, NULL), ncclSuccess);
  float* send[MAXDEV];
  float* recv[MAXDEV];
  float* gath[MAXDEV];
  cudaStream_t st[MAXDEV];
  float host[COUNT];
  for (int d = 0; d < ndev; d++) {
    cudaSetDevice(d);
    cudaStreamCreate(&st[d]);
    cudaMalloc((void**)&send[d], COUNT * sizeof(float));
    cudaMalloc((void**)&recv[d], COUNT * sizeof(float));
    cudaMalloc((void**)&gath[d], (size_t)ndev * COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++) host[i] = (float)(d + 1) * (float)(i % 97);
    cudaMemcpy(send[d], host, sizeof(host), cudaMemcpyHostToDevice);
  }
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int d = 0; d < ndev; d++)
    CHECK_EQ_INT(ncclAllReduce(send[d], recv[d], COUNT, ncclFloat, ncclSum, comms[d], st[d]), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int d = 0; d < ndev; d++)
    CHECK_EQ_INT(ncclAllGather(send[d], gath[d], COUNT, ncclFloat, comms[d], st[d]), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  float sumfactor = (float)(ndev * (ndev + 1) / 2);
  static float all[MAXDEV * COUNT];
  for (int d = 0; d < ndev; d++) {
    cudaSetDevice(d);
    CHECK_EQ_INT(cudaStreamSynchronize(st[d]), cudaSuccess);
    cudaMemcpy(host, recv[d], sizeof(host), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < COUNT; i++) bad += host[i] != sumfactor * (float)(i % 97);
    CHECK_MSG(bad == 0, "allreduce on device %d: %d wrong elements", d, bad);
    cudaMemcpy(all, gath[d], (size_t)ndev * COUNT * sizeof(float), cudaMemcpyDeviceToHost);
    bad = 0;
    for (int r = 0; r < ndev; r++)
      for (int i = 0; i < COUNT; i++) bad += all[r * COUNT + i] != (float)(r + 1) * (float)(i % 97);
    CHECK_MSG(bad == 0, "allgather on device %d: %d wrong elements", d, bad);
  }
  int n = 0, rank = -1, dev = -1;
  CHECK_EQ_INT(ncclCommCount(comms[0], &n), ncclSuccess);
  CHECK_EQ_INT(n, ndev);
  CHECK_EQ_INT(ncclCommUserRank(comms[0], &rank), ncclSuccess);
  CHECK_EQ_INT(rank, 0);
  CHECK_EQ_INT(ncclCommCuDevice(comms[0], &dev), ncclSuccess);
  CHECK_EQ_INT(dev, 0);
  for (int d = 0; d < ndev; d++) {
    CHECK_EQ_INT(ncclCommFinalize(comms[d]), ncclSuccess);
    CHECK_EQ_INT(ncclCommDestroy(comms[d]), ncclSuccess);
    cudaFree(send[d]);
    cudaFree(recv[d]);
    cudaFree(gath[d]);
  }
  fprintf(stderr, "%d GPU(s): allreduce and allgather through shunt to NCCL correct\n", ndev);
  CHECK_DONE();
}
