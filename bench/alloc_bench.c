/* The benchmark client of scripts/bench.sh: times cuMemAlloc_v2 + cuMemFree_v2 (4 KiB) and
 * friends against whatever libcuda.so.1 the loader finds (the shim), with or
 * without libcuquota.so preloaded — the client does not know which, so every case runs the
 * very same code. Prints "key value" lines (value in ns or per second); asserts nothing.
 *
 * Built twice by bench.sh: plain (lookup "dlsym" or "getproc": dlopen + dlsym, or the CUDA
 * runtime's way through cuGetProcAddress_v2) and with -DLINKED -lcuda (lookup "linked":
 * direct calls to the exported symbols).
 *
 *   alloc_bench pair    LOOKUP PAIRS        ns per alloc+free pair (after a warm-up)
 *   alloc_bench live    LOOKUP LIVE ROUNDS  ns per free with 1 live, LIVE live newest-first
 *                                           and oldest-first (each free timed alone)
 *   alloc_bench threads LOOKUP T PAIRS      T threads, PAIRS pairs each: pairs/s in total
 *                                           and wall ns per pair (wall / all pairs)
 *   alloc_bench streamthreads LOOKUP T PAIRS  as threads, with cuMemAllocAsync +
 *                                           cuMemFreeAsync, each thread on a stream of its own
 *                                           (cuStreamCreate; dlsym only)
 *   alloc_bench asyncpair LOOKUP PAIRS   ns per cuMemAllocAsync + cuMemFreeAsync pair on the
 *                                           NULL stream (the stream → device lookup)
 *   alloc_bench deeppair LOOKUP PAIRS DEPTH   as pair, with the loop DEPTH frames further
 *                                           down (a framework's stack, for CUQUOTA_STACKS)
 *   alloc_bench dlsym-other CALLS           ns per dlsym of "strlen" via RTLD_DEFAULT and
 *                                           via libc's handle (no CUDA involved)
 */
#define _GNU_SOURCE
#ifdef LINKED
#define CUDA_MIN_EXTERN
#endif
#include "../tests/clients/cuda_min.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BYTES 4096

static fn_cuMemAlloc_v2 mem_alloc;
static fn_cuMemFree_v2 mem_free;
static fn_cuCtxSetCurrent ctx_set_current;
static fn_cuMemAllocAsync mem_alloc_async; /* asyncpair */
static fn_cuMemFreeAsync mem_free_async;
typedef CUresult (*fn_cuStreamCreate)(CUstream *stream, unsigned int flags);
static fn_cuStreamCreate stream_create; /* streamthreads (dlsym only) */
static CUcontext ctx;
#ifdef LINKED
static int linked;
#endif

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int rc) {
    fprintf(stderr, "alloc_bench: %s failed (%d)\n", what, rc);
    exit(3);
}

#ifdef LINKED
#define CALL_ALLOC(p, n) (linked ? cuMemAlloc_v2((p), (n)) : mem_alloc((p), (n)))
#define CALL_FREE(p) (linked ? cuMemFree_v2(p) : mem_free(p))
#else
#define CALL_ALLOC(p, n) mem_alloc((p), (n))
#define CALL_FREE(p) mem_free(p)
#endif

static fn_cuGetProcAddress_v2 getproc;

static void *by_proc(const char *name, int version) {
    void *fn = NULL;
    int status = -1;
    CUresult rc = getproc(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (rc != CUDA_SUCCESS || !fn) die(name, rc);
    return fn;
}

/* Resolves the functions the way LOOKUP says, then cuInit and a current context. */
static void setup(const char *lookup) {
    fn_cuInit init;
    fn_cuDeviceGet device_get;
    fn_cuDevicePrimaryCtxRetain retain;
    CUdevice dev;
    CUresult rc;

    if (!strcmp(lookup, "linked")) {
#ifdef LINKED
        linked = 1;
        init = cuInit;
        device_get = cuDeviceGet;
        retain = cuDevicePrimaryCtxRetain;
        ctx_set_current = cuCtxSetCurrent;
        mem_alloc = cuMemAlloc_v2;
        mem_free = cuMemFree_v2;
        mem_alloc_async = cuMemAllocAsync;
        mem_free_async = cuMemFreeAsync;
#else
        fprintf(stderr, "alloc_bench: built without -DLINKED\n");
        exit(2);
#endif
    } else {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "alloc_bench: dlopen libcuda.so.1: %s\n", dlerror());
            exit(3);
        }
        if (!strcmp(lookup, "dlsym")) {
            *(void **)&init = dlsym(h, "cuInit");
            *(void **)&device_get = dlsym(h, "cuDeviceGet");
            *(void **)&retain = dlsym(h, "cuDevicePrimaryCtxRetain");
            *(void **)&ctx_set_current = dlsym(h, "cuCtxSetCurrent");
            *(void **)&mem_alloc = dlsym(h, "cuMemAlloc_v2");
            *(void **)&mem_free = dlsym(h, "cuMemFree_v2");
            *(void **)&mem_alloc_async = dlsym(h, "cuMemAllocAsync");
            *(void **)&mem_free_async = dlsym(h, "cuMemFreeAsync");
            *(void **)&stream_create = dlsym(h, "cuStreamCreate");
        } else if (!strcmp(lookup, "getproc")) {
            /* As libcudart does: dlsym only cuGetProcAddress_v2, use it once to get
             * cuGetProcAddress itself, and look everything up through that. */
            fn_cuGetProcAddress_v2 entry;
            *(void **)&entry = dlsym(h, "cuGetProcAddress_v2");
            if (!entry) die("dlsym cuGetProcAddress_v2", 0);
            getproc = entry;
            *(void **)&getproc = by_proc("cuGetProcAddress", 12000);
            *(void **)&init = by_proc("cuInit", 2000);
            *(void **)&device_get = by_proc("cuDeviceGet", 2000);
            *(void **)&retain = by_proc("cuDevicePrimaryCtxRetain", 7000);
            *(void **)&ctx_set_current = by_proc("cuCtxSetCurrent", 4000);
            *(void **)&mem_alloc = by_proc("cuMemAlloc", 3020);
            *(void **)&mem_free = by_proc("cuMemFree", 3020);
            *(void **)&mem_alloc_async = by_proc("cuMemAllocAsync", 11020);
            *(void **)&mem_free_async = by_proc("cuMemFreeAsync", 11020);
        } else {
            fprintf(stderr, "alloc_bench: unknown lookup %s\n", lookup);
            exit(2);
        }
        if (!init || !device_get || !retain || !ctx_set_current || !mem_alloc || !mem_free)
            die("dlsym", 0);
    }
    if ((rc = init(0))) die("cuInit", rc);
    if ((rc = device_get(&dev, 0))) die("cuDeviceGet", rc);
    if ((rc = retain(&ctx, dev))) die("cuDevicePrimaryCtxRetain", rc);
    if ((rc = ctx_set_current(ctx))) die("cuCtxSetCurrent", rc);
}

static void pairs(long n) {
    CUdeviceptr p;
    CUresult rc;
    for (long i = 0; i < n; i++) {
        if ((rc = CALL_ALLOC(&p, BYTES))) die("cuMemAlloc_v2", rc);
        if ((rc = CALL_FREE(p))) die("cuMemFree_v2", rc);
    }
}

static int bench_pair(long n) {
    pairs(n / 10 + 100); /* warm-up: caches, lazy binding, the trace's start */
    uint64_t t0 = now_ns();
    pairs(n);
    uint64_t t1 = now_ns();
    printf("pair_ns %.1f\n", (double)(t1 - t0) / (double)n);
    return 0;
}

/* bench_pair, DEPTH calls down. Not a tail call (the asm after it), so each frame stays. */
__attribute__((noinline)) static int nested_pair(int depth, long n) {
    if (depth <= 0) return bench_pair(n);
    int rc = nested_pair(depth - 1, n);
    __asm__ volatile("" ::: "memory");
    return rc;
}

static void async_pairs_on(long n, CUstream stream) {
    CUdeviceptr p;
    CUresult rc;
    for (long i = 0; i < n; i++) {
        if ((rc = mem_alloc_async(&p, BYTES, stream))) die("cuMemAllocAsync", rc);
        if ((rc = mem_free_async(p, stream))) die("cuMemFreeAsync", rc);
    }
}

static void async_pairs(long n) { async_pairs_on(n, NULL); }

/* Like bench_pair (the same warm-up, so bench.sh's callgrind arithmetic holds). */
static int bench_async_pair(long n) {
    if (!mem_alloc_async || !mem_free_async) die("dlsym cuMemAllocAsync", 0);
    async_pairs(n / 10 + 100);
    uint64_t t0 = now_ns();
    async_pairs(n);
    uint64_t t1 = now_ns();
    printf("pair_ns %.1f\n", (double)(t1 - t0) / (double)n);
    return 0;
}

/* One free, timed alone (both clock reads are included, the same in every case). */
static uint64_t timed_free(CUdeviceptr p) {
    uint64_t t0 = now_ns();
    CUresult rc = CALL_FREE(p);
    uint64_t t1 = now_ns();
    if (rc) die("cuMemFree_v2", rc);
    return t1 - t0;
}

static void alloc_all(CUdeviceptr *ptrs, long n) {
    CUresult rc;
    for (long i = 0; i < n; i++)
        if ((rc = CALL_ALLOC(&ptrs[i], BYTES))) die("cuMemAlloc_v2", rc);
}

/* The phases are separate functions so that a profiler can be pointed at one, e.g.
 * valgrind --tool=callgrind --cache-sim=yes --toggle-collect=free_newest_first. */
__attribute__((noinline)) static uint64_t free_one_live(long n) {
    uint64_t total = 0;
    for (long i = 0; i < n; i++) {
        CUdeviceptr p;
        CUresult rc = CALL_ALLOC(&p, BYTES);
        if (rc) die("cuMemAlloc_v2", rc);
        total += timed_free(p);
    }
    return total;
}

__attribute__((noinline)) static uint64_t free_newest_first(CUdeviceptr *ptrs, long n) {
    uint64_t total = 0;
    for (long i = n - 1; i >= 0; i--) total += timed_free(ptrs[i]);
    return total;
}

__attribute__((noinline)) static uint64_t free_oldest_first(CUdeviceptr *ptrs, long n) {
    uint64_t total = 0;
    for (long i = 0; i < n; i++) total += timed_free(ptrs[i]);
    return total;
}

static int bench_live(long live, long rounds) {
    CUdeviceptr *ptrs = calloc((size_t)live, sizeof *ptrs);
    uint64_t one, newest = 0, oldest = 0;
    if (!ptrs) return 3;
    pairs(1000);
    /* 1 live: allocate one, free it (only the free is timed). */
    one = free_one_live(live * rounds);
    for (long r = 0; r < rounds; r++) {
        alloc_all(ptrs, live);
        newest += free_newest_first(ptrs, live);
        alloc_all(ptrs, live);
        oldest += free_oldest_first(ptrs, live);
    }
    double n = (double)live * (double)rounds;
    printf("free1_ns %.1f\nfree_newest_ns %.1f\nfree_oldest_ns %.1f\n", one / n, newest / n,
           oldest / n);
    free(ptrs);
    return 0;
}

static pthread_barrier_t start_line;
static long per_thread;
static int on_streams; /* streamthreads: stream-ordered pairs, each thread on a stream of its own */

static void *worker(void *arg) {
    (void)arg;
    CUresult rc = ctx_set_current(ctx);
    CUstream stream = NULL;
    if (rc) die("cuCtxSetCurrent", rc);
    if (on_streams) {
        if (!stream_create || !mem_alloc_async || !mem_free_async) die("dlsym cuStreamCreate", 0);
        if ((rc = stream_create(&stream, 1 /* CU_STREAM_NON_BLOCKING */))) die("cuStreamCreate", rc);
        async_pairs_on(per_thread / 20 + 100, stream);
    } else {
        pairs(per_thread / 20 + 100);
    }
    pthread_barrier_wait(&start_line);
    if (on_streams)
        async_pairs_on(per_thread, stream);
    else
        pairs(per_thread);
    return NULL;
}

static int bench_threads(int threads, long n) {
    pthread_t tids[256];
    if (threads < 1 || threads > 256) return 2;
    per_thread = n;
    pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++)
        if (pthread_create(&tids[i], NULL, worker, NULL)) die("pthread_create", 0);
    pthread_barrier_wait(&start_line);
    uint64_t t0 = now_ns();
    for (int i = 0; i < threads; i++) pthread_join(tids[i], NULL);
    uint64_t t1 = now_ns();
    double total = (double)threads * (double)n;
    printf("pairs_per_s %.0f\nwall_ns_per_pair %.1f\n", total * 1e9 / (double)(t1 - t0),
           (double)(t1 - t0) / total);
    return 0;
}

static int bench_dlsym_other(long n) {
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    volatile uintptr_t sink = 0;
    if (!libc) die("dlopen libc.so.6", 0);
    for (long i = 0; i < n / 10; i++) sink += (uintptr_t)dlsym(RTLD_DEFAULT, "strlen");
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++) sink += (uintptr_t)dlsym(RTLD_DEFAULT, "strlen");
    uint64_t t1 = now_ns();
    for (long i = 0; i < n; i++) sink += (uintptr_t)dlsym(libc, "strlen");
    uint64_t t2 = now_ns();
    if (!sink) die("dlsym strlen", 0);
    printf("dlsym_default_ns %.1f\ndlsym_handle_ns %.1f\n", (double)(t1 - t0) / (double)n,
           (double)(t2 - t1) / (double)n);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "dlsym-other")) return bench_dlsym_other(atol(argv[2]));
    if (argc < 4) {
        fprintf(stderr, "usage: alloc_bench pair|live|threads|dlsym-other LOOKUP ...\n");
        return 2;
    }
    setup(argv[2]);
    if (!strcmp(argv[1], "pair")) return bench_pair(atol(argv[3]));
    if (!strcmp(argv[1], "asyncpair")) return bench_async_pair(atol(argv[3]));
    if (!strcmp(argv[1], "deeppair") && argc >= 5) return nested_pair(atoi(argv[4]), atol(argv[3]));
    if (!strcmp(argv[1], "live") && argc >= 5) return bench_live(atol(argv[3]), atol(argv[4]));
    if (!strcmp(argv[1], "threads") && argc >= 5)
        return bench_threads(atoi(argv[3]), atol(argv[4]));
    if (!strcmp(argv[1], "streamthreads") && argc >= 5) {
        on_streams = 1;
        return bench_threads(atoi(argv[3]), atol(argv[4]));
    }
    fprintf(stderr, "alloc_bench: bad arguments\n");
    return 2;
}
