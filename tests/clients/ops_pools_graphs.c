/* The ops on pools that keep memory and on graph memory (their rows: ops_table.h).
 *   footprint:DEV              cuShimFootprint: allocations= pool_cache= graph= context=
 *   sync / streamsync:S        cuCtxSynchronize / cuStreamSynchronize of stream slot S
 *                              (or "n": the NULL stream); not hooked (client's dlsym)
 *   pooltrim:POOL:KEEP         cuMemPoolTrimTo; POOL is "pool" (the current device's pool
 *                              of the pool op, made if need be), "defpool" (its default
 *                              pool) or "hostpool" (hostpool's pool)
 *   poolattr:POOL:ATTR         cuMemPoolGetAttribute, ATTR threshold | reserved |
 *                              reservedhigh | used | usedhigh: value=V
 *   poolthreshold:POOL:BYTES   cuMemPoolSetAttribute(RELEASE_THRESHOLD)
 *   graph                      cuGraphCreate: a graph slot (endcapture:S makes one too)
 *   graphalloc:G:SIZE[:DEV]    cuGraphAddMemAllocNode into graph slot G (device DEV, else
 *                              the current one): a pointer slot (not live: free:N works
 *                              only once a launch made it live)
 *   graphfree:G:P              cuGraphAddMemFreeNode of pointer slot P into graph G
 *   instantiate:G[:FLAGS]      cuGraphInstantiateWithFlags (cuGraphInstantiate since
 *                              CUDA 12): an exec slot
 *   instantiatep:G:FLAGS:S     cuGraphInstantiateWithParams, upload stream S: an exec
 *                              slot, result=R (its result_out)
 *   upload:E:S / launch:E:S    cuGraphUpload / cuGraphLaunch of exec slot E on stream S
 *   execdestroy:E / graphdestroy:G   cuGraphExecDestroy / cuGraphDestroy
 *   graphtrim:DEV              cuDeviceGraphMemTrim
 *   graphattr:DEV:ATTR         cuDeviceGetGraphMemAttribute, ATTR used | usedhigh |
 *                              reserved | reservedhigh: value=V
 *   graphnodes:G               cuGraphGetNodes / cuGraphNodeGetType (not hooked):
 *                              n= alloc= free=
 *   graphthreads:T:R:SIZE   T threads, each with the caller's context: its own graph of one
 *                           SIZE allocation freed inside it, instantiated, then R rounds of
 *                           cuGraphLaunch on the NULL stream and cuMemAlloc_v2(SIZE) +
 *                           cuMemFree_v2; prints launch_ok= launch_oom= alloc_ok= alloc_oom=
 *                           other= (any other result, setup included)
 *   instantiate1:G / instantiate2:G   the CUDA 10 cuGraphInstantiate and the CUDA 11.0
 *                           cuGraphInstantiate_v2 (error node, log) of graph slot G, looked up
 *                           with the client's dlsym on the driver: an exec slot
 *   poolthreads:N:ROUNDS:SIZE   the pool cache under threads: N threads, in ROUNDS
 *                           lock-step rounds: each frees its oldest allocation when it holds
 *                           3 (cuMemFreeAsync or cuMemFree_v2, as it was made), then
 *                           allocates SIZE, alternately with cuMemAllocAsync on the NULL
 *                           stream and cuMemAlloc_v2. Between rounds (no call in flight)
 *                           thread 0 reads the shim's whole footprint of the current device
 *                           (cuShimFootprint) and keeps the highest, and every 4th round
 *                           synchronizes the context (the pools then give back what they
 *                           keep above their thresholds). Prints "poolthreads N ok= oom=
 *                           other= max=" */
#define _GNU_SOURCE
#include "ops_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pool by name: "pool", "defpool" or "hostpool" (which must exist); -1: no such name. */
static CUresult named_pool(const struct drv *d, const char *name, CUmemoryPool *pool) {
    if (!strcmp(name, "pool"))
        return own_pool(d, pool);
    if (!strcmp(name, "hostpool")) {
        *pool = host_pool;
        return host_pool ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    }
    if (!strcmp(name, "defpool")) {
        CUdevice dev = 0;
        CUresult rc = CALL(d, cuDeviceGet, &dev, cur_dev);
        return rc ? rc : CALL(d, cuDeviceGetDefaultMemPool, pool, dev);
    }
    return -1;
}

/* CUmemPool_attribute by name; -1 for an unknown one. */
static int pool_attr_number(const char *name) {
    const char *names[] = {"threshold", "reserved", "reservedhigh", "used", "usedhigh"};
    int i;
    for (i = 0; i < 5; i++)
        if (!strcmp(name, names[i]))
            return 4 + i;
    return -1;
}

struct graph_thread {
    const struct drv *d;
    CUcontext ctx;
    unsigned long long rounds, size;
    unsigned long launch_ok, launch_oom, alloc_ok, alloc_oom, other;
};

static void *graph_thread_main(void *p) {
    struct graph_thread *t = p;
    const struct drv *d = t->d;
    CUDA_MEM_ALLOC_NODE_PARAMS params;
    CUgraph g = NULL;
    CUgraphNode node = NULL, freed = NULL;
    CUgraphExec e = NULL;
    unsigned long long i;
    CUdevice dev = 0;
    CUresult rc = CALL(d, cuCtxSetCurrent, t->ctx);
    if (!rc)
        rc = CALL(d, cuGraphCreate, &g, 0);
    if (!rc)
        rc = CALL(d, cuDeviceGet, &dev, cur_dev);
    memset(&params, 0, sizeof params);
    params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params.poolProps.location.id = dev;
    params.bytesize = t->size;
    if (!rc)
        rc = CALL(d, cuGraphAddMemAllocNode, &node, g, NULL, 0, &params);
    if (!rc)
        rc = CALL(d, cuGraphAddMemFreeNode, &freed, g, &node, 1, params.dptr);
    if (!rc)
        rc = CALL(d, cuGraphInstantiateWithFlags, &e, g, 0);
    if (rc) {
        t->other++;
        return NULL;
    }
    for (i = 0; i < t->rounds; i++) {
        CUdeviceptr dp = 0;
        rc = CALL(d, cuGraphLaunch, e, NULL);
        if (!rc)
            t->launch_ok++;
        else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
            t->launch_oom++;
        else
            t->other++;
        rc = CALL(d, cuMemAlloc_v2, &dp, t->size);
        if (!rc) {
            t->alloc_ok++;
            if (CALL(d, cuMemFree_v2, dp))
                t->other++;
        } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            t->alloc_oom++;
        } else {
            t->other++;
        }
    }
    if (CALL(d, cuGraphExecDestroy, e) || CALL(d, cuGraphDestroy, g))
        t->other++;
    return NULL;
}

static void graph_threads(const struct drv *d, unsigned long n, unsigned long long rounds,
                          unsigned long long size) {
    struct graph_thread *ts = calloc(n, sizeof *ts);
    pthread_t *tids = calloc(n, sizeof *tids);
    unsigned long i, started = 0, lo = 0, lm = 0, ao = 0, am = 0, other = 0;
    CUcontext ctx = NULL;
    if (!ts || !tids || CALL(d, cuCtxGetCurrent, &ctx)) {
        out("graphthreads %lu failed", n);
        free(ts);
        free(tids);
        return;
    }
    for (i = 0; i < n; i++) {
        ts[i].d = d;
        ts[i].ctx = ctx;
        ts[i].rounds = rounds;
        ts[i].size = size;
        if (pthread_create(&tids[i], NULL, graph_thread_main, &ts[i]))
            break;
        started++;
    }
    for (i = 0; i < started; i++) {
        pthread_join(tids[i], NULL);
        lo += ts[i].launch_ok;
        lm += ts[i].launch_oom;
        ao += ts[i].alloc_ok;
        am += ts[i].alloc_oom;
        other += ts[i].other;
    }
    out("graphthreads %lu launch_ok=%lu launch_oom=%lu alloc_ok=%lu alloc_oom=%lu other=%lu",
        started, lo, lm, ao, am, other + (n - started));
    free(ts);
    free(tids);
}

struct pool_thread {
    const struct drv *d;
    pthread_barrier_t *round;
    CUcontext ctx;
    unsigned long t, rounds;
    size_t size;
    unsigned long ok, oom, other;
    unsigned long long max;
};

static void *pool_thread_main(void *p) {
    struct pool_thread *a = p;
    const struct drv *d = a->d;
    CUdeviceptr live[3];
    int was_async[3];
    unsigned int head = 0, n = 0;
    unsigned long r;
    fn_cuShimFootprint fp = NULL;
    fn_cuCtxSynchronize sync = NULL;

    if (a->t == 0) {
        *(void **)&fp = raw_sym(d, "cuShimFootprint");
        *(void **)&sync = raw_sym(d, "cuCtxSynchronize");
    }
    if (CALL(d, cuCtxSetCurrent, a->ctx))
        a->other++;
    for (r = 0; r < a->rounds; r++) {
        CUdeviceptr dp = 0;
        CUresult rc;
        int async = (int)((a->t + r) % 2);
        pthread_barrier_wait(a->round);
        if (n == 3) {
            rc = was_async[head] ? CALL(d, cuMemFreeAsync, live[head], NULL)
                                 : CALL(d, cuMemFree_v2, live[head]);
            if (rc)
                a->other++;
            head = (head + 1) % 3;
            n--;
        }
        rc = async ? CALL(d, cuMemAllocAsync, &dp, a->size, NULL)
                   : CALL(d, cuMemAlloc_v2, &dp, a->size);
        if (rc == CUDA_SUCCESS) {
            live[(head + n) % 3] = dp;
            was_async[(head + n) % 3] = async;
            n++;
            a->ok++;
        } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            a->oom++;
        } else {
            a->other++;
        }
        pthread_barrier_wait(a->round);
        if (a->t == 0) {
            size_t v[4] = {0, 0, 0, 0};
            unsigned long long sum;
            if (!fp || fp(cur_dev, &v[0], &v[1], &v[2], &v[3]))
                a->other++;
            sum = (unsigned long long)v[0] + v[1] + v[2] + v[3];
            if (sum > a->max)
                a->max = sum;
            if (r % 4 == 3 && (!sync || sync()))
                a->other++;
        }
    }
    pthread_barrier_wait(a->round);
    while (n > 0) {
        if ((was_async[head] ? CALL(d, cuMemFreeAsync, live[head], NULL)
                             : CALL(d, cuMemFree_v2, live[head])))
            a->other++;
        head = (head + 1) % 3;
        n--;
    }
    return NULL;
}

static void run_pool_threads(const struct drv *d, unsigned long nthreads, unsigned long rounds,
                             size_t size) {
    struct pool_thread *args = calloc(nthreads, sizeof *args);
    pthread_t *tids = calloc(nthreads, sizeof *tids);
    unsigned long i, ok = 0, oom = 0, other = 0;
    CUcontext ctx = NULL;
    pthread_barrier_t round;

    if (!args || !tids) {
        fprintf(stderr, "ops: out of host memory\n");
        exit(3);
    }
    if (CALL(d, cuCtxGetCurrent, &ctx))
        other++;
    pthread_barrier_init(&round, NULL, (unsigned int)nthreads);
    for (i = 0; i < nthreads; i++) {
        args[i].d = d;
        args[i].round = &round;
        args[i].ctx = ctx;
        args[i].t = i;
        args[i].rounds = rounds;
        args[i].size = size;
        if (pthread_create(&tids[i], NULL, pool_thread_main, &args[i])) {
            fprintf(stderr, "ops: pthread_create failed\n");
            exit(3);
        }
    }
    for (i = 0; i < nthreads; i++) {
        pthread_join(tids[i], NULL);
        ok += args[i].ok;
        oom += args[i].oom;
        other += args[i].other;
    }
    pthread_barrier_destroy(&round);
    out("poolthreads %lu ok=%lu oom=%lu other=%lu max=%llu", nthreads, ok, oom, other,
        args[0].max);
    free(args);
    free(tids);
}

int op_footprint(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    size_t v[4] = {0, 0, 0, 0};
    fn_cuShimFootprint fp = NULL;
    void *h;
    NARGS(1);
    if (parse_num(f[1], &a) || a >= MAX_DEVICES)
        return -1;
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h && d->sym)
        *(void **)&fp = d->sym(h, "cuShimFootprint");
    rc = fp ? fp((int)a, &v[0], &v[1], &v[2], &v[3]) : CUDA_ERROR_NOT_FOUND;
    out("footprint %llu rc=%d allocations=%zu pool_cache=%zu graph=%zu context=%zu", a, rc,
        v[0], v[1], v[2], v[3]);
    return 0;
}

int op_sync(const struct drv *d, char **f, int nf) {
    CUresult rc;
    fn_cuCtxSynchronize sync;
    NARGS(0);
    *(void **)&sync = raw_sym(d, "cuCtxSynchronize");
    rc = sync ? sync() : CUDA_ERROR_NOT_FOUND;
    out("sync rc=%d", rc);
    return 0;
}

int op_streamsync(const struct drv *d, char **f, int nf) {
    CUresult rc;
    fn_cuStreamSynchronize sync;
    CUstream st = NULL;
    NARGS(1);
    if (stream_arg(f[1], &st))
        return -1;
    *(void **)&sync = raw_sym(d, "cuStreamSynchronize");
    rc = sync ? sync(st) : CUDA_ERROR_NOT_FOUND;
    out("streamsync %s rc=%d", f[1], rc);
    return 0;
}

int op_pooltrim(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0;
    CUresult rc;
    CUmemoryPool pool = NULL;
    unsigned long long value = 0;
    int attr = 4;
    NARGS(2);
    if (!strcmp(op, "poolattr")) {
        attr = pool_attr_number(f[2]);
        if (attr < 0)
            return -1;
    } else if (parse_size(f[2], &a)) {
        return -1;
    }
    rc = named_pool(d, f[1], &pool);
    if (rc == -1)
        return -1;
    if (!rc && !strcmp(op, "pooltrim")) {
        rc = CALL(d, cuMemPoolTrimTo, pool, (size_t)a);
    } else if (!rc && !strcmp(op, "poolthreshold")) {
        value = a;
        rc = CALL(d, cuMemPoolSetAttribute, pool, 4, &value);
    } else if (!rc) {
        rc = CALL(d, cuMemPoolGetAttribute, pool, attr, &value);
    }
    if (!strcmp(op, "poolattr"))
        out("poolattr %s %s rc=%d value=%llu", f[1], f[2], rc, value);
    else
        out("%s %s %llu rc=%d", op, f[1], a, rc);
    return 0;
}

int op_graph(const struct drv *d, char **f, int nf) {
    CUresult rc;
    CUgraph g = NULL;
    NARGS(0);
    rc = CALL(d, cuGraphCreate, &g, 0);
    out("graph rc=%d slot=%zu", rc, push(&graphs, (unsigned long long)(size_t)g, 0, rc == 0));
    return 0;
}

int op_graphalloc(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0, b = 0;
    CUresult rc;
    CUDA_MEM_ALLOC_NODE_PARAMS params;
    CUgraphNode node = NULL;
    struct slot *g;
    if (nf != 3 && nf != 4)
        return -1;
    g = get_slot(&graphs, f[1]);
    b = (unsigned long long)cur_dev;
    if (!g || parse_size(f[2], &a) || (nf == 4 && (parse_num(f[3], &b) || b >= MAX_DEVICES)))
        return -1;
    memset(&params, 0, sizeof params);
    params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params.poolProps.location.id = (int)b;
    params.bytesize = a;
    rc = CALL(d, cuGraphAddMemAllocNode, &node, (CUgraph)(size_t)g->value, NULL, 0, &params);
    if (rc)
        params.dptr = 0;
    print_alloc(op, a, rc, push(&ptrs, params.dptr, a, 0), params.dptr);
    return 0;
}

int op_graphfree(const struct drv *d, char **f, int nf) {
    CUresult rc;
    CUgraphNode node = NULL;
    struct slot *g, *s;
    NARGS(2);
    g = get_slot(&graphs, f[1]);
    s = get_slot(&ptrs, f[2]);
    if (!g || !s)
        return -1;
    rc = CALL(d, cuGraphAddMemFreeNode, &node, (CUgraph)(size_t)g->value, NULL, 0, s->value);
    out("graphfree %s %s rc=%d", f[1], f[2], rc);
    return 0;
}

int op_instantiate(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0;
    CUresult rc;
    CUgraphExec e = NULL;
    struct slot *g;
    int with_params = !strcmp(op, "instantiatep");
    int result = -1;
    if (with_params ? nf != 4 : (nf != 2 && nf != 3))
        return -1;
    g = get_slot(&graphs, f[1]);
    if (!g || (nf >= 3 && parse_num(f[2], &a)))
        return -1;
    if (with_params) {
        CUDA_GRAPH_INSTANTIATE_PARAMS ip;
        CUstream st = NULL;
        if (stream_arg(f[3], &st))
            return -1;
        memset(&ip, 0, sizeof ip);
        ip.flags = a;
        ip.hUploadStream = st;
        ip.result_out = -1;
        rc = CALL(d, cuGraphInstantiateWithParams, &e, (CUgraph)(size_t)g->value, &ip);
        result = ip.result_out;
    } else {
        rc = CALL(d, cuGraphInstantiateWithFlags, &e, (CUgraph)(size_t)g->value, a);
    }
    if (rc)
        e = NULL;
    if (with_params)
        out("%s %s rc=%d slot=%zu result=%d", op, f[1], rc,
            push(&execs, (unsigned long long)(size_t)e, 0, rc == 0), result);
    else
        out("%s %s rc=%d slot=%zu", op, f[1], rc,
            push(&execs, (unsigned long long)(size_t)e, 0, rc == 0));
    return 0;
}

int op_instantiate1(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    typedef CUresult (*fn_logged)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
    fn_logged inst;
    CUgraphExec e = NULL;
    CUgraphNode err = NULL;
    char log[64];
    struct slot *g;
    NARGS(1);
    g = get_slot(&graphs, f[1]);
    if (!g)
        return -1;
    *(void **)&inst = raw_sym(d, op[11] == '1' ? "cuGraphInstantiate" : "cuGraphInstantiate_v2");
    rc = inst ? inst(&e, (CUgraph)(size_t)g->value, &err, log, sizeof log)
              : CUDA_ERROR_NOT_FOUND;
    if (rc)
        e = NULL;
    out("%s %s rc=%d slot=%zu", op, f[1], rc,
        push(&execs, (unsigned long long)(size_t)e, 0, rc == 0));
    return 0;
}

int op_upload(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    CUstream st = NULL;
    struct slot *e;
    NARGS(2);
    e = get_slot(&execs, f[1]);
    if (!e || stream_arg(f[2], &st))
        return -1;
    if (!strcmp(op, "upload"))
        rc = CALL(d, cuGraphUpload, (CUgraphExec)(size_t)e->value, st);
    else
        rc = CALL(d, cuGraphLaunch, (CUgraphExec)(size_t)e->value, st);
    out("%s %s %s rc=%d", op, f[1], f[2], rc);
    return 0;
}

int op_execdestroy(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    int exec = !strcmp(op, "execdestroy");
    struct slot *s;
    NARGS(1);
    s = get_slot(exec ? &execs : &graphs, f[1]);
    if (!s)
        return -1;
    if (exec)
        rc = CALL(d, cuGraphExecDestroy, (CUgraphExec)(size_t)s->value);
    else
        rc = CALL(d, cuGraphDestroy, (CUgraph)(size_t)s->value);
    if (!rc)
        s->live = 0;
    out("%s %s rc=%d", op, f[1], rc);
    return 0;
}

int op_graphtrim(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0;
    CUresult rc;
    unsigned long long value = 0;
    int attr = -1;
    CUdevice dev = 0;
    int trim = !strcmp(op, "graphtrim");
    NARGS(trim ? 1 : 2);
    if (parse_num(f[1], &a) || a >= MAX_DEVICES)
        return -1;
    if (!trim) {
        const char *names[] = {"used", "usedhigh", "reserved", "reservedhigh"};
        int i;
        for (i = 0; i < 4; i++)
            if (!strcmp(f[2], names[i]))
                attr = i;
        if (attr < 0)
            return -1;
    }
    rc = CALL(d, cuDeviceGet, &dev, (int)a);
    if (!rc && trim)
        rc = CALL(d, cuDeviceGraphMemTrim, dev);
    else if (!rc)
        rc = CALL(d, cuDeviceGetGraphMemAttribute, dev, attr, &value);
    if (trim)
        out("graphtrim %llu rc=%d", a, rc);
    else
        out("graphattr %llu %s rc=%d value=%llu", a, f[2], rc, value);
    return 0;
}

int op_graphnodes(const struct drv *d, char **f, int nf) {
    CUresult rc;
    fn_cuGraphGetNodes get;
    fn_cuGraphNodeGetType type_of;
    CUgraphNode nodes[64];
    size_t n = 64, i, allocs = 0, frees = 0;
    struct slot *g;
    NARGS(1);
    g = get_slot(&graphs, f[1]);
    if (!g)
        return -1;
    *(void **)&get = raw_sym(d, "cuGraphGetNodes");
    *(void **)&type_of = raw_sym(d, "cuGraphNodeGetType");
    rc = get && type_of ? get((CUgraph)(size_t)g->value, nodes, &n) : CUDA_ERROR_NOT_FOUND;
    if (rc)
        n = 0;
    for (i = 0; i < n; i++) {
        int t = -1;
        if (!type_of(nodes[i], &t)) {
            allocs += t == 10;
            frees += t == 11;
        }
    }
    out("graphnodes %s rc=%d n=%zu alloc=%zu free=%zu", f[1], rc, n, allocs, frees);
    return 0;
}

/* graph memory in the interposer */
int op_graphthreads(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0, b = 0, c = 0;
    NARGS(3);
    if (parse_num(f[1], &a) || parse_num(f[2], &b) || parse_size(f[3], &c) || !a)
        return -1;
    graph_threads(d, (unsigned long)a, b, c);
    return 0;
}

int op_poolthreads(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0, b = 0, c = 0;
    NARGS(3);
    if (parse_num(f[1], &a) || a == 0 || a > 256 || parse_num(f[2], &b) ||
        parse_size(f[3], &c))
        return -1;
    run_pool_threads(d, (unsigned long)a, (unsigned long)b, c);
    return 0;
}
