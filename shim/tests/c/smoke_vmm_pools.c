/* The smoke scenarios of virtual memory management and stream-ordered pools. */
#define _GNU_SOURCE
#include "smoke.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

void scenario_vmm(void) {
    OK(cuInit(0));
    pthread_t t;
    pthread_create(&t, NULL, vmm_thread, NULL);
    pthread_join(t, NULL);
}

void scenario_pools(void) {
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
