/* A client that loads the driver itself: dlopen("libcuda.so.1") and dlsym of each versioned
 * name. Built twice: normally (binding dlsym@GLIBC_2.34, the default since glibc 2.34) and
 * with -DOLD_DLSYM, which binds the original dlsym@GLIBC_2.2.5 (x86_64; GLIBC_2.17 on
 * aarch64), as binaries built against an older glibc do. */
#define _GNU_SOURCE
#include "ops.h"

#include <dlfcn.h>
#include <stdio.h>

#ifdef OLD_DLSYM
extern void *dlsym_compat(void *handle, const char *name);
#if defined(__x86_64__)
__asm__(".symver dlsym_compat, dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym_compat, dlsym@GLIBC_2.17");
#else
#error "OLD_DLSYM: unknown architecture"
#endif
#define LOOKUP dlsym_compat
#else
#define LOOKUP dlsym
#endif

static void *sym(void *handle, const char *name) {
    return LOOKUP(handle, name);
}

/* A newer driver's variant by its name, looked up when the op asks. */
static void *newer_alloc(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? LOOKUP(h, "cuMemAlloc_v3") : NULL;
}

int main(int argc, char **argv) {
    struct drv d = {0};
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlsym_client: dlopen libcuda.so.1: %s\n", dlerror());
        return 4;
    }
    /* Every function of driver_functions.h by its exported name. */
#define DRV(name, base, version, params) *(void **)&d.name = LOOKUP(h, #name);
#define DRV_LEGACY DRV
    DRIVER_FUNCTIONS
#undef DRV
#undef DRV_LEGACY
    d.sym = sym;
    d.newer_alloc = newer_alloc;
    return run_ops(&d, argc - 1, argv + 1);
}
