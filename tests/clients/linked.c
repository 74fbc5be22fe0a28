/* A client linked with -lcuda that takes the addresses of the exported driver functions
 * directly, as a program built against the driver's import library does. Under LD_PRELOAD
 * the interposer's exported symbols win the lookup. */
#define _GNU_SOURCE
#define CUDA_MIN_EXTERN
#include "ops.h"

#include <dlfcn.h>

static void *sym(void *handle, const char *name) {
    return dlsym(handle, name);
}

int main(int argc, char **argv) {
    struct drv d = {
        .cuInit = cuInit,
        .cuDeviceGet = cuDeviceGet,
        .cuDeviceGetCount = cuDeviceGetCount,
        .cuDevicePrimaryCtxRetain = cuDevicePrimaryCtxRetain,
        .cuCtxSetCurrent = cuCtxSetCurrent,
        .cuCtxGetCurrent = cuCtxGetCurrent,
        .cuMemAlloc_v2 = cuMemAlloc_v2,
        .cuMemFree_v2 = cuMemFree_v2,
        .cuMemAllocPitch_v2 = cuMemAllocPitch_v2,
        .cuMemAllocManaged = cuMemAllocManaged,
        .cuMemAllocAsync = cuMemAllocAsync,
        .cuMemAllocFromPoolAsync = cuMemAllocFromPoolAsync,
        .cuMemFreeAsync = cuMemFreeAsync,
        .cuMemPoolCreate = cuMemPoolCreate,
        .cuDeviceGetDefaultMemPool = cuDeviceGetDefaultMemPool,
        .cuMemCreate = cuMemCreate,
        .cuMemRelease = cuMemRelease,
        .cuMemAddressReserve = cuMemAddressReserve,
        .cuMemMap = cuMemMap,
        .cuMemUnmap = cuMemUnmap,
        .cuMemAddressFree = cuMemAddressFree,
        .cuMemGetInfo_v2 = cuMemGetInfo_v2,
        .cuDeviceTotalMem_v2 = cuDeviceTotalMem_v2,
        .cuMemAlloc = cuMemAlloc,
        .cuMemFree = cuMemFree,
        .cuMemGetInfo = cuMemGetInfo,
        .cuGetErrorName = cuGetErrorName,
        /* arrays */
        .cuArrayCreate_v2 = cuArrayCreate_v2,
        .cuArray3DCreate_v2 = cuArray3DCreate_v2,
        .cuArrayDestroy = cuArrayDestroy,
        .cuMipmappedArrayCreate = cuMipmappedArrayCreate,
        .cuMipmappedArrayDestroy = cuMipmappedArrayDestroy,
        .cuArrayCreate = cuArrayCreate,
        .cuArray3DCreate = cuArray3DCreate,
        .cuMemSetAccess = cuMemSetAccess,
        .cuMemRetainAllocationHandle = cuMemRetainAllocationHandle,
        .cuMemExportToShareableHandle = cuMemExportToShareableHandle,
        .cuMemImportFromShareableHandle = cuMemImportFromShareableHandle,
        .cuIpcOpenMemHandle = cuIpcOpenMemHandle_v2,
        .cuMemPoolImportPointer = cuMemPoolImportPointer,
        .cuExternalMemoryGetMappedBuffer = cuExternalMemoryGetMappedBuffer,
        /* Placement, contexts, capture (issue 10). */
        .cuCtxDestroy_v2 = cuCtxDestroy_v2,
        .cuDevicePrimaryCtxReset_v2 = cuDevicePrimaryCtxReset_v2,
        .cuDevicePrimaryCtxRelease_v2 = cuDevicePrimaryCtxRelease_v2,
        .cuMemGetDefaultMemPool = cuMemGetDefaultMemPool,
        /* Pools that keep memory, graph memory (issue 11). */
        .cuMemPoolTrimTo = cuMemPoolTrimTo,
        .cuMemPoolGetAttribute = cuMemPoolGetAttribute,
        .cuMemPoolSetAttribute = cuMemPoolSetAttribute,
        .cuGraphCreate = cuGraphCreate,
        .cuGraphDestroy = cuGraphDestroy,
        .cuGraphAddMemAllocNode = cuGraphAddMemAllocNode,
        .cuGraphAddMemFreeNode = cuGraphAddMemFreeNode,
        .cuGraphInstantiateWithFlags = cuGraphInstantiateWithFlags,
        .cuGraphInstantiateWithParams = cuGraphInstantiateWithParams,
        .cuGraphUpload = cuGraphUpload,
        .cuGraphLaunch = cuGraphLaunch,
        .cuGraphExecDestroy = cuGraphExecDestroy,
        .cuDeviceGraphMemTrim = cuDeviceGraphMemTrim,
        .cuDeviceGetGraphMemAttribute = cuDeviceGetGraphMemAttribute,
        .sym = sym,
    };
    return run_ops(&d, argc - 1, argv + 1);
}
