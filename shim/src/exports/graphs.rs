//! CUDA graphs with memory nodes, executable graphs and the graph memory pool.
//! Prototypes and `cuGetProcAddress` versions from `cuda.h` / `cudaTypedefs.h`.

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::{h, handle_ptr};
use crate::abi::*;
use crate::ffi::{self, write_optional, Out};
use crate::graphs;
use crate::proc_address::{Row, StreamKind};

exports! {
    fn cuGraphCreate(graph: *mut Handle, flags: c_uint) as cuGraphCreate since 10000 {
        let out = Out::new(graph)?;
        out.write(handle_ptr(graphs::create_graph(flags)?));
        Ok(())
    }

    fn cuGraphDestroy(graph: Handle) as cuGraphDestroy since 10000 {
        graphs::destroy(h(graph))
    }

    fn cuGraphAddMemAllocNode(
        node: *mut Handle,
        graph: Handle,
        dependencies: *const Handle,
        num_dependencies: usize,
        params: *mut MemAllocNodeParams,
    ) as cuGraphAddMemAllocNode since 11040 {
        let out = Out::new(node)?;
        let deps = dependencies_of(dependencies, num_dependencies)?;
        let p = ffi::read(params)?;
        let access = if p.access_desc_count == 0 {
            &[][..]
        } else {
            ffi::slice(p.access_descs, p.access_desc_count)?
        };
        let (handle, address) = graphs::add_mem_alloc_node(h(graph), &deps, p, access)?;
        out.write(handle_ptr(handle));
        // SAFETY: `params` was just read through the same pointer; the field is `dptr`,
        // written back as the driver does.
        Out::new(unsafe { &raw mut (*params).dptr })?.write(address);
        Ok(())
    }

    fn cuGraphMemAllocNodeGetParams(
        node: Handle,
        params: *mut MemAllocNodeParams,
    ) as cuGraphMemAllocNodeGetParams since 11040 {
        let out = Out::new(params)?;
        out.write(graphs::alloc_node_params(h(node))?);
        Ok(())
    }

    fn cuGraphAddMemFreeNode(
        node: *mut Handle,
        graph: Handle,
        dependencies: *const Handle,
        num_dependencies: usize,
        dptr: CUdeviceptr,
    ) as cuGraphAddMemFreeNode since 11040 {
        let out = Out::new(node)?;
        let deps = dependencies_of(dependencies, num_dependencies)?;
        out.write(handle_ptr(graphs::add_mem_free_node(h(graph), &deps, dptr)?));
        Ok(())
    }

    fn cuGraphMemFreeNodeGetParams(
        node: Handle,
        dptr: *mut CUdeviceptr,
    ) as cuGraphMemFreeNodeGetParams since 11040 {
        let out = Out::new(dptr)?;
        out.write(graphs::free_node_address(h(node))?);
        Ok(())
    }

    /// With `nodes` null, the count; else up to `*count` nodes, the rest of the array
    /// nulled, and the number obtained.
    fn cuGraphGetNodes(
        graph: Handle,
        nodes: *mut Handle,
        count: *mut usize,
    ) as cuGraphGetNodes since 10000 {
        let count_out = Out::new(count)?;
        let all = graphs::nodes(h(graph))?;
        if nodes.is_null() {
            count_out.write(all.len());
            return Ok(());
        }
        let room = ffi::read(count.cast_const())?;
        for i in 0..room {
            let node = all.get(i).map_or(std::ptr::null_mut(), |&n| handle_ptr(n));
            // SAFETY: the caller's array holds `*count` entries.
            Out::new(unsafe { nodes.add(i) })?.write(node);
        }
        count_out.write(room.min(all.len()));
        Ok(())
    }

    fn cuGraphNodeGetType(node: Handle, kind: *mut c_int) as cuGraphNodeGetType since 10000 {
        let out = Out::new(kind)?;
        out.write(graphs::node_type(h(node))?);
        Ok(())
    }

    /// The CUDA 10 form (and `_v2`, CUDA 11.0): flags 0, an error node and a log.
    fn cuGraphInstantiate(
        exec: *mut Handle,
        graph: Handle,
        error_node: *mut Handle,
        log: *mut c_char,
        log_size: usize,
    ) as cuGraphInstantiate since 10000 {
        instantiate_logged(exec, graph, error_node, log, log_size)
    }

    fn cuGraphInstantiate_v2(
        exec: *mut Handle,
        graph: Handle,
        error_node: *mut Handle,
        log: *mut c_char,
        log_size: usize,
    ) as cuGraphInstantiate since 11000 {
        instantiate_logged(exec, graph, error_node, log, log_size)
    }

    /// What `cuGraphInstantiate` means from CUDA 12 on (see [`ALIASES`]).
    fn cuGraphInstantiateWithFlags(
        exec: *mut Handle,
        graph: Handle,
        flags: u64,
    ) as cuGraphInstantiateWithFlags since 11040 {
        let out = Out::new(exec)?;
        out.write(handle_ptr(graphs::instantiate(h(graph), flags, false)?));
        Ok(())
    }

    fn cuGraphInstantiateWithParams(
        exec: *mut Handle,
        graph: Handle,
        params: *mut GraphInstantiateParams,
    ) as cuGraphInstantiateWithParams since 12000 {
        instantiate_with_params(exec, graph, params)
    }

    fn cuGraphInstantiateWithParams_ptsz(
        exec: *mut Handle,
        graph: Handle,
        params: *mut GraphInstantiateParams,
    ) as cuGraphInstantiateWithParams since 12000 Ptsz {
        instantiate_with_params(exec, graph, params)
    }

    fn cuGraphUpload(exec: Handle, stream: Handle) as cuGraphUpload since 11010 {
        graphs::upload(h(exec), h(stream))
    }

    fn cuGraphUpload_ptsz(exec: Handle, stream: Handle) as cuGraphUpload since 11010 Ptsz {
        graphs::upload(h(exec), h(stream))
    }

    fn cuGraphLaunch(exec: Handle, stream: Handle) as cuGraphLaunch since 10000 {
        graphs::launch(h(exec), h(stream))
    }

    fn cuGraphLaunch_ptsz(exec: Handle, stream: Handle) as cuGraphLaunch since 10000 Ptsz {
        graphs::launch(h(exec), h(stream))
    }

    fn cuGraphExecDestroy(exec: Handle) as cuGraphExecDestroy since 10000 {
        graphs::exec_destroy(h(exec))
    }

    fn cuDeviceGraphMemTrim(device: CUdevice) as cuDeviceGraphMemTrim since 11040 {
        graphs::trim(device)
    }

    fn cuDeviceGetGraphMemAttribute(
        device: CUdevice,
        attribute: c_int,
        value: *mut c_void,
    ) as cuDeviceGetGraphMemAttribute since 11040 {
        let out = Out::new(value.cast::<u64>())?;
        out.write(graphs::get_attribute(device, attribute)?);
        Ok(())
    }

    fn cuDeviceSetGraphMemAttribute(
        device: CUdevice,
        attribute: c_int,
        value: *mut c_void,
    ) as cuDeviceSetGraphMemAttribute since 11040 {
        graphs::set_attribute(device, attribute, ffi::read(value.cast::<u64>().cast_const())?)
    }
}

/// `cuGetProcAddress("cuGraphInstantiate")` for CUDA 12.0 and later answers the flags form:
/// `cudaTypedefs.h` defines `PFN_cuGraphInstantiate` as `PFN_cuGraphInstantiateWithFlags_v11040`
/// and `cuda.h` `cuGraphInstantiate` as `cuGraphInstantiateWithFlags`.
pub(super) static ALIASES: &[Row] = &[Row::alias(
    "cuGraphInstantiate",
    "cuGraphInstantiateWithFlags",
    12000,
    StreamKind::Normal,
    cuGraphInstantiateWithFlags as *const (),
)];

/// A caller's dependency list (possibly empty) as handles.
///
/// # Safety
/// `deps` must be valid for `count` handles when `count` is not 0.
pub(super) unsafe fn dependencies_of(
    deps: *const Handle,
    count: usize,
) -> Result<Vec<usize>, CUresult> {
    if count == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: by this function's contract.
    Ok(unsafe { ffi::slice(deps, count)? }
        .iter()
        .map(|&d| h(d))
        .collect())
}

/// `cuGraphInstantiate` / `_v2`: no flags; the error node is nulled and the log left empty.
///
/// # Safety
/// Pointers as the driver API documents them.
unsafe fn instantiate_logged(
    exec: *mut Handle,
    graph: Handle,
    error_node: *mut Handle,
    log: *mut c_char,
    log_size: usize,
) -> Result<(), CUresult> {
    let out = unsafe { Out::new(exec)? };
    write_optional(unsafe { Out::optional(error_node) }, std::ptr::null_mut());
    if log_size > 0 {
        write_optional(unsafe { Out::optional(log) }, 0);
    }
    out.write(handle_ptr(graphs::instantiate(h(graph), 0, false)?));
    Ok(())
}

/// `cuGraphInstantiateWithParams`: the result and error node are written back; with
/// `CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD` the graph is uploaded into the given stream, and a
/// failed upload undoes the instantiation.
///
/// # Safety
/// Pointers as the driver API documents them.
unsafe fn instantiate_with_params(
    exec: *mut Handle,
    graph: Handle,
    params: *mut GraphInstantiateParams,
) -> Result<(), CUresult> {
    let out = unsafe { Out::new(exec)? };
    let p = unsafe { ffi::read(params.cast_const())? };
    let result = graphs::instantiate(h(graph), p.flags, true).and_then(|handle| {
        if p.flags & GRAPH_INSTANTIATE_UPLOAD != 0 {
            if let Err(code) = graphs::upload(handle, h(p.upload_stream)) {
                let _ = graphs::exec_destroy(handle);
                return Err(code);
            }
        }
        Ok(handle)
    });
    let mut written = p;
    written.err_node_out = std::ptr::null_mut();
    written.result_out = match result {
        Ok(_) => GRAPH_INSTANTIATE_SUCCESS,
        Err(_) => GRAPH_INSTANTIATE_ERROR,
    };
    unsafe { Out::new(params)? }.write(written);
    out.write(handle_ptr(result?));
    Ok(())
}
