/* Does pool memory outlive the context whose stream allocated it? cuda.h on cuCtxDestroy:
 * it "will not destroy memory allocations by cuMemCreate(), cuMemAllocAsync() and
 * cuMemAllocFromPoolAsync()". A created context takes 512 MiB with cuMemAllocAsync and is
 * destroyed; the primary context then frees the pointer (free_rc) and trims the pool. */
#include "ask.h"

int main(void) {
    ask_open();
    CUcontext primary = use_primary();
    FN(cuCtxCreate_v2);
    FN(cuCtxDestroy_v2);
    FN(cuCtxSetCurrent);
    FN(cuCtxSynchronize);
    FN(cuMemAllocAsync);
    FN(cuMemFreeAsync);
    FN(cuDeviceGetDefaultMemPool);
    FN(cuMemPoolTrimTo);
    CUcontext own = NULL;
    CUdeviceptr p = 0;
    CUmemoryPool pool = NULL;
    report("start");
    MUST(cuCtxCreate_v2(&own, 0, 0));
    MUST(cuMemAllocAsync(&p, 512 * MIB, NULL));
    MUST(cuCtxSynchronize());
    report("allocated");
    MUST(cuCtxDestroy_v2(own));
    MUST(cuCtxSetCurrent(primary));
    report("destroyed");
    printf("free_rc=%d\n", cuMemFreeAsync(p, NULL));
    MUST(cuCtxSynchronize());
    MUST(cuDeviceGetDefaultMemPool(&pool, 0));
    MUST(cuMemPoolTrimTo(pool, 0));
    report("freed");
    return 0;
}
