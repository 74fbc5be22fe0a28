/* A second dlsym interposer, as layered tools write them: it finds "the real dlsym" with
 * dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5") and reports each lookup of a driver name on a
 * real handle to stderr ("dlsym_layer: NAME"), so a test sees that it was not skipped.
 * Built as a shared object for LD_PRELOAD, before or after libcuquota.so. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void *(*fn_dlsym)(void *, const char *);

void *dlsym(void *handle, const char *name) {
    static fn_dlsym real;
    if (!real)
        real = (fn_dlsym)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (!real)
        return NULL;
    if (handle != RTLD_DEFAULT && handle != RTLD_NEXT && !strncmp(name, "cuMemAlloc", 10))
        fprintf(stderr, "dlsym_layer: %s\n", name);
    return real(handle, name);
}
