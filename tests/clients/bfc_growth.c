/* The demo workload: an allocator in the style of TensorFlow's BFC allocator with
 * allow_growth. It reaches the driver through dlopen/dlsym, as TensorFlow does, grows its
 * pool in regions that double from 2 MiB, and when the driver says
 * CUDA_ERROR_OUT_OF_MEMORY it retries the region at 9/10 of the size until it fits or
 * drops below 2 MiB. It stops growing at the target total (argv[1], default 7 GiB) or
 * after a region had to back off, "trains" with a few 64 MiB scratch allocations, frees
 * everything and exits 0.
 *
 *   usage: bfc_growth [TARGET]      TARGET in bytes, or with a K/M/G suffix (binary)
 *
 * BFC_HOLD_MS=N keeps the pool N milliseconds after training before freeing it (default 0;
 * the demo holds it so that `cuquota top` shows the process holding its memory). */
#define _GNU_SOURCE
#include "cuda_min.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB (1ULL << 20)
#define GIB (1ULL << 30)
#define MIN_REGION (2 * MIB)
#define MAX_REGIONS 64
#define TRAINING_STEPS 5
#define SCRATCH (64 * MIB)

static fn_cuInit p_cuInit;
static fn_cuDeviceGet p_cuDeviceGet;
static fn_cuDevicePrimaryCtxRetain p_cuDevicePrimaryCtxRetain;
static fn_cuCtxSetCurrent p_cuCtxSetCurrent;
static fn_cuMemAlloc_v2 p_cuMemAlloc_v2;
static fn_cuMemFree_v2 p_cuMemFree_v2;

/* Human size: "N B" under 1 KiB, else the largest binary unit with two decimals. */
static const char *human(unsigned long long n, char *buf, size_t len) {
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
    int u = -1;
    unsigned long long div = 1;
    if (n < 1024) {
        snprintf(buf, len, "%llu B", n);
        return buf;
    }
    while (u < 3 && n >= div * 1024) {
        div *= 1024;
        u++;
    }
    snprintf(buf, len, "%.2f %s", (double)n / (double)div, units[u]);
    return buf;
}

static int parse_size(const char *s, unsigned long long *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10), mul = 1;
    if (end == s)
        return -1;
    if (*end == 'K') mul = 1ULL << 10;
    else if (*end == 'M') mul = MIB;
    else if (*end == 'G') mul = GIB;
    else if (*end) return -1;
    if (*end && end[1])
        return -1;
    *out = v * mul;
    return 0;
}

static void *must(void *h, const char *name) {
    void *f = dlsym(h, name);
    if (!f) {
        fprintf(stderr, "bfc: the driver has no %s\n", name);
        exit(4);
    }
    return f;
}

int main(int argc, char **argv) {
    unsigned long long target = 7 * GIB, total = 0, region = MIN_REGION;
    CUdeviceptr regions[MAX_REGIONS];
    int nregions = 0, step, train_ok = 0, train_refused = 0;
    char b1[32], b2[32];
    CUdevice dev;
    CUcontext ctx;
    CUresult rc;
    void *h;

    /* Line-buffered, so that our lines and cuquota's interleave in order in a pipe too. */
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (argc > 1 && parse_size(argv[1], &target)) {
        fprintf(stderr, "usage: bfc_growth [TARGET]\n");
        return 2;
    }
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "bfc: dlopen libcuda.so.1: %s\n", dlerror());
        return 4;
    }
    *(void **)&p_cuInit = must(h, "cuInit");
    *(void **)&p_cuDeviceGet = must(h, "cuDeviceGet");
    *(void **)&p_cuDevicePrimaryCtxRetain = must(h, "cuDevicePrimaryCtxRetain");
    *(void **)&p_cuCtxSetCurrent = must(h, "cuCtxSetCurrent");
    *(void **)&p_cuMemAlloc_v2 = must(h, "cuMemAlloc_v2");
    *(void **)&p_cuMemFree_v2 = must(h, "cuMemFree_v2");

    if ((rc = p_cuInit(0)) || (rc = p_cuDeviceGet(&dev, 0)) ||
        (rc = p_cuDevicePrimaryCtxRetain(&ctx, dev)) || (rc = p_cuCtxSetCurrent(ctx))) {
        fprintf(stderr, "bfc: CUDA initialisation failed: CUresult %d\n", rc);
        return 1;
    }
    printf("bfc: growing a pool towards %s in regions doubling from %s\n",
           human(target, b1, sizeof b1), human(MIN_REGION, b2, sizeof b2));

    while (total < target && nregions < MAX_REGIONS) {
        unsigned long long ask = region;
        int refusals = 0;
        CUdeviceptr p = 0;
        for (;;) {
            rc = p_cuMemAlloc_v2(&p, ask);
            if (rc != CUDA_ERROR_OUT_OF_MEMORY)
                break;
            refusals++;
            ask = ask * 9 / 10;
            if (ask < MIN_REGION)
                break;
        }
        if (rc != CUDA_SUCCESS) {
            if (rc == CUDA_ERROR_OUT_OF_MEMORY)
                printf("bfc: region %d: asked %s, gave up after %d refusals\n", nregions + 1,
                       human(region, b1, sizeof b1), refusals);
            else
                printf("bfc: region %d: asked %s, failed with CUresult %d\n", nregions + 1,
                       human(region, b1, sizeof b1), rc);
            break;
        }
        regions[nregions++] = p;
        total += ask;
        if (refusals) {
            printf("bfc: region %d: asked %s, got %s after %d refusal%s\n", nregions,
                   human(region, b1, sizeof b1), human(ask, b2, sizeof b2), refusals,
                   refusals == 1 ? "" : "s");
            break; /* the pool has found its ceiling */
        }
        printf("bfc: region %d: asked %s, got it\n", nregions, human(region, b1, sizeof b1));
        region *= 2;
    }
    printf("bfc: pool holds %s in %d regions\n", human(total, b1, sizeof b1), nregions);

    for (step = 0; step < TRAINING_STEPS; step++) {
        CUdeviceptr p = 0;
        rc = p_cuMemAlloc_v2(&p, SCRATCH);
        if (rc == CUDA_SUCCESS) {
            train_ok++;
            p_cuMemFree_v2(p);
        } else {
            train_refused++;
        }
    }
    printf("bfc: training: %d steps with %s of scratch each, %d ok, %d refused\n",
           TRAINING_STEPS, human(SCRATCH, b1, sizeof b1), train_ok, train_refused);

    if (getenv("BFC_HOLD_MS")) {
        long ms = atol(getenv("BFC_HOLD_MS"));
        struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
        if (ms > 0) {
            printf("bfc: holding the pool for %ld ms\n", ms);
            nanosleep(&t, NULL);
        }
    }
    while (nregions > 0)
        p_cuMemFree_v2(regions[--nregions]);
    printf("bfc: freed the pool, done\n");
    return 0;
}
