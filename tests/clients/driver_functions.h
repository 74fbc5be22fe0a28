/* The driver functions the op clients (linked.c, dlsym_client.c, runtime_client.c) resolve
 * into `struct drv` (ops.h) for the ops, as one X-macro list; cuda_min.h makes the pointer
 * types and the linked client's declarations from it, each client its lookups:
 *
 *   DRV(name, base, version, params)         the exported symbol `name` (also the field
 *                                            of struct drv and the type fn_name), which the
 *                                            runtime client asks cuGetProcAddress for by
 *                                            its base name `base` at CUDA `version`
 *   DRV_LEGACY(name, base, version, params)  the same for a legacy entry point with 32-bit
 *                                            sizes: type fn_name_v1, linked weakly (a
 *                                            driver without it leaves the field NULL)
 *
 * Each returns CUresult. The order is the runtime client's lookup order.
 * tests/integration/paths.rs counts the lines that start with DRV( or DRV_LEGACY(: keep
 * one entry per line. Adding a hooked function the ops use: one line here, and its op in
 * ops_table.h and its group's ops_*.c file (and any new types in cuda_min.h). */
#define DRIVER_FUNCTIONS \
  /* Devices, contexts, plain allocations */ \
  DRV(cuInit, cuInit, 2000, (unsigned int flags)) \
  DRV(cuDeviceGet, cuDeviceGet, 2000, (CUdevice *dev, int ordinal)) \
  DRV(cuDeviceGetCount, cuDeviceGetCount, 2000, (int *count)) \
  DRV(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, (CUcontext *ctx, CUdevice dev)) \
  DRV(cuCtxSetCurrent, cuCtxSetCurrent, 4000, (CUcontext ctx)) \
  DRV(cuCtxGetCurrent, cuCtxGetCurrent, 4000, (CUcontext *ctx)) \
  DRV(cuMemAlloc_v2, cuMemAlloc, 3020, (CUdeviceptr *dptr, size_t bytes)) \
  DRV(cuMemFree_v2, cuMemFree, 3020, (CUdeviceptr dptr)) \
  DRV(cuMemGetInfo_v2, cuMemGetInfo, 3020, (size_t *free_bytes, size_t *total_bytes)) \
  DRV(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, \
      (CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem)) \
  DRV(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, (size_t *bytes, CUdevice dev)) \
  DRV(cuMemAllocManaged, cuMemAllocManaged, 6000, \
      (CUdeviceptr *dptr, size_t bytes, unsigned int flags)) \
  /* Stream-ordered allocations and pools */ \
  DRV(cuMemAllocAsync, cuMemAllocAsync, 11020, (CUdeviceptr *dptr, size_t bytes, CUstream stream)) \
  DRV(cuMemFreeAsync, cuMemFreeAsync, 11020, (CUdeviceptr dptr, CUstream stream)) \
  DRV(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, \
      (CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream)) \
  DRV(cuMemPoolCreate, cuMemPoolCreate, 11020, (CUmemoryPool *pool, const CUmemPoolProps *props)) \
  DRV(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, \
      (CUmemoryPool *pool, CUdevice dev)) \
  /* Virtual memory management */ \
  DRV(cuMemCreate, cuMemCreate, 10020, \
      (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, \
       unsigned long long flags)) \
  DRV(cuMemRelease, cuMemRelease, 10020, (CUmemGenericAllocationHandle handle)) \
  DRV(cuMemAddressReserve, cuMemAddressReserve, 10020, \
      (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, \
       unsigned long long flags)) \
  DRV(cuMemMap, cuMemMap, 10020, \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, \
       unsigned long long flags)) \
  DRV(cuMemUnmap, cuMemUnmap, 10020, (CUdeviceptr ptr, size_t size)) \
  DRV(cuMemAddressFree, cuMemAddressFree, 10020, (CUdeviceptr ptr, size_t size)) \
  /* Error names */ \
  DRV(cuGetErrorName, cuGetErrorName, 6000, (CUresult error, const char **name)) \
  /* CUDA arrays */ \
  DRV(cuArrayCreate_v2, cuArrayCreate, 3020, (CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc)) \
  DRV(cuArray3DCreate_v2, cuArray3DCreate, 3020, \
      (CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc)) \
  DRV(cuArrayDestroy, cuArrayDestroy, 2000, (CUarray array)) \
  DRV(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, \
      (CUmipmappedArray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels)) \
  DRV(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, (CUmipmappedArray array)) \
  DRV_LEGACY(cuArrayCreate, cuArrayCreate, 2000, \
             (CUarray *array, const CUDA_ARRAY_DESCRIPTOR_v1 *desc)) \
  DRV_LEGACY(cuArray3DCreate, cuArray3DCreate, 2000, \
             (CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc)) \
  /* VMM lifetimes and imports */ \
  DRV(cuMemSetAccess, cuMemSetAccess, 10020, \
      (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)) \
  DRV(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, \
      (CUmemGenericAllocationHandle *handle, void *addr)) \
  DRV(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020, \
      (void *shareable, CUmemGenericAllocationHandle handle, int type, unsigned long long flags)) \
  DRV(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020, \
      (CUmemGenericAllocationHandle *handle, void *os_handle, int type)) \
  DRV(cuMemMapArrayAsync, cuMemMapArrayAsync, 11010, \
      (CUarrayMapInfo *infos, unsigned int count, CUstream stream)) \
  DRV(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 11000, \
      (CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)) \
  DRV(cuMemPoolImportPointer, cuMemPoolImportPointer, 11020, \
      (CUdeviceptr *dptr, CUmemoryPool pool, void *data)) \
  DRV(cuExternalMemoryGetMappedBuffer, cuExternalMemoryGetMappedBuffer, 10000, \
      (CUdeviceptr *dptr, void *memory, const void *desc)) \
  /* Placement and contexts; cuMemGetDefaultMemPool is CUDA 13's */ \
  DRV(cuCtxDestroy_v2, cuCtxDestroy, 4000, (CUcontext ctx)) \
  DRV(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 11000, (CUdevice dev)) \
  DRV(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, (CUdevice dev)) \
  DRV(cuMemGetDefaultMemPool, cuMemGetDefaultMemPool, 13000, \
      (CUmemoryPool *pool, CUmemLocation *location, int type)) \
  /* Pools that keep memory, graph memory; cuGraphInstantiate at 12000 is the flags form, \
   * as cudart asks for it */ \
  DRV(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, (CUmemoryPool pool, size_t keep)) \
  DRV(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020, \
      (CUmemoryPool pool, int attr, void *value)) \
  DRV(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020, \
      (CUmemoryPool pool, int attr, void *value)) \
  DRV(cuGraphCreate, cuGraphCreate, 10000, (CUgraph *graph, unsigned int flags)) \
  DRV(cuGraphDestroy, cuGraphDestroy, 10000, (CUgraph graph)) \
  DRV(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, 11040, \
      (CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps, \
       CUDA_MEM_ALLOC_NODE_PARAMS *params)) \
  DRV(cuGraphAddMemFreeNode, cuGraphAddMemFreeNode, 11040, \
      (CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps, \
       CUdeviceptr dptr)) \
  DRV(cuGraphInstantiateWithFlags, cuGraphInstantiate, 12000, \
      (CUgraphExec *exec, CUgraph graph, unsigned long long flags)) \
  DRV(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, \
      (CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params)) \
  DRV(cuGraphUpload, cuGraphUpload, 11010, (CUgraphExec exec, CUstream stream)) \
  DRV(cuGraphLaunch, cuGraphLaunch, 10000, (CUgraphExec exec, CUstream stream)) \
  DRV(cuGraphExecDestroy, cuGraphExecDestroy, 10000, (CUgraphExec exec)) \
  DRV(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040, (CUdevice dev)) \
  DRV(cuDeviceGetGraphMemAttribute, cuDeviceGetGraphMemAttribute, 11040, \
      (CUdevice dev, int attr, void *value)) \
  /* Stream capture, the forms cuquota counts (the per-thread client gets each _ptsz) */ \
  DRV(cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010, (CUstream stream, int mode)) \
  DRV(cuStreamEndCapture, cuStreamEndCapture, 10000, (CUstream stream, CUgraph *graph)) \
  DRV(cuStreamBeginRecaptureToGraph, cuStreamBeginRecaptureToGraph, 13030, \
      (CUstream stream, int mode, CUgraph graph, void *callback, void *user_data)) \
  DRV(cuStreamBeginCaptureToCig, cuStreamBeginCaptureToCig, 13010, \
      (CUstream stream, CUstreamCigCaptureParams *params)) \
  DRV(cuStreamEndCaptureToCig, cuStreamEndCaptureToCig, 13010, (CUstream stream)) \
  /* Green contexts, and the device resources they are made of */ \
  DRV(cuDeviceGetDevResource, cuDeviceGetDevResource, 12040, \
      (CUdevice dev, CUdevResource *resource, int type)) \
  DRV(cuDevResourceGenerateDesc, cuDevResourceGenerateDesc, 12040, \
      (CUdevResourceDesc *desc, CUdevResource *resources, unsigned int count)) \
  DRV(cuGreenCtxCreate, cuGreenCtxCreate, 12040, \
      (CUgreenCtx *green, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)) \
  DRV(cuGreenCtxDestroy, cuGreenCtxDestroy, 12040, (CUgreenCtx green)) \
  DRV(cuCtxFromGreenCtx, cuCtxFromGreenCtx, 12040, (CUcontext *ctx, CUgreenCtx green)) \
  DRV(cuGreenCtxStreamCreate, cuGreenCtxStreamCreate, 12050, \
      (CUstream *stream, CUgreenCtx green, unsigned int flags, int priority)) \
  /* Context memory on the client's own path */ \
  DRV(cuCtxCreate_v2, cuCtxCreate, 3020, (CUcontext *ctx, unsigned int flags, CUdevice dev)) \
  DRV(cuCtxSetLimit, cuCtxSetLimit, 3010, (int limit, size_t value)) \
  /* The legacy 32-bit forms, as a pre-3.2 caller would get them */ \
  DRV_LEGACY(cuMemAlloc, cuMemAlloc, 2000, (CUdeviceptr_v1 *dptr, unsigned int bytes)) \
  DRV_LEGACY(cuMemFree, cuMemFree, 2000, (CUdeviceptr_v1 dptr)) \
  DRV_LEGACY(cuMemGetInfo, cuMemGetInfo, 2000, \
             (unsigned int *free_bytes, unsigned int *total_bytes))
