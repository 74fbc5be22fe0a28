/* The op interpreter shared by the test clients. Each client fills `struct drv` its own way
 * (linked symbols, dlsym, cuGetProcAddress) and hands its argv to run_ops. */
#ifndef CUQUOTA_OPS_H
#define CUQUOTA_OPS_H

#include "cuda_min.h"

struct drv {
    fn_cuInit cuInit;
    fn_cuDeviceGet cuDeviceGet;
    fn_cuDeviceGetCount cuDeviceGetCount;
    fn_cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRetain;
    fn_cuCtxSetCurrent cuCtxSetCurrent;
    fn_cuCtxGetCurrent cuCtxGetCurrent;
    fn_cuMemAlloc_v2 cuMemAlloc_v2;
    fn_cuMemFree_v2 cuMemFree_v2;
    fn_cuMemAllocPitch_v2 cuMemAllocPitch_v2;
    fn_cuMemAllocManaged cuMemAllocManaged;
    fn_cuMemAllocAsync cuMemAllocAsync;
    fn_cuMemAllocFromPoolAsync cuMemAllocFromPoolAsync;
    fn_cuMemFreeAsync cuMemFreeAsync;
    fn_cuMemPoolCreate cuMemPoolCreate;
    fn_cuDeviceGetDefaultMemPool cuDeviceGetDefaultMemPool;
    fn_cuMemCreate cuMemCreate;
    fn_cuMemRelease cuMemRelease;
    fn_cuMemAddressReserve cuMemAddressReserve;
    fn_cuMemMap cuMemMap;
    fn_cuMemUnmap cuMemUnmap;
    fn_cuMemAddressFree cuMemAddressFree;
    fn_cuMemGetInfo_v2 cuMemGetInfo_v2;
    fn_cuDeviceTotalMem_v2 cuDeviceTotalMem_v2;
    /* Legacy 32-bit entry points; any may be NULL (ops then print rc=500). */
    fn_cuMemAlloc_v1 cuMemAlloc;
    fn_cuMemFree_v1 cuMemFree;
    fn_cuMemGetInfo_v1 cuMemGetInfo;
    fn_cuGetErrorName cuGetErrorName;
    /* arrays */
    fn_cuArrayCreate_v2 cuArrayCreate_v2;
    fn_cuArray3DCreate_v2 cuArray3DCreate_v2;
    fn_cuArrayDestroy cuArrayDestroy;
    fn_cuMipmappedArrayCreate cuMipmappedArrayCreate;
    fn_cuMipmappedArrayDestroy cuMipmappedArrayDestroy;
    fn_cuArrayCreate_v1 cuArrayCreate;     /* legacy; may be NULL */
    fn_cuArray3DCreate_v1 cuArray3DCreate; /* legacy; may be NULL */
    /* VMM lifetimes and imports */
    fn_cuMemSetAccess cuMemSetAccess;
    fn_cuMemRetainAllocationHandle cuMemRetainAllocationHandle;
    fn_cuMemExportToShareableHandle cuMemExportToShareableHandle;
    fn_cuMemImportFromShareableHandle cuMemImportFromShareableHandle;
    fn_cuIpcOpenMemHandle cuIpcOpenMemHandle;
    fn_cuMemPoolImportPointer cuMemPoolImportPointer;
    fn_cuExternalMemoryGetMappedBuffer cuExternalMemoryGetMappedBuffer;
    /* Placement, contexts, capture (issue 10). */
    fn_cuCtxDestroy_v2 cuCtxDestroy_v2;
    fn_cuDevicePrimaryCtxReset_v2 cuDevicePrimaryCtxReset_v2;
    fn_cuDevicePrimaryCtxRelease_v2 cuDevicePrimaryCtxRelease_v2;
    fn_cuMemGetDefaultMemPool cuMemGetDefaultMemPool; /* CUDA 13 */
    /* Pools that keep memory, graph memory (issue 11). */
    fn_cuMemPoolTrimTo cuMemPoolTrimTo;
    fn_cuMemPoolGetAttribute cuMemPoolGetAttribute;
    fn_cuMemPoolSetAttribute cuMemPoolSetAttribute;
    fn_cuGraphCreate cuGraphCreate;
    fn_cuGraphDestroy cuGraphDestroy;
    fn_cuGraphAddMemAllocNode cuGraphAddMemAllocNode;
    fn_cuGraphAddMemFreeNode cuGraphAddMemFreeNode;
    fn_cuGraphInstantiateWithFlags cuGraphInstantiateWithFlags;
    fn_cuGraphInstantiateWithParams cuGraphInstantiateWithParams;
    fn_cuGraphUpload cuGraphUpload;
    fn_cuGraphLaunch cuGraphLaunch;
    fn_cuGraphExecDestroy cuGraphExecDestroy;
    fn_cuDeviceGraphMemTrim cuDeviceGraphMemTrim;
    fn_cuDeviceGetGraphMemAttribute cuDeviceGetGraphMemAttribute;
    /* The client's own symbol lookup (for the shim's cuShimStats), so that every
     * client binary references only the dlsym version it means to. */
    void *(*sym)(void *handle, const char *name);
};

/* Runs the ops in argv[0..argc) and prints one line per op on stdout. Returns the exit
 * status: 0 after running them all (whatever their rc), 2 on a malformed op. */
int run_ops(const struct drv *d, int argc, char **argv);

/* The concurrency soak (soak.c): THREADS threads for MS milliseconds (or ROUNDS rounds, if
 * not 0) against QUOTA bytes on device 0, from the caller's current context. Prints one
 * line; -1 when it cannot start. */
int soak_run(const struct drv *d, unsigned long threads, unsigned long ms, size_t quota,
             unsigned int seed, unsigned long rounds);

#endif
