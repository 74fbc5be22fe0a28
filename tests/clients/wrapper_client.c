/* A program that exports its own cuMemAlloc_v2 (linked with -rdynamic, as lazy-loading stubs
 * are) and forwards it to the driver's function, found by `dlsym` on the driver's handle
 * (argv[1] "dlsym") or through cuGetProcAddress_v2 (argv[1] "proc"). Then it allocates each
 * size in argv[2..] through its own wrapper and prints `alloc rc=N` per size.
 * If the interposer handed this program's own wrapper out as its hook, the wrapper would call
 * itself until the stack overflows. */
#define _GNU_SOURCE
#include "cuda_min.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*fn_alloc)(CUdeviceptr *, size_t);
typedef CUresult (*fn_getproc)(const char *, void **, int, cuuint64_t, int *);
typedef CUresult (*fn_init)(unsigned int);
typedef CUresult (*fn_ctx)(CUcontext *, CUdevice);
typedef CUresult (*fn_setctx)(CUcontext);

static fn_alloc forward;
static int depth;

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    CUresult rc;
    if (++depth > 1) {
        printf("recursed\n");
        fflush(stdout);
        exit(3);
    }
    rc = forward(dptr, bytes);
    --depth;
    return rc;
}

int main(int argc, char **argv) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CUcontext ctx = NULL;
    if (!h || argc < 2)
        return 4;
    fn_init init = (fn_init)dlsym(h, "cuInit");
    fn_ctx retain = (fn_ctx)dlsym(h, "cuDevicePrimaryCtxRetain");
    fn_setctx set = (fn_setctx)dlsym(h, "cuCtxSetCurrent");
    if (!init || !retain || !set || init(0) || retain(&ctx, 0) || set(ctx))
        return 5;
    if (!strcmp(argv[1], "dlsym")) {
        forward = (fn_alloc)dlsym(h, "cuMemAlloc_v2");
    } else {
        fn_getproc getproc = (fn_getproc)dlsym(h, "cuGetProcAddress_v2");
        int status = -1;
        if (!getproc || getproc("cuMemAlloc", (void **)&forward, 12000, 0, &status))
            return 6;
    }
    printf("forward %s\n", forward == cuMemAlloc_v2 ? "self" : "other");
    for (int i = 2; i < argc; i++) {
        CUdeviceptr p = 0;
        printf("alloc rc=%d\n", (int)cuMemAlloc_v2(&p, strtoull(argv[i], NULL, 0)));
    }
    return 0;
}
