/* What CUDA arrays take on the device, measured two ways for a few large shapes: the drop
 * in the driver's free memory (cuMemGetInfo_v2) across the array's creation, and the memory
 * requirements of a deferred-mapping array of the same shape (what cuquota charges for it).
 * The gpu-check "arrays" check runs it on a real GPU to see that the two agree; the
 * integration tests run it on the shim. Reaches the driver through dlopen/dlsym.
 *
 * Prints one line per shape, then "done":
 *   shape NAME rc=R drop=BYTES twin=BYTES twin_rc=R destroy_rc=R
 * Under the interposer cuMemGetInfo is virtualised: run it without LD_PRELOAD (or with no
 * quota) for the driver's own figures. Exit status 0 if every call succeeded. */
#define _GNU_SOURCE
#include "cuda_min.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define DEFERRED_MAPPING 0x80 /* CUDA_ARRAY3D_DEFERRED_MAPPING */
#define LAYERED 0x01
#define CUBEMAP 0x04
#define U8 0x01
#define FLOAT 0x20

typedef CUresult (*fn_cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes);

struct shape {
    const char *name;
    size_t w, h, d;
    int format;
    unsigned int channels, flags, levels; /* levels 0: a plain array */
};

/* Odd widths, so that rows need padding. */
static const struct shape SHAPES[] = {
    {"2d-rgba8", 8191, 4097, 0, U8, 4, 0, 0},
    {"3d-u8", 1000, 1000, 100, U8, 1, 0, 0},
    {"layered-float", 2047, 2047, 16, FLOAT, 1, LAYERED, 0},
    {"cubemap-rgba8", 4096, 4096, 6, U8, 4, CUBEMAP, 0},
    {"mipmap-rgba8", 8191, 8191, 0, U8, 4, 0, 13},
};

static void *must(void *h, const char *name) {
    void *f = dlsym(h, name);
    if (!f) {
        fprintf(stderr, "array_sizes: the driver has no %s\n", name);
        exit(4);
    }
    return f;
}

int main(void) {
    fn_cuInit init;
    fn_cuDeviceGet device_get;
    fn_cuDevicePrimaryCtxRetain retain;
    fn_cuCtxSetCurrent set_current;
    fn_cuMemGetInfo info;
    fn_cuArray3DCreate_v2 create;
    fn_cuArrayDestroy destroy;
    fn_cuMipmappedArrayCreate mip_create;
    fn_cuMipmappedArrayDestroy mip_destroy;
    fn_cuArrayGetMemoryRequirements req;
    fn_cuMipmappedArrayGetMemoryRequirements mip_req;
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    size_t i;
    int failed = 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "array_sizes: dlopen libcuda.so.1: %s\n", dlerror());
        return 4;
    }
    *(void **)&init = must(h, "cuInit");
    *(void **)&device_get = must(h, "cuDeviceGet");
    *(void **)&retain = must(h, "cuDevicePrimaryCtxRetain");
    *(void **)&set_current = must(h, "cuCtxSetCurrent");
    *(void **)&info = must(h, "cuMemGetInfo_v2");
    *(void **)&create = must(h, "cuArray3DCreate_v2");
    *(void **)&destroy = must(h, "cuArrayDestroy");
    *(void **)&mip_create = must(h, "cuMipmappedArrayCreate");
    *(void **)&mip_destroy = must(h, "cuMipmappedArrayDestroy");
    *(void **)&req = must(h, "cuArrayGetMemoryRequirements");
    *(void **)&mip_req = must(h, "cuMipmappedArrayGetMemoryRequirements");
    if (init(0) || device_get(&dev, 0) || retain(&ctx, dev) || set_current(ctx)) {
        fprintf(stderr, "array_sizes: no context on device 0\n");
        return 4;
    }
    for (i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const struct shape *s = &SHAPES[i];
        CUDA_ARRAY3D_DESCRIPTOR desc = {s->w, s->h, s->d, s->format, s->channels, s->flags};
        CUDA_ARRAY_MEMORY_REQUIREMENTS twin = {0, 0, {0}};
        size_t before = 0, after = 0, total = 0;
        CUresult rc, twin_rc, destroy_rc = 0;
        void *a = NULL;

        /* The real array, and what the driver's free memory says it took. */
        info(&before, &total);
        rc = s->levels ? mip_create((CUmipmappedArray *)&a, &desc, s->levels)
                       : create((CUarray *)&a, &desc);
        info(&after, &total);
        if (!rc)
            destroy_rc = s->levels ? mip_destroy((CUmipmappedArray)a) : destroy((CUarray)a);

        /* The deferred-mapping array of the same shape, and its requirements. */
        desc.Flags |= DEFERRED_MAPPING;
        a = NULL;
        twin_rc = s->levels ? mip_create((CUmipmappedArray *)&a, &desc, s->levels)
                            : create((CUarray *)&a, &desc);
        if (!twin_rc) {
            twin_rc = s->levels ? mip_req(&twin, (CUmipmappedArray)a, dev)
                                : req(&twin, (CUarray)a, dev);
            if (s->levels)
                mip_destroy((CUmipmappedArray)a);
            else
                destroy((CUarray)a);
        }
        printf("shape %s rc=%d drop=%lld twin=%zu twin_rc=%d destroy_rc=%d\n", s->name, rc,
               (long long)before - (long long)after, twin.size, twin_rc, destroy_rc);
        failed |= rc || twin_rc || destroy_rc;
    }
    printf("done\n");
    return failed ? 1 : 0;
}
