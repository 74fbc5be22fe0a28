/* Loads deep_plugin.so (argv[1]) with RTLD_NOW | RTLD_DEEPBIND ("deep"), or into a new
 * namespace with dlmopen ("dlmopen"), then allocates each size in argv[4..] through the
 * plugin by the path argv[3] ("linked", "dlsym", "proc"), printing `alloc rc=N` per size.
 * The host itself never touches the driver. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fn_init)(void);
typedef int (*fn_alloc)(const char *, size_t);

int main(int argc, char **argv) {
    void *h;
    if (argc < 4)
        return 4;
    if (!strcmp(argv[2], "dlmopen"))
        h = dlmopen(LM_ID_NEWLM, argv[1], RTLD_NOW);
    else
        h = dlopen(argv[1], RTLD_NOW | RTLD_DEEPBIND);
    if (!h) {
        fprintf(stderr, "deep_host: %s\n", dlerror());
        return 5;
    }
    fn_init init = (fn_init)dlsym(h, "plugin_init");
    fn_alloc alloc = (fn_alloc)dlsym(h, "plugin_alloc");
    if (!init || !alloc || init())
        return 6;
    for (int i = 4; i < argc; i++)
        printf("alloc rc=%d\n", alloc(argv[3], strtoull(argv[i], NULL, 0)));
    return 0;
}
