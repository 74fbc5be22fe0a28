//! Green contexts, as far as memory goes: a green context retains its device's primary
//! context and takes memory of its own; its `CUcontext` (`cuCtxFromGreenCtx`) is "treated
//! as if it were a primary context", so what is allocated in it is the primary context's.
//!
//! cuda.h on each:
//!
//! * `cuGreenCtxCreate`: "This API will retain the primary context on device dev, which
//!   will is released when the green context is destroyed." Flags: `CU_GREEN_CTX_NONE`,
//!   `CU_GREEN_CTX_DEFAULT_STREAM`. What the green context takes itself is
//!   `CUDA_SHIM_GREEN_CONTEXT_MEMORY` (its primary context's activation takes
//!   `CUDA_SHIM_CONTEXT_MEMORY`, as any retain that makes it active); one that does not fit
//!   is not made (`CUDA_ERROR_OUT_OF_MEMORY`).
//! * `cuGreenCtxDestroy`: "releasing the primary context of the device that this green
//!   context was created for. Any resources provisioned for this green context [...] are
//!   released as well. The API does not destroy streams created via cuGreenCtxStreamCreate
//!   [...] any subsequent API calls involving these streams will return
//!   CUDA_ERROR_STREAM_DETACHED with the exception of [...] cuStreamDestroy. Additionally,
//!   the API will invalidate all active captures on these streams."
//! * `cuCtxFromGreenCtx`: "This call does not create a new independent context and does not
//!   change the underlying context lifetime. The validity of the returned pContext is tied
//!   to hCtx"; "Destroying pContext via cuCtxDestroy is undefined behavior" (refused here).
//! * `cuGreenCtxStreamCreate`: "ignores the context that is current to the calling thread
//!   and creates a stream in the specified green context"; "CU_STREAM_NON_BLOCKING must be
//!   specified."
//! * Resources: `cuDeviceGetDevResource` gives the device's SMs
//!   (`CU_DEV_RESOURCE_TYPE_SM`: the 132 of the shim's Hopper-class device, partitions of 8
//!   — "On Compute Architecture 9.0+ [...] The alignment is 8"); `cuDevResourceGenerateDesc`
//!   makes a descriptor of them, which "will remain valid for the lifetime of the process".
//!   The shim does not split SMs (it runs no kernels), so a descriptor holds one SM resource
//!   ("If multiple resources are provided [...] they must be outputs [...] from the same
//!   split API instance"); workqueue resources are not simulated
//!   (`CUDA_ERROR_NOT_SUPPORTED`).

use std::collections::BTreeMap;

use crate::abi::*;
use crate::context;
use crate::state::{self, State};
use crate::streams;

/// `CU_DEV_RESOURCE_TYPE_*`.
const RESOURCE_SM: u32 = 1;
const RESOURCE_WORKQUEUE_CONFIG: u32 = 1000;
const RESOURCE_WORKQUEUE: u32 = 10000;
/// The shim's device: 132 SMs (`CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`), aligned by 8.
const SM_COUNT: u32 = 132;
const SM_ALIGNMENT: u32 = 8;
/// `CU_GREEN_CTX_DEFAULT_STREAM`.
const DEFAULT_STREAM: u32 = 1;
/// `CU_STREAM_NON_BLOCKING`.
const NON_BLOCKING: u32 = 1;

#[derive(Default)]
pub struct Greens {
    /// Green contexts by handle.
    contexts: BTreeMap<usize, Green>,
    /// Resource descriptors by handle: their device.
    descs: BTreeMap<usize, usize>,
}

impl Greens {
    pub const fn new() -> Self {
        Greens {
            contexts: BTreeMap::new(),
            descs: BTreeMap::new(),
        }
    }
}

struct Green {
    device: usize,
    /// Its `CUcontext` (a record in `State::contexts`, `green` set).
    context: usize,
}

/// `cuDeviceGetDevResource`: the device's SMs; the device is kept in the resource's internal
/// bytes, for the descriptor.
pub fn device_resource(device: CUdevice, kind: u32) -> Result<DevResource, CUresult> {
    let index = state::device_index(device)?;
    match kind {
        RESOURCE_SM => {}
        RESOURCE_WORKQUEUE_CONFIG | RESOURCE_WORKQUEUE => return Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => return Err(CUDA_ERROR_INVALID_RESOURCE_TYPE),
    }
    let mut r = DevResource::zeroed();
    r.kind = RESOURCE_SM;
    r.internal[..4].copy_from_slice(&(index as u32 + 1).to_le_bytes());
    r.data[..3].copy_from_slice(&[SM_COUNT, SM_ALIGNMENT, SM_ALIGNMENT]);
    Ok(r)
}

/// `cuDevResourceGenerateDesc`: one SM resource from `cuDeviceGetDevResource`.
pub fn generate_desc(resources: &[DevResource]) -> Result<usize, CUresult> {
    let [r] = resources else {
        return Err(match resources.len() {
            0 => CUDA_ERROR_INVALID_VALUE,
            _ => CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
        });
    };
    if r.kind != RESOURCE_SM {
        return Err(CUDA_ERROR_INVALID_RESOURCE_TYPE);
    }
    let tag = u32::from_le_bytes([r.internal[0], r.internal[1], r.internal[2], r.internal[3]]);
    let mut state = state::lock();
    let device = (tag as usize)
        .checked_sub(1)
        .filter(|d| *d < state.devices.len())
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let handle = state::new_handle();
    state.greens.descs.insert(handle, device);
    Ok(handle)
}

/// `cuGreenCtxCreate`: retains the primary context (charging its activation), then takes
/// the green context's own memory; nothing is left behind when either does not fit.
pub fn create(desc: usize, device: CUdevice, flags: u32) -> Result<usize, CUresult> {
    {
        let state = state::lock();
        state.device(device)?;
        let made_for = state.greens.descs.get(&desc).copied();
        if made_for != Some(device as usize) || flags & !DEFAULT_STREAM != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    context::primary_retain(device)?;
    let made = (|| {
        let mut state = state::lock();
        let cost = state.machine.green_context_cost;
        state.device_mut(device)?.charge_context(cost)?;
        let index = device as usize;
        let ctx = context::add_context(&mut state, index, 0, false, cost);
        if let Some(c) = state.contexts.get_mut(&ctx) {
            c.green = true;
        }
        let handle = state::new_handle();
        let green = Green {
            device: index,
            context: ctx,
        };
        state.greens.contexts.insert(handle, green);
        Ok(handle)
    })();
    if made.is_err() {
        let _ = context::primary_release(device);
    }
    made
}

/// `cuGreenCtxDestroy`: its own memory goes, its streams are detached, the primary context
/// is released (the last release frees the primary context's memory).
pub fn destroy(handle: usize) -> Result<(), CUresult> {
    let device = {
        let mut state = state::lock();
        let green = state
            .greens
            .contexts
            .remove(&handle)
            .ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        streams::detach_of_context(&mut state, green.context);
        context::end_green(&mut state, green.context);
        green.device
    };
    context::primary_release(device as CUdevice)
}

fn green(state: &State, handle: usize) -> Result<&Green, CUresult> {
    state
        .greens
        .contexts
        .get(&handle)
        .ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

/// `cuCtxFromGreenCtx`: the green context's `CUcontext`.
pub fn context_of(handle: usize) -> Result<usize, CUresult> {
    green(&state::lock(), handle).map(|g| g.context)
}

/// `cuGreenCtxStreamCreate`: a stream of the green context.
pub fn stream_create(handle: usize, flags: u32, priority: i32) -> Result<usize, CUresult> {
    if flags != NON_BLOCKING {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut state = state::lock();
    let (context, device) = green(&state, handle).map(|g| (g.context, g.device))?;
    Ok(streams::add(&mut state, context, device, flags, priority))
}
