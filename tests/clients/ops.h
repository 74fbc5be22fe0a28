/* The op interpreter shared by the test clients. Each client fills `struct drv` from the
 * list in driver_functions.h its own way (linked symbols, dlsym, cuGetProcAddress) and
 * hands its argv to run_ops. */
#ifndef CUQUOTA_OPS_H
#define CUQUOTA_OPS_H

#include "cuda_min.h"

struct drv {
    /* One field per function of driver_functions.h, of type fn_NAME (fn_NAME_v1 for the
     * legacy ones). A field may be NULL (the driver lacks a legacy entry point, or a lookup
     * failed): its ops then print rc=500. */
#define DRV(name, base, version, params) fn_##name name;
#define DRV_LEGACY(name, base, version, params) fn_##name##_v1 name;
    DRIVER_FUNCTIONS
#undef DRV
#undef DRV_LEGACY
    /* The client's own symbol lookup (for the shim's cuShimStats), so that every
     * client binary references only the dlsym version it means to. */
    void *(*sym)(void *handle, const char *name);
    /* A newer driver's cuMemAlloc (the shim's cuMemAlloc_v3, with CUDA_SHIM_DRIVER_VERSION
     * 13060 or more) as this client's own path finds it when the op asks (the dlsym clients
     * by its name, the runtime client by cuGetProcAddress("cuMemAlloc", 13060)); NULL: none,
     * or the client has no such path (the linked one). */
    void *(*newer_alloc)(void);
};

/* Runs the ops in argv[0..argc) and prints one line per op on stdout. Returns the exit
 * status: 0 after running them all (whatever their rc), 2 on a malformed op. */
int run_ops(const struct drv *d, int argc, char **argv);

/* The concurrency soak (soak.c): THREADS threads for MS milliseconds (or ROUNDS rounds, if
 * not 0) against QUOTA bytes on device 0, from the caller's current context. Prints one
 * line; -1 when it cannot start. */
int soak_run(const struct drv *d, unsigned long threads, unsigned long ms, size_t quota,
             unsigned int seed, unsigned long rounds);

#endif
