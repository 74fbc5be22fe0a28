/* The ops on device identity and NVML (their rows: ops_table.h). Driver functions through
 * the client's dlsym on the driver's handle; NVML through dlopen("libnvidia-ml.so.1") (the
 * shim answers as it too). INDEX is an NVML index.
 *   uuid:DEV / busid:DEV         cuDeviceGetUuid as "uuid=GPU-..." / cuDeviceGetPCIBusId
 *                                as "id=..." of device ordinal DEV
 *   otherproc:INDEX:PID:SIZE     cuShimOtherProcess (the shim's: another process's memory)
 *   nvmlinit / nvmlshutdown      nvmlInit_v2 / nvmlShutdown
 *   nvmlcount                    nvmlDeviceGetCount_v2: "nvmlcount rc=R n=N"
 *   nvmlinfo:INDEX               nvmlDeviceGetMemoryInfo: "... free=F used=U total=T"
 *   nvmlinfo2:INDEX              nvmlDeviceGetMemoryInfo_v2: "... free used total reserved"
 *   nvmlprocs:INDEX              nvmlDeviceGetComputeRunningProcesses_v3 (size query first):
 *                                "nvmlprocs INDEX rc=R n=N listed=0|1 mine=BYTES others=BYTES"
 *                                (mine: this pid's usedGpuMemory; others: the rest summed)
 *   nvmlwait:INDEX:SIZE          nvmlDeviceGetMemoryInfo every 10 ms until used is SIZE, for
 *                                30 s at most: "nvmlwait INDEX rc=R met=0|1 used=U"
 *   nvmluuid:INDEX / nvmlbus:INDEX  nvmlDeviceGetUUID "uuid=..." / nvmlDeviceGetPciInfo_v3
 *                                "id=BUSIDLEGACY long=BUSID" */
#define _GNU_SOURCE
#include "ops_internal.h"

#include <dlfcn.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *nvml_sym(const struct drv *d, const char *name) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    return h && d->sym ? d->sym(h, name) : NULL;
}

static int nvml_handle(const struct drv *d, const char *index, nvmlDevice_t *dev) {
    unsigned long long i;
    fn_nvmlDeviceGetHandleByIndex_v2 get;
    if (parse_num(index, &i))
        return -1;
    *(void **)&get = nvml_sym(d, "nvmlDeviceGetHandleByIndex_v2");
    return get ? get((unsigned int)i, dev) : CUDA_ERROR_NOT_FOUND;
}

int op_uuid(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    int rc;
    fn_cuDeviceGetUuid get;
    unsigned char u[16] = {0};
    NARGS(1);
    if (parse_num(f[1], &a))
        return -1;
    *(void **)&get = raw_sym(d, "cuDeviceGetUuid");
    rc = get ? get(u, (CUdevice)a) : CUDA_ERROR_NOT_FOUND;
    out("uuid %llu rc=%d uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
        "%02x%02x%02x%02x%02x%02x",
        a, rc, u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
        u[12], u[13], u[14], u[15]);
    return 0;
}

int op_busid(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    int rc;
    fn_cuDeviceGetPCIBusId get;
    char id[32] = "-";
    NARGS(1);
    if (parse_num(f[1], &a))
        return -1;
    *(void **)&get = raw_sym(d, "cuDeviceGetPCIBusId");
    rc = get ? get(id, sizeof id, (CUdevice)a) : CUDA_ERROR_NOT_FOUND;
    out("busid %llu rc=%d id=%s", a, rc, id);
    return 0;
}

int op_otherproc(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0, b = 0, c = 0;
    int rc;
    fn_cuShimOtherProcess set;
    NARGS(3);
    if (parse_num(f[1], &a) || parse_num(f[2], &b) || parse_size(f[3], &c))
        return -1;
    *(void **)&set = raw_sym(d, "cuShimOtherProcess");
    rc = set ? set((int)a, (unsigned int)b, c) : CUDA_ERROR_NOT_FOUND;
    out("otherproc %llu rc=%d", a, rc);
    return 0;
}

int op_nvmlinit(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    int rc;
    fn_nvmlInit_v2 call;
    NARGS(0);
    *(void **)&call = nvml_sym(d, !strcmp(op, "nvmlinit") ? "nvmlInit_v2" : "nvmlShutdown");
    rc = call ? call() : CUDA_ERROR_NOT_FOUND;
    out("%s rc=%d", op, rc);
    return 0;
}

int op_nvmlcount(const struct drv *d, char **f, int nf) {
    int rc;
    fn_nvmlDeviceGetCount_v2 count;
    unsigned int n = 0;
    NARGS(0);
    *(void **)&count = nvml_sym(d, "nvmlDeviceGetCount_v2");
    rc = count ? count(&n) : CUDA_ERROR_NOT_FOUND;
    out("nvmlcount rc=%d n=%u", rc, n);
    return 0;
}

int op_nvmlinfo(const struct drv *d, char **f, int nf) {
    nvmlDevice_t nd = NULL;
    int rc;
    fn_nvmlDeviceGetMemoryInfo get;
    nvmlMemory_t m = {0, 0, 0};
    NARGS(1);
    rc = nvml_handle(d, f[1], &nd);
    if (rc < 0)
        return -1;
    *(void **)&get = nvml_sym(d, "nvmlDeviceGetMemoryInfo");
    if (!rc)
        rc = get ? get(nd, &m) : CUDA_ERROR_NOT_FOUND;
    out("nvmlinfo %s rc=%d free=%llu used=%llu total=%llu", f[1], rc, m.free, m.used,
        m.total);
    return 0;
}

int op_nvmlinfo2(const struct drv *d, char **f, int nf) {
    nvmlDevice_t nd = NULL;
    int rc;
    fn_nvmlDeviceGetMemoryInfo_v2 get;
    nvmlMemory_v2_t m;
    NARGS(1);
    memset(&m, 0, sizeof m);
    m.version = NVML_MEMORY_V2;
    rc = nvml_handle(d, f[1], &nd);
    if (rc < 0)
        return -1;
    *(void **)&get = nvml_sym(d, "nvmlDeviceGetMemoryInfo_v2");
    if (!rc)
        rc = get ? get(nd, &m) : CUDA_ERROR_NOT_FOUND;
    out("nvmlinfo2 %s rc=%d free=%llu used=%llu total=%llu reserved=%llu", f[1], rc, m.free,
        m.used, m.total, m.reserved);
    return 0;
}

int op_nvmlprocs(const struct drv *d, char **f, int nf) {
    nvmlDevice_t nd = NULL;
    int rc;
    fn_nvmlDeviceGetComputeRunningProcesses_v3 get;
    nvmlProcessInfo_t infos[64];
    unsigned int n = 0, i;
    unsigned long long mine = 0, others = 0;
    int listed = 0;
    NARGS(1);
    rc = nvml_handle(d, f[1], &nd);
    if (rc < 0)
        return -1;
    *(void **)&get = nvml_sym(d, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!rc && !get)
        rc = CUDA_ERROR_NOT_FOUND;
    if (!rc) {
        rc = get(nd, &n, NULL); /* the size query: 7 (insufficient size) if any */
        if (rc == 7 && n <= 64)
            rc = get(nd, &n, infos);
    }
    for (i = 0; !rc && i < n; i++) {
        if (infos[i].pid == (unsigned int)getpid()) {
            listed = 1;
            mine = infos[i].usedGpuMemory;
        } else {
            others += infos[i].usedGpuMemory;
        }
    }
    out("nvmlprocs %s rc=%d n=%u listed=%d mine=%llu others=%llu", f[1], rc, n, listed, mine,
        others);
    return 0;
}

int op_nvmluuid(const struct drv *d, char **f, int nf) {
    nvmlDevice_t nd = NULL;
    int rc;
    fn_nvmlDeviceGetUUID get;
    char uuid[96] = "-";
    NARGS(1);
    rc = nvml_handle(d, f[1], &nd);
    if (rc < 0)
        return -1;
    *(void **)&get = nvml_sym(d, "nvmlDeviceGetUUID");
    if (!rc)
        rc = get ? get(nd, uuid, sizeof uuid) : CUDA_ERROR_NOT_FOUND;
    out("nvmluuid %s rc=%d uuid=%s", f[1], rc, uuid);
    return 0;
}

int op_nvmlbus(const struct drv *d, char **f, int nf) {
    nvmlDevice_t nd = NULL;
    int rc;
    fn_nvmlDeviceGetPciInfo_v3 get;
    nvmlPciInfo_t pci;
    NARGS(1);
    memset(&pci, 0, sizeof pci);
    rc = nvml_handle(d, f[1], &nd);
    if (rc < 0)
        return -1;
    *(void **)&get = nvml_sym(d, "nvmlDeviceGetPciInfo_v3");
    if (!rc)
        rc = get ? get(nd, &pci) : CUDA_ERROR_NOT_FOUND;
    out("nvmlbus %s rc=%d id=%s long=%s", f[1], rc, pci.busIdLegacy, pci.busId);
    return 0;
}

int op_nvmlwait(const struct drv *d, char **f, int nf) {
    nvmlDevice_t nd = NULL;
    unsigned long long want = 0;
    int rc, i, met = 0;
    fn_nvmlDeviceGetMemoryInfo get;
    nvmlMemory_t m = {0, 0, 0};
    struct timespec pause = {0, 10000000L};
    NARGS(2);
    if (parse_size(f[2], &want))
        return -1;
    rc = nvml_handle(d, f[1], &nd);
    if (rc < 0)
        return -1;
    *(void **)&get = nvml_sym(d, "nvmlDeviceGetMemoryInfo");
    for (i = 0; !rc && !met && i < 3000; i++) {
        rc = get ? get(nd, &m) : CUDA_ERROR_NOT_FOUND;
        met = !rc && m.used == want;
        if (!rc && !met)
            nanosleep(&pause, NULL);
    }
    out("nvmlwait %s rc=%d met=%d used=%llu", f[1], rc, met, m.used);
    return 0;
}
