/* Exercises the shim (the stand-in libcuda.so.1) through its C ABI. Usage: smoke SCENARIO.
 * Declares the few driver API types it needs itself (no NVIDIA headers). Exits 0 when every
 * check passes; otherwise prints the failing check and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUstream, *CUevent, *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { int type, id; } CUmemLocation;
typedef struct {
    int type, requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc;
typedef struct {
    int allocType, handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

CUresult cuInit(unsigned);
CUresult cuDriverGetVersion(int *);
CUresult cuGetErrorName(CUresult, const char **);
CUresult cuGetErrorString(CUresult, const char **);
CUresult cuGetExportTable(const void **, const void *);
CUresult cuGetProcAddress(const char *, void **, int, unsigned long long);
CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);
CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetName(char *, int, CUdevice);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuDeviceTotalMem(unsigned *, CUdevice);
CUresult cuDeviceGetAttribute(int *, int, CUdevice);
CUresult cuDeviceGetPCIBusId(char *, int, CUdevice);
CUresult cuDeviceGetByPCIBusId(CUdevice *, const char *);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuDevicePrimaryCtxGetState(CUdevice, unsigned *, int *);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxGetCurrent(CUcontext *);
CUresult cuCtxPushCurrent_v2(CUcontext);
CUresult cuCtxPopCurrent_v2(CUcontext *);
CUresult cuCtxGetDevice(CUdevice *);
CUresult cuCtxSynchronize(void);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventElapsedTime(float *, CUevent, CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemGetInfo(unsigned *, unsigned *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAlloc(unsigned *, unsigned);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFree(unsigned);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemGetAddressRange_v2(CUdeviceptr *, size_t *, CUdeviceptr);
CUresult cuMemHostAlloc(void **, size_t, unsigned);
CUresult cuMemFreeHost(void *);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *, void *, unsigned);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuMemcpyDtoD_v2(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemsetD32_v2(CUdeviceptr, unsigned, size_t);
CUresult cuMemsetD8Async(CUdeviceptr, unsigned char, size_t, CUstream);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, CUdevice);
CUresult cuDeviceGetMemPool(CUmemoryPool *, CUdevice);
CUresult cuDeviceSetMemPool(CUdevice, CUmemoryPool);
CUresult cuMemPoolCreate(CUmemoryPool *, const CUmemPoolProps *);
CUresult cuMemPoolDestroy(CUmemoryPool);
CUresult cuMemPoolSetAttribute(CUmemoryPool, int, void *);
CUresult cuMemPoolGetAttribute(CUmemoryPool, int, void *);
CUresult cuMemPoolSetAccess(CUmemoryPool, const CUmemAccessDesc *, size_t);
CUresult cuMemPoolGetAccess(int *, CUmemoryPool, CUmemLocation *);
CUresult cuStreamIsCapturing(CUstream, int *);
CUresult cuStreamIsCapturing_ptsz(CUstream, int *);
CUresult cuMemGetAllocationGranularity(size_t *, const CUmemAllocationProp *, int);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *, CUmemGenericAllocationHandle);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *, void *);
CUresult cuEventSynchronize(CUevent);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice);
CUresult cuMemPoolTrimTo(CUmemoryPool, size_t);
/* graphs with memory nodes */
typedef void *CUgraph, *CUgraphNode, *CUgraphExec;
typedef struct {
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;
typedef struct {
    unsigned long long flags;
    CUstream hUploadStream;
    CUgraphNode hErrNode_out;
    int result_out;
} CUDA_GRAPH_INSTANTIATE_PARAMS;
CUresult cuGraphCreate(CUgraph *, unsigned);
CUresult cuGraphDestroy(CUgraph);
CUresult cuGraphAddMemAllocNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                CUDA_MEM_ALLOC_NODE_PARAMS *);
CUresult cuGraphMemAllocNodeGetParams(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS *);
CUresult cuGraphAddMemFreeNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr);
CUresult cuGraphMemFreeNodeGetParams(CUgraphNode, CUdeviceptr *);
CUresult cuGraphGetNodes(CUgraph, CUgraphNode *, size_t *);
CUresult cuGraphNodeGetType(CUgraphNode, int *);
CUresult cuGraphInstantiate(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphInstantiateWithParams(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
CUresult cuGraphUpload(CUgraphExec, CUstream);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuDeviceGraphMemTrim(CUdevice);
CUresult cuDeviceGetGraphMemAttribute(CUdevice, int, void *);
CUresult cuDeviceSetGraphMemAttribute(CUdevice, int, void *);
CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
int cuShimFootprint(int, size_t *, size_t *, size_t *, size_t *);
int cuShimInjectFault(const char *, unsigned, unsigned);
int cuShimStats(int, size_t *, size_t *, unsigned long long *);

static int failures;
#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)
#define OK(call) CHECK((call) == 0)

static const size_t MiB = 1ull << 20, GiB = 1ull << 30;

static size_t in_use(int dev) {
    size_t bytes = 0;
    CHECK(cuShimStats(dev, &bytes, NULL, NULL) == 0);
    return bytes;
}

static unsigned long long live(int dev) {
    unsigned long long n = 0;
    CHECK(cuShimStats(dev, NULL, NULL, &n) == 0);
    return n;
}

static void use_primary(int dev) {
    CUcontext ctx = NULL;
    OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(ctx != NULL);
    OK(cuCtxSetCurrent(ctx));
}

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

static void scenario_basic(void) {
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

static void *libcuda(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL);
    return lib;
}

static void scenario_proc_address(void) {
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

static void scenario_faults_env(void) {
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

static void scenario_faults_api(void) {
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

static void *vmm_thread(void *arg) {
    (void)arg;
    CUcontext ctx = (CUcontext)1;
    OK(cuCtxGetCurrent(&ctx));
    CHECK(ctx == NULL); /* no context on this thread */

    CUmemAllocationProp prop = {1, 0, {1, 0}, NULL, {0}};
    size_t gran = 0;
    OK(cuMemGetAllocationGranularity(&gran, &prop, 0));
    CHECK(gran == 2 * MiB);
    OK(cuMemGetAllocationGranularity(&gran, &prop, 1));
    CHECK(gran == 2 * MiB);

    CUmemGenericAllocationHandle h = 0, h2 = 0;
    CHECK(cuMemCreate(&h, 3 * MiB, &prop, 0) == 1);
    OK(cuMemCreate(&h, 4 * MiB, &prop, 0));
    CHECK(in_use(0) == 4 * MiB && live(0) == 1);
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    CHECK(got.type == 1 && got.location.type == 1 && got.location.id == 0);

    CUdeviceptr va = 0;
    OK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CHECK(va != 0 && va % (2 * MiB) == 0);
    CHECK(in_use(0) == 4 * MiB); /* reservations are free */
    OK(cuMemMap(va, 4 * MiB, 0, h, 0));
    CHECK(cuMemMap(va, 2 * MiB, 0, h, 0) == 1); /* overlaps */
    CUmemAccessDesc desc = {{1, 0}, 3};
    OK(cuMemSetAccess(va, 4 * MiB, &desc, 1));
    memset((void *)(uintptr_t)va, 0x5a, 4 * MiB);
    CHECK(((unsigned char *)(uintptr_t)va)[4 * MiB - 1] == 0x5a);
    OK(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + 100)));
    CHECK(h2 == h);
    OK(cuMemRelease(h2));

    /* Released while mapped: still charged until unmapped. */
    OK(cuMemRelease(h));
    CHECK(cuMemRelease(h) == 1);
    CHECK(in_use(0) == 4 * MiB);
    CHECK(cuMemUnmap(va, 2 * MiB) == 1); /* partial */
    OK(cuMemUnmap(va, 4 * MiB));
    CHECK(in_use(0) == 0 && live(0) == 0);
    OK(cuMemAddressFree(va, 8 * MiB));
    CHECK(cuMemAddressFree(va, 8 * MiB) == 1);

    /* Host-located physical memory is not charged. */
    CUmemAllocationProp host = {1, 0, {2, 0}, NULL, {0}};
    OK(cuMemCreate(&h, 2 * MiB, &host, 0));
    CHECK(in_use(0) == 0);
    OK(cuMemRelease(h));
    CUmemAllocationProp bad_dev = {1, 0, {1, 7}, NULL, {0}};
    CHECK(cuMemCreate(&h, 2 * MiB, &bad_dev, 0) == 101);
    CUmemAllocationProp huge = {1, 0, {1, 0}, NULL, {0}};
    CHECK(cuMemCreate(&h, 10 * GiB, &huge, 0) == 2);
    CHECK(cuMemRelease(424242) == 1);
    return NULL;
}

static void scenario_vmm(void) {
    OK(cuInit(0));
    pthread_t t;
    pthread_create(&t, NULL, vmm_thread, NULL);
    pthread_join(t, NULL);
}

static void scenario_pools(void) {
    OK(cuInit(0));
    CUdeviceptr a = 0, b = 0, c = 0;
    CHECK(cuMemAllocAsync(&a, 4096, NULL) == 201); /* default stream needs a context */
    use_primary(0);
    OK(cuMemAllocAsync(&a, 4096, NULL));
    OK(cuMemAllocAsync(&b, 1 * MiB, (CUstream)0x1));
    OK(cuMemAllocAsync_ptsz(&c, 1 * MiB, (CUstream)0x2));
    CHECK(in_use(0) == 4096 + 2 * MiB && live(0) == 3);
    CHECK(cuMemAllocAsync(&a, 100, (CUstream)0x1234) == 400);

    CUmemoryPool def = NULL, cur = NULL, pool = NULL;
    OK(cuDeviceGetDefaultMemPool(&def, 0));
    OK(cuDeviceGetMemPool(&cur, 0));
    CHECK(def != NULL && def == cur);
    unsigned long long used = 0;
    OK(cuMemPoolGetAttribute(def, 7, &used)); /* USED_MEM_CURRENT */
    CHECK(used == 4096 + 2 * MiB);
    OK(cuMemPoolGetAttribute(def, 5, &used)); /* RESERVED_MEM_CURRENT: two 2 MiB chunks */
    CHECK(used == 4 * MiB);
    OK(cuMemFreeAsync(a, NULL));
    OK(cuMemFreeAsync(b, NULL));
    OK(cuMemFree_v2(c)); /* any free works */
    OK(cuMemPoolGetAttribute(def, 7, &used));
    CHECK(used == 0);
    OK(cuMemPoolGetAttribute(def, 8, &used)); /* USED_MEM_HIGH */
    CHECK(used == 4096 + 2 * MiB);
    unsigned long long zero = 0;
    OK(cuMemPoolSetAttribute(def, 8, &zero));
    OK(cuMemPoolGetAttribute(def, 8, &used));
    CHECK(used == 0);
    unsigned long long threshold = 1ull << 40;
    OK(cuMemPoolSetAttribute(def, 4, &threshold));
    threshold = 0;
    OK(cuMemPoolGetAttribute(def, 4, &threshold));
    CHECK(threshold == 1ull << 40);
    int reuse = 0;
    OK(cuMemPoolSetAttribute(def, 1, &reuse));
    reuse = 5;
    OK(cuMemPoolGetAttribute(def, 1, &reuse));
    CHECK(reuse == 0);
    CHECK(cuMemPoolSetAttribute(def, 7, &zero) == 1);

    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = 1;
    props.location.id = 0;
    OK(cuMemPoolCreate(&pool, &props));
    CUstream s;
    OK(cuStreamCreate(&s, 1));
    OK(cuMemAllocFromPoolAsync(&a, 3 * MiB, pool, s));
    OK(cuMemPoolGetAttribute(pool, 7, &used));
    CHECK(used == 3 * MiB && in_use(0) == 3 * MiB);
    OK(cuDeviceSetMemPool(0, pool));
    OK(cuMemAllocAsync(&b, MiB, s));
    OK(cuMemPoolGetAttribute(pool, 7, &used));
    CHECK(used == 4 * MiB);
    OK(cuMemFreeAsync(a, s));
    OK(cuMemFreeAsync(b, s));

    /* Nothing is ever captured. */
    int capturing = 7;
    OK(cuStreamIsCapturing(s, &capturing));
    CHECK(capturing == 0);
    capturing = 7;
    OK(cuStreamIsCapturing_ptsz((CUstream)0x2, &capturing));
    CHECK(capturing == 0);
    CHECK(cuStreamIsCapturing((CUstream)0x1234, &capturing) == 400);

    /* Pool access: the owner is always read-write and cannot lose it; a device that does
     * not exist is refused. */
    int access = -1;
    CUmemLocation loc = {1, 0};
    OK(cuMemPoolGetAccess(&access, pool, &loc));
    CHECK(access == 3);
    CUmemAccessDesc desc = {{1, 0}, 3};
    OK(cuMemPoolSetAccess(pool, &desc, 1));
    desc.flags = 0;
    CHECK(cuMemPoolSetAccess(pool, &desc, 1) == 101);
    desc.location.id = 5;
    CHECK(cuMemPoolSetAccess(pool, &desc, 1) == 101);
    loc.type = 2;
    CHECK(cuMemPoolGetAccess(&access, pool, &loc) == 1);
    OK(cuMemPoolDestroy(pool));
    CHECK(cuMemPoolDestroy(def) == 1);
    OK(cuDeviceGetMemPool(&cur, 0));
    CHECK(cur == def);
    CHECK(cuMemAllocFromPoolAsync(&a, 100, pool, s) == 1);
    props.location.id = 3;
    CHECK(cuMemPoolCreate(&pool, &props) == 1);
    CHECK(in_use(0) == 0 && live(0) == 0);
    OK(cuStreamDestroy_v2(s));
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

static void scenario_threads(void) {
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

static void scenario_bad_config(void) {
    /* CUDA_SHIM_MEMORY=lots */
    int count = 0;
    CHECK(cuInit(0) == 1);
    CHECK(cuDeviceGetCount(&count) == 3);
    int version = 0;
    OK(cuDriverGetVersion(&version));
}

static void scenario_multi(void) {
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

static void scenario_interpose(void) {
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


/* ---- the footprint: pools that keep memory, graph memory ---- */

/* The footprint parts of device 0: live allocations, pool cache, graph memory. */
static void footprint_is(size_t allocations, size_t pool_cache, size_t graph, int line) {
    size_t a = 1, p = 1, g = 1, c = 1, fr = 0, to = 0;
    CHECK(cuShimFootprint(0, &a, &p, &g, &c) == 0);
    CHECK(cuMemGetInfo_v2(&fr, &to) == 0);
    if (a != allocations || p != pool_cache || g != graph || c != 0 ||
        fr != to - (a + p + g)) {
        fprintf(stderr, "line %d: footprint %zu %zu %zu %zu free %zu of %zu\n", line, a, p, g,
                c, fr, to);
        failures++;
    }
}
#define FOOTPRINT(a, p, g) footprint_is((a), (p), (g), __LINE__)

static unsigned long long pool_attr(CUmemoryPool pool, int attr) {
    unsigned long long v = 0;
    OK(cuMemPoolGetAttribute(pool, attr, &v));
    return v;
}

/* CUDA_SHIM_MEMORY=64MiB */
static void scenario_pool_cache(void) {
    CUdeviceptr a = 0, b = 0, big = 0;
    CUmemoryPool def = NULL, pool = NULL, host = NULL;
    CUevent ev = NULL;
    unsigned long long v;
    OK(cuInit(0));
    CHECK(cuShimFootprint(7, NULL, NULL, NULL, NULL) == 101);
    use_primary(0);
    OK(cuDeviceGetDefaultMemPool(&def, 0));
    FOOTPRINT(0, 0, 0);
    /* 3 MiB reserve two chunks; the unused MiB is pool cache */
    OK(cuMemAllocAsync(&a, 3 * MiB, NULL));
    FOOTPRINT(3 * MiB, 1 * MiB, 0);
    CHECK(pool_attr(def, 5) == 4 * MiB && pool_attr(def, 7) == 3 * MiB);
    /* a free returns it to the pool: the footprint stays */
    OK(cuMemFreeAsync(a, NULL));
    FOOTPRINT(0, 4 * MiB, 0);
    CHECK(pool_attr(def, 5) == 4 * MiB && pool_attr(def, 7) == 0);
    CHECK(cuMemAlloc_v2(&big, 61 * MiB) == 2);
    OK(cuMemAlloc_v2(&big, 60 * MiB));
    OK(cuMemFree_v2(big));
    /* reuse needs no growth */
    OK(cuMemAllocAsync(&a, 4 * MiB, NULL));
    FOOTPRINT(4 * MiB, 0, 0);
    OK(cuMemFreeAsync(a, NULL));
    /* a synchronize releases what is above the threshold (0) */
    OK(cuStreamSynchronize(NULL));
    FOOTPRINT(0, 0, 0);
    CHECK(pool_attr(def, 5) == 0 && pool_attr(def, 6) == 4 * MiB);
    v = 0;
    OK(cuMemPoolSetAttribute(def, 6, &v)); /* reset RESERVED_MEM_HIGH */
    CHECK(pool_attr(def, 6) == 0);
    /* a threshold keeps chunks while at least that much stays */
    v = 5 * MiB;
    OK(cuMemPoolSetAttribute(def, 4, &v));
    OK(cuMemAllocAsync(&a, 8 * MiB, NULL));
    OK(cuMemFreeAsync(a, NULL));
    OK(cuCtxSynchronize());
    FOOTPRINT(0, 6 * MiB, 0);
    /* trim: at least KEEP bytes stay; no-op when it holds less */
    OK(cuMemPoolTrimTo(def, 3 * MiB));
    CHECK(pool_attr(def, 5) == 4 * MiB);
    OK(cuMemPoolTrimTo(def, 16 * MiB));
    CHECK(pool_attr(def, 5) == 4 * MiB);
    OK(cuMemPoolTrimTo(def, 0));
    FOOTPRINT(0, 0, 0);
    v = 0;
    OK(cuMemPoolSetAttribute(def, 4, &v));
    /* chunks under live allocations stay */
    OK(cuMemAllocAsync(&a, 1 * MiB, NULL));
    OK(cuMemAllocAsync(&b, 3 * MiB, NULL));
    OK(cuMemFreeAsync(a, NULL));
    OK(cuMemPoolTrimTo(def, 0));
    FOOTPRINT(3 * MiB, 1 * MiB, 0);
    OK(cuMemFreeAsync(b, NULL));
    /* an event synchronize is a synchronisation too */
    OK(cuEventCreate(&ev, 0));
    OK(cuEventSynchronize(ev));
    FOOTPRINT(0, 0, 0);
    OK(cuEventDestroy_v2(ev));
    /* only the growth has to fit on the device */
    OK(cuMemAlloc_v2(&big, 63 * MiB));
    CHECK(cuMemAllocAsync(&a, 1 * MiB, NULL) == 2);
    FOOTPRINT(63 * MiB, 0, 0);
    OK(cuMemFree_v2(big));
    /* host pools charge no device; they still report their reservation */
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = 3; /* HOST_NUMA */
    OK(cuMemPoolCreate(&host, &props));
    OK(cuMemAllocFromPoolAsync(&a, 5 * MiB, host, NULL));
    FOOTPRINT(0, 0, 0);
    CHECK(pool_attr(host, 5) == 6 * MiB && pool_attr(host, 7) == 5 * MiB);
    OK(cuMemFreeAsync(a, NULL));
    /* a destroyed pool keeps what live allocations use, and lets go of it after */
    props.location.type = 1;
    OK(cuMemPoolCreate(&pool, &props));
    OK(cuMemAllocFromPoolAsync(&a, 3 * MiB, pool, NULL));
    OK(cuMemAllocFromPoolAsync(&b, 2 * MiB, pool, NULL));
    OK(cuMemFreeAsync(b, NULL));
    FOOTPRINT(3 * MiB, 3 * MiB, 0);
    OK(cuMemPoolDestroy(pool));
    FOOTPRINT(3 * MiB, 1 * MiB, 0);
    OK(cuMemFreeAsync(a, NULL));
    FOOTPRINT(0, 0, 0);
    /* a reset frees the context's allocations; its pools release what they keep */
    OK(cuMemAllocAsync(&a, 3 * MiB, NULL));
    OK(cuMemAllocAsync(&b, 1 * MiB, NULL));
    OK(cuMemFreeAsync(b, NULL));
    FOOTPRINT(3 * MiB, 1 * MiB, 0);
    OK(cuDevicePrimaryCtxReset_v2(0));
    FOOTPRINT(0, 0, 0);
    CHECK(in_use(0) == 0 && live(0) == 0);
}

/* CUDA_SHIM_POOL_CHUNK=32MiB */
static void scenario_pool_chunk(void) {
    CUdeviceptr a = 0;
    OK(cuInit(0));
    use_primary(0);
    OK(cuMemAllocAsync(&a, 1 * MiB, NULL));
    FOOTPRINT(1 * MiB, 31 * MiB, 0);
    OK(cuMemFreeAsync(a, NULL));
    OK(cuStreamSynchronize(NULL));
    FOOTPRINT(0, 0, 0);
}

static unsigned long long graph_attr(int attr) {
    unsigned long long v = 0;
    OK(cuDeviceGetGraphMemAttribute(0, attr, &v));
    return v;
}

static CUgraphNode alloc_node(CUgraph g, const CUgraphNode *deps, size_t n, size_t bytes,
                              CUdeviceptr *dptr) {
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    CUgraphNode node = NULL;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = 1;
    p.poolProps.location.type = 1;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    OK(cuGraphAddMemAllocNode(&node, g, deps, n, &p));
    *dptr = p.dptr;
    return node;
}

/* CUDA_SHIM_MEMORY=64MiB */
static void scenario_graphs(void) {
    CUgraph g = NULL, g2 = NULL;
    CUgraphNode n1, n2, n3, nodes[4];
    CUgraphExec e = NULL, e2 = NULL;
    CUdeviceptr d1 = 0, d2 = 0, c = 0, big = 0;
    CUstream s = NULL;
    size_t count = 0;
    int type = -1;
    unsigned long long zero = 0;
    void *fn = NULL, *want = NULL;
    OK(cuInit(0));
    use_primary(0);
    OK(cuStreamCreate(&s, 0));
    CHECK(cuGraphCreate(&g, 1) == 1);
    OK(cuGraphCreate(&g, 0));
    n1 = alloc_node(g, NULL, 0, 3 * MiB, &d1);
    n2 = alloc_node(g, &n1, 1, 5 * MiB, &d2);
    CHECK(d1 && d2 && d1 != d2);
    OK(cuGraphAddMemFreeNode(&n3, g, &n2, 1, d1));
    CHECK(cuGraphAddMemFreeNode(&n3, g, NULL, 0, d1) == 1); /* freed twice */
    CHECK(cuGraphAddMemFreeNode(&n3, g, NULL, 0, d1 + 4096) == 1); /* not an allocation */
    OK(cuGraphNodeGetType(n1, &type));
    CHECK(type == 10);
    {
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        CUdeviceptr freed = 0;
        OK(cuGraphMemAllocNodeGetParams(n2, &p));
        CHECK(p.bytesize == 5 * MiB && p.dptr == d2 && p.poolProps.location.id == 0);
        CHECK(cuGraphMemAllocNodeGetParams(n3, &p) == 1);
        OK(cuGraphMemFreeNodeGetParams(n3, &freed));
        CHECK(freed == d1);
    }
    {
        /* a host-located allocation node charges no device */
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        CUgraph gh = NULL;
        CUgraphNode hn = NULL;
        CUgraphExec he = NULL;
        memset(&p, 0, sizeof p);
        p.poolProps.allocType = 1;
        p.poolProps.location.type = 3; /* HOST_NUMA */
        p.bytesize = 4 * MiB;
        OK(cuGraphCreate(&gh, 0));
        OK(cuGraphAddMemAllocNode(&hn, gh, NULL, 0, &p));
        p.poolProps.handleTypes = 1; /* no IPC for graph memory */
        CHECK(cuGraphAddMemAllocNode(&hn, gh, NULL, 0, &p) == 1);
        OK(cuGraphInstantiateWithFlags(&he, gh, 1));
        OK(cuGraphLaunch(he, NULL));
        FOOTPRINT(0, 0, 0);
        OK(cuMemFree_v2(p.dptr));
        OK(cuGraphExecDestroy(he));
        OK(cuGraphDestroy(gh));
    }
    OK(cuGraphGetNodes(g, NULL, &count));
    CHECK(count == 3);
    count = 4;
    nodes[3] = (CUgraphNode)1;
    OK(cuGraphGetNodes(g, nodes, &count));
    CHECK(count == 3 && nodes[0] == n1 && nodes[2] == n3 && nodes[3] == NULL);
    /* nothing is backed before an upload or a launch */
    OK(cuGraphInstantiateWithFlags(&e, g, 0));
    CHECK(cuGraphInstantiateWithFlags(&e2, g, 0) == 1); /* one executable graph at a time */
    FOOTPRINT(0, 0, 0);
    OK(cuGraphUpload(e, s));
    FOOTPRINT(0, 0, 8 * MiB);
    CHECK(graph_attr(2) == 8 * MiB && graph_attr(0) == 0);
    /* not live yet: no copies */
    char buf[16] = "graph memory", back[16] = {0};
    CHECK(cuMemcpyHtoD_v2(d2, buf, sizeof buf) == 1);
    /* a launch: d1 is freed inside the graph, d2 stays live */
    OK(cuGraphLaunch(e, NULL));
    OK(cuMemcpyHtoD_v2(d2 + 4096, buf, sizeof buf));
    OK(cuMemcpyDtoH_v2(back, d2 + 4096, sizeof back));
    CHECK(!memcmp(buf, back, sizeof buf));
    CHECK(cuMemcpyHtoD_v2(d1, buf, sizeof buf) == 1); /* freed inside the graph */
    {
        CUdeviceptr base = 0;
        size_t size = 0;
        OK(cuMemGetAddressRange_v2(&base, &size, d2 + 100));
        CHECK(base == d2 && size == 5 * MiB);
    }
    FOOTPRINT(0, 0, 8 * MiB);
    CHECK(graph_attr(0) == 5 * MiB && graph_attr(1) == 8 * MiB && graph_attr(3) == 8 * MiB);
    CHECK(in_use(0) == 0);
    CHECK(cuGraphLaunch(e, s) == 1); /* d2 still live */
    OK(cuMemFreeAsync(d2, s));
    CHECK(graph_attr(0) == 0 && graph_attr(2) == 8 * MiB);
    CHECK(cuMemcpyHtoD_v2(d2, buf, sizeof buf) == 1);
    OK(cuGraphLaunch(e, s));
    OK(cuMemFree_v2(d2));
    CHECK(cuMemFree_v2(d2) == 1);
    /* trim releases what no live allocation uses */
    OK(cuDeviceGraphMemTrim(0));
    FOOTPRINT(0, 0, 0);
    OK(cuDeviceSetGraphMemAttribute(0, 3, &zero));
    CHECK(graph_attr(3) == 0);
    CHECK(cuDeviceSetGraphMemAttribute(0, 2, &zero) == 1);
    /* a launch whose memory does not fit fails and changes nothing */
    OK(cuMemAlloc_v2(&big, 60 * MiB));
    CHECK(cuGraphLaunch(e, s) == 2);
    CHECK(cuGraphUpload(e, s) == 2);
    FOOTPRINT(60 * MiB, 0, 0);
    CHECK(graph_attr(0) == 0);
    OK(cuMemFree_v2(big));
    /* auto-free on launch: each launch frees the last one's unfreed allocations */
    OK(cuGraphExecDestroy(e));
    OK(cuGraphInstantiateWithFlags(&e2, g, 1));
    OK(cuGraphLaunch(e2, s));
    OK(cuGraphLaunch(e2, s));
    CHECK(graph_attr(0) == 5 * MiB);
    FOOTPRINT(0, 0, 8 * MiB);
    /* unfreed allocations outlive their executable graph and graph */
    OK(cuGraphExecDestroy(e2));
    OK(cuGraphDestroy(g));
    CHECK(graph_attr(0) == 5 * MiB);
    OK(cuDeviceGraphMemTrim(0));
    FOOTPRINT(0, 0, 6 * MiB);
    OK(cuMemFreeAsync(d2, s));
    OK(cuDeviceGraphMemTrim(0));
    FOOTPRINT(0, 0, 0);
    CHECK(cuGraphDestroy(g) == 1);

    /* capture makes the same nodes */
    OK(cuStreamBeginCapture_v2(s, 0));
    OK(cuMemAllocAsync(&c, 2 * MiB, s));
    FOOTPRINT(0, 0, 0);
    OK(cuMemFreeAsync(c, s));
    OK(cuStreamEndCapture(s, &g2));
    count = 2;
    OK(cuGraphGetNodes(g2, nodes, &count));
    CHECK(count == 2);
    OK(cuGraphNodeGetType(nodes[0], &type));
    CHECK(type == 10);
    OK(cuGraphNodeGetType(nodes[1], &type));
    CHECK(type == 11);
    {
        CUDA_GRAPH_INSTANTIATE_PARAMS ip;
        memset(&ip, 0, sizeof ip);
        ip.flags = 2; /* UPLOAD */
        ip.hUploadStream = s;
        ip.result_out = 7;
        OK(cuGraphInstantiateWithParams(&e, g2, &ip));
        CHECK(ip.result_out == 0);
        FOOTPRINT(0, 0, 2 * MiB);
        OK(cuGraphLaunch(e, s));
        CHECK(graph_attr(0) == 0);
        OK(cuGraphExecDestroy(e));
        ip.flags = 4; /* device launch: not simulated */
        CHECK(cuGraphInstantiateWithParams(&e, g2, &ip) == 801);
        CHECK(ip.result_out == 1);
    }
    /* the CUDA 10 form */
    {
        CUgraphNode err = (CUgraphNode)1;
        OK(cuGraphInstantiate(&e, g2, &err, NULL, 0));
        CHECK(err == NULL);
        OK(cuGraphExecDestroy(e));
    }
    OK(cuGraphDestroy(g2));
    OK(cuDeviceGraphMemTrim(0));
    FOOTPRINT(0, 0, 0);
    /* cuGetProcAddress: cuGraphInstantiate is the flags form from CUDA 12.0 */
    OK(cuGetProcAddress("cuGraphInstantiate", &fn, 12000, 0));
    want = dlsym(libcuda(), "cuGraphInstantiateWithFlags");
    CHECK(fn == want && fn != NULL);
    OK(cuGetProcAddress("cuGraphInstantiate", &fn, 11000, 0));
    CHECK(fn == dlsym(libcuda(), "cuGraphInstantiate_v2"));

    /* a primary context reset frees live graph allocations and releases graph memory and
     * pool caches, whatever the release thresholds */
    {
        unsigned long long keep = 1ull << 40;
        CUmemoryPool def = NULL;
        OK(cuGraphCreate(&g, 0));
        alloc_node(g, NULL, 0, 3 * MiB, &d1);
        OK(cuGraphInstantiateWithFlags(&e, g, 0));
        OK(cuGraphLaunch(e, s));
        OK(cuDeviceGetDefaultMemPool(&def, 0));
        OK(cuMemPoolSetAttribute(def, 4, &keep));
        OK(cuMemAllocAsync(&c, 1 * MiB, s));
        OK(cuMemFreeAsync(c, s));
        OK(cuStreamSynchronize(s));
        FOOTPRINT(0, 2 * MiB, 4 * MiB);
        OK(cuDevicePrimaryCtxReset_v2(0));
        FOOTPRINT(0, 0, 0);
        CHECK(graph_attr(0) == 0);
        CHECK(cuMemFree_v2(d1) == 1);
        /* the executable graph stays usable */
        use_primary(0);
        OK(cuGraphLaunch(e, NULL));
        FOOTPRINT(0, 0, 4 * MiB);
        OK(cuMemFree_v2(d1));
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: smoke SCENARIO\n");
        return 2;
    }
    const char *s = argv[1];
    if (!strcmp(s, "basic")) scenario_basic();
    else if (!strcmp(s, "proc_address")) scenario_proc_address();
    else if (!strcmp(s, "faults_env")) scenario_faults_env();
    else if (!strcmp(s, "faults_api")) scenario_faults_api();
    else if (!strcmp(s, "vmm")) scenario_vmm();
    else if (!strcmp(s, "pools")) scenario_pools();
    else if (!strcmp(s, "threads")) scenario_threads();
    else if (!strcmp(s, "bad_config")) scenario_bad_config();
    else if (!strcmp(s, "multi")) scenario_multi();
    else if (!strcmp(s, "interpose")) scenario_interpose();
    else if (!strcmp(s, "pool_cache")) scenario_pool_cache();
    else if (!strcmp(s, "pool_chunk")) scenario_pool_chunk();
    else if (!strcmp(s, "graphs")) scenario_graphs();
    else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
