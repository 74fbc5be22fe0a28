/* Process start-up, with and without a preloaded library: spawns PROG N times each way,
 * alternating (so drift hits both the same), and prints the median ns of spawn + wait.
 *
 *   spawn_bench N PROG PRELOAD [NAME=VALUE ...]
 *
 * The "with" children get LD_PRELOAD=PRELOAD and the extra variables; the "without"
 * children get this process's environment minus LD_PRELOAD. */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t once(const char *prog, char **env) {
    char *argv[] = {(char *)prog, NULL};
    pid_t pid;
    int status;
    uint64_t t0 = now_ns();
    if (posix_spawn(&pid, prog, NULL, NULL, argv, env)) {
        perror("spawn_bench: posix_spawn");
        exit(3);
    }
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "spawn_bench: %s failed\n", prog);
        exit(3);
    }
    return now_ns() - t0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: spawn_bench N PROG PRELOAD [NAME=VALUE ...]\n");
        return 2;
    }
    long n = atol(argv[1]);
    size_t count = 0;
    while (environ[count]) count++;
    char **plain = calloc(count + 1, sizeof *plain);
    char **with = calloc(count + (size_t)argc + 1, sizeof *with);
    uint64_t *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    size_t np = 0, nw = 0;
    char *preload = malloc(strlen(argv[3]) + 16);
    sprintf(preload, "LD_PRELOAD=%s", argv[3]);
    for (size_t i = 0; i < count; i++) {
        if (!strncmp(environ[i], "LD_PRELOAD=", 11)) continue;
        plain[np++] = environ[i];
        with[nw++] = environ[i];
    }
    with[nw++] = preload;
    for (int i = 4; i < argc; i++) with[nw++] = argv[i];
    for (int i = 0; i < 5; i++) once(argv[2], plain), once(argv[2], with);
    for (long i = 0; i < n; i++) {
        a[i] = once(argv[2], plain);
        b[i] = once(argv[2], with);
    }
    qsort(a, (size_t)n, sizeof *a, cmp);
    qsort(b, (size_t)n, sizeof *b, cmp);
    printf("start_without_ns %llu\nstart_with_ns %llu\n", (unsigned long long)a[n / 2],
           (unsigned long long)b[n / 2]);
    return 0;
}
