/* Every op of the op interpreter (ops.c) as one X-macro list, one row per op:
 *
 *   OP(name, function)   the op word's first field `name` runs `function` (an op_fn of
 *                        ops_internal.h), defined in the op file of its group
 *
 * Several names may share a function, named for the first of them; it tells them apart by
 * its f[0]. Adding an op: its row here and its function in its group's file. The words
 * that prefix or take several ops (t-, tc-, bg-, fork:, forkexec:, setenv:, waitgone:) are
 * the interpreter's own, not rows. */
#ifndef CUQUOTA_OPS_TABLE_H
#define CUQUOTA_OPS_TABLE_H

#define OP_TABLE \
  /* Devices, plain allocations, virtual memory (ops_memory.c) */ \
  OP("init", op_init) \
  OP("dev", op_dev) \
  OP("noctx", op_noctx) \
  OP("getctx", op_getctx) \
  OP("count", op_count) \
  OP("alloc", op_alloc) \
  OP("managed", op_alloc) \
  OP("async", op_alloc) \
  OP("pool", op_alloc) \
  OP("defpool", op_alloc) \
  OP("newer", op_alloc) \
  OP("pitch", op_pitch) \
  OP("lalloc", op_lalloc) \
  OP("free", op_free) \
  OP("freeasync", op_free) \
  OP("lfree", op_free) \
  OP("freeptr", op_freeptr) \
  OP("freeall", op_freeall) \
  OP("fill", op_fill) \
  OP("info", op_info) \
  OP("linfo", op_linfo) \
  OP("total", op_total) \
  OP("errname", op_errname) \
  OP("shimstats", op_shimstats) \
  OP("create", op_create) \
  OP("createhost", op_create) \
  OP("createat", op_createat) \
  OP("release", op_release) \
  OP("reserve", op_reserve) \
  OP("map", op_map) \
  OP("unmap", op_unmap) \
  OP("unreserve", op_unreserve) \
  OP("createfd", op_createfd) \
  OP("mapat", op_mapat) \
  OP("unmapat", op_unmapat) \
  OP("access", op_unmapat) \
  OP("retain", op_retain) \
  OP("export", op_export) \
  OP("import", op_import) \
  OP("closefd", op_closefd) \
  OP("createtile", op_createtile) \
  OP("arrmap", op_arrmap) \
  OP("arrunmap", op_arrmap) \
  OP("ipcopen", op_ipcopen) \
  OP("poolimport", op_ipcopen) \
  OP("extbuf", op_ipcopen) \
  /* Threads, processes, signals (ops_process.c) */ \
  OP("threads", op_threads) \
  OP("sleep", op_sleep) \
  OP("exit", op_exit) \
  OP("_exit", op_exit) \
  OP("soak", op_soak) \
  OP("stream", op_stream) \
  OP("freeon", op_freeon) \
  OP("spin", op_spin) \
  OP("signal", op_signal) \
  OP("catch", op_catch) \
  OP("procinfo", op_procinfo) \
  OP("sigexit", op_sigexit) \
  OP("exitthread", op_exitthread) \
  OP("atexitfree", op_atexitfree) \
  OP("kill", op_kill) \
  OP("sigalloc", op_sigalloc) \
  OP("sigallocs", op_sigallocs) \
  /* CUDA arrays (ops_arrays.c) */ \
  OP("larray", op_larray) \
  OP("larray3d", op_larray) \
  OP("array", op_array) \
  OP("array3d", op_array) \
  OP("mipmap", op_array) \
  OP("arrdestroy", op_arrdestroy) \
  OP("mipdestroy", op_arrdestroy) \
  OP("arrreq", op_arrreq) \
  OP("mipreq", op_arrreq) \
  OP("miplevel", op_miplevel) \
  /* Placement, contexts, capture, context memory (ops_contexts.c) */ \
  OP("asyncon", op_asyncon) \
  OP("defpoolon", op_asyncon) \
  OP("hostpool", op_asyncon) \
  OP("locpool", op_locpool) \
  OP("poolat", op_locpool) \
  OP("ctxretain", op_ctxretain) \
  OP("ctxattach", op_ctxattach) \
  OP("ctxdetach", op_ctxattach) \
  OP("ctxcreate", op_ctxcreate) \
  OP("ctxdestroy", op_ctxdestroy) \
  OP("ctxreset", op_ctxreset) \
  OP("ctxrelease", op_ctxreset) \
  OP("capture", op_capture) \
  OP("endcapture", op_capture) \
  OP("pcapture", op_pcapture) \
  OP("pendcapture", op_pcapture) \
  OP("recapture", op_pcapture) \
  OP("cigcapture", op_pcapture) \
  OP("cigend", op_pcapture) \
  OP("ctxgrow", op_ctxgrow) \
  OP("green", op_green) \
  OP("greendestroy", op_green) \
  OP("greenctx", op_green) \
  OP("greenstream", op_green) \
  OP("ctxcreate3", op_ctxcreate3) \
  OP("ctxcreate4", op_ctxcreate3) \
  OP("setlimit", op_setlimit) \
  OP("getlimit", op_getlimit) \
  OP("pctxcreate", op_pctxcreate) \
  OP("psetlimit", op_psetlimit) \
  OP("pctxthreads", op_pctxthreads) \
  /* Device identity and NVML (ops_nvml.c) */ \
  OP("uuid", op_uuid) \
  OP("busid", op_busid) \
  OP("otherproc", op_otherproc) \
  OP("nvmlinit", op_nvmlinit) \
  OP("nvmlshutdown", op_nvmlinit) \
  OP("nvmlcount", op_nvmlcount) \
  OP("nvmlinfo", op_nvmlinfo) \
  OP("nvmlinfo2", op_nvmlinfo2) \
  OP("nvmlprocs", op_nvmlprocs) \
  OP("nvmlwait", op_nvmlwait) \
  OP("nvmluuid", op_nvmluuid) \
  OP("nvmlbus", op_nvmlbus) \
  /* Pools that keep memory, graph memory (ops_pools_graphs.c) */ \
  OP("footprint", op_footprint) \
  OP("sync", op_sync) \
  OP("streamsync", op_streamsync) \
  OP("pooltrim", op_pooltrim) \
  OP("poolattr", op_pooltrim) \
  OP("poolthreshold", op_pooltrim) \
  OP("graph", op_graph) \
  OP("graphalloc", op_graphalloc) \
  OP("graphfree", op_graphfree) \
  OP("instantiate", op_instantiate) \
  OP("instantiatep", op_instantiate) \
  OP("instantiate1", op_instantiate1) \
  OP("instantiate2", op_instantiate1) \
  OP("upload", op_upload) \
  OP("launch", op_upload) \
  OP("execdestroy", op_execdestroy) \
  OP("graphdestroy", op_execdestroy) \
  OP("graphtrim", op_graphtrim) \
  OP("graphattr", op_graphtrim) \
  OP("graphnodes", op_graphnodes) \
  OP("graphthreads", op_graphthreads) \
  OP("poolthreads", op_poolthreads)

#endif
