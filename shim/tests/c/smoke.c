/* Exercises the shim (the stand-in libcuda.so.1) through its C ABI. Usage: smoke SCENARIO.
 * Declares the few driver API types it needs itself (smoke.h, no NVIDIA headers). Exits 0
 * when every check passes; otherwise prints the failing check and exits 1. */
#define _GNU_SOURCE
#include "smoke.h"

#include <dlfcn.h>
#include <string.h>

int failures;

size_t in_use(int dev) {
    size_t bytes = 0;
    CHECK(cuShimStats(dev, &bytes, NULL, NULL) == 0);
    return bytes;
}

unsigned long long live(int dev) {
    unsigned long long n = 0;
    CHECK(cuShimStats(dev, NULL, NULL, &n) == 0);
    return n;
}

void use_primary(int dev) {
    CUcontext ctx = NULL;
    OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(ctx != NULL);
    OK(cuCtxSetCurrent(ctx));
}

void *libcuda(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL);
    return lib;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: smoke SCENARIO\n");
        return 2;
    }
    const char *s = argv[1];
    if (!strcmp(s, "basic")) scenario_basic();
    else if (!strcmp(s, "proc_address")) scenario_proc_address();
    else if (!strcmp(s, "faults_env")) scenario_faults_env();
    else if (!strcmp(s, "faults_api")) scenario_faults_api();
    else if (!strcmp(s, "vmm")) scenario_vmm();
    else if (!strcmp(s, "pools")) scenario_pools();
    else if (!strcmp(s, "threads")) scenario_threads();
    else if (!strcmp(s, "bad_config")) scenario_bad_config();
    else if (!strcmp(s, "multi")) scenario_multi();
    else if (!strcmp(s, "interpose")) scenario_interpose();
    else if (!strcmp(s, "pool_cache")) scenario_pool_cache();
    else if (!strcmp(s, "pool_chunk")) scenario_pool_chunk();
    else if (!strcmp(s, "graphs")) scenario_graphs();
    else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
