/* A client that reaches the driver the way the CUDA runtime (libcudart) does: dlopen
 * libcuda.so.1, dlsym only cuGetProcAddress_v2, ask it for "cuGetProcAddress" itself, and
 * then look every function up through that pointer by base name and CUDA version.
 * CLIENT_PER_THREAD=1 passes CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, as a runtime
 * built for per-thread default streams does (the async functions become _ptsz). One line
 * "lookup NAME version=V flags=F rc=R status=S" is printed per lookup at start-up. */
#define _GNU_SOURCE
#include "ops.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fn_cuGetProcAddress_v2 getproc;
static unsigned long long lookup_flags;

static void *sym(void *handle, const char *name) {
    return dlsym(handle, name);
}

static void *lookup(const char *name, int version) {
    void *fn = NULL;
    int status = -1;
    CUresult rc = getproc(name, &fn, version, lookup_flags, &status);
    printf("lookup %s version=%d flags=%llu rc=%d status=%d\n", name, version, lookup_flags, rc,
           status);
    fflush(stdout);
    return rc == CUDA_SUCCESS ? fn : NULL;
}

int main(int argc, char **argv) {
    struct drv d = {0};
    const char *pt = getenv("CLIENT_PER_THREAD");
    fn_cuGetProcAddress_v2 entry, self_v2;
    fn_cuGetProcAddress_v1 self_v1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

    if (!h) {
        fprintf(stderr, "runtime_client: dlopen libcuda.so.1: %s\n", dlerror());
        return 4;
    }
    lookup_flags = pt && !strcmp(pt, "1") ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                          : CU_GET_PROC_ADDRESS_DEFAULT;
    *(void **)&entry = dlsym(h, "cuGetProcAddress_v2");
    if (!entry) {
        fprintf(stderr, "runtime_client: no cuGetProcAddress_v2\n");
        return 4;
    }
    /* Like cudart: the dlsym'd entry point is used only to fetch cuGetProcAddress itself. */
    getproc = entry;
    *(void **)&self_v2 = lookup("cuGetProcAddress", 12000);
    *(void **)&self_v1 = lookup("cuGetProcAddress", 11030);
    (void)self_v1; /* kept, as cudart keeps both; the v2 form is the one used */
    if (self_v2)
        getproc = self_v2;

#define GET(field, name, version) (*(void **)&d.field = lookup(name, version))
    GET(cuInit, "cuInit", 2000);
    GET(cuDeviceGet, "cuDeviceGet", 2000);
    GET(cuDeviceGetCount, "cuDeviceGetCount", 2000);
    GET(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000);
    GET(cuCtxSetCurrent, "cuCtxSetCurrent", 4000);
    GET(cuCtxGetCurrent, "cuCtxGetCurrent", 4000);
    GET(cuMemAlloc_v2, "cuMemAlloc", 3020);
    GET(cuMemFree_v2, "cuMemFree", 3020);
    GET(cuMemGetInfo_v2, "cuMemGetInfo", 3020);
    GET(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020);
    GET(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020);
    GET(cuMemAllocManaged, "cuMemAllocManaged", 6000);
    GET(cuMemAllocAsync, "cuMemAllocAsync", 11020);
    GET(cuMemFreeAsync, "cuMemFreeAsync", 11020);
    GET(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020);
    GET(cuMemPoolCreate, "cuMemPoolCreate", 11020);
    GET(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020);
    GET(cuMemCreate, "cuMemCreate", 10020);
    GET(cuMemRelease, "cuMemRelease", 10020);
    GET(cuMemAddressReserve, "cuMemAddressReserve", 10020);
    GET(cuMemMap, "cuMemMap", 10020);
    GET(cuMemUnmap, "cuMemUnmap", 10020);
    GET(cuMemAddressFree, "cuMemAddressFree", 10020);
    GET(cuGetErrorName, "cuGetErrorName", 6000);
    /* arrays */
    GET(cuArrayCreate_v2, "cuArrayCreate", 3020);
    GET(cuArray3DCreate_v2, "cuArray3DCreate", 3020);
    GET(cuArrayDestroy, "cuArrayDestroy", 2000);
    GET(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000);
    GET(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000);
    GET(cuArrayCreate, "cuArrayCreate", 2000);
    GET(cuArray3DCreate, "cuArray3DCreate", 2000);
    GET(cuMemSetAccess, "cuMemSetAccess", 10020);
    GET(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000);
    GET(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 10020);
    GET(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 10020);
    GET(cuIpcOpenMemHandle, "cuIpcOpenMemHandle", 11000);
    GET(cuMemPoolImportPointer, "cuMemPoolImportPointer", 11020);
    GET(cuExternalMemoryGetMappedBuffer, "cuExternalMemoryGetMappedBuffer", 10000);
    /* Placement, contexts, capture (issue 10). */
    GET(cuCtxDestroy_v2, "cuCtxDestroy", 4000);
    GET(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000);
    GET(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000);
    GET(cuMemGetDefaultMemPool, "cuMemGetDefaultMemPool", 13000);
    /* Pools that keep memory, graph memory (issue 11): cuGraphInstantiate at 12000 is the
     * flags form, as cudart asks for it. */
    GET(cuMemPoolTrimTo, "cuMemPoolTrimTo", 11020);
    GET(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 11020);
    GET(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 11020);
    GET(cuGraphCreate, "cuGraphCreate", 10000);
    GET(cuGraphDestroy, "cuGraphDestroy", 10000);
    GET(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", 11040);
    GET(cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode", 11040);
    GET(cuGraphInstantiateWithFlags, "cuGraphInstantiate", 12000);
    GET(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", 12000);
    GET(cuGraphUpload, "cuGraphUpload", 11010);
    GET(cuGraphLaunch, "cuGraphLaunch", 10000);
    GET(cuGraphExecDestroy, "cuGraphExecDestroy", 10000);
    GET(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 11040);
    GET(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", 11040);
    /* The legacy 32-bit forms, as a pre-3.2 caller would get them. */
    GET(cuMemAlloc, "cuMemAlloc", 2000);
    GET(cuMemFree, "cuMemFree", 2000);
    GET(cuMemGetInfo, "cuMemGetInfo", 2000);
#undef GET
    d.sym = sym;
    return run_ops(&d, argc - 1, argv + 1);
}
