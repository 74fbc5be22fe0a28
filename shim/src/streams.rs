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
    /// Capturing into a graph (`cuStreamBeginCapture` .. `cuStreamEndCapture`).
    pub capturing: bool,
    /// Addresses handed out by allocations captured on this stream.
    captured: Vec<u64>,
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
        capturing: false,
        captured: Vec::new(),
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

/// The context a stream's work belongs to: the current one for the default streams.
pub fn context(state: &State, handle: usize) -> Result<usize, CUresult> {
    if is_default(handle) {
        return context::current(state).map(|(c, _)| c);
    }
    state
        .streams
        .get(&handle)
        .map(|s| s.context)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)
}

/// A context is destroyed: so are its streams.
pub fn destroy_of_context(state: &mut State, context: usize) {
    state.streams.retain(|_, s| s.context != context);
}

/// `cuStreamBeginCapture`: the default streams cannot capture.
pub fn begin_capture(handle: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    if is_default(handle) {
        context::current(&state)?;
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    let stream = state
        .streams
        .get_mut(&handle)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if stream.capturing {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    }
    stream.capturing = true;
    Ok(())
}

/// `cuStreamEndCapture`: the captured graph (a handle; it holds no memory here).
pub fn end_capture(handle: usize) -> Result<usize, CUresult> {
    let mut state = state::lock();
    let stream = state
        .streams
        .get_mut(&handle)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if !stream.capturing {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    }
    stream.capturing = false;
    stream.captured.clear();
    Ok(state::new_handle())
}

/// `cuStreamIsCapturing`: whether the stream is capturing.
pub fn is_capturing(handle: usize) -> Result<bool, CUresult> {
    let state = state::lock();
    device(&state, handle)?;
    Ok(state.streams.get(&handle).is_some_and(|s| s.capturing))
}

/// An allocation on a capturing stream: an address for the graph's memory, nothing
/// allocated. `None` when the stream is not capturing.
pub fn capture_allocation(handle: usize, size: usize) -> Result<Option<u64>, CUresult> {
    let mut state = state::lock();
    device(&state, handle)?;
    let Some(stream) = state.streams.get_mut(&handle).filter(|s| s.capturing) else {
        return Ok(None);
    };
    if size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // Addresses in a range no host mapping uses, never reused.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(
        (size as u64).div_ceil(256).max(1),
        std::sync::atomic::Ordering::Relaxed,
    );
    let address = 0x7e00_0000_0000 + n * 256;
    stream.captured.push(address);
    Ok(Some(address))
}

/// A free on a capturing stream: a node that frees nothing (true), if the pointer is one the
/// graph or the device knows; `Ok(false)` when the stream is not capturing.
pub fn capture_free(handle: usize, dptr: u64) -> Result<bool, CUresult> {
    let state = state::lock();
    let Some(stream) = state.streams.get(&handle).filter(|s| s.capturing) else {
        return Ok(false);
    };
    if stream.captured.contains(&dptr) || state.allocations.contains_key(&dptr) {
        Ok(true)
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    }
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
