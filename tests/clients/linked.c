/* A client linked with -lcuda that takes the addresses of the exported driver functions
 * directly, as a program built against the driver's import library does. Under LD_PRELOAD
 * the interposer's exported symbols win the lookup. */
#define _GNU_SOURCE
#define CUDA_MIN_EXTERN
#include "ops.h"

#include <dlfcn.h>

static void *sym(void *handle, const char *name) {
    return dlsym(handle, name);
}

int main(int argc, char **argv) {
    struct drv d = {
        /* Every function of driver_functions.h by its exported symbol (the legacy ones weak). */
#define DRV(name, base, version, params) .name = name,
#define DRV_LEGACY DRV
        DRIVER_FUNCTIONS
#undef DRV
#undef DRV_LEGACY
        .sym = sym,
    };
    return run_ops(&d, argc - 1, argv + 1);
}
