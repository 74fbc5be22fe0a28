/* A client that loads the driver itself: dlopen("libcuda.so.1") and dlsym of each versioned
 * name. Built twice: normally (binding dlsym@GLIBC_2.34, the default since glibc 2.34) and
 * with -DOLD_DLSYM, which binds the original dlsym@GLIBC_2.2.5 (x86_64; GLIBC_2.17 on
 * aarch64), as binaries built against an older glibc do. */
#define _GNU_SOURCE
#include "ops.h"

#include <dlfcn.h>
#include <stdio.h>

#ifdef OLD_DLSYM
extern void *dlsym_compat(void *handle, const char *name);
#if defined(__x86_64__)
__asm__(".symver dlsym_compat, dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym_compat, dlsym@GLIBC_2.17");
#else
#error "OLD_DLSYM: unknown architecture"
#endif
#define LOOKUP dlsym_compat
#else
#define LOOKUP dlsym
#endif

static void *sym(void *handle, const char *name) {
    return LOOKUP(handle, name);
}

int main(int argc, char **argv) {
    struct drv d = {0};
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlsym_client: dlopen libcuda.so.1: %s\n", dlerror());
        return 4;
    }
#define GET(field, name) (*(void **)&d.field = LOOKUP(h, name))
    GET(cuInit, "cuInit");
    GET(cuDeviceGet, "cuDeviceGet");
    GET(cuDeviceGetCount, "cuDeviceGetCount");
    GET(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    GET(cuCtxSetCurrent, "cuCtxSetCurrent");
    GET(cuCtxGetCurrent, "cuCtxGetCurrent");
    GET(cuMemAlloc_v2, "cuMemAlloc_v2");
    GET(cuMemFree_v2, "cuMemFree_v2");
    GET(cuMemAllocPitch_v2, "cuMemAllocPitch_v2");
    GET(cuMemAllocManaged, "cuMemAllocManaged");
    GET(cuMemAllocAsync, "cuMemAllocAsync");
    GET(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
    GET(cuMemFreeAsync, "cuMemFreeAsync");
    GET(cuMemPoolCreate, "cuMemPoolCreate");
    GET(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool");
    GET(cuMemCreate, "cuMemCreate");
    GET(cuMemRelease, "cuMemRelease");
    GET(cuMemAddressReserve, "cuMemAddressReserve");
    GET(cuMemMap, "cuMemMap");
    GET(cuMemUnmap, "cuMemUnmap");
    GET(cuMemAddressFree, "cuMemAddressFree");
    GET(cuMemGetInfo_v2, "cuMemGetInfo_v2");
    GET(cuDeviceTotalMem_v2, "cuDeviceTotalMem_v2");
    GET(cuMemAlloc, "cuMemAlloc");
    GET(cuMemFree, "cuMemFree");
    GET(cuMemGetInfo, "cuMemGetInfo");
    GET(cuGetErrorName, "cuGetErrorName");
    /* arrays */
    GET(cuArrayCreate_v2, "cuArrayCreate_v2");
    GET(cuArray3DCreate_v2, "cuArray3DCreate_v2");
    GET(cuArrayDestroy, "cuArrayDestroy");
    GET(cuMipmappedArrayCreate, "cuMipmappedArrayCreate");
    GET(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy");
    GET(cuArrayCreate, "cuArrayCreate");
    GET(cuArray3DCreate, "cuArray3DCreate");
    GET(cuMemSetAccess, "cuMemSetAccess");
    GET(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle");
    GET(cuMemExportToShareableHandle, "cuMemExportToShareableHandle");
    GET(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle");
    GET(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2");
    GET(cuMemPoolImportPointer, "cuMemPoolImportPointer");
    GET(cuExternalMemoryGetMappedBuffer, "cuExternalMemoryGetMappedBuffer");
    /* Placement, contexts, capture (issue 10). */
    GET(cuCtxDestroy_v2, "cuCtxDestroy_v2");
    GET(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset_v2");
    GET(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease_v2");
    GET(cuMemGetDefaultMemPool, "cuMemGetDefaultMemPool");
    /* Pools that keep memory, graph memory (issue 11). */
    GET(cuMemPoolTrimTo, "cuMemPoolTrimTo");
    GET(cuMemPoolGetAttribute, "cuMemPoolGetAttribute");
    GET(cuMemPoolSetAttribute, "cuMemPoolSetAttribute");
    GET(cuGraphCreate, "cuGraphCreate");
    GET(cuGraphDestroy, "cuGraphDestroy");
    GET(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode");
    GET(cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode");
    GET(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
    GET(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams");
    GET(cuGraphUpload, "cuGraphUpload");
    GET(cuGraphLaunch, "cuGraphLaunch");
    GET(cuGraphExecDestroy, "cuGraphExecDestroy");
    GET(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim");
    GET(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute");
#undef GET
    d.sym = sym;
    return run_ops(&d, argc - 1, argv + 1);
}
