/* The driver calls tests make on the stand-in (fake_cuda.h), declared with plain types: a test
 * links the stand-in as libcuda.so.1 and drives devices, memory, streams and graphs with these. */
#ifndef FAKECUDA_FAKE_CUDA_API_H
#define FAKECUDA_FAKE_CUDA_API_H

#include <stddef.h>

typedef void* fc_handle;

int cuInit(unsigned flags);
int cuDevicePrimaryCtxRetain(fc_handle* ctx, int dev);
int cuCtxSetCurrent(fc_handle ctx);
int cuMemAlloc_v2(unsigned long long* dptr, size_t bytes);
int cuMemFree_v2(unsigned long long dptr);
int cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t n);
int cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t n);
int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t n, fc_handle stream);
int cuStreamCreate(fc_handle* s, unsigned flags);
int cuStreamDestroy_v2(fc_handle s);
int cuStreamSynchronize(fc_handle s);
int cuStreamBeginCapture_v2(fc_handle s, int mode);
int cuStreamEndCapture(fc_handle s, fc_handle* graph);
int cuGraphInstantiateWithFlags(fc_handle* exec, fc_handle graph, unsigned long long flags);
int cuGraphLaunch(fc_handle exec, fc_handle stream);
int cuGraphDestroy(fc_handle g);
int cuGraphExecDestroy(fc_handle g);
void fakecuda_fault(const char* spec);
long long fakecuda_copied_bytes(void);
int fakecuda_replace(void* p);
long fakecuda_stream_count(void);
long long fakecuda_pcie_reads(void);
long fakecuda_exec_launches(void);
long fakecuda_exec_calls(void);
/* Memory freed by its owner while importers or descriptors still hold it (fc_kept.c), and the
 * other processes' allocations this process maps. */
long long fakecuda_pinned_bytes(void);
/* Pinned host memory (cuMemHostAlloc) allocated and not freed, in bytes. */
long long fakecuda_host_alloc_bytes(void);
long fakecuda_imports(void);

/* VMM and stream-ordered memory, as cuda.h declares them (plain types): CUmemAllocationProp and
 * CUmemAccessDesc laid out as the driver reads them. */
struct prop {
  int type, handle_types, loc_type, loc_id;
  void* win32;
  unsigned char flags[8];
};
struct access_desc {
  int loc_type, loc_id, flags;
};
int cuMemCreate(unsigned long long* h, size_t size, const struct prop* p, unsigned long long flags);
int cuMemAddressReserve(unsigned long long* ptr, size_t size, size_t align, unsigned long long addr,
                        unsigned long long flags);
int cuMemMap(unsigned long long ptr, size_t size, size_t offset, unsigned long long h,
             unsigned long long flags);
int cuMemSetAccess(unsigned long long ptr, size_t size, const struct access_desc* d, size_t count);
int cuMemUnmap(unsigned long long ptr, size_t size);
int cuMemRelease(unsigned long long h);
int cuMemAddressFree(unsigned long long ptr, size_t size);
int cuMemExportToShareableHandle(void* out, unsigned long long h, int type, unsigned long long flags);
int cuMemAllocAsync(unsigned long long* dptr, size_t bytes, fc_handle stream);
int cuMemFreeAsync(unsigned long long dptr, fc_handle stream);

#endif
