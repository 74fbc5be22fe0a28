/* The ops on devices, plain allocations and virtual memory (their rows: ops_table.h).
 * Each allocation is a pointer slot, each cuMemCreate a handle slot, each reservation a
 * reservation slot; later ops name them by number.
 *
 * newer:SIZE: a newer driver's cuMemAlloc (struct drv's newer_alloc), rc=500 if not found.
 *
 * VMM lifetimes and imports:
 *   createfd:SIZE           cuMemCreate on the current device, exportable as a POSIX fd
 *   mapat:R:OFF:H           cuMemMap of handle slot H (its whole size) at reservation R + OFF
 *   unmapat:R:OFF:SIZE      cuMemUnmap of SIZE bytes at reservation R + OFF
 *   access:R:OFF:SIZE       cuMemSetAccess read-write for the current device
 *   retain:R:OFF            cuMemRetainAllocationHandle of reservation R + OFF: a handle slot
 *   export:H                cuMemExportToShareableHandle (POSIX fd); the fd goes in $OPS_FD
 *                           (inherited by a forkexec child)
 *   import:SIZE             cuMemImportFromShareableHandle of $OPS_FD: a handle slot of SIZE
 *   closefd                 close($OPS_FD): the exported descriptor is released
 *   createtile:SIZE         cuMemCreate of a tile pool (for sparse / deferred-mapping arrays)
 *   arrmap:A:H / arrunmap:A cuMemMapArrayAsync of handle slot H into array slot A, whole /
 *                           out of it
 *   createat:SIZE:TYPE:ID   cuMemCreate at location TYPE (CUmemLocationType) ID; for
 *                           DEVICE_LOCALITY_DOMAIN (6), device ID's locality domain 0
 *   ipcopen / poolimport / extbuf   cuIpcOpenMemHandle(_v2) of a zero handle,
 *                           cuMemPoolImportPointer and cuExternalMemoryGetMappedBuffer with
 *                           null objects: a pointer slot if one comes back */
#define _GNU_SOURCE
#include "ops_internal.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILL_LIMIT 1000000UL

int op_init(const struct drv *d, char **f, int nf) {
    CUresult rc;
    NARGS(0);
    rc = CALL(d, cuInit, 0);
    if (!rc)
        rc = use_device(d, 0);
    out("init rc=%d", rc);
    return 0;
}

int op_dev(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    NARGS(1);
    if (parse_num(f[1], &a) || a >= MAX_DEVICES)
        return -1;
    rc = use_device(d, (int)a);
    out("dev %llu rc=%d", a, rc);
    return 0;
}

int op_noctx(const struct drv *d, char **f, int nf) {
    CUresult rc;
    NARGS(0);
    rc = CALL(d, cuCtxSetCurrent, NULL);
    out("noctx rc=%d", rc);
    return 0;
}

int op_getctx(const struct drv *d, char **f, int nf) {
    CUresult rc;
    CUcontext ctx = NULL;
    NARGS(0);
    rc = CALL(d, cuCtxGetCurrent, &ctx);
    out("getctx rc=%d ctx=%p", rc, (void *)ctx);
    return 0;
}

int op_count(const struct drv *d, char **f, int nf) {
    CUresult rc;
    int n = 0;
    NARGS(0);
    rc = CALL(d, cuDeviceGetCount, &n);
    out("count rc=%d n=%d", rc, n);
    return 0;
}

int op_alloc(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0;
    CUresult rc;
    CUdeviceptr dp = 0;
    NARGS(1);
    if (parse_size(f[1], &a))
        return -1;
    if (!strcmp(op, "alloc")) {
        rc = CALL(d, cuMemAlloc_v2, &dp, a);
    } else if (!strcmp(op, "managed")) {
        rc = CALL(d, cuMemAllocManaged, &dp, a, CU_MEM_ATTACH_GLOBAL);
    } else if (!strcmp(op, "async")) {
        rc = CALL(d, cuMemAllocAsync, &dp, a, NULL);
    } else if (!strcmp(op, "newer")) {
        /* A newer driver's variant, found the client's way (rc=500: not found). */
        fn_cuMemAlloc_v2 newer = NULL;
        if (d->newer_alloc)
            *(void **)&newer = d->newer_alloc();
        rc = newer ? newer(&dp, a) : CUDA_ERROR_NOT_FOUND;
    } else if (!strcmp(op, "pool")) {
        CUmemoryPool pool = NULL;
        rc = own_pool(d, &pool);
        if (!rc)
            rc = CALL(d, cuMemAllocFromPoolAsync, &dp, a, pool, NULL);
    } else {
        CUmemoryPool pool = NULL;
        CUdevice dev = 0;
        rc = CALL(d, cuDeviceGet, &dev, cur_dev);
        if (!rc)
            rc = CALL(d, cuDeviceGetDefaultMemPool, &pool, dev);
        if (!rc)
            rc = CALL(d, cuMemAllocFromPoolAsync, &dp, a, pool, NULL);
    }
    if (rc)
        dp = 0;
    print_alloc(op, a, rc, push(&ptrs, dp, a, rc == 0), dp);
    return 0;
}

int op_pitch(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0, b = 0, c = 0;
    CUresult rc;
    CUdeviceptr dp = 0;
    size_t pitch = 0;
    size_t slot;
    NARGS(3);
    if (parse_size(f[1], &a) || parse_size(f[2], &b) || parse_num(f[3], &c) ||
        c > UINT_MAX)
        return -1;
    rc = CALL(d, cuMemAllocPitch_v2, &dp, &pitch, a, b, (unsigned int)c);
    if (rc)
        dp = 0;
    slot = push(&ptrs, dp, rc ? 0 : pitch * b, rc == 0);
    out("pitch %llu %llu rc=%d slot=%zu pitch=%zu ptr=0x%llx", a, b, rc, slot, pitch, dp);
    return 0;
}

int op_lalloc(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0;
    CUresult rc;
    CUdeviceptr_v1 dp = 0;
    NARGS(1);
    if (parse_size(f[1], &a) || a > UINT_MAX)
        return -1;
    rc = CALL(d, cuMemAlloc, &dp, (unsigned int)a);
    if (rc)
        dp = 0;
    print_alloc(op, a, rc, push(&ptrs, dp, a, rc == 0), dp);
    return 0;
}

int op_free(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    struct slot *s;
    NARGS(1);
    s = get_slot(&ptrs, f[1]);
    if (!s)
        return -1;
    if (!strcmp(op, "free"))
        rc = CALL(d, cuMemFree_v2, s->value);
    else if (!strcmp(op, "freeasync"))
        rc = CALL(d, cuMemFreeAsync, s->value, NULL);
    else
        rc = CALL(d, cuMemFree, (CUdeviceptr_v1)s->value);
    if (!rc)
        s->live = 0;
    out("%s %s rc=%d", op, f[1], rc);
    return 0;
}

int op_freeptr(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    NARGS(1);
    if (parse_hex(f[1], &a))
        return -1;
    rc = CALL(d, cuMemFree_v2, a);
    out("freeptr 0x%llx rc=%d", a, rc);
    return 0;
}

int op_freeall(const struct drv *d, char **f, int nf) {
    CUresult rc;
    size_t i, n = 0;
    CUresult first = 0;
    NARGS(0);
    for (i = 0; i < ptrs.n; i++) {
        if (!ptrs.v[i].live)
            continue;
        n++;
        rc = CALL(d, cuMemFree_v2, ptrs.v[i].value);
        if (rc && !first)
            first = rc;
        if (!rc)
            ptrs.v[i].live = 0;
    }
    out("freeall n=%zu rc=%d", n, first);
    return 0;
}

int op_fill(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    unsigned long ok = 0;
    NARGS(1);
    if (parse_size(f[1], &a))
        return -1;
    for (rc = 0; ok < FILL_LIMIT;) {
        CUdeviceptr dp = 0;
        rc = CALL(d, cuMemAlloc_v2, &dp, a);
        if (rc)
            break;
        push(&ptrs, dp, a, 1);
        ok++;
    }
    out("fill %llu ok=%lu rc=%d", a, ok, rc);
    return 0;
}

int op_info(const struct drv *d, char **f, int nf) {
    CUresult rc;
    size_t fr = 0, to = 0;
    NARGS(0);
    rc = CALL(d, cuMemGetInfo_v2, &fr, &to);
    out("info rc=%d free=%zu total=%zu", rc, fr, to);
    return 0;
}

int op_linfo(const struct drv *d, char **f, int nf) {
    CUresult rc;
    unsigned int fr = 0, to = 0;
    NARGS(0);
    rc = CALL(d, cuMemGetInfo, &fr, &to);
    out("linfo rc=%d free=%u total=%u", rc, fr, to);
    return 0;
}

int op_total(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    CUdevice dev = 0;
    size_t bytes = 0;
    NARGS(1);
    if (parse_num(f[1], &a) || a >= MAX_DEVICES)
        return -1;
    rc = CALL(d, cuDeviceGet, &dev, (int)a);
    if (!rc)
        rc = CALL(d, cuDeviceTotalMem_v2, &bytes, dev);
    out("total %llu rc=%d bytes=%zu", a, rc, bytes);
    return 0;
}

int op_errname(const struct drv *d, char **f, int nf) {
    CUresult rc;
    long long code;
    const char *name = NULL;
    NARGS(1);
    if (parse_int(f[1], &code))
        return -1;
    rc = CALL(d, cuGetErrorName, (CUresult)code, &name);
    out("errname %lld rc=%d name=%s", code, rc, name ? name : "-");
    return 0;
}

int op_shimstats(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    size_t in_use = 0, peak = 0;
    unsigned long long live = 0;
    void *h;
    fn_cuShimStats stats = NULL;
    NARGS(1);
    if (parse_num(f[1], &a) || a >= MAX_DEVICES)
        return -1;
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h && d->sym)
        stats = (fn_cuShimStats)d->sym(h, "cuShimStats");
    rc = stats ? stats((int)a, &in_use, &peak, &live) : CUDA_ERROR_NOT_FOUND;
    out("shimstats %llu rc=%d in_use=%zu peak=%zu live=%llu", a, rc, in_use, peak, live);
    return 0;
}

int op_create(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0, b = 0;
    CUresult rc;
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h = 0;
    size_t slot;
    int host = !strcmp(op, "createhost");
    if (host)
        NARGS(1);
    else if (nf != 2 && nf != 3)
        return -1;
    if (parse_size(f[1], &a))
        return -1;
    if (nf == 3 && (parse_num(f[2], &b) || b >= MAX_DEVICES))
        return -1;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = host ? 0 : (int)b;
    rc = CALL(d, cuMemCreate, &h, a, &prop, 0);
    if (rc)
        h = 0;
    slot = push(&handles, h, a, rc == 0);
    out("%s %llu rc=%d slot=%zu handle=0x%llx", op, a, rc, slot, h);
    return 0;
}

int op_createat(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0, t = 0, id = 0;
    CUresult rc;
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h = 0;
    size_t slot;
    NARGS(3);
    if (parse_size(f[1], &a) || parse_num(f[2], &t) || parse_num(f[3], &id))
        return -1;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    set_location(&prop.location, (int)t, (int)id);
    rc = CALL(d, cuMemCreate, &h, a, &prop, 0);
    if (rc)
        h = 0;
    slot = push(&handles, h, a, rc == 0);
    out("createat %llu rc=%d slot=%zu handle=0x%llx", a, rc, slot, h);
    return 0;
}

int op_release(const struct drv *d, char **f, int nf) {
    CUresult rc;
    struct slot *s;
    NARGS(1);
    s = get_slot(&handles, f[1]);
    if (!s)
        return -1;
    rc = CALL(d, cuMemRelease, s->value);
    if (!rc)
        s->live = 0;
    out("release %s rc=%d", f[1], rc);
    return 0;
}

int op_reserve(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    CUdeviceptr dp = 0;
    size_t slot;
    NARGS(1);
    if (parse_size(f[1], &a))
        return -1;
    rc = CALL(d, cuMemAddressReserve, &dp, a, 0, 0, 0);
    if (rc)
        dp = 0;
    slot = push(&reservations, dp, a, rc == 0);
    out("reserve %llu rc=%d slot=%zu ptr=0x%llx", a, rc, slot, dp);
    return 0;
}

int op_map(const struct drv *d, char **f, int nf) {
    CUresult rc;
    struct slot *r, *h;
    NARGS(2);
    r = get_slot(&reservations, f[1]);
    h = get_slot(&handles, f[2]);
    if (!r || !h)
        return -1;
    rc = CALL(d, cuMemMap, r->value, h->size, 0, h->value, 0);
    if (!rc)
        r->mapped = h->size;
    out("map %s %s rc=%d", f[1], f[2], rc);
    return 0;
}

int op_unmap(const struct drv *d, char **f, int nf) {
    CUresult rc;
    struct slot *r;
    NARGS(1);
    r = get_slot(&reservations, f[1]);
    if (!r)
        return -1;
    rc = CALL(d, cuMemUnmap, r->value, r->mapped);
    if (!rc)
        r->mapped = 0;
    out("unmap %s rc=%d", f[1], rc);
    return 0;
}

int op_unreserve(const struct drv *d, char **f, int nf) {
    CUresult rc;
    struct slot *r;
    NARGS(1);
    r = get_slot(&reservations, f[1]);
    if (!r)
        return -1;
    rc = CALL(d, cuMemAddressFree, r->value, r->size);
    if (!rc)
        r->live = 0;
    out("unreserve %s rc=%d", f[1], rc);
    return 0;
}

int op_createfd(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle hd = 0;
    size_t slot;
    if (nf != 2 || parse_size(f[1], &a))
        return -1;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = cur_dev;
    rc = CALL(d, cuMemCreate, &hd, a, &prop, 0);
    if (rc)
        hd = 0;
    slot = push(&handles, hd, a, rc == 0);
    out("createfd %llu rc=%d slot=%zu handle=0x%llx", a, rc, slot, hd);
    return 0;
}

int op_mapat(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    struct slot *r, *h;
    CUresult rc;
    if (nf != 4 || parse_size(f[2], &a))
        return -1;
    r = get_slot(&reservations, f[1]);
    h = get_slot(&handles, f[3]);
    if (!r || !h)
        return -1;
    rc = CALL(d, cuMemMap, r->value + a, h->size, 0, h->value, 0);
    out("mapat %s %s %s rc=%d", f[1], f[2], f[3], rc);
    return 0;
}

int op_unmapat(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0, b = 0;
    struct slot *r;
    CUresult rc;
    if (nf != 4 || parse_size(f[2], &a) || parse_size(f[3], &b))
        return -1;
    r = get_slot(&reservations, f[1]);
    if (!r)
        return -1;
    if (!strcmp(op, "unmapat")) {
        rc = CALL(d, cuMemUnmap, r->value + a, b);
    } else {
        CUmemAccessDesc desc;
        desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        desc.location.id = cur_dev;
        desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        rc = CALL(d, cuMemSetAccess, r->value + a, b, &desc, 1);
    }
    out("%s %s %s %s rc=%d", op, f[1], f[2], f[3], rc);
    return 0;
}

int op_retain(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    struct slot *r;
    CUresult rc;
    CUmemGenericAllocationHandle hd = 0;
    size_t slot;
    if (nf != 3 || parse_size(f[2], &a))
        return -1;
    r = get_slot(&reservations, f[1]);
    if (!r)
        return -1;
    rc = CALL(d, cuMemRetainAllocationHandle, &hd, (void *)(uintptr_t)(r->value + a));
    if (rc)
        hd = 0;
    slot = push(&handles, hd, 0, rc == 0);
    out("retain %s %s rc=%d slot=%zu handle=0x%llx", f[1], f[2], rc, slot, hd);
    return 0;
}

int op_export(const struct drv *d, char **f, int nf) {
    struct slot *h;
    CUresult rc;
    int fd = -1;
    char num[32];
    if (nf != 2)
        return -1;
    h = get_slot(&handles, f[1]);
    if (!h)
        return -1;
    rc = CALL(d, cuMemExportToShareableHandle, &fd, h->value,
              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (!rc) {
        snprintf(num, sizeof num, "%d", fd);
        setenv("OPS_FD", num, 1);
    }
    out("export %s rc=%d fd=%d", f[1], rc, rc ? -1 : fd);
    return 0;
}

/* A tile pool for sparse and deferred-mapping arrays: cuMemCreate on the current device with
 * CU_MEM_CREATE_USAGE_TILE_POOL (allocFlags.usage, an unsigned short at byte 2). */
int op_createtile(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h = 0;
    size_t slot;
    NARGS(1);
    if (parse_size(f[1], &a))
        return -1;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = cur_dev;
    prop.allocFlags[2] = 1;
    rc = CALL(d, cuMemCreate, &h, a, &prop, 0);
    if (rc)
        h = 0;
    slot = push(&handles, h, a, rc == 0);
    out("createtile %llu rc=%d slot=%zu handle=0x%llx", a, rc, slot, h);
    return 0;
}

/* cuMemMapArrayAsync of handle slot H into (arrmap:A:H) or out of (arrunmap:A) array slot A,
 * whole (a deferred-mapping array's subresource is ignored), on the NULL stream. */
int op_arrmap(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    int map = !strcmp(op, "arrmap");
    struct slot *a, *h = NULL;
    CUarrayMapInfo info;
    CUresult rc;
    NARGS(map ? 2 : 1);
    a = get_slot(&arrays, f[1]);
    if (map)
        h = get_slot(&handles, f[2]);
    if (!a || (map && !h))
        return -1;
    memset(&info, 0, sizeof info);
    info.resource = (void *)(size_t)a->value;
    info.memOperationType = map ? 1 : 2;
    info.memHandle = map ? h->value : 0;
    info.deviceBitMask = 1u << cur_dev;
    rc = CALL(d, cuMemMapArrayAsync, &info, 1, NULL);
    out("%s %s rc=%d", op, f[1], rc);
    return 0;
}

int op_closefd(const struct drv *d, char **f, int nf) {
    const char *fd = getenv("OPS_FD");
    int rc;
    (void)d;
    (void)f;
    if (nf != 1 || !fd)
        return -1;
    rc = close(atoi(fd));
    unsetenv("OPS_FD");
    out("closefd %s rc=%d", fd, rc);
    return 0;
}

int op_import(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    CUmemGenericAllocationHandle hd = 0;
    const char *fd = getenv("OPS_FD");
    size_t slot;
    if (nf != 2 || parse_size(f[1], &a))
        return -1;
    if (!fd)
        fd = "-1";
    rc = CALL(d, cuMemImportFromShareableHandle, &hd, (void *)(intptr_t)atoi(fd),
              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (rc)
        hd = 0;
    slot = push(&handles, hd, a, rc == 0);
    out("import %llu rc=%d slot=%zu handle=0x%llx", a, rc, slot, hd);
    return 0;
}

int op_ipcopen(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    CUdeviceptr dp = 0;
    size_t slot;
    if (nf != 1)
        return -1;
    if (!strcmp(op, "ipcopen")) {
        CUipcMemHandle ipc;
        memset(&ipc, 0, sizeof ipc);
        rc = CALL(d, cuIpcOpenMemHandle_v2, &dp, ipc, 1);
    } else if (!strcmp(op, "poolimport")) {
        char data[64] = {0};
        rc = CALL(d, cuMemPoolImportPointer, &dp, dev_pool[cur_dev], data);
    } else {
        char desc[64] = {0};
        rc = CALL(d, cuExternalMemoryGetMappedBuffer, &dp, NULL, desc);
    }
    if (rc)
        dp = 0;
    slot = push(&ptrs, dp, 0, rc == 0);
    out("%s rc=%d slot=%zu ptr=0x%llx", op, rc, slot, dp);
    return 0;
}
