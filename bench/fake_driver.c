/* A bench-only stand-in libcuda.so.1 whose allocation path takes no lock and shares no
 * written memory between threads, so that a thread row measures what the interposer adds
 * when threads allocate at once (the test shim, shim/, keeps its books under one global
 * lock: its raw pairs do not scale, and they hide the interposer's own contention).
 *
 * One GPU, one primary context. cuMemAlloc_v2/cuMemAllocAsync hand out addresses from a
 * per-thread range (each thread's first call takes a fresh 4 GiB range), reusing the last
 * address the thread freed, as a caching driver does. Frees only remember the address.
 * Nothing here checks anything: it is not a driver, only the cheapest thing that answers.
 *
 * Built by scripts/bench.sh as target/bench/fake/libcuda.so.1.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;

#define EXPORT __attribute__((visibility("default")))
#define GIB (1ull << 30)

static char the_context; /* its address is the one context handle */
static char streams[64]; /* cuStreamCreate hands out addresses in here */
static atomic_uint next_stream;
static atomic_ullong next_range = 1; /* range n covers [n << 32, (n + 1) << 32) */
static __thread CUcontext current;
static __thread CUdeviceptr bump, spare;

EXPORT CUresult cuInit(unsigned flags) { (void)flags; return 0; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
EXPORT CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = ordinal; return ordinal ? 101 : 0; }
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    (void)d;
    strncpy(name, "Bench fake GPU", (size_t)len);
    if (len > 0) name[len - 1] = 0;
    return 0;
}
EXPORT CUresult cuDeviceGetUuid(unsigned char uuid[16], CUdevice d) {
    memset(uuid, 0x5a, 16);
    uuid[0] = (unsigned char)d;
    return 0;
}
EXPORT CUresult cuDeviceGetUuid_v2(unsigned char uuid[16], CUdevice d) { return cuDeviceGetUuid(uuid, d); }
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) { (void)d; *bytes = 80 * GIB; return 0; }
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) { (void)attr; (void)d; *v = 0; return 0; }
EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) {
    (void)d;
    strncpy(id, "00000000:01:00.0", (size_t)len);
    if (len > 0) id[len - 1] = 0;
    return 0;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = &the_context; return 0; }
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return 0; }
EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags, int *active) {
    (void)d;
    *flags = 0;
    *active = 1;
    return 0;
}
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { current = c; return 0; }
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { *c = current; return 0; }
EXPORT CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return current ? 0 : 201; }
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) { current = c; return 0; }
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c) { if (c) *c = current; return 0; }
EXPORT CUresult cuCtxSynchronize(void) { return 0; }
EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) { *free_ = 80 * GIB; *total = 80 * GIB; return 0; }

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags) {
    (void)flags;
    *s = &streams[atomic_fetch_add(&next_stream, 1) % sizeof streams];
    return 0;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { (void)s; return 0; }
EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext *c) { (void)s; *c = &the_context; return 0; }
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status) { (void)s; *status = 0; return 0; }
EXPORT CUresult cuStreamSynchronize(CUstream s) { (void)s; return 0; }

static CUresult take(CUdeviceptr *p, size_t bytes) {
    if (!current) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    if (spare) {
        *p = spare;
        spare = 0;
        return 0;
    }
    if (!bump) bump = atomic_fetch_add(&next_range, 1) << 32;
    *p = bump;
    bump += (bytes + 4095) & ~4095ull;
    return 0;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) { return take(p, bytes); }
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { spare = p; return 0; }
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream s) { (void)s; return take(p, bytes); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; spare = p; return 0; }

/* This library's own handle: RTLD_DEFAULT would find an interposer's exports first. */
static void *own(void) {
    static void *handle;
    if (!handle) handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return handle;
}

/* What the library exports, by the name cuGetProcAddress is asked (the _v2 names for the
 * functions whose current version has one). */
static void *self(const char *symbol) {
    static const char *const v2[] = {"cuMemAlloc", "cuMemFree", "cuDeviceTotalMem", "cuMemGetInfo",
                                     "cuCtxPushCurrent", "cuCtxPopCurrent", "cuDevicePrimaryCtxRelease",
                                     "cuStreamDestroy", "cuDeviceGetUuid"};
    char name[128];
    for (size_t i = 0; i < sizeof v2 / sizeof *v2; i++)
        if (!strcmp(symbol, v2[i])) {
            strcpy(name, symbol);
            strcat(name, "_v2");
            return dlsym(own(), name);
        }
    return dlsym(own(), symbol);
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
    (void)version;
    (void)flags;
    *pfn = self(symbol);
    return *pfn ? 0 : 500; /* CUDA_ERROR_NOT_FOUND */
}
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags,
                                    int *status) {
    CUresult rc = cuGetProcAddress(symbol, pfn, version, flags);
    if (status) *status = rc ? 1 : 0;
    return rc;
}
