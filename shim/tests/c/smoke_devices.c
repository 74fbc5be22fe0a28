/* The smoke scenarios of devices, contexts and plain allocations: init and accounting,
 * cuGetProcAddress, injected faults, threads, bad settings, several devices and context
 * stacks, an interposer in front of the shim. */
#define _GNU_SOURCE
#include "smoke.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void *no_context_thread(void *arg) {
    (void)arg;
    CUdeviceptr p = 0;
    size_t free_b, total_b;
    CUdevice dev;
    CHECK(cuMemAlloc_v2(&p, 4096) == 201);
    CHECK(cuMemGetInfo_v2(&free_b, &total_b) == 201);
    CHECK(cuCtxGetDevice(&dev) == 201);
    CHECK(cuCtxSynchronize() == 201);
    return NULL;
}

void scenario_basic(void) {
    int version = 0, count = 0;
    CUdeviceptr p = 0;
    CHECK(cuDeviceGetCount(&count) == 3); /* before cuInit */
    OK(cuDriverGetVersion(&version));
    CHECK(version == 12080);
    const char *text = NULL;
    OK(cuGetErrorName(2, &text));
    CHECK(text && strcmp(text, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
    OK(cuGetErrorString(0, &text));
    CHECK(cuGetErrorName(12345, &text) == 1 && text == NULL);
    CHECK(cuGetExportTable(NULL, NULL) == 801);

    CHECK(cuInit(1) == 1);
    OK(cuInit(0));
    OK(cuDeviceGetCount(&count));
    CHECK(count == 1);
    CUdevice dev = -1;
    OK(cuDeviceGet(&dev, 0));
    CHECK(dev == 0);
    CHECK(cuDeviceGet(&dev, 1) == 101);
    char name[64];
    OK(cuDeviceGetName(name, sizeof name, 0));
    CHECK(strcmp(name, "cuquota stand-in GPU 0") == 0);
    size_t total = 0;
    OK(cuDeviceTotalMem_v2(&total, 0));
    CHECK(total == 8 * GiB);
    unsigned total32 = 0;
    OK(cuDeviceTotalMem(&total32, 0));
    CHECK(total32 == 0xffffffffu);
    int value = 0;
    OK(cuDeviceGetAttribute(&value, 75, 0));
    CHECK(value == 9);
    OK(cuDeviceGetAttribute(&value, 16, 0));
    CHECK(value == 132);
    char bus[32];
    OK(cuDeviceGetPCIBusId(bus, sizeof bus, 0));
    OK(cuDeviceGetByPCIBusId(&dev, bus));
    CHECK(dev == 0);

    /* No current context yet. */
    CHECK(cuMemAlloc_v2(&p, 4096) == 201);
    use_primary(0);
    unsigned flags;
    int active = 0;
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 1);

    size_t free_b = 0, total_b = 0;
    OK(cuMemGetInfo_v2(&free_b, &total_b));
    CHECK(free_b == 8 * GiB && total_b == 8 * GiB);

    CUdeviceptr a = 0, b = 0, c = 0;
    OK(cuMemAlloc_v2(&a, 1 * GiB));
    OK(cuMemGetInfo_v2(&free_b, &total_b));
    CHECK(free_b == 7 * GiB);
    CHECK(in_use(0) == 1 * GiB && live(0) == 1);
    CHECK(cuMemAlloc_v2(&b, 7 * GiB + 1) == 2);
    CHECK(live(0) == 1);
    OK(cuMemAlloc_v2(&b, 7 * GiB));
    OK(cuMemGetInfo_v2(&free_b, &total_b));
    CHECK(free_b == 0);
    CHECK(cuMemAlloc_v2(&c, 1) == 2);
    OK(cuMemFree_v2(b));
    OK(cuMemFree_v2(a));
    OK(cuMemGetInfo_v2(&free_b, &total_b));
    CHECK(free_b == 8 * GiB);
    size_t peak = 0;
    OK(cuShimStats(0, NULL, &peak, NULL));
    CHECK(peak == 8 * GiB);
    CHECK(cuShimStats(1, NULL, NULL, NULL) == 101);
    CHECK(cuMemFree_v2(a) == 1); /* double free */
    CHECK(cuMemFree_v2(12345) == 1);
    OK(cuMemFree_v2(0));
    CHECK(cuMemAlloc_v2(&a, 0) == 1);

    /* Small allocations, data round trip, memset, address range. */
    OK(cuMemAlloc_v2(&a, 1000));
    CHECK(a % 256 == 0);
    OK(cuMemAlloc_v2(&b, 1000));
    char src[1000], dst[1000];
    for (int i = 0; i < 1000; i++) src[i] = (char)i;
    OK(cuMemcpyHtoD_v2(a, src, sizeof src));
    OK(cuMemcpyDtoD_v2(b, a, sizeof src));
    OK(cuMemcpyDtoH_v2(dst, b, sizeof dst));
    CHECK(memcmp(src, dst, sizeof src) == 0);
    CHECK(cuMemcpyHtoD_v2(a, src, 1001) == 1); /* past the end */
    OK(cuMemsetD32_v2(a, 0xdeadbeef, 250));
    OK(cuMemcpyDtoH_v2(dst, a, 8));
    CHECK(((unsigned *)dst)[1] == 0xdeadbeef);
    CUdeviceptr base = 0;
    size_t size = 0;
    OK(cuMemGetAddressRange_v2(&base, &size, a + 10));
    CHECK(base == a && size == 1000);
    CHECK(cuMemGetAddressRange_v2(&base, &size, 16) == 500);
    CHECK(in_use(0) == 2000);
    OK(cuMemFree_v2(a));
    OK(cuMemFree_v2(b));

    /* Pitch, managed, legacy 32-bit entry points. */
    size_t pitch = 0;
    CHECK(cuMemAllocPitch_v2(&a, &pitch, 1000, 10, 3) == 1);
    OK(cuMemAllocPitch_v2(&a, &pitch, 1000, 10, 4));
    CHECK(pitch == 1024 && in_use(0) == 10240);
    OK(cuMemFree_v2(a));
    CHECK(cuMemAllocManaged(&a, 4096, 0) == 1);
    OK(cuMemAllocManaged(&a, 4096, 1));
    CHECK(in_use(0) == 4096);
    OK(cuMemFree_v2(a));
    unsigned p32 = 0, free32 = 0, total32b = 0;
    OK(cuMemAlloc(&p32, 1 << 20));
    CHECK(p32 != 0 && in_use(0) == MiB);
    OK(cuMemsetD32_v2(p32, 7, 1 << 18));
    OK(cuMemGetInfo(&free32, &total32b));
    CHECK(free32 == 0xffffffffu && total32b == 0xffffffffu);
    OK(cuMemFree(p32));
    CHECK(in_use(0) == 0 && live(0) == 0);

    /* Host memory is never charged. */
    void *host = NULL;
    OK(cuMemHostAlloc(&host, 1 << 20, 0));
    CHECK(in_use(0) == 0);
    OK(cuMemHostGetDevicePointer_v2(&a, host, 0));
    CHECK(a == (CUdeviceptr)(uintptr_t)host);
    OK(cuMemFreeHost(host));
    CHECK(cuMemFreeHost(host) == 1);

    /* Streams and events. */
    CUstream s = NULL;
    CUevent e1 = NULL, e2 = NULL;
    OK(cuStreamCreate(&s, 0));
    OK(cuEventCreate(&e1, 0));
    OK(cuEventCreate(&e2, 0));
    OK(cuEventRecord(e1, s));
    OK(cuMemAlloc_v2(&a, 64));
    OK(cuMemcpyHtoDAsync_v2(a, src, 64, s));
    OK(cuMemsetD8Async(a, 1, 64, (CUstream)0x2));
    OK(cuEventRecord(e2, s));
    OK(cuStreamSynchronize(s));
    float ms = -1;
    OK(cuEventElapsedTime(&ms, e1, e2));
    CHECK(ms == 0.0f);
    OK(cuEventDestroy_v2(e1));
    OK(cuEventDestroy_v2(e2));
    OK(cuStreamDestroy_v2(s));
    CHECK(cuStreamDestroy_v2(s) == 400);
    OK(cuMemFree_v2(a));

    /* Another thread has no current context. */
    pthread_t t;
    pthread_create(&t, NULL, no_context_thread, NULL);
    pthread_join(t, NULL);
}

void scenario_proc_address(void) {
    void *lib = libcuda();
    void *pfn = NULL;
    int status = -1;
    /* Works before cuInit. */
    OK(cuGetProcAddress_v2("cuMemAlloc", &pfn, 3020, 0, &status));
    CHECK(status == 0 && pfn == dlsym(lib, "cuMemAlloc_v2") && pfn == (void *)&cuMemAlloc_v2);
    OK(cuGetProcAddress_v2("cuMemAlloc", &pfn, 2000, 0, &status));
    CHECK(status == 0 && pfn == dlsym(lib, "cuMemAlloc") && pfn == (void *)&cuMemAlloc);
    OK(cuGetProcAddress_v2("cuMemAlloc", &pfn, 12080, 0, NULL));
    CHECK(pfn == (void *)&cuMemAlloc_v2);
    OK(cuGetProcAddress_v2("cuMemAllocAsync", &pfn, 12000, 2, &status));
    CHECK(status == 0 && pfn == (void *)&cuMemAllocAsync_ptsz);
    OK(cuGetProcAddress_v2("cuMemAllocAsync", &pfn, 12000, 0, &status));
    CHECK(pfn == (void *)&cuMemAllocAsync);
    OK(cuGetProcAddress_v2("cuMemAllocAsync", &pfn, 12000, 1, &status));
    CHECK(pfn == (void *)&cuMemAllocAsync);
    pfn = (void *)1;
    CHECK(cuGetProcAddress_v2("cuMemAllocAsync", &pfn, 11000, 0, &status) == 500);
    CHECK(status == 2 && pfn == NULL);
    pfn = (void *)1;
    CHECK(cuGetProcAddress_v2("cuBogusFunction", &pfn, 12000, 0, &status) == 500);
    CHECK(status == 1 && pfn == NULL);
    CHECK(cuGetProcAddress_v2("cuMemAlloc_v2", &pfn, 12000, 0, &status) == 500);
    CHECK(status == 1);
    OK(cuGetProcAddress_v2("cuGetProcAddress", &pfn, 11030, 0, &status));
    CHECK(pfn == (void *)&cuGetProcAddress);
    OK(cuGetProcAddress_v2("cuGetProcAddress", &pfn, 12000, 0, &status));
    CHECK(pfn == (void *)&cuGetProcAddress_v2);
    OK(cuGetProcAddress("cuMemcpyHtoDAsync", &pfn, 12000, 2));
    CHECK(pfn == dlsym(lib, "cuMemcpyHtoDAsync_v2_ptsz"));
    OK(cuGetProcAddress("cuMemCreate", &pfn, 10020, 0));
    CHECK(pfn == dlsym(lib, "cuMemCreate"));
    CHECK(cuGetProcAddress("cuMemCreate", &pfn, 10010, 0) == 500);
    CHECK(cuGetProcAddress_v2(NULL, &pfn, 12000, 0, &status) == 1);

    /* A function pointer obtained this way works. */
    CUresult (*init)(unsigned) = NULL;
    OK(cuGetProcAddress("cuInit", (void **)&init, 12000, 0));
    OK(init(0));
}

void scenario_faults_env(void) {
    /* CUDA_SHIM_FAIL=cuMemAlloc_v2:2:2,cuMemGetInfo_v2:3+:999,cuMemCreate:*:12345 */
    OK(cuInit(0));
    use_primary(0);
    CUdeviceptr a = 0, b = 0, c = 0;
    OK(cuMemAlloc_v2(&a, 4096));
    b = 77;
    CHECK(cuMemAlloc_v2(&b, 4096) == 2);
    CHECK(b == 77 && live(0) == 1); /* nothing done */
    OK(cuMemAlloc_v2(&c, 4096));
    CHECK(live(0) == 2);
    size_t f, t;
    OK(cuMemGetInfo_v2(&f, &t));
    OK(cuMemGetInfo_v2(&f, &t));
    CHECK(cuMemGetInfo_v2(&f, &t) == 999);
    CHECK(cuMemGetInfo_v2(&f, &t) == 999);
    CUmemAllocationProp prop = {1, 0, {1, 0}, NULL, {0}};
    CUmemGenericAllocationHandle h;
    CHECK(cuMemCreate(&h, 2 * MiB, &prop, 0) == 12345);
    CHECK(live(0) == 2);
    /* Another symbol is unaffected, and the API can replace env rules. */
    OK(cuMemFree_v2(a));
    CHECK(cuShimInjectFault("cuMemCreate", 0, 0) == 0);
    OK(cuMemCreate(&h, 2 * MiB, &prop, 0));
    OK(cuMemRelease(h));
    OK(cuMemFree_v2(c));
}

void scenario_faults_api(void) {
    OK(cuInit(0));
    use_primary(0);
    CUdeviceptr a = 0, b = 0;
    CHECK(cuShimInjectFault("cuMemAloc_v2", 1, 2) == 1); /* misspelt: rejected */
    CHECK(cuShimInjectFault("cuMemFree_v2", 2, 700) == 0);
    OK(cuMemAlloc_v2(&a, 100));
    OK(cuMemAlloc_v2(&b, 100));
    OK(cuMemFree_v2(a));
    CHECK(cuMemFree_v2(b) == 700); /* second call since injection */
    CHECK(live(0) == 1);
    OK(cuMemFree_v2(b));
    CHECK(live(0) == 0);
    CHECK(cuShimInjectFault("cuMemAllocAsync_ptsz", 0, 2) == 0);
    CHECK(cuMemAllocAsync_ptsz(&a, 100, NULL) == 2);
    CHECK(cuMemAllocAsync_ptsz(&a, 100, NULL) == 2);
    OK(cuMemAllocAsync(&a, 100, NULL));
    OK(cuMemFreeAsync(a, NULL));
    CHECK(cuShimInjectFault(NULL, 0, 0) == 0); /* clear all */
    OK(cuMemAllocAsync_ptsz(&a, 100, NULL));
    OK(cuMemFreeAsync(a, NULL));
    /* Faults fire even before cuInit would be checked, and for pre-init functions. */
    CHECK(cuShimInjectFault("cuDriverGetVersion", 1, 3) == 0);
    int v;
    CHECK(cuDriverGetVersion(&v) == 3);
    OK(cuDriverGetVersion(&v));
}

#define THREADS 16
#define ROUNDS 2000

static void *worker(void *arg) {
    CUcontext ctx = arg;
    OK(cuCtxSetCurrent(ctx));
    CUdeviceptr held[8] = {0};
    for (int i = 0; i < ROUNDS; i++) {
        int slot = i % 8;
        if (held[slot]) OK(cuMemFree_v2(held[slot]));
        size_t size = (i % 5 == 0) ? (size_t)(128 << 10) : (size_t)(64 + i % 1000);
        OK(cuMemAlloc_v2(&held[slot], size));
    }
    for (int slot = 0; slot < 8; slot++) OK(cuMemFree_v2(held[slot]));
    return NULL;
}

void scenario_threads(void) {
    OK(cuInit(0));
    CUcontext ctx = NULL;
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, ctx);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    CHECK(in_use(0) == 0 && live(0) == 0);
    size_t peak = 0;
    OK(cuShimStats(0, NULL, &peak, NULL));
    CHECK(peak > 0 && peak <= THREADS * 8 * (size_t)(128 << 10));
}

void scenario_bad_config(void) {
    /* CUDA_SHIM_MEMORY=lots */
    int count = 0;
    CHECK(cuInit(0) == 1);
    CHECK(cuDeviceGetCount(&count) == 3);
    int version = 0;
    OK(cuDriverGetVersion(&version));
}

void scenario_multi(void) {
    /* CUDA_SHIM_DEVICES=2 CUDA_SHIM_MEMORY=1GiB,2GiB CUDA_SHIM_DRIVER_VERSION=12040 */
    int count = 0, version = 0;
    OK(cuInit(0));
    OK(cuDriverGetVersion(&version));
    CHECK(version == 12040);
    OK(cuDeviceGetCount(&count));
    CHECK(count == 2);
    size_t total = 0, free_b = 0;
    OK(cuDeviceTotalMem_v2(&total, 1));
    CHECK(total == 2 * GiB);
    CUcontext c0 = NULL, c1 = NULL, popped = NULL;
    OK(cuCtxCreate_v2(&c0, 0, 0)); /* pushed: current */
    OK(cuCtxCreate_v2(&c1, 0, 1));
    CUdevice dev = -1;
    OK(cuCtxGetDevice(&dev));
    CHECK(dev == 1);
    CUdeviceptr a = 0, b = 0;
    OK(cuMemAlloc_v2(&a, GiB + 1));
    CHECK(in_use(1) == GiB + 1 && in_use(0) == 0);
    OK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(total == 2 * GiB && free_b == GiB - 1);
    OK(cuCtxPopCurrent_v2(&popped));
    CHECK(popped == c1);
    OK(cuCtxGetDevice(&dev));
    CHECK(dev == 0);
    CHECK(cuMemAlloc_v2(&b, GiB + 1) == 2);
    OK(cuMemAlloc_v2(&b, GiB));
    OK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(total == GiB && free_b == 0);
    OK(cuCtxPushCurrent_v2(c1));
    OK(cuMemFree_v2(a));
    OK(cuMemFree_v2(b));
    CHECK(in_use(0) == 0 && in_use(1) == 0);
    OK(cuCtxDestroy_v2(c1)); /* current: popped */
    OK(cuCtxGetDevice(&dev));
    CHECK(dev == 0);
    CHECK(cuCtxPushCurrent_v2(c1) == 201);
    OK(cuCtxDestroy_v2(c0));
    CHECK(cuCtxGetDevice(&dev) == 201);
    CHECK(cuCtxPopCurrent_v2(&popped) == 201);
    char bus[32];
    OK(cuDeviceGetPCIBusId(bus, sizeof bus, 1));
    OK(cuDeviceGetByPCIBusId(&dev, bus));
    CHECK(dev == 1);
}

void scenario_interpose(void) {
    /* A preloaded library defines cuMemAlloc_v2 and counts its calls. */
    int *hook_calls = dlsym(RTLD_DEFAULT, "hook_calls");
    CHECK(hook_calls != NULL);
    if (!hook_calls) return;
    OK(cuInit(0));
    use_primary(0);
    CUdeviceptr a = 0, b = 0;
    OK(cuMemAlloc_v2(&a, 100)); /* binds to the hook */
    CHECK(*hook_calls == 1);
    CUresult (*alloc)(CUdeviceptr *, size_t) = NULL;
    OK(cuGetProcAddress("cuMemAlloc", (void **)&alloc, 12000, 0));
    CHECK(alloc == dlsym(libcuda(), "cuMemAlloc_v2"));
    CHECK((void *)alloc != dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
    OK(alloc(&b, 100)); /* the shim's own function: not the hook */
    CHECK(*hook_calls == 1);
    CHECK(live(0) == 2);
}
