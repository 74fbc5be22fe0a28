/* What the gpu-check "questions" programs share: the driver and NVML through dlopen, and
 * one line per moment with the driver's own figures. Each program asks the real driver one
 * question cuda.h leaves open for cuquota's accounting, with no interposer in front:
 *
 *   LABEL rc=R free=BYTES nvml_used=BYTES
 *
 * free: cuMemGetInfo_v2 of the current context (-1 with none, rc its error); nvml_used:
 * NVML's usedGpuMemory of this process on NVML device 0 (-1 where NVML cannot say). Built
 * against the test clients' own declarations (tests/clients/cuda_min.h), gcc -Itests/clients. */
#ifndef CUQUOTA_ASK_H
#define CUQUOTA_ASK_H
#define _GNU_SOURCE
#include "cuda_min.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1ull << 20)

/* Kernels from PTX (the driver JIT-compiles it for the GPU it has), from cuda.h's
 * declarations. */
typedef struct cuquota_module_opaque *CUmodule;
typedef struct cuquota_function_opaque *CUfunction;
typedef CUresult (*fn_cuModuleLoadData)(CUmodule *module, const void *image);
typedef CUresult (*fn_cuModuleGetFunction)(CUfunction *f, CUmodule module, const char *name);
typedef CUresult (*fn_cuModuleUnload)(CUmodule module);
typedef CUresult (*fn_cuLaunchKernel)(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                      unsigned int grid_z, unsigned int block_x,
                                      unsigned int block_y, unsigned int block_z,
                                      unsigned int shared_bytes, CUstream stream, void **params,
                                      void **extra);
/* CUlimit values. */
#define CU_LIMIT_STACK_SIZE 0x00
#define CU_LIMIT_MALLOC_HEAP_SIZE 0x02

static void *ask_cuda, *ask_nvml;
static nvmlDevice_t ask_nvml_dev;

/* A driver function by name; the program ends (status 4) if the driver lacks it. */
static void *need(const char *name) {
    void *f = ask_cuda ? dlsym(ask_cuda, name) : NULL;
    if (!f) {
        printf("missing %s\n", name);
        exit(4);
    }
    return f;
}

#define FN(name) fn_##name name = (fn_##name)need(#name)
/* A call that must succeed: otherwise its name and result, and status 3. */
#define MUST(call)                                                                            \
    do {                                                                                      \
        CUresult must_rc_ = (call);                                                           \
        if (must_rc_) {                                                                       \
            printf("failed %s rc=%d\n", #call, must_rc_);                                     \
            exit(3);                                                                          \
        }                                                                                     \
    } while (0)

/* Opens the driver (status 4 without one), initialises it, and NVML where there is one. */
static void ask_open(void) {
    ask_cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!ask_cuda) {
        printf("missing libcuda.so.1\n");
        exit(4);
    }
    FN(cuInit);
    MUST(cuInit(0));
    ask_nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    fn_nvmlInit_v2 init = ask_nvml ? (fn_nvmlInit_v2)dlsym(ask_nvml, "nvmlInit_v2") : NULL;
    fn_nvmlDeviceGetHandleByIndex_v2 by_index =
        ask_nvml ? (fn_nvmlDeviceGetHandleByIndex_v2)dlsym(ask_nvml,
                                                           "nvmlDeviceGetHandleByIndex_v2")
                 : NULL;
    if (!init || !by_index || init() || by_index(0, &ask_nvml_dev))
        ask_nvml_dev = NULL;
}

/* NVML's figure for this process on device 0, or -1. */
static long long nvml_used(void) {
    nvmlProcessInfo_t procs[64];
    unsigned int n = 64, i;
    fn_nvmlDeviceGetComputeRunningProcesses_v3 list =
        ask_nvml ? (fn_nvmlDeviceGetComputeRunningProcesses_v3)dlsym(
                       ask_nvml, "nvmlDeviceGetComputeRunningProcesses_v3")
                 : NULL;
    if (!ask_nvml_dev || !list || list(ask_nvml_dev, &n, procs))
        return -1;
    for (i = 0; i < n; i++)
        if (procs[i].pid == (unsigned int)getpid())
            return (long long)procs[i].usedGpuMemory;
    return 0;
}

static void report(const char *label) {
    FN(cuMemGetInfo_v2);
    size_t free_b = 0, total = 0;
    CUresult rc = cuMemGetInfo_v2(&free_b, &total);
    printf("%s rc=%d free=%lld nvml_used=%lld\n", label, rc, rc ? -1 : (long long)free_b,
           nvml_used());
    fflush(stdout);
}

/* A CUlimit of the current context (-1 where the driver does not say). */
static inline long long get_limit(int limit) {
    FN(cuCtxGetLimit);
    size_t value = 0;
    return cuCtxGetLimit(&value, limit) ? -1 : (long long)value;
}

/* The kernel `name` of a PTX module loaded into the current context; a driver that cannot
 * load or find it ends the program as MUST does (status 3, the call and its result). */
static inline CUfunction load_kernel(const char *ptx, const char *name, CUmodule *module) {
    FN(cuModuleLoadData);
    FN(cuModuleGetFunction);
    CUfunction f = NULL;
    MUST(cuModuleLoadData(module, ptx));
    MUST(cuModuleGetFunction(&f, *module, name));
    return f;
}

/* Device 0's primary context, retained and made current. */
static CUcontext use_primary(void) {
    FN(cuDeviceGet);
    FN(cuDevicePrimaryCtxRetain);
    FN(cuCtxSetCurrent);
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    MUST(cuDeviceGet(&dev, 0));
    MUST(cuDevicePrimaryCtxRetain(&ctx, dev));
    MUST(cuCtxSetCurrent(ctx));
    return ctx;
}

#endif
