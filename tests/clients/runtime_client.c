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

/* A newer driver's cuMemAlloc: asked for at CUDA 13.6 when the op asks. */
static void *newer_alloc(void) {
    return lookup("cuMemAlloc", 13060);
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

    /* Every function of driver_functions.h by its base name and version, in the list's
     * order (the legacy 32-bit forms at 2000, as a pre-3.2 caller would get them). */
#define DRV(name, base, version, params) *(void **)&d.name = lookup(#base, version);
#define DRV_LEGACY DRV
    DRIVER_FUNCTIONS
#undef DRV
#undef DRV_LEGACY
    d.sym = sym;
    d.newer_alloc = newer_alloc;
    return run_ops(&d, argc - 1, argv + 1);
}
