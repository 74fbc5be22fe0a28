/* Exercises the shim's context memory, cuCtxSetLimit memory, its NVML face (through
 * dlopen("libnvidia-ml.so.1"), as pynvml and nvidia-smi-like tools load it) and
 * CUDA_VISIBLE_DEVICES. Usage: context_nvml SCENARIO. Declares the types it needs itself
 * (no NVIDIA headers). Exits 0 when every check passes; otherwise prints the failing checks
 * and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef struct { unsigned char bytes[16]; } CUuuid;

CUresult cuInit(unsigned);
CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGetUuid(CUuuid *, CUdevice);
CUresult cuDeviceGetPCIBusId(char *, int, CUdevice);
CUresult cuDeviceGetByPCIBusId(CUdevice *, const char *);
CUresult cuDeviceGetName(char *, int, CUdevice);
CUresult cuDeviceGetAttribute(int *, int, CUdevice);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxCreate_v3(CUcontext *, void *, int, unsigned, CUdevice);
CUresult cuCtxCreate_v4(CUcontext *, void *, unsigned, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSetLimit(int, size_t);
CUresult cuCtxGetLimit(size_t *, int);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
int cuShimOtherProcess(int, unsigned, size_t);

/* nvml.h's types, as the header lays them out. */
typedef void *nvmlDevice_t;
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;
#define nvmlMemory_v2 ((unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

static struct {
    int (*Init)(void);
    int (*Init_v2)(void);
    int (*InitWithFlags)(unsigned);
    int (*Shutdown)(void);
    const char *(*ErrorString)(int);
    int (*GetCount)(unsigned *);
    int (*GetCount_v2)(unsigned *);
    int (*ByIndex)(unsigned, nvmlDevice_t *);
    int (*ByIndex_v2)(unsigned, nvmlDevice_t *);
    int (*ByPci)(const char *, nvmlDevice_t *);
    int (*ByPci_v2)(const char *, nvmlDevice_t *);
    int (*ByUuid)(const char *, nvmlDevice_t *);
    int (*PciInfo_v3)(nvmlDevice_t, nvmlPciInfo_t *);
    int (*Uuid)(nvmlDevice_t, char *, unsigned);
    int (*Name)(nvmlDevice_t, char *, unsigned);
    int (*Memory)(nvmlDevice_t, nvmlMemory_t *);
    int (*Memory_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
    int (*Procs)(nvmlDevice_t, unsigned *, nvmlProcessInfo_v1_t *);
    int (*Procs_v2)(nvmlDevice_t, unsigned *, nvmlProcessInfo_v2_t *);
    int (*Procs_v3)(nvmlDevice_t, unsigned *, nvmlProcessInfo_v2_t *);
} nvml;

int failures;
/* What the shim's device holds resident: 132 SMs x 2048 threads. */
static const size_t THREADS = 132 * 2048;

enum { CU_LIMIT_STACK_SIZE = 0, CU_LIMIT_PRINTF_FIFO_SIZE = 1, CU_LIMIT_MALLOC_HEAP_SIZE = 2 };

static size_t free_now(void) {
    size_t f = 0, t = 0;
    OK(cuMemGetInfo_v2(&f, &t));
    return f;
}

static void load_nvml(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(h != NULL);
    if (!h) exit(1);
    /* The same object as the driver: one accounting. */
    CHECK(h == dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD));
#define SYM(field, name) *(void **)&nvml.field = dlsym(h, name); CHECK(nvml.field != NULL)
    SYM(Init, "nvmlInit");
    SYM(Init_v2, "nvmlInit_v2");
    SYM(InitWithFlags, "nvmlInitWithFlags");
    SYM(Shutdown, "nvmlShutdown");
    SYM(ErrorString, "nvmlErrorString");
    SYM(GetCount, "nvmlDeviceGetCount");
    SYM(GetCount_v2, "nvmlDeviceGetCount_v2");
    SYM(ByIndex, "nvmlDeviceGetHandleByIndex");
    SYM(ByIndex_v2, "nvmlDeviceGetHandleByIndex_v2");
    SYM(ByPci, "nvmlDeviceGetHandleByPciBusId");
    SYM(ByPci_v2, "nvmlDeviceGetHandleByPciBusId_v2");
    SYM(ByUuid, "nvmlDeviceGetHandleByUUID");
    SYM(PciInfo_v3, "nvmlDeviceGetPciInfo_v3");
    SYM(Uuid, "nvmlDeviceGetUUID");
    SYM(Name, "nvmlDeviceGetName");
    SYM(Memory, "nvmlDeviceGetMemoryInfo");
    SYM(Memory_v2, "nvmlDeviceGetMemoryInfo_v2");
    SYM(Procs, "nvmlDeviceGetComputeRunningProcesses");
    SYM(Procs_v2, "nvmlDeviceGetComputeRunningProcesses_v2");
    SYM(Procs_v3, "nvmlDeviceGetComputeRunningProcesses_v3");
#undef SYM
    if (failures) exit(1);
}

static nvmlDevice_t nvml_device(unsigned index) {
    nvmlDevice_t d = NULL;
    OK(nvml.ByIndex_v2(index, &d));
    return d;
}

static nvmlMemory_t nvml_memory(unsigned index) {
    nvmlMemory_t m = {0, 0, 0};
    OK(nvml.Memory(nvml_device(index), &m));
    return m;
}

/* The pids and bytes NVML lists for a device (v3), at most 8. */
static unsigned nvml_procs(unsigned index, nvmlProcessInfo_v2_t *out) {
    unsigned n = 8;
    OK(nvml.Procs_v3(nvml_device(index), &n, out));
    return n;
}

/* Contexts take CUDA_SHIM_CONTEXT_MEMORY=512MiB on a 2 GiB device. */
static void scenario_context_memory(void) {
    CUcontext primary = NULL, a = NULL, b = NULL, c = NULL, d = NULL;
    CUdeviceptr p = 0;
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&primary, 0));
    OK(cuCtxSetCurrent(primary));
    CHECK(free_now() == 2 * GiB - 512 * MiB);
    OK(cuDevicePrimaryCtxRetain(&primary, 0)); /* a second reference takes nothing */
    CHECK(free_now() == 2 * GiB - 512 * MiB);
    OK(cuCtxCreate_v2(&a, 0, 0));
    CHECK(free_now() == GiB);
    OK(cuCtxCreate_v3(&b, NULL, 0, 0, 0));
    CHECK(free_now() == 512 * MiB);
    /* An allocation fits what the contexts leave, not more. */
    CHECK(cuMemAlloc_v2(&p, 512 * MiB + 1) == 2);
    OK(cuMemAlloc_v2(&p, 256 * MiB));
    /* A context that does not fit is not made, and leaves nothing behind. */
    CHECK(cuCtxCreate_v4(&c, NULL, 0, 0) == 2);
    CHECK(free_now() == 256 * MiB);
    OK(cuMemFree_v2(p));
    OK(cuCtxCreate_v4(&c, NULL, 0, 0));
    CHECK(free_now() == 0);
    CHECK(cuCtxCreate_v2(&d, 0, 0) == 2);
    OK(cuCtxDestroy_v2(c));
    OK(cuCtxDestroy_v2(b));
    OK(cuCtxDestroy_v2(a)); /* each popped itself: the primary context is current again */
    CHECK(free_now() == 2 * GiB - 512 * MiB);
    /* The primary context's memory goes with its last release... */
    OK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK(free_now() == 2 * GiB - 512 * MiB);
    OK(cuDevicePrimaryCtxRelease_v2(0));
    OK(cuCtxCreate_v2(&a, 0, 0));
    CHECK(free_now() == 2 * GiB - 512 * MiB); /* a's alone */
    OK(cuCtxDestroy_v2(a));
    /* ...or a reset, and comes back with the next retain. */
    OK(cuDevicePrimaryCtxRetain(&primary, 0));
    OK(cuCtxSetCurrent(primary));
    CHECK(free_now() == 2 * GiB - 512 * MiB);
    OK(cuDevicePrimaryCtxReset_v2(0));
    OK(cuCtxCreate_v2(&a, 0, 0));
    CHECK(free_now() == 2 * GiB - 512 * MiB);
    OK(cuCtxDestroy_v2(a));
    OK(cuDevicePrimaryCtxRetain(&primary, 0));
    OK(cuCtxSetCurrent(primary));
    CHECK(free_now() == 2 * GiB - 512 * MiB);
}

/* CUDA_SHIM_CONTEXT_MEMORY=512MiB on a 2 GiB device: cuCtxSetLimit's growth. */
static void scenario_limits(void) {
    CUcontext primary = NULL, a = NULL;
    size_t value = 0;
    const size_t base = 2 * GiB - 512 * MiB;
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&primary, 0));
    OK(cuCtxSetCurrent(primary));
    OK(cuCtxGetLimit(&value, CU_LIMIT_MALLOC_HEAP_SIZE));
    CHECK(value == 8 * MiB);
    OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 264 * MiB));
    CHECK(free_now() == base - 256 * MiB);
    OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 72 * MiB));
    CHECK(free_now() == base - 64 * MiB);
    OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 1 * MiB)); /* below the default: nothing */
    CHECK(free_now() == base);
    OK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 33 * MiB));
    CHECK(free_now() == base - 32 * MiB);
    /* The stack: per resident thread. */
    OK(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE));
    CHECK(value == 1024);
    OK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 2048));
    CHECK(free_now() == base - 32 * MiB - 1024 * THREADS);
    /* Too much: out of memory, the limit and the memory unchanged. */
    CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 8192) == 2);
    OK(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE));
    CHECK(value == 2048);
    CHECK(free_now() == base - 32 * MiB - 1024 * THREADS);
    /* Limits that take no memory. */
    OK(cuCtxSetLimit(4, 100000));
    CHECK(free_now() == base - 32 * MiB - 1024 * THREADS);
    /* A created context's limits are its own, and go with it. */
    OK(cuCtxCreate_v2(&a, 0, 0));
    OK(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE));
    CHECK(value == 1024);
    OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 108 * MiB));
    CHECK(free_now() == base - 32 * MiB - 1024 * THREADS - 512 * MiB - 100 * MiB);
    OK(cuCtxDestroy_v2(a));
    CHECK(free_now() == base - 32 * MiB - 1024 * THREADS);
    /* A reset gives back the primary context's growth and forgets its limits. */
    OK(cuDevicePrimaryCtxReset_v2(0));
    OK(cuDevicePrimaryCtxRetain(&primary, 0));
    OK(cuCtxSetCurrent(primary));
    CHECK(free_now() == base);
    OK(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE));
    CHECK(value == 1024);
    /* Released for the last time, the primary context has no limits to set. */
    OK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 100 * MiB) == 201);
    OK(cuDevicePrimaryCtxRetain(&primary, 0));
    CHECK(free_now() == base);
}

/* Two devices (1 GiB, 2 GiB), CUDA_SHIM_CONTEXT_MEMORY=64MiB, another process (pid 4242)
 * holding 100 MiB on device 1, and CUDA_VISIBLE_DEVICES=1: the driver sees one device,
 * NVML both. */
static void scenario_nvml(void) {
    unsigned n = 0;
    nvmlDevice_t d0 = NULL, d1 = NULL, found = NULL;
    char text[96], bus[32];
    load_nvml();
    CHECK(nvml.GetCount_v2(&n) == 1); /* NVML_ERROR_UNINITIALIZED */
    CHECK(nvml.Shutdown() == 1);
    CHECK(strcmp(nvml.ErrorString(7), "Insufficient Size") == 0);
    CHECK(strcmp(nvml.ErrorString(1), "Uninitialized") == 0);

    /* Before cuInit: NVML makes the devices; the other process shows already. */
    OK(nvml.Init_v2());
    OK(nvml.GetCount_v2(&n));
    CHECK(n == 2);
    OK(nvml.GetCount(&n));
    CHECK(n == 2);
    CHECK(nvml.ByIndex_v2(2, &d0) == 2);
    OK(nvml.ByIndex(0, &d0));
    OK(nvml.ByIndex_v2(1, &d1));
    CHECK(d0 != d1 && d0 != NULL);
    nvmlMemory_t m = nvml_memory(1);
    CHECK(m.total == 2 * GiB && m.used == 100 * MiB && m.free == 2 * GiB - 100 * MiB);
    m = nvml_memory(0);
    CHECK(m.total == GiB && m.used == 0 && m.free == GiB);
    nvmlProcessInfo_v2_t procs[8];
    CHECK(nvml_procs(1, procs) == 1 && procs[0].pid == 4242 && procs[0].usedGpuMemory == 100 * MiB);
    CHECK(nvml_procs(0, procs) == 0);

    /* The driver sees physical device 1 as ordinal 0, with the same identity. */
    OK(cuInit(0));
    int count = 0;
    OK(cuDeviceGetCount(&count));
    CHECK(count == 1);
    size_t total = 0;
    OK(cuDeviceTotalMem_v2(&total, 0));
    CHECK(total == 2 * GiB);
    OK(nvml.Uuid(d1, text, sizeof text));
    CHECK(strcmp(text, "GPU-63757175-6f74-412d-b368-696d00000001") == 0);
    CUuuid u;
    OK(cuDeviceGetUuid(&u, 0));
    char from_cuda[64];
    snprintf(from_cuda, sizeof from_cuda,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u.bytes[0], u.bytes[1], u.bytes[2], u.bytes[3], u.bytes[4], u.bytes[5], u.bytes[6],
             u.bytes[7], u.bytes[8], u.bytes[9], u.bytes[10], u.bytes[11], u.bytes[12],
             u.bytes[13], u.bytes[14], u.bytes[15]);
    CHECK(strcmp(from_cuda, text) == 0);
    OK(nvml.ByUuid(text, &found));
    CHECK(found == d1);
    CHECK(nvml.ByUuid("GPU-63757175", &found) == 6);
    CHECK(nvml.Uuid(d1, text, 40) == 7); /* 40 characters and the NUL need 41 */
    OK(nvml.Uuid(d1, text, 41));
    nvmlPciInfo_t pci;
    memset(&pci, 0xff, sizeof pci);
    OK(nvml.PciInfo_v3(d1, &pci));
    CHECK(sizeof pci == 68);
    CHECK(pci.domain == 0 && pci.bus == 1 && pci.device == 0);
    CHECK(strcmp(pci.busIdLegacy, "0000:01:00.0") == 0);
    CHECK(strcmp(pci.busId, "00000000:01:00.0") == 0);
    OK(cuDeviceGetPCIBusId(bus, sizeof bus, 0));
    CHECK(strcmp(bus, pci.busIdLegacy) == 0);
    int attr = -1;
    OK(cuDeviceGetAttribute(&attr, 33, 0)); /* PCI_BUS_ID */
    CHECK(attr == 1);
    CUdevice dev = -1;
    OK(cuDeviceGetByPCIBusId(&dev, "0000:01:00.0"));
    CHECK(dev == 0);
    CHECK(cuDeviceGetByPCIBusId(&dev, "0000:00:00.0") == 101); /* hidden from the driver */
    OK(nvml.ByPci_v2(pci.busId, &found));
    CHECK(found == d1);
    OK(nvml.ByPci("0:1:0", &found));
    CHECK(found == d1);
    OK(nvml.ByPci_v2("00:00.0", &found));
    CHECK(found == d0);
    CHECK(nvml.ByPci_v2("0000:07:00.0", &found) == 6);
    OK(nvml.Name(d1, text, sizeof text));
    char name[96];
    OK(cuDeviceGetName(name, sizeof name, 0));
    CHECK(strcmp(text, name) == 0 && strcmp(name, "cuquota stand-in GPU 1") == 0);
    CHECK(nvml.Name(d1, text, 5) == 7);

    /* This process appears once it has a context, with its footprint. */
    CHECK(nvml_procs(1, procs) == 1);
    CUcontext ctx = NULL;
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxSetCurrent(ctx));
    CHECK(nvml_procs(1, procs) == 2);
    CHECK(procs[0].pid == (unsigned)getpid() && procs[0].usedGpuMemory == 64 * MiB);
    CHECK(procs[0].gpuInstanceId == 0xffffffffu && procs[0].computeInstanceId == 0xffffffffu);
    CUdeviceptr p = 0;
    OK(cuMemAlloc_v2(&p, 10 * MiB));
    CHECK(nvml_procs(1, procs) == 2 && procs[0].usedGpuMemory == 74 * MiB);
    CHECK(procs[1].pid == 4242 && procs[1].usedGpuMemory == 100 * MiB);
    m = nvml_memory(1);
    CHECK(m.used == 174 * MiB && m.free == 2 * GiB - 174 * MiB);
    CHECK(free_now() == m.free);
    nvmlMemory_v2_t m2;
    memset(&m2, 0, sizeof m2);
    CHECK(nvml.Memory_v2(d1, &m2) == 25); /* no version: NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    m2.version = nvmlMemory_v2;
    OK(nvml.Memory_v2(d1, &m2));
    CHECK(m2.version == 0x02000028u && m2.total == 2 * GiB && m2.reserved == 0);
    CHECK(m2.used == 174 * MiB && m2.free == m.free);

    /* The size-query protocol, for each struct version. */
    n = 0;
    CHECK(nvml.Procs_v3(d1, &n, NULL) == 7 && n == 2);
    n = 1;
    CHECK(nvml.Procs_v2(d1, &n, procs) == 7 && n == 2);
    n = 0;
    OK(nvml.Procs_v3(d0, &n, NULL)); /* none on device 0 */
    CHECK(n == 0);
    nvmlProcessInfo_v1_t v1[3];
    memset(v1, 0, sizeof v1);
    n = 3;
    OK(nvml.Procs(d1, &n, v1));
    CHECK(sizeof v1[0] == 16 && n == 2);
    CHECK(v1[0].pid == (unsigned)getpid() && v1[0].usedGpuMemory == 74 * MiB);
    CHECK(v1[1].pid == 4242 && v1[1].usedGpuMemory == 100 * MiB && v1[2].pid == 0);
    n = 4;
    memset(procs, 0, sizeof procs);
    OK(nvml.Procs_v2(d1, &n, procs));
    CHECK(sizeof procs[0] == 24 && n == 2 && procs[1].pid == 4242);

    /* Other processes: in both APIs' free memory, listed by NVML. */
    OK(cuShimOtherProcess(1, 999, GiB));
    CHECK(free_now() == GiB - 174 * MiB);
    CHECK(nvml_memory(1).free == GiB - 174 * MiB);
    CHECK(nvml_procs(1, procs) == 3 && procs[2].pid == 999 && procs[2].usedGpuMemory == GiB);
    CHECK(cuMemAlloc_v2(&p, GiB) == 2);
    CHECK(cuShimOtherProcess(1, 1000, GiB) == 2); /* does not fit */
    OK(cuShimOtherProcess(1, 999, 0));
    CHECK(nvml_procs(1, procs) == 2);
    CHECK(free_now() == 2 * GiB - 174 * MiB);
    OK(cuShimOtherProcess(0, 5, 300 * MiB)); /* a device the driver does not see */
    m = nvml_memory(0);
    CHECK(m.used == 300 * MiB && m.free == GiB - 300 * MiB);
    CHECK(cuShimOtherProcess(2, 5, 1) == 101);

    /* Bad handles and null outputs. */
    CHECK(nvml.Memory((nvmlDevice_t)0x1234, &m) == 2);
    CHECK(nvml.Memory(d1, NULL) == 2);
    CHECK(nvml.Procs_v3(d1, NULL, procs) == 2);

    /* Initialisations are counted. */
    OK(nvml.InitWithFlags(0));
    OK(nvml.Shutdown());
    OK(nvml.GetCount_v2(&n));
    OK(nvml.Shutdown());
    CHECK(nvml.GetCount_v2(&n) == 1);
    CHECK(nvml.Memory(d1, &m) == 1);
    OK(nvml.Shutdown()); /* more often than nvmlInit: no error */
    OK(nvml.Init());
    OK(nvml.GetCount_v2(&n));
}

/* CUDA_SHIM_DEVICES=3, CUDA_SHIM_MEMORY=1GiB,2GiB,3GiB; CUDA_VISIBLE_DEVICES per test. */
static void scenario_visible(const char *want) {
    /* want: the totals in GiB the driver should see, in ordinal order ("" for none). */
    int count = -1;
    CUresult rc = cuInit(0);
    if (!*want) {
        CHECK(rc == 100); /* CUDA_ERROR_NO_DEVICE */
        CHECK(cuDeviceGetCount(&count) == 3);
        return;
    }
    OK(rc);
    OK(cuDeviceGetCount(&count));
    CHECK(count == (int)strlen(want));
    for (int i = 0; i < count; i++) {
        size_t total = 0;
        CUuuid u;
        OK(cuDeviceTotalMem_v2(&total, i));
        CHECK(total == (size_t)(want[i] - '0') * GiB);
        OK(cuDeviceGetUuid(&u, i));
        CHECK(u.bytes[15] == want[i] - '1'); /* the physical index */
    }
}

/* A bad CUDA_SHIM_* setting: NVML cannot start either (as without a driver). */
static void scenario_bad_config(void) {
    unsigned n = 0;
    load_nvml();
    CHECK(nvml.Init_v2() == 999); /* NVML_ERROR_UNKNOWN */
    CHECK(nvml.GetCount_v2(&n) == 1);
    CHECK(cuInit(0) == 1);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: context_nvml SCENARIO [ARG]\n");
        return 2;
    }
    const char *s = argv[1];
    if (!strcmp(s, "context_memory")) scenario_context_memory();
    else if (!strcmp(s, "limits")) scenario_limits();
    else if (!strcmp(s, "nvml")) scenario_nvml();
    else if (!strcmp(s, "visible") && argc == 3) scenario_visible(argv[2]);
    else if (!strcmp(s, "bad_config")) scenario_bad_config();
    else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    return 0;
}
