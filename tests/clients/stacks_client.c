/* Allocations of every kind that reaches the driver, each made in a function of its own name,
 * for the call-stack tests: the report must name these functions (and, built with -g, this
 * file and the line of the call). Built with and without frame pointers. Linked with -lcuda.
 * Prints "ok" when every call succeeded; otherwise the failing step and its CUresult. */
#define CUDA_MIN_EXTERN
#include "cuda_min.h"

#include <stdio.h>
#include <string.h>

#define MIB (1024ull * 1024ull)
#define NOINLINE __attribute__((noinline))

static int failed(const char *what, CUresult rc) {
    printf("%s failed: %d\n", what, rc);
    return 1;
}

/* Each keeps the compiler from merging it with its neighbours or turning the call into a
 * tail call (which would leave this frame off the stack). */
#define KEEP() __asm__ volatile("" ::: "memory")

NOINLINE static int load_weights(CUdeviceptr *out) {
    CUresult rc = cuMemAlloc_v2(out, 64 * MIB);
    KEEP();
    return rc ? failed("load_weights", rc) : 0;
}

NOINLINE static int make_scratch(CUdeviceptr *out) {
    size_t pitch = 0;
    CUresult rc = cuMemAllocPitch_v2(out, &pitch, 4096, 1024, 16);
    KEEP();
    return rc ? failed("make_scratch", rc) : 0;
}

NOINLINE static int share_table(CUdeviceptr *out) {
    CUresult rc = cuMemAllocManaged(out, 16 * MIB, CU_MEM_ATTACH_GLOBAL);
    KEEP();
    return rc ? failed("share_table", rc) : 0;
}

NOINLINE static int pool_request(CUdeviceptr *out) {
    CUresult rc = cuMemAllocAsync(out, 8 * MIB, (CUstream)0);
    KEEP();
    return rc ? failed("pool_request", rc) : 0;
}

NOINLINE static int map_chunk(CUmemGenericAllocationHandle *out) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUresult rc = cuMemCreate(out, 32 * MIB, &prop, 0);
    KEEP();
    return rc ? failed("map_chunk", rc) : 0;
}

NOINLINE static int make_texture(CUarray *out) {
    CUDA_ARRAY_DESCRIPTOR desc = {.Width = 1024, .Height = 1024, .Format = 0x20, .NumChannels = 4};
    CUresult rc = cuArrayCreate_v2(out, &desc);
    KEEP();
    return rc ? failed("make_texture", rc) : 0;
}

int main(void) {
    CUcontext ctx;
    CUresult rc = cuInit(0);
    if (rc)
        return failed("cuInit", rc);
    if ((rc = cuDevicePrimaryCtxRetain(&ctx, 0)) || (rc = cuCtxSetCurrent(ctx)))
        return failed("context", rc);
    CUdeviceptr weights, scratch, table, pooled;
    CUmemGenericAllocationHandle chunk;
    CUarray texture;
    if (load_weights(&weights) || make_scratch(&scratch) || share_table(&table) ||
        pool_request(&pooled) || map_chunk(&chunk) || make_texture(&texture))
        return 1;
    /* The scratch buffer is freed; the others stay live at exit. */
    if ((rc = cuMemFree_v2(scratch)))
        return failed("cuMemFree", rc);
    printf("ok\n");
    return 0;
}
