//! Graph memory, a part of the footprint: instantiation learns an executable graph's
//! allocations, uploads and launches reserve what they may add to the graph memory pool,
//! and each of these and the program's own trim set the `graph` part to the driver's
//! reservation after (see `engine/graph_memory.rs`).

use super::{hook, hooked, table, watched};
use crate::cuda_abi::{
    CuDevice, CuGraph, CuGraphExec, CuGraphInstantiateParams, CuGraphNode, CuResult, CuStream,
};
use crate::ffi::{self, Out};
use crate::lookup::{CFunction, Real};
use crate::real_driver as real;
use std::ffi::c_char;

/// An instantiation of `graph` with `flags`; `call` instantiates into the caller's `exec`.
fn instantiate<F: CFunction>(
    real: &'static Real<F>,
    exec: *mut CuGraphExec,
    graph: CuGraph,
    flags: u64,
    call: impl Fn(F) -> CuResult,
) -> CuResult {
    hook(
        real,
        |f, e| {
            e.graph_instantiate(real.name(), graph as usize, flags, || {
                let rc = call(f);
                // SAFETY: `exec` is the caller's out-pointer, null or valid.
                let made = match (rc.is_ok(), unsafe { Out::new(exec) }) {
                    (true, Some(out)) => out.get() as usize,
                    _ => 0,
                };
                (rc, made)
            })
        },
        &call,
    )
}

/// The CUDA 10 and 11.0 forms: no flags.
fn instantiate_logged(
    real: &'static Real<real::cuGraphInstantiate>,
    exec: *mut CuGraphExec,
    graph: CuGraph,
    error_node: *mut CuGraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CuResult {
    instantiate(real, exec, graph, 0, |f| {
        // SAFETY: the caller's arguments, passed on.
        unsafe { f(exec, graph, error_node, log, log_size) }
    })
}

hooked!(
    cuGraphInstantiate,
    |exec: *mut CuGraphExec,
     graph: CuGraph,
     error_node: *mut CuGraphNode,
     log: *mut c_char,
     log_size: usize| {
        instantiate_logged(
            &real::cuGraphInstantiate,
            exec,
            graph,
            error_node,
            log,
            log_size,
        )
    }
);

hooked!(
    cuGraphInstantiate_v2,
    |exec: *mut CuGraphExec,
     graph: CuGraph,
     error_node: *mut CuGraphNode,
     log: *mut c_char,
     log_size: usize| {
        instantiate_logged(
            &real::cuGraphInstantiate_v2,
            exec,
            graph,
            error_node,
            log,
            log_size,
        )
    }
);

hooked!(
    cuGraphInstantiateWithFlags,
    |exec: *mut CuGraphExec, graph: CuGraph, flags: u64| {
        instantiate(
            &real::cuGraphInstantiateWithFlags,
            exec,
            graph,
            flags,
            |f| {
                // SAFETY: the caller's arguments, passed on.
                unsafe { f(exec, graph, flags) }
            },
        )
    }
);

/// # Safety
/// The caller's arguments of `cuGraphInstantiateWithParams(_ptsz)`.
unsafe fn instantiate_with_params(
    real: &'static Real<real::cuGraphInstantiateWithParams>,
    exec: *mut CuGraphExec,
    graph: CuGraph,
    params: *mut CuGraphInstantiateParams,
) -> CuResult {
    // SAFETY: `params` is null or the caller's valid CUDA_GRAPH_INSTANTIATE_PARAMS.
    let flags = unsafe { ffi::input(params.cast_const()) }.map_or(0, |p| p.flags);
    instantiate(real, exec, graph, flags, |f| {
        // SAFETY: the caller's arguments, passed on.
        unsafe { f(exec, graph, params) }
    })
}

hooked!(
    cuGraphInstantiateWithParams,
    |exec: *mut CuGraphExec, graph: CuGraph, params: *mut CuGraphInstantiateParams| {
        // SAFETY: the caller's arguments, passed on.
        unsafe { instantiate_with_params(&real::cuGraphInstantiateWithParams, exec, graph, params) }
    }
);

hooked!(
    cuGraphInstantiateWithParams_ptsz,
    |exec: *mut CuGraphExec, graph: CuGraph, params: *mut CuGraphInstantiateParams| {
        let real = &real::cuGraphInstantiateWithParams_ptsz;
        // SAFETY: the caller's arguments, passed on.
        unsafe { instantiate_with_params(real, exec, graph, params) }
    }
);

/// An upload (`launch` false) or launch of `exec` into `stream`.
fn graph_run(
    real: &'static Real<real::cuGraphLaunch>,
    exec: CuGraphExec,
    stream: CuStream,
    launch: bool,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    let call = |f: real::cuGraphLaunch| unsafe { f(exec, stream) };
    hook(
        real,
        |f, e| e.graph_run(real.name(), exec as usize, launch, || call(f)),
        call,
    )
}

hooked!(cuGraphUpload, |exec: CuGraphExec, stream: CuStream| {
    graph_run(&real::cuGraphUpload, exec, stream, false)
});

hooked!(cuGraphUpload_ptsz, |exec: CuGraphExec, stream: CuStream| {
    graph_run(&real::cuGraphUpload_ptsz, exec, stream, false)
});

hooked!(cuGraphLaunch, |exec: CuGraphExec, stream: CuStream| {
    graph_run(&real::cuGraphLaunch, exec, stream, true)
});

hooked!(cuGraphLaunch_ptsz, |exec: CuGraphExec, stream: CuStream| {
    graph_run(&real::cuGraphLaunch_ptsz, exec, stream, true)
});

hooked!(cuGraphExecDestroy, |exec: CuGraphExec| {
    watched(
        &real::cuGraphExecDestroy,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(exec) },
        |e| e.graph_exec_destroyed(exec as usize),
    )
});

// The program's own trim: only watched (it charges nothing), then the part follows.
hooked!(cuDeviceGraphMemTrim, |dev: CuDevice| {
    watched(
        &real::cuDeviceGraphMemTrim,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(dev) },
        |e| {
            if let Ok(device) = u32::try_from(dev) {
                e.graph_memory_trimmed(real::cuDeviceGraphMemTrim.name(), device);
            }
        },
    )
});

table!(
    cuGraphInstantiate,
    cuGraphInstantiate_v2,
    cuGraphInstantiateWithFlags,
    cuGraphInstantiateWithParams,
    cuGraphInstantiateWithParams_ptsz,
    cuGraphUpload,
    cuGraphUpload_ptsz,
    cuGraphLaunch,
    cuGraphLaunch_ptsz,
    cuGraphExecDestroy,
    cuDeviceGraphMemTrim
);
