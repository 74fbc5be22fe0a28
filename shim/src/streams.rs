//! Streams and events. Everything runs synchronously, so they only need to exist and to
//! remember which device their work would go to.

use crate::abi::*;
use crate::context;
use crate::state::{self, State};

pub struct Stream {
    pub device: usize,
    pub context: usize,
    pub flags: u32,
    pub priority: i32,
}

/// `cuStreamCreate*`: a stream on the current context.
pub fn create(flags: u32, priority: i32) -> Result<usize, CUresult> {
    if flags & !1 != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut state = state::lock();
    let (context, ctx) = context::current(&state)?;
    let stream = Stream {
        device: ctx.device,
        context,
        flags,
        // Like the real driver, clamp to the range cuCtxGetStreamPriorityRange reports.
        priority: priority.clamp(-5, 0),
    };
    let handle = state::new_handle();
    state.streams.insert(handle, stream);
    Ok(handle)
}

pub fn destroy(handle: usize) -> Result<(), CUresult> {
    state::lock()
        .streams
        .remove(&handle)
        .map(|_| ())
        .ok_or(CUDA_ERROR_INVALID_HANDLE)
}

fn is_default(handle: usize) -> bool {
    matches!(handle, 0 | STREAM_LEGACY | STREAM_PER_THREAD)
}

/// The device a stream's work goes to: the current context's for the default streams.
pub fn device(state: &State, handle: usize) -> Result<usize, CUresult> {
    if is_default(handle) {
        return context::current_device(state);
    }
    state
        .streams
        .get(&handle)
        .map(|s| s.device)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)
}

/// Checks that a stream handle is usable (a default stream needs a current context).
pub fn check(handle: usize) -> Result<(), CUresult> {
    device(&state::lock(), handle).map(|_| ())
}

/// `cuStreamGetFlags` / `cuStreamGetPriority` / `cuStreamGetCtx`: (flags, priority, context).
pub fn properties(handle: usize) -> Result<(u32, i32, usize), CUresult> {
    let state = state::lock();
    if is_default(handle) {
        let (context, _) = context::current(&state)?;
        return Ok((0, 0, context));
    }
    state
        .streams
        .get(&handle)
        .map(|s| (s.flags, s.priority, s.context))
        .ok_or(CUDA_ERROR_INVALID_HANDLE)
}

/// `cuEventCreate`: an event on the current context.
pub fn create_event(flags: u32) -> Result<usize, CUresult> {
    if flags & !0xf != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut state = state::lock();
    context::current(&state)?;
    let handle = state::new_handle();
    state.events.insert(handle);
    Ok(handle)
}

pub fn destroy_event(handle: usize) -> Result<(), CUresult> {
    if state::lock().events.remove(&handle) {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

pub fn check_event(handle: usize) -> Result<(), CUresult> {
    if state::lock().events.contains(&handle) {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

/// `cuEventRecord` / `cuStreamWaitEvent`: both handles must be valid.
pub fn check_event_and_stream(event: usize, stream: usize) -> Result<(), CUresult> {
    let state = state::lock();
    if !state.events.contains(&event) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    device(&state, stream).map(|_| ())
}
