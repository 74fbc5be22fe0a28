/* The ops on placement, contexts, stream capture and context memory (their rows:
 * ops_table.h).
 *   asyncon:SIZE:STREAM        cuMemAllocAsync on stream slot STREAM
 *   defpoolon:DEV:SIZE:STREAM  from device DEV's default pool, on stream slot STREAM
 *                              (or "n": the NULL stream)
 *   hostpool:SIZE              from a pool on host NUMA node 0, on the NULL stream
 *   locpool:TYPE:ID:SIZE       from CUDA 13's cuMemGetDefaultMemPool of location TYPE
 *                              (CUmemLocationType) ID, pinned, on the NULL stream (for
 *                              DEVICE_LOCALITY_DOMAIN, 6: device ID's locality domain 0)
 *   poolat:TYPE:ID:SIZE        the same from a pool cuMemPoolCreate makes there
 *   ctxcreate                  cuCtxCreate_v2 on the current device (made current)
 *   ctxdestroy:SLOT            cuCtxDestroy_v2 of a created context
 *   ctxreset:DEV / ctxrelease:DEV  cuDevicePrimaryCtxReset_v2 / _Release_v2
 *   capture:STREAM / endcapture:STREAM  cuStreamBeginCapture_v2 / cuStreamEndCapture
 *   pcapture:STREAM / pendcapture:STREAM  the same on the client's own lookup path
 *                              (pendcapture: a graph slot, "slot=S", and "same=1" when it
 *                              is graph slot GRAPH of a recapture's)
 *   recapture:STREAM:GRAPH     cuStreamBeginRecaptureToGraph of graph slot GRAPH (own path)
 *   cigcapture:STREAM / cigend:STREAM  cuStreamBeginCaptureToCig (a D3D12 command list
 *                              parameter) / cuStreamEndCaptureToCig (own path)
 *   ctxgrow:SIZE               cuShimContextGrowth (the shim's: the driver takes SIZE more
 *                              for the current context, announced by no call)
 *   green:DEV                  a green context of all of device DEV's SMs
 *                              (cuDeviceGetDevResource, cuDevResourceGenerateDesc,
 *                              cuGreenCtxCreate): a green slot, "green DEV rc=R slot=S"
 *   greendestroy:SLOT          cuGreenCtxDestroy
 *   greenctx:SLOT              cuCtxFromGreenCtx, made current (cuCtxSetCurrent)
 *   greenstream:SLOT           cuGreenCtxStreamCreate (non-blocking): a stream slot
 *                              (all on the client's own lookup path)
 *   ctxretain:DEV              cuDevicePrimaryCtxRetain (one more reference)
 *   ctxattach / ctxdetach:SLOT cuCtxAttach of the current context / cuCtxDetach of a
 *                              created one (deprecated; dlsym on the driver's handle)
 *
 * Context memory through the client's dlsym on the driver's handle:
 *   ctxcreate3 / ctxcreate4      cuCtxCreate_v3 / _v4 on the current device (made current);
 *                                a context slot, as ctxcreate
 *   setlimit:LIMIT:VALUE         cuCtxSetLimit (LIMIT a CUlimit number, VALUE a size)
 *   getlimit:LIMIT               cuCtxGetLimit: "getlimit LIMIT rc=R value=V"
 *
 * Context memory on the client's own lookup path (linked, dlsym, cuGetProcAddress):
 *   pctxcreate                   cuCtxCreate_v2 on the current device (made current); a
 *                                context slot, as ctxcreate: "pctxcreate rc=R slot=S"
 *   psetlimit:LIMIT:VALUE        cuCtxSetLimit: "psetlimit LIMIT rc=R"
 *   pctxthreads:N                N threads (at most 16) each create a context on the
 *                                current device at once (kept to the end): "pctxthreads N
 *                                ok=K" (K: how many succeeded) */
#define _GNU_SOURCE
#include "ops_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct ctx_thread {
    const struct drv *d;
    pthread_barrier_t *start;
    CUdevice dev;
    CUresult rc;
};

static void *ctx_thread_main(void *p) {
    struct ctx_thread *t = p;
    CUcontext ctx = NULL;
    pthread_barrier_wait(t->start);
    t->rc = CALL(t->d, cuCtxCreate_v2, &ctx, 0, t->dev);
    return NULL;
}

int op_asyncon(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0, b = 0;
    CUresult rc;
    CUdeviceptr dp = 0;
    CUstream st = NULL;
    const char *stream_word = NULL;
    int is_on = !strcmp(op, "asyncon"), is_def = !strcmp(op, "defpoolon");
    NARGS(is_on ? 2 : is_def ? 3 : 1);
    if (parse_size(f[is_def ? 2 : 1], &a))
        return -1;
    if (is_on)
        stream_word = f[2];
    else if (is_def)
        stream_word = f[3];
    if (stream_word && strcmp(stream_word, "n")) {
        struct slot *s = get_slot(&streams, stream_word);
        if (!s)
            return -1;
        st = (CUstream)(size_t)s->value;
    }
    if (is_on) {
        rc = CALL(d, cuMemAllocAsync, &dp, a, st);
    } else if (is_def) {
        CUmemoryPool pool = NULL;
        CUdevice dev = 0;
        if (parse_num(f[1], &b))
            return -1;
        rc = CALL(d, cuDeviceGet, &dev, (int)b);
        if (!rc)
            rc = CALL(d, cuDeviceGetDefaultMemPool, &pool, dev);
        if (!rc)
            rc = CALL(d, cuMemAllocFromPoolAsync, &dp, a, pool, st);
    } else {
        rc = 0;
        if (!host_pool) {
            CUmemPoolProps props;
            memset(&props, 0, sizeof props);
            props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            props.location.type = 3; /* CU_MEM_LOCATION_TYPE_HOST_NUMA */
            props.location.id = 0;
            rc = CALL(d, cuMemPoolCreate, &host_pool, &props);
        }
        if (!rc)
            rc = CALL(d, cuMemAllocFromPoolAsync, &dp, a, host_pool, NULL);
    }
    if (rc)
        dp = 0;
    print_alloc(op, a, rc, push(&ptrs, dp, a, rc == 0), dp);
    return 0;
}

int op_locpool(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0, b = 0, c = 0;
    CUresult rc;
    CUdeviceptr dp = 0;
    CUmemoryPool pool = NULL;
    CUmemLocation loc;
    NARGS(3);
    if (parse_num(f[1], &a) || parse_num(f[2], &b) || parse_size(f[3], &c))
        return -1;
    set_location(&loc, (int)a, (int)b);
    if (!strcmp(op, "poolat")) {
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location = loc;
        rc = CALL(d, cuMemPoolCreate, &pool, &props);
    } else {
        rc = CALL(d, cuMemGetDefaultMemPool, &pool, &loc, CU_MEM_ALLOCATION_TYPE_PINNED);
    }
    if (!rc)
        rc = CALL(d, cuMemAllocFromPoolAsync, &dp, c, pool, NULL);
    if (rc)
        dp = 0;
    print_alloc(op, c, rc, push(&ptrs, dp, c, rc == 0), dp);
    return 0;
}

int op_ctxretain(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    NARGS(1);
    if (parse_num(f[1], &a) || a >= MAX_DEVICES)
        return -1;
    rc = CALL(d, cuDeviceGet, &dev, (int)a);
    if (!rc)
        rc = CALL(d, cuDevicePrimaryCtxRetain, &ctx, dev);
    out("ctxretain %llu rc=%d", a, rc);
    return 0;
}

int op_ctxattach(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    typedef CUresult (*fn_attach)(CUcontext *, unsigned int);
    typedef CUresult (*fn_detach)(CUcontext);
    if (!strcmp(op, "ctxattach")) {
        fn_attach attach;
        CUcontext ctx = NULL;
        NARGS(0);
        *(void **)&attach = raw_sym(d, "cuCtxAttach");
        rc = attach ? attach(&ctx, 0) : CUDA_ERROR_NOT_FOUND;
        out("ctxattach rc=%d", rc);
    } else {
        fn_detach detach;
        struct slot *s;
        NARGS(1);
        s = get_slot(&contexts, f[1]);
        if (!s)
            return -1;
        *(void **)&detach = raw_sym(d, "cuCtxDetach");
        rc = detach ? detach((CUcontext)(size_t)s->value) : CUDA_ERROR_NOT_FOUND;
        out("ctxdetach %s rc=%d", f[1], rc);
    }
    return 0;
}

int op_ctxcreate(const struct drv *d, char **f, int nf) {
    CUresult rc;
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    fn_cuCtxCreate_v2 create;
    NARGS(0);
    *(void **)&create = raw_sym(d, "cuCtxCreate_v2");
    rc = CALL(d, cuDeviceGet, &dev, cur_dev);
    if (!rc)
        rc = create ? create(&ctx, 0, dev) : CUDA_ERROR_NOT_FOUND;
    out("ctxcreate rc=%d slot=%zu", rc,
        push(&contexts, (unsigned long long)(size_t)ctx, 0, rc == 0));
    return 0;
}

int op_ctxdestroy(const struct drv *d, char **f, int nf) {
    CUresult rc;
    struct slot *s;
    NARGS(1);
    s = get_slot(&contexts, f[1]);
    if (!s)
        return -1;
    rc = CALL(d, cuCtxDestroy_v2, (CUcontext)(size_t)s->value);
    if (!rc)
        s->live = 0;
    out("ctxdestroy %s rc=%d", f[1], rc);
    return 0;
}

int op_ctxreset(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0;
    CUresult rc;
    CUdevice dev = 0;
    NARGS(1);
    if (parse_num(f[1], &a) || a >= MAX_DEVICES)
        return -1;
    rc = CALL(d, cuDeviceGet, &dev, (int)a);
    if (!rc && !strcmp(op, "ctxreset"))
        rc = CALL(d, cuDevicePrimaryCtxReset_v2, dev);
    else if (!rc)
        rc = CALL(d, cuDevicePrimaryCtxRelease_v2, dev);
    out("%s %llu rc=%d", op, a, rc);
    return 0;
}

int op_capture(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    struct slot *s;
    NARGS(1);
    s = get_slot(&streams, f[1]);
    if (!s)
        return -1;
    if (!strcmp(op, "capture")) {
        fn_cuStreamBeginCapture_v2 begin;
        *(void **)&begin = raw_sym(d, "cuStreamBeginCapture_v2");
        rc = begin ? begin((CUstream)(size_t)s->value, 0) : CUDA_ERROR_NOT_FOUND;
    } else {
        fn_cuStreamEndCapture end;
        CUgraph graph = NULL;
        *(void **)&end = raw_sym(d, "cuStreamEndCapture");
        rc = end ? end((CUstream)(size_t)s->value, &graph) : CUDA_ERROR_NOT_FOUND;
        /* the captured graph is a graph slot */
        out("%s %s rc=%d slot=%zu", op, f[1], rc,
            push(&graphs, (unsigned long long)(size_t)graph, 0, rc == 0 && graph));
        return 0;
    }
    out("%s %s rc=%d", op, f[1], rc);
    return 0;
}

int op_ctxcreate3(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    int rc;
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    NARGS(0);
    rc = CALL(d, cuDeviceGet, &dev, cur_dev);
    if (!rc && !strcmp(op, "ctxcreate3")) {
        fn_cuCtxCreate_v3 create;
        *(void **)&create = raw_sym(d, "cuCtxCreate_v3");
        rc = create ? create(&ctx, NULL, 0, 0, dev) : CUDA_ERROR_NOT_FOUND;
    } else if (!rc) {
        fn_cuCtxCreate_v4 create;
        *(void **)&create = raw_sym(d, "cuCtxCreate_v4");
        rc = create ? create(&ctx, NULL, 0, dev) : CUDA_ERROR_NOT_FOUND;
    }
    out("%s rc=%d slot=%zu", op, rc,
        push(&contexts, (unsigned long long)(size_t)ctx, 0, rc == 0));
    return 0;
}

int op_setlimit(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0, b = 0;
    int rc;
    fn_cuCtxSetLimit set;
    NARGS(2);
    if (parse_num(f[1], &a) || parse_size(f[2], &b))
        return -1;
    *(void **)&set = raw_sym(d, "cuCtxSetLimit");
    rc = set ? set((int)a, b) : CUDA_ERROR_NOT_FOUND;
    out("setlimit %llu rc=%d", a, rc);
    return 0;
}

int op_getlimit(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    int rc;
    fn_cuCtxGetLimit get;
    size_t value = 0;
    NARGS(1);
    if (parse_num(f[1], &a))
        return -1;
    *(void **)&get = raw_sym(d, "cuCtxGetLimit");
    rc = get ? get(&value, (int)a) : CUDA_ERROR_NOT_FOUND;
    out("getlimit %llu rc=%d value=%zu", a, rc, value);
    return 0;
}

int op_pctxcreate(const struct drv *d, char **f, int nf) {
    CUresult rc;
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    if (nf != 1)
        return -1;
    rc = CALL(d, cuDeviceGet, &dev, cur_dev);
    if (!rc)
        rc = CALL(d, cuCtxCreate_v2, &ctx, 0, dev);
    out("pctxcreate rc=%d slot=%zu", rc,
        push(&contexts, (unsigned long long)(size_t)ctx, 0, rc == 0));
    return 0;
}

int op_psetlimit(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0, b = 0;
    CUresult rc;
    if (nf != 3 || parse_num(f[1], &a) || parse_size(f[2], &b))
        return -1;
    rc = CALL(d, cuCtxSetLimit, (int)a, b);
    out("psetlimit %llu rc=%d", a, rc);
    return 0;
}

int op_pctxthreads(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    struct ctx_thread t[16];
    pthread_t tid[16];
    pthread_barrier_t start;
    CUdevice dev = 0;
    unsigned long long i, ok = 0;
    if (nf != 2 || parse_num(f[1], &a) || a == 0 || a > 16)
        return -1;
    rc = CALL(d, cuDeviceGet, &dev, cur_dev);
    if (rc)
        return -1;
    pthread_barrier_init(&start, NULL, (unsigned)a);
    for (i = 0; i < a; i++) {
        t[i].d = d;
        t[i].start = &start;
        t[i].dev = dev;
        t[i].rc = CUDA_ERROR_UNKNOWN;
        if (pthread_create(&tid[i], NULL, ctx_thread_main, &t[i]))
            exit(3);
    }
    for (i = 0; i < a; i++) {
        pthread_join(tid[i], NULL);
        ok += t[i].rc == CUDA_SUCCESS;
    }
    pthread_barrier_destroy(&start);
    out("pctxthreads %llu ok=%llu", a, ok);
    return 0;
}

static CUgraph recaptured; /* the graph of the last recapture: pendcapture says "same=1" */

int op_pcapture(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    struct slot *s, *g = NULL;
    CUstream st;
    if (!strcmp(op, "recapture") ? nf != 3 : nf != 2)
        return -1;
    s = get_slot(&streams, f[1]);
    if (nf == 3)
        g = get_slot(&graphs, f[2]);
    if (!s || (nf == 3 && !g))
        return -1;
    st = (CUstream)(size_t)s->value;
    if (!strcmp(op, "pcapture")) {
        rc = CALL(d, cuStreamBeginCapture_v2, st, 0);
    } else if (!strcmp(op, "recapture")) {
        recaptured = (CUgraph)(size_t)g->value;
        rc = CALL(d, cuStreamBeginRecaptureToGraph, st, 0, recaptured, NULL, NULL);
    } else if (!strcmp(op, "cigcapture")) {
        CUstreamCigParam cig = {1 /* STREAM_CIG_DATA_TYPE_D3D12_COMMAND_LIST */, NULL};
        CUstreamCigCaptureParams params = {&cig};
        rc = CALL(d, cuStreamBeginCaptureToCig, st, &params);
    } else if (!strcmp(op, "cigend")) {
        rc = CALL(d, cuStreamEndCaptureToCig, st);
    } else {
        CUgraph graph = NULL;
        rc = CALL(d, cuStreamEndCapture, st, &graph);
        out("%s %s rc=%d slot=%zu same=%d", op, f[1], rc,
            push(&graphs, (unsigned long long)(size_t)graph, 0, rc == 0 && graph),
            rc == 0 && graph && graph == recaptured);
        return 0;
    }
    out("%s %s rc=%d", op, f[1], rc);
    return 0;
}

static struct slots greens; /* CUgreenCtx, made by green */

int op_green(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0;
    CUresult rc;
    struct slot *s;
    NARGS(1);
    if (!strcmp(op, "green")) {
        CUdevice dev = 0;
        CUdevResource sms;
        CUdevResourceDesc desc = NULL;
        CUgreenCtx g = NULL;
        if (parse_num(f[1], &a) || a >= MAX_DEVICES)
            return -1;
        memset(&sms, 0, sizeof sms);
        rc = CALL(d, cuDeviceGet, &dev, (int)a);
        if (!rc)
            rc = CALL(d, cuDeviceGetDevResource, dev, &sms, 1 /* CU_DEV_RESOURCE_TYPE_SM */);
        if (!rc)
            rc = CALL(d, cuDevResourceGenerateDesc, &desc, &sms, 1);
        if (!rc)
            rc = CALL(d, cuGreenCtxCreate, &g, desc, dev, 0);
        out("green %llu rc=%d slot=%zu", a, rc,
            push(&greens, (unsigned long long)(size_t)g, 0, rc == 0));
        return 0;
    }
    s = get_slot(&greens, f[1]);
    if (!s)
        return -1;
    if (!strcmp(op, "greendestroy")) {
        rc = CALL(d, cuGreenCtxDestroy, (CUgreenCtx)(size_t)s->value);
        if (!rc)
            s->live = 0;
    } else if (!strcmp(op, "greenctx")) {
        CUcontext ctx = NULL;
        rc = CALL(d, cuCtxFromGreenCtx, &ctx, (CUgreenCtx)(size_t)s->value);
        if (!rc)
            rc = CALL(d, cuCtxSetCurrent, ctx);
    } else {
        CUstream st = NULL;
        rc = CALL(d, cuGreenCtxStreamCreate, &st, (CUgreenCtx)(size_t)s->value,
                  1 /* CU_STREAM_NON_BLOCKING */, 0);
        out("%s %s rc=%d slot=%zu", op, f[1], rc,
            push(&streams, (unsigned long long)(size_t)st, 0, rc == 0));
        return 0;
    }
    out("%s %s rc=%d", op, f[1], rc);
    return 0;
}

int op_ctxgrow(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    int rc;
    int (*grow)(size_t);
    NARGS(1);
    if (parse_size(f[1], &a))
        return -1;
    *(void **)&grow = raw_sym(d, "cuShimContextGrowth");
    rc = grow ? grow((size_t)a) : CUDA_ERROR_NOT_FOUND;
    out("ctxgrow rc=%d", rc);
    return 0;
}
