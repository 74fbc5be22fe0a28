/* The concurrency soak behind the op soak:THREADS:MS:QUOTA[:SEED[:ROUNDS]] (see ops_process.c).
 *
 * THREADS threads share the caller's context and, in rounds, each make OPS_PER_ROUND random
 * calls: cuMemAlloc_v2, cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemCreate (device 0),
 * the VMM map/unmap/retain patterns, cuArrayCreate_v2 / cuArrayDestroy, contexts of their
 * own destroyed with what they hold, cuMemFree_v2, cuMemFreeAsync, cuMemRelease and
 * cuMemGetInfo_v2, of random sizes around
 * QUOTA (the quota the process runs under on device 0). After every call a thread samples
 * the shim's own accounting (cuShimStats) and counts any moment its in-use was
 * above QUOTA. Between rounds all threads wait at a barrier while the calling thread takes
 * a checkpoint with nothing in flight: the driver's in-use and live count must equal what
 * the threads hold, and cuMemGetInfo_v2 must say exactly QUOTA minus that. Rounds go on
 * until MS milliseconds have passed, or ROUNDS rounds have run if ROUNDS is not 0 (at
 * least one round always runs). A bounded number of rounds bounds the number of trace
 * events, so that a test can ask for every one of them whatever the scheduler does.
 *
 * Every other check is the test's, from the one line printed at the end:
 *   soak THREADS rounds=R alloc=A async=S pool=P create=C oom=O free=F freeasync=G
 *        release=L info=I other=X over=V badcheck=B max_in_use=M live=N live_bytes=Y
 *        vmm=W unmap=U retained=T array=Y arrayfree=Z ctx=C ctxalloc=P ctxarray=Q ctxfreed=E
 * where `other` counts calls that returned anything but success or out-of-memory (or an
 * info that broke its bounds), and the allocations still live at the end are kept (not
 * freed) so that the exit summary and the trace have something left to account for. The
 * first few problems are described on stderr. */
#define _GNU_SOURCE
#include "ops.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CALL(d, fn, ...) ((d)->fn ? (d)->fn(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND)

#define HELD 8
#define OPS_PER_ROUND 64
#define GRANULARITY (2ULL << 20) /* the shim's cuMemCreate granularity */

enum { ITEM_PTR, ITEM_HANDLE, ITEM_MAPPED, ITEM_ARRAY };

struct item {
    int kind;
    unsigned long long value; /* a pointer or a handle; for ITEM_MAPPED the mapped address */
    size_t size;
};

struct shared {
    const struct drv *d;
    CUcontext ctx;
    CUmemoryPool pool;
    fn_cuShimStats stats;
    /* the shim's whole footprint (what cuMemGetInfo_v2's free is the quota less) */
    fn_cuShimFootprint footprint;
    fn_cuCtxCreate_v2 ctx_create; /* not hooked: looked up with the client's dlsym */
    size_t quota;
    pthread_barrier_t done, go;
    int stop; /* written by the caller between the barriers */
};

struct worker {
    struct shared *s;
    unsigned int x;
    struct item held[HELD];
    int n;
    unsigned long alloc, async, pool, create, oom, free, freeasync, release, info, other;
    unsigned long vmm, unmap, retained; /* the VMM block below */
    unsigned long array, arrayfree;      /* CUDA arrays */
    unsigned long ctx, ctxalloc, ctxarray, ctxfreed; /* contexts of their own, below */
    unsigned long over;
    size_t max_in_use;
};

static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
static int reported;

static void problem(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void problem(const char *fmt, ...) {
    va_list ap;
    pthread_mutex_lock(&report_lock);
    if (reported++ < 20) {
        fputs("soak: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    pthread_mutex_unlock(&report_lock);
}

static unsigned int next(unsigned int *x) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/* Mostly sizes that matter against the quota: a few small ones, many between 1/64 and
 * 1/2 of it, and some at or above it. */
static size_t pick_size(unsigned int *x, size_t q, int granular) {
    unsigned int r = next(x) % 100;
    size_t s;
    if (r < 25)
        s = 1 + next(x) % (64u << 10);
    else if (r < 65)
        s = q / 64 + next(x) % (q / 8);
    else if (r < 93)
        s = q / 4 + next(x) % (q / 4);
    else
        s = q - q / 8 + next(x) % (q / 4);
    if (granular)
        s = (s + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
    return s;
}

static void sample(struct worker *w) {
    size_t in_use = 0;
    if (w->s->stats(0, &in_use, NULL, NULL)) {
        w->other++;
        problem("cuShimStats failed");
        return;
    }
    if (in_use > w->max_in_use)
        w->max_in_use = in_use;
    if (in_use > w->s->quota) {
        w->over++;
        problem("the driver had %zu bytes in use, over the quota of %zu", in_use, w->s->quota);
    }
}

static void allocated(struct worker *w, const char *api, CUresult rc, int kind,
                      unsigned long long value, size_t size, unsigned long *ok) {
    if (rc == CUDA_SUCCESS) {
        w->held[w->n].kind = kind;
        w->held[w->n].value = value;
        w->held[w->n].size = size;
        w->n++;
        (*ok)++;
    } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
        w->oom++;
    } else {
        w->other++;
        problem("%s of %zu bytes returned %d", api, size, rc);
    }
}

/* ---- VMM: the CUDA samples' pattern and NCCL's free path -------------------------------
 * vmm_alloc: cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess, then cuMemRelease
 * at once (the mapping keeps the memory; it is held as an ITEM_MAPPED of its address).
 * vmm_free: every other time cuMemRetainAllocationHandle before the cuMemUnmap and
 * cuMemRelease of the retained handle after it (which is then what frees the memory), then
 * cuMemAddressFree. Counted: vmm (mapped creations), unmap, retained. */
static void vmm_alloc(struct worker *w) {
    const struct drv *d = w->s->d;
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h = 0;
    CUmemAccessDesc access;
    CUdeviceptr va = 0;
    size_t size = pick_size(&w->x, w->s->quota, 1);
    CUresult rc;

    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    rc = CALL(d, cuMemCreate, &h, size, &prop, 0);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
        w->oom++;
        return;
    }
    if (rc == CUDA_SUCCESS)
        rc = CALL(d, cuMemAddressReserve, &va, size, 0, 0, 0);
    if (rc == CUDA_SUCCESS)
        rc = CALL(d, cuMemMap, va, size, 0, h, 0);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (rc == CUDA_SUCCESS)
        rc = CALL(d, cuMemSetAccess, va, size, &access, 1);
    if (rc == CUDA_SUCCESS)
        rc = CALL(d, cuMemRelease, h);
    if (rc) {
        w->other++;
        problem("the samples' VMM pattern of %zu bytes failed with %d", size, rc);
        return;
    }
    w->held[w->n].kind = ITEM_MAPPED;
    w->held[w->n].value = va;
    w->held[w->n].size = size;
    w->n++;
    w->vmm++;
}

static CUresult vmm_free(struct worker *w, struct item it) {
    const struct drv *d = w->s->d;
    CUmemGenericAllocationHandle h = 0;
    int retain = next(&w->x) & 1;
    CUresult rc = CUDA_SUCCESS;

    if (retain)
        rc = CALL(d, cuMemRetainAllocationHandle, &h, (void *)(uintptr_t)(it.value + it.size / 2));
    if (rc == CUDA_SUCCESS)
        rc = CALL(d, cuMemUnmap, it.value, it.size);
    if (rc == CUDA_SUCCESS && retain)
        rc = CALL(d, cuMemRelease, h);
    if (rc == CUDA_SUCCESS)
        rc = CALL(d, cuMemAddressFree, it.value, it.size);
    w->unmap++;
    w->retained += (unsigned long)retain;
    return rc;
}

/* ---- CUDA arrays: 1024-byte rows of bytes and whole 64 KiB pages, so what the shim lays
 * out is exactly the elements (the checkpoint can add sizes up) ---------------------------- */
#define ARRAY_PAGE (64u << 10)

static CUresult array_alloc(struct worker *w, size_t *size, unsigned long long *handle) {
    CUDA_ARRAY_DESCRIPTOR desc;
    CUarray arr = NULL;
    CUresult rc;
    *size = (pick_size(&w->x, w->s->quota, 0) + ARRAY_PAGE - 1) / ARRAY_PAGE * ARRAY_PAGE;
    desc.Width = 1024;
    desc.Height = *size / 1024;
    desc.Format = 1; /* CU_AD_FORMAT_UNSIGNED_INT8 */
    desc.NumChannels = 1;
    rc = CALL(w->s->d, cuArrayCreate_v2, &arr, &desc);
    *handle = (unsigned long long)(uintptr_t)arr;
    return rc;
}

/* ---- a context of its own: cuCtxCreate, a pointer and an array in it, then cuCtxDestroy,
 * which frees both (nothing to free by hand); back to the shared context --------------------
 * Counted: ctx (contexts destroyed), ctxalloc / ctxarray (what they held), ctxfreed (the
 * contexts that held something: one trace event each). */
static void own_context(struct worker *w) {
    const struct drv *d = w->s->d;
    CUcontext own = NULL;
    CUdeviceptr p = 0;
    unsigned long long arr = 0;
    size_t size;
    unsigned long before = w->ctxalloc + w->ctxarray;
    CUresult rc;

    if (!w->s->ctx_create || w->s->ctx_create(&own, 0, 0)) {
        w->other++;
        problem("cuCtxCreate_v2 failed");
        return;
    }
    size = pick_size(&w->x, w->s->quota, 0);
    rc = CALL(d, cuMemAlloc_v2, &p, size);
    if (rc == CUDA_SUCCESS)
        w->ctxalloc++;
    else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
        w->oom++;
    else {
        w->other++;
        problem("cuMemAlloc_v2 in a context of its own returned %d", rc);
    }
    sample(w);
    rc = array_alloc(w, &size, &arr);
    if (rc == CUDA_SUCCESS)
        w->ctxarray++;
    else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
        w->oom++;
    else {
        w->other++;
        problem("cuArrayCreate_v2 in a context of its own returned %d", rc);
    }
    sample(w);
    rc = CALL(d, cuCtxDestroy_v2, own);
    if (rc) {
        w->other++;
        problem("cuCtxDestroy_v2 returned %d", rc);
    }
    w->ctx++;
    w->ctxfreed += (unsigned long)(w->ctxalloc + w->ctxarray > before);
    if (CALL(d, cuCtxSetCurrent, w->s->ctx)) {
        w->other++;
        problem("cuCtxSetCurrent failed");
    }
}

static void one_call(struct worker *w) {
    const struct drv *d = w->s->d;
    size_t q = w->s->quota;
    unsigned int r = next(&w->x) % 100;
    CUresult rc;

    if (w->n == HELD || (w->n > 0 && r < 30)) {
        int i = (int)(next(&w->x) % (unsigned int)w->n);
        struct item it = w->held[i];
        const char *api;
        if (it.kind == ITEM_ARRAY) {
            rc = CALL(d, cuArrayDestroy, (CUarray)(uintptr_t)it.value);
            api = "cuArrayDestroy";
            w->arrayfree++;
        } else if (it.kind == ITEM_HANDLE) {
            rc = CALL(d, cuMemRelease, it.value);
            api = "cuMemRelease";
            w->release++;
        } else if (it.kind == ITEM_MAPPED) {
            rc = vmm_free(w, it);
            api = "the VMM free path";
        } else if (next(&w->x) & 1) {
            rc = CALL(d, cuMemFreeAsync, it.value, NULL);
            api = "cuMemFreeAsync";
            w->freeasync++;
        } else {
            rc = CALL(d, cuMemFree_v2, it.value);
            api = "cuMemFree_v2";
            w->free++;
        }
        if (rc) {
            w->other++;
            problem("%s of a live allocation returned %d", api, rc);
        } else {
            w->held[i] = w->held[--w->n];
        }
    } else if (r < 40) {
        size_t fr = 0, to = 0;
        rc = CALL(d, cuMemGetInfo_v2, &fr, &to);
        w->info++;
        if (rc || to != q || fr > q) {
            w->other++;
            problem("cuMemGetInfo_v2 returned %d, free %zu, total %zu (quota %zu)", rc, fr, to, q);
        }
    } else if (r < 60) {
        CUdeviceptr p = 0;
        size_t size = pick_size(&w->x, q, 0);
        rc = CALL(d, cuMemAlloc_v2, &p, size);
        allocated(w, "cuMemAlloc_v2", rc, ITEM_PTR, p, size, &w->alloc);
    } else if (r < 75) {
        CUdeviceptr p = 0;
        size_t size = pick_size(&w->x, q, 0);
        rc = CALL(d, cuMemAllocAsync, &p, size, NULL);
        allocated(w, "cuMemAllocAsync", rc, ITEM_PTR, p, size, &w->async);
    } else if (r < 85) {
        CUdeviceptr p = 0;
        size_t size = pick_size(&w->x, q, 0);
        rc = CALL(d, cuMemAllocFromPoolAsync, &p, size, w->s->pool, NULL);
        allocated(w, "cuMemAllocFromPoolAsync", rc, ITEM_PTR, p, size, &w->pool);
    } else if (r >= 92) {
        vmm_alloc(w);
    } else if (r >= 89) {
        if (next(&w->x) % 4 == 0) {
            own_context(w);
        } else {
            unsigned long long arr = 0;
            size_t size = 0;
            rc = array_alloc(w, &size, &arr);
            allocated(w, "cuArrayCreate_v2", rc, ITEM_ARRAY, arr, size, &w->array);
        }
    } else {
        CUmemAllocationProp prop;
        CUmemGenericAllocationHandle h = 0;
        size_t size = pick_size(&w->x, q, 1);
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        rc = CALL(d, cuMemCreate, &h, size, &prop, 0);
        allocated(w, "cuMemCreate", rc, ITEM_HANDLE, h, size, &w->create);
    }
    sample(w);
}

static void *worker_main(void *p) {
    struct worker *w = p;
    struct shared *s = w->s;
    int i;

    if (CALL(s->d, cuCtxSetCurrent, s->ctx)) {
        w->other++;
        problem("cuCtxSetCurrent failed");
    }
    for (;;) {
        for (i = 0; i < OPS_PER_ROUND; i++)
            one_call(w);
        pthread_barrier_wait(&s->done);
        pthread_barrier_wait(&s->go);
        if (s->stop)
            break;
    }
    return NULL;
}

static unsigned long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000 + (unsigned long long)ts.tv_nsec / 1000000;
}

/* With every worker parked at the barrier: the driver's books against the workers'. */
static int checkpoint(struct shared *s, struct worker *w, unsigned long n) {
    size_t in_use = 0, peak = 0, fr = 0, to = 0, held = 0;
    unsigned long long live = 0, count = 0;
    unsigned long i;
    int j, bad = 0;
    CUresult rc;

    for (i = 0; i < n; i++) {
        for (j = 0; j < w[i].n; j++)
            held += w[i].held[j].size;
        count += (unsigned long long)w[i].n;
    }
    rc = s->stats(0, &in_use, &peak, &live);
    if (rc || in_use != held || live != count) {
        problem("checkpoint: driver in use %zu (%llu live), the threads hold %zu (%llu)", in_use,
                live, held, count);
        bad++;
    }
    /* The quota bounds the footprint: the allocations the threads hold and what
     * the pools keep beyond them (the shim's own figure). */
    {
        size_t a = 0, pc = 0, g = 0, c = 0;
        if (s->footprint && !s->footprint(0, &a, &pc, &g, &c))
            held = a + pc + g + c;
    }
    rc = CALL(s->d, cuMemGetInfo_v2, &fr, &to);
    if (rc || to != s->quota || fr != s->quota - held) {
        problem("checkpoint: cuMemGetInfo_v2 returned %d, free %zu, total %zu; expected free %zu",
                rc, fr, to, s->quota - held);
        bad++;
    }
    return bad;
}

int soak_run(const struct drv *d, unsigned long nthreads, unsigned long ms, size_t quota,
             unsigned int seed, unsigned long max_rounds) {
    struct shared s;
    struct worker *w = calloc(nthreads, sizeof *w);
    pthread_t *tids = calloc(nthreads, sizeof *tids);
    unsigned long long deadline = now_ms() + ms;
    unsigned long i, rounds = 0, badcheck = 0;
    struct worker t;
    unsigned long long live = 0, live_bytes = 0;
    CUmemPoolProps props;
    void *lib;
    int j;

    if (!w || !tids || quota < (64u << 10) * 4)
        return -1;
    memset(&s, 0, sizeof s);
    memset(&t, 0, sizeof t);
    s.d = d;
    s.quota = quota;
    if (CALL(d, cuCtxGetCurrent, &s.ctx) || !s.ctx) {
        fprintf(stderr, "soak: no current context (run init first)\n");
        return -1;
    }
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib && d->sym)
        *(void **)&s.stats = d->sym(lib, "cuShimStats");
    if (lib && d->sym)
        *(void **)&s.footprint = d->sym(lib, "cuShimFootprint");
    if (!s.stats) {
        fprintf(stderr, "soak: the driver has no cuShimStats\n");
        return -1;
    }
    if (lib && d->sym)
        *(void **)&s.ctx_create = d->sym(lib, "cuCtxCreate_v2");
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    if (CALL(d, cuMemPoolCreate, &s.pool, &props)) {
        fprintf(stderr, "soak: cuMemPoolCreate failed\n");
        return -1;
    }
    pthread_barrier_init(&s.done, NULL, (unsigned int)nthreads + 1);
    pthread_barrier_init(&s.go, NULL, (unsigned int)nthreads + 1);
    for (i = 0; i < nthreads; i++) {
        w[i].s = &s;
        w[i].x = seed * 2654435761u + (unsigned int)i * 40503u + 1u;
        if (pthread_create(&tids[i], NULL, worker_main, &w[i])) {
            fprintf(stderr, "soak: pthread_create failed\n");
            exit(3);
        }
    }
    for (;;) {
        pthread_barrier_wait(&s.done);
        badcheck += (unsigned long)checkpoint(&s, w, nthreads);
        rounds++;
        s.stop = now_ms() >= deadline || (max_rounds && rounds >= max_rounds);
        pthread_barrier_wait(&s.go);
        if (s.stop)
            break;
    }
    for (i = 0; i < nthreads; i++) {
        pthread_join(tids[i], NULL);
        t.alloc += w[i].alloc;
        t.async += w[i].async;
        t.pool += w[i].pool;
        t.create += w[i].create;
        t.oom += w[i].oom;
        t.free += w[i].free;
        t.freeasync += w[i].freeasync;
        t.release += w[i].release;
        t.info += w[i].info;
        t.other += w[i].other;
        t.vmm += w[i].vmm;
        t.unmap += w[i].unmap;
        t.retained += w[i].retained;
        t.array += w[i].array;
        t.arrayfree += w[i].arrayfree;
        t.ctx += w[i].ctx;
        t.ctxalloc += w[i].ctxalloc;
        t.ctxarray += w[i].ctxarray;
        t.ctxfreed += w[i].ctxfreed;
        t.over += w[i].over;
        if (w[i].max_in_use > t.max_in_use)
            t.max_in_use = w[i].max_in_use;
        for (j = 0; j < w[i].n; j++) {
            live++;
            live_bytes += w[i].held[j].size;
        }
    }
    pthread_barrier_destroy(&s.done);
    pthread_barrier_destroy(&s.go);
    printf("soak %lu rounds=%lu alloc=%lu async=%lu pool=%lu create=%lu oom=%lu free=%lu "
           "freeasync=%lu release=%lu info=%lu other=%lu over=%lu badcheck=%lu max_in_use=%zu "
           "live=%llu live_bytes=%llu vmm=%lu unmap=%lu retained=%lu array=%lu arrayfree=%lu "
           "ctx=%lu ctxalloc=%lu ctxarray=%lu ctxfreed=%lu\n",
           nthreads, rounds, t.alloc, t.async, t.pool, t.create, t.oom, t.free, t.freeasync,
           t.release, t.info, t.other, t.over, badcheck, t.max_in_use, live, live_bytes, t.vmm,
           t.unmap, t.retained, t.array, t.arrayfree, t.ctx, t.ctxalloc, t.ctxarray,
           t.ctxfreed);
    fflush(stdout);
    free(w);
    free(tids);
    return 0;
}
