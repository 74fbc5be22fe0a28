/* A minimal LD_PRELOAD interposer: hooks cuMemAlloc_v2, counts the calls, forwards them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

int hook_calls;

int cuMemAlloc_v2(unsigned long long *dptr, size_t bytes) {
    int (*real)(unsigned long long *, size_t) =
        (int (*)(unsigned long long *, size_t))dlsym(RTLD_NEXT, "cuMemAlloc_v2");
    hook_calls++;
    return real ? real(dptr, bytes) : 999;
}
