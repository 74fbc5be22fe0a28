/* A plugin linked against the driver, loaded by deep_host with RTLD_DEEPBIND: its undefined
 * symbols (the driver's functions, dlsym) bind to its own dependencies first, past the
 * preloaded interposer. plugin_alloc reaches cuMemAlloc_v2 by the path named: "linked" (the
 * exported symbol), "dlsym" (dlsym on the driver's handle) or "proc" (cuGetProcAddress_v2). */
#define _GNU_SOURCE
#include "cuda_min.h"

#include <dlfcn.h>
#include <string.h>

CUresult cuInit(unsigned int flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             int *status);

typedef CUresult (*fn_alloc)(CUdeviceptr *, size_t);

int plugin_init(void) {
    CUcontext ctx = NULL;
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx))
        return -1;
    return 0;
}

int plugin_alloc(const char *how, size_t bytes) {
    CUdeviceptr p = 0;
    fn_alloc alloc = NULL;
    if (!strcmp(how, "linked")) {
        /* A call, through the PLT, as programs make them (taking the address would be a
         * data relocation, which the audit interface does not report). */
        return (int)cuMemAlloc_v2(&p, bytes);
    } else if (!strcmp(how, "dlsym")) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        alloc = h ? (fn_alloc)dlsym(h, "cuMemAlloc_v2") : NULL;
    } else if (!strcmp(how, "proc")) {
        int status = -1;
        if (cuGetProcAddress_v2("cuMemAlloc", (void **)&alloc, 12000, 0, &status))
            alloc = NULL;
    }
    return alloc ? (int)alloc(&p, bytes) : -1;
}
