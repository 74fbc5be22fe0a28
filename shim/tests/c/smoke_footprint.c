/* The smoke scenarios of the footprint: pools that keep memory, graph memory. */
#define _GNU_SOURCE
#include "smoke.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The footprint parts of device 0: live allocations, pool cache, graph memory. */
static void footprint_is(size_t allocations, size_t pool_cache, size_t graph, int line) {
    size_t a = 1, p = 1, g = 1, c = 1, fr = 0, to = 0;
    CHECK(cuShimFootprint(0, &a, &p, &g, &c) == 0);
    CHECK(cuMemGetInfo_v2(&fr, &to) == 0);
    if (a != allocations || p != pool_cache || g != graph || c != 0 ||
        fr != to - (a + p + g)) {
        fprintf(stderr, "line %d: footprint %zu %zu %zu %zu free %zu of %zu\n", line, a, p, g,
                c, fr, to);
        failures++;
    }
}
#define FOOTPRINT(a, p, g) footprint_is((a), (p), (g), __LINE__)

static unsigned long long pool_attr(CUmemoryPool pool, int attr) {
    unsigned long long v = 0;
    OK(cuMemPoolGetAttribute(pool, attr, &v));
    return v;
}

/* CUDA_SHIM_MEMORY=64MiB */
void scenario_pool_cache(void) {
    CUdeviceptr a = 0, b = 0, c = 0, big = 0;
    CUmemoryPool def = NULL, pool = NULL, host = NULL;
    CUevent ev = NULL;
    unsigned long long v;
    OK(cuInit(0));
    CHECK(cuShimFootprint(7, NULL, NULL, NULL, NULL) == 101);
    use_primary(0);
    OK(cuDeviceGetDefaultMemPool(&def, 0));
    FOOTPRINT(0, 0, 0);
    /* 3 MiB reserve two chunks; the unused MiB is pool cache */
    OK(cuMemAllocAsync(&a, 3 * MiB, NULL));
    FOOTPRINT(3 * MiB, 1 * MiB, 0);
    CHECK(pool_attr(def, 5) == 4 * MiB && pool_attr(def, 7) == 3 * MiB);
    /* a free returns it to the pool: the footprint stays */
    OK(cuMemFreeAsync(a, NULL));
    FOOTPRINT(0, 4 * MiB, 0);
    CHECK(pool_attr(def, 5) == 4 * MiB && pool_attr(def, 7) == 0);
    CHECK(cuMemAlloc_v2(&big, 61 * MiB) == 2);
    OK(cuMemAlloc_v2(&big, 60 * MiB));
    OK(cuMemFree_v2(big));
    /* reuse needs no growth */
    OK(cuMemAllocAsync(&a, 4 * MiB, NULL));
    FOOTPRINT(4 * MiB, 0, 0);
    OK(cuMemFreeAsync(a, NULL));
    /* a synchronize releases what is above the threshold (0) */
    OK(cuStreamSynchronize(NULL));
    FOOTPRINT(0, 0, 0);
    CHECK(pool_attr(def, 5) == 0 && pool_attr(def, 6) == 4 * MiB);
    v = 0;
    OK(cuMemPoolSetAttribute(def, 6, &v)); /* reset RESERVED_MEM_HIGH */
    CHECK(pool_attr(def, 6) == 0);
    /* a threshold keeps chunks while at least that much stays */
    v = 5 * MiB;
    OK(cuMemPoolSetAttribute(def, 4, &v));
    OK(cuMemAllocAsync(&a, 8 * MiB, NULL));
    OK(cuMemFreeAsync(a, NULL));
    OK(cuCtxSynchronize());
    FOOTPRINT(0, 6 * MiB, 0);
    /* trim: at least KEEP bytes stay; no-op when it holds less */
    OK(cuMemPoolTrimTo(def, 3 * MiB));
    CHECK(pool_attr(def, 5) == 4 * MiB);
    OK(cuMemPoolTrimTo(def, 16 * MiB));
    CHECK(pool_attr(def, 5) == 4 * MiB);
    OK(cuMemPoolTrimTo(def, 0));
    FOOTPRINT(0, 0, 0);
    v = 0;
    OK(cuMemPoolSetAttribute(def, 4, &v));
    /* chunks under live allocations stay */
    OK(cuMemAllocAsync(&a, 1 * MiB, NULL));
    OK(cuMemAllocAsync(&b, 3 * MiB, NULL));
    OK(cuMemFreeAsync(a, NULL));
    OK(cuMemPoolTrimTo(def, 0));
    FOOTPRINT(3 * MiB, 1 * MiB, 0);
    OK(cuMemFreeAsync(b, NULL));
    /* an event synchronize is a synchronisation too */
    OK(cuEventCreate(&ev, 0));
    OK(cuEventSynchronize(ev));
    FOOTPRINT(0, 0, 0);
    OK(cuEventDestroy_v2(ev));
    /* only the growth has to fit on the device */
    OK(cuMemAlloc_v2(&big, 63 * MiB));
    CHECK(cuMemAllocAsync(&a, 1 * MiB, NULL) == 2);
    FOOTPRINT(63 * MiB, 0, 0);
    OK(cuMemFree_v2(big));
    /* host pools charge no device; they still report their reservation */
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = 3; /* HOST_NUMA */
    OK(cuMemPoolCreate(&host, &props));
    OK(cuMemAllocFromPoolAsync(&a, 5 * MiB, host, NULL));
    FOOTPRINT(0, 0, 0);
    CHECK(pool_attr(host, 5) == 6 * MiB && pool_attr(host, 7) == 5 * MiB);
    OK(cuMemFreeAsync(a, NULL));
    /* a destroyed pool keeps what live allocations use, and lets go of it after */
    props.location.type = 1;
    OK(cuMemPoolCreate(&pool, &props));
    OK(cuMemAllocFromPoolAsync(&a, 3 * MiB, pool, NULL));
    OK(cuMemAllocFromPoolAsync(&b, 2 * MiB, pool, NULL));
    OK(cuMemFreeAsync(b, NULL));
    FOOTPRINT(3 * MiB, 3 * MiB, 0);
    OK(cuMemPoolDestroy(pool));
    FOOTPRINT(3 * MiB, 1 * MiB, 0);
    OK(cuMemFreeAsync(a, NULL));
    FOOTPRINT(0, 0, 0);
    /* cuda.h: cuCtxDestroy "will not destroy memory allocations by ... cuMemAllocAsync()":
     * a created context's pool allocation stays, and any context frees it */
    {
        CUcontext own = NULL;
        OK(cuCtxCreate_v2(&own, 0, 0));
        OK(cuMemAllocAsync(&a, 3 * MiB, NULL));
        OK(cuCtxDestroy_v2(own)); /* popped: the primary context is current again */
        FOOTPRINT(3 * MiB, 1 * MiB, 0);
        CHECK(in_use(0) == 3 * MiB && live(0) == 1);
        OK(cuMemFree_v2(a));
        CHECK(in_use(0) == 0 && live(0) == 0);
    }
    /* a reset (device-wide) frees the device's pool allocations, whichever context's
     * stream made them; its pools release what they keep */
    {
        CUcontext own = NULL;
        OK(cuCtxCreate_v2(&own, 0, 0));
        OK(cuMemAllocAsync(&c, 2 * MiB, NULL));
        OK(cuCtxDestroy_v2(own));
    }
    OK(cuMemAllocAsync(&a, 3 * MiB, NULL));
    OK(cuMemAllocAsync(&b, 1 * MiB, NULL));
    OK(cuMemFreeAsync(b, NULL));
    FOOTPRINT(5 * MiB, 1 * MiB, 0);
    OK(cuDevicePrimaryCtxReset_v2(0));
    FOOTPRINT(0, 0, 0);
    CHECK(in_use(0) == 0 && live(0) == 0);
    CHECK(cuMemFree_v2(c) == 1);
}

/* CUDA_SHIM_POOL_CHUNK=32MiB */
void scenario_pool_chunk(void) {
    CUdeviceptr a = 0;
    OK(cuInit(0));
    use_primary(0);
    OK(cuMemAllocAsync(&a, 1 * MiB, NULL));
    FOOTPRINT(1 * MiB, 31 * MiB, 0);
    OK(cuMemFreeAsync(a, NULL));
    OK(cuStreamSynchronize(NULL));
    FOOTPRINT(0, 0, 0);
}

static unsigned long long graph_attr(int attr) {
    unsigned long long v = 0;
    OK(cuDeviceGetGraphMemAttribute(0, attr, &v));
    return v;
}

static CUgraphNode alloc_node(CUgraph g, const CUgraphNode *deps, size_t n, size_t bytes,
                              CUdeviceptr *dptr) {
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    CUgraphNode node = NULL;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = 1;
    p.poolProps.location.type = 1;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    OK(cuGraphAddMemAllocNode(&node, g, deps, n, &p));
    *dptr = p.dptr;
    return node;
}

/* CUDA_SHIM_MEMORY=64MiB */
void scenario_graphs(void) {
    CUgraph g = NULL, g2 = NULL;
    CUgraphNode n1, n2, n3, nodes[4];
    CUgraphExec e = NULL, e2 = NULL;
    CUdeviceptr d1 = 0, d2 = 0, c = 0, big = 0;
    CUstream s = NULL;
    size_t count = 0;
    int type = -1;
    unsigned long long zero = 0;
    void *fn = NULL, *want = NULL;
    OK(cuInit(0));
    use_primary(0);
    OK(cuStreamCreate(&s, 0));
    CHECK(cuGraphCreate(&g, 1) == 1);
    OK(cuGraphCreate(&g, 0));
    n1 = alloc_node(g, NULL, 0, 3 * MiB, &d1);
    n2 = alloc_node(g, &n1, 1, 5 * MiB, &d2);
    CHECK(d1 && d2 && d1 != d2);
    OK(cuGraphAddMemFreeNode(&n3, g, &n2, 1, d1));
    CHECK(cuGraphAddMemFreeNode(&n3, g, NULL, 0, d1) == 1); /* freed twice */
    CHECK(cuGraphAddMemFreeNode(&n3, g, NULL, 0, d1 + 4096) == 1); /* not an allocation */
    OK(cuGraphNodeGetType(n1, &type));
    CHECK(type == 10);
    {
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        CUdeviceptr freed = 0;
        OK(cuGraphMemAllocNodeGetParams(n2, &p));
        CHECK(p.bytesize == 5 * MiB && p.dptr == d2 && p.poolProps.location.id == 0);
        CHECK(cuGraphMemAllocNodeGetParams(n3, &p) == 1);
        OK(cuGraphMemFreeNodeGetParams(n3, &freed));
        CHECK(freed == d1);
    }
    {
        /* a host-located allocation node charges no device */
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        CUgraph gh = NULL;
        CUgraphNode hn = NULL;
        CUgraphExec he = NULL;
        memset(&p, 0, sizeof p);
        p.poolProps.allocType = 1;
        p.poolProps.location.type = 3; /* HOST_NUMA */
        p.bytesize = 4 * MiB;
        OK(cuGraphCreate(&gh, 0));
        OK(cuGraphAddMemAllocNode(&hn, gh, NULL, 0, &p));
        p.poolProps.handleTypes = 1; /* no IPC for graph memory */
        CHECK(cuGraphAddMemAllocNode(&hn, gh, NULL, 0, &p) == 1);
        OK(cuGraphInstantiateWithFlags(&he, gh, 1));
        OK(cuGraphLaunch(he, NULL));
        FOOTPRINT(0, 0, 0);
        OK(cuMemFree_v2(p.dptr));
        OK(cuGraphExecDestroy(he));
        OK(cuGraphDestroy(gh));
    }
    OK(cuGraphGetNodes(g, NULL, &count));
    CHECK(count == 3);
    count = 4;
    nodes[3] = (CUgraphNode)1;
    OK(cuGraphGetNodes(g, nodes, &count));
    CHECK(count == 3 && nodes[0] == n1 && nodes[2] == n3 && nodes[3] == NULL);
    /* nothing is backed before an upload or a launch */
    OK(cuGraphInstantiateWithFlags(&e, g, 0));
    CHECK(cuGraphInstantiateWithFlags(&e2, g, 0) == 1); /* one executable graph at a time */
    FOOTPRINT(0, 0, 0);
    OK(cuGraphUpload(e, s));
    FOOTPRINT(0, 0, 8 * MiB);
    CHECK(graph_attr(2) == 8 * MiB && graph_attr(0) == 0);
    /* not live yet: no copies */
    char buf[16] = "graph memory", back[16] = {0};
    CHECK(cuMemcpyHtoD_v2(d2, buf, sizeof buf) == 1);
    /* a launch: d1 is freed inside the graph, d2 stays live */
    OK(cuGraphLaunch(e, NULL));
    OK(cuMemcpyHtoD_v2(d2 + 4096, buf, sizeof buf));
    OK(cuMemcpyDtoH_v2(back, d2 + 4096, sizeof back));
    CHECK(!memcmp(buf, back, sizeof buf));
    CHECK(cuMemcpyHtoD_v2(d1, buf, sizeof buf) == 1); /* freed inside the graph */
    {
        CUdeviceptr base = 0;
        size_t size = 0;
        OK(cuMemGetAddressRange_v2(&base, &size, d2 + 100));
        CHECK(base == d2 && size == 5 * MiB);
    }
    FOOTPRINT(0, 0, 8 * MiB);
    CHECK(graph_attr(0) == 5 * MiB && graph_attr(1) == 8 * MiB && graph_attr(3) == 8 * MiB);
    CHECK(in_use(0) == 0);
    CHECK(cuGraphLaunch(e, s) == 1); /* d2 still live */
    OK(cuMemFreeAsync(d2, s));
    CHECK(graph_attr(0) == 0 && graph_attr(2) == 8 * MiB);
    CHECK(cuMemcpyHtoD_v2(d2, buf, sizeof buf) == 1);
    OK(cuGraphLaunch(e, s));
    OK(cuMemFree_v2(d2));
    CHECK(cuMemFree_v2(d2) == 1);
    /* trim releases what no live allocation uses */
    OK(cuDeviceGraphMemTrim(0));
    FOOTPRINT(0, 0, 0);
    OK(cuDeviceSetGraphMemAttribute(0, 3, &zero));
    CHECK(graph_attr(3) == 0);
    CHECK(cuDeviceSetGraphMemAttribute(0, 2, &zero) == 1);
    /* a launch whose memory does not fit fails and changes nothing */
    OK(cuMemAlloc_v2(&big, 60 * MiB));
    CHECK(cuGraphLaunch(e, s) == 2);
    CHECK(cuGraphUpload(e, s) == 2);
    FOOTPRINT(60 * MiB, 0, 0);
    CHECK(graph_attr(0) == 0);
    OK(cuMemFree_v2(big));
    /* auto-free on launch: each launch frees the last one's unfreed allocations */
    OK(cuGraphExecDestroy(e));
    OK(cuGraphInstantiateWithFlags(&e2, g, 1));
    OK(cuGraphLaunch(e2, s));
    OK(cuGraphLaunch(e2, s));
    CHECK(graph_attr(0) == 5 * MiB);
    FOOTPRINT(0, 0, 8 * MiB);
    /* unfreed allocations outlive their executable graph and graph */
    OK(cuGraphExecDestroy(e2));
    OK(cuGraphDestroy(g));
    CHECK(graph_attr(0) == 5 * MiB);
    OK(cuDeviceGraphMemTrim(0));
    FOOTPRINT(0, 0, 6 * MiB);
    OK(cuMemFreeAsync(d2, s));
    OK(cuDeviceGraphMemTrim(0));
    FOOTPRINT(0, 0, 0);
    CHECK(cuGraphDestroy(g) == 1);

    /* capture makes the same nodes */
    OK(cuStreamBeginCapture_v2(s, 0));
    OK(cuMemAllocAsync(&c, 2 * MiB, s));
    FOOTPRINT(0, 0, 0);
    OK(cuMemFreeAsync(c, s));
    OK(cuStreamEndCapture(s, &g2));
    count = 2;
    OK(cuGraphGetNodes(g2, nodes, &count));
    CHECK(count == 2);
    OK(cuGraphNodeGetType(nodes[0], &type));
    CHECK(type == 10);
    OK(cuGraphNodeGetType(nodes[1], &type));
    CHECK(type == 11);
    {
        CUDA_GRAPH_INSTANTIATE_PARAMS ip;
        memset(&ip, 0, sizeof ip);
        ip.flags = 2; /* UPLOAD */
        ip.hUploadStream = s;
        ip.result_out = 7;
        OK(cuGraphInstantiateWithParams(&e, g2, &ip));
        CHECK(ip.result_out == 0);
        FOOTPRINT(0, 0, 2 * MiB);
        OK(cuGraphLaunch(e, s));
        CHECK(graph_attr(0) == 0);
        OK(cuGraphExecDestroy(e));
        ip.flags = 4; /* device launch: not simulated */
        CHECK(cuGraphInstantiateWithParams(&e, g2, &ip) == 801);
        CHECK(ip.result_out == 1);
    }
    /* capture into an existing graph: its nodes go there; dependencies must be its nodes */
    {
        CUgraph g3, same, child = NULL;
        OK(cuGraphCreate(&g3, 0));
        OK(cuStreamBeginCaptureToGraph(s, g3, NULL, NULL, 0, 0));
        OK(cuMemAllocAsync(&c, 2 * MiB, s));
        /* only the graph pool's reservation from the launch above: the capture adds nothing */
        FOOTPRINT(0, 0, 2 * MiB);
        OK(cuMemFreeAsync(c, s));
        OK(cuStreamEndCapture(s, &same));
        CHECK(same == g3);
        count = 2;
        OK(cuGraphGetNodes(g3, nodes, &count));
        CHECK(count == 2);
        /* memory nodes are no child graph nodes, and an unknown node is none either */
        CHECK(cuGraphChildGraphNodeGetGraph(nodes[0], &child) == 1 && child == NULL);
        CHECK(cuGraphChildGraphNodeGetGraph((CUgraphNode)g3, &child) == 1);
        OK(cuStreamBeginCaptureToGraph(s, g3, &nodes[1], NULL, 1, 0));
        CHECK(cuStreamBeginCaptureToGraph(s, g3, NULL, NULL, 0, 0) == 401); /* ILLEGAL_STATE */
        OK(cuStreamEndCapture(s, &same));
        CHECK(cuStreamBeginCaptureToGraph(s, g3, (CUgraphNode *)&g2, NULL, 1, 0) == 1);
        CHECK(cuStreamBeginCaptureToGraph(s, (CUgraph)nodes[0], NULL, NULL, 0, 0) == 1);
        /* the per-thread default stream cannot capture */
        CHECK(cuStreamBeginCapture_ptsz(NULL) == 900);
        OK(cuGraphDestroy(g3));
    }
    /* the CUDA 10 form */
    {
        CUgraphNode err = (CUgraphNode)1;
        OK(cuGraphInstantiate(&e, g2, &err, NULL, 0));
        CHECK(err == NULL);
        OK(cuGraphExecDestroy(e));
    }
    OK(cuGraphDestroy(g2));
    OK(cuDeviceGraphMemTrim(0));
    FOOTPRINT(0, 0, 0);
    /* cuGetProcAddress: cuGraphInstantiate is the flags form from CUDA 12.0 */
    OK(cuGetProcAddress("cuGraphInstantiate", &fn, 12000, 0));
    want = dlsym(libcuda(), "cuGraphInstantiateWithFlags");
    CHECK(fn == want && fn != NULL);
    OK(cuGetProcAddress("cuGraphInstantiate", &fn, 11000, 0));
    CHECK(fn == dlsym(libcuda(), "cuGraphInstantiate_v2"));

    /* a primary context reset frees live graph allocations and releases graph memory and
     * pool caches, whatever the release thresholds */
    {
        unsigned long long keep = 1ull << 40;
        CUmemoryPool def = NULL;
        OK(cuGraphCreate(&g, 0));
        alloc_node(g, NULL, 0, 3 * MiB, &d1);
        OK(cuGraphInstantiateWithFlags(&e, g, 0));
        OK(cuGraphLaunch(e, s));
        OK(cuDeviceGetDefaultMemPool(&def, 0));
        OK(cuMemPoolSetAttribute(def, 4, &keep));
        OK(cuMemAllocAsync(&c, 1 * MiB, s));
        OK(cuMemFreeAsync(c, s));
        OK(cuStreamSynchronize(s));
        FOOTPRINT(0, 2 * MiB, 4 * MiB);
        OK(cuDevicePrimaryCtxReset_v2(0));
        FOOTPRINT(0, 0, 0);
        CHECK(graph_attr(0) == 0);
        CHECK(cuMemFree_v2(d1) == 1);
        /* the executable graph stays usable */
        use_primary(0);
        OK(cuGraphLaunch(e, NULL));
        FOOTPRINT(0, 0, 4 * MiB);
        OK(cuMemFree_v2(d1));
    }
}
