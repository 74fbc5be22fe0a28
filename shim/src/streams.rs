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
    /// The graph being captured into (`cuStreamBeginCapture` .. `cuStreamEndCapture`).
    capture: Option<usize>,
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
        capture: None,
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

/// `cuStreamBeginCapture`: the default streams cannot capture. The capture builds a graph.
pub fn begin_capture(handle: usize) -> Result<(), CUresult> {
    begin_capture_into(handle, |state| crate::graphs::create(state, 0))
}

/// `cuStreamBeginCaptureToGraph`: "Begin graph capture on \p hStream, placing new nodes into
/// an existing graph" (cuda.h); the dependencies must be nodes of that graph. The shim's
/// graphs hold no edges, so dependencies are checked and not otherwise kept.
pub fn begin_capture_to_graph(handle: usize, graph: usize, deps: &[usize]) -> Result<(), CUresult> {
    begin_capture_into(handle, |state| {
        crate::graphs::check_capture_target(state, graph, deps)?;
        Ok(graph)
    })
}

/// Starts a capture on a stream that can capture and is not capturing, into the graph
/// `graph` gives.
fn begin_capture_into(
    handle: usize,
    graph: impl FnOnce(&mut State) -> Result<usize, CUresult>,
) -> Result<(), CUresult> {
    let mut state = state::lock();
    if is_default(handle) {
        context::current(&state)?;
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    match state.streams.get(&handle) {
        None => return Err(CUDA_ERROR_INVALID_HANDLE),
        Some(s) if s.capture.is_some() => return Err(CUDA_ERROR_ILLEGAL_STATE),
        Some(_) => {}
    }
    let graph = graph(&mut state)?;
    if let Some(stream) = state.streams.get_mut(&handle) {
        stream.capture = Some(graph);
    }
    Ok(())
}

/// `cuStreamEndCapture`: the captured graph.
pub fn end_capture(handle: usize) -> Result<usize, CUresult> {
    let mut state = state::lock();
    let stream = state
        .streams
        .get_mut(&handle)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    stream.capture.take().ok_or(CUDA_ERROR_ILLEGAL_STATE)
}

/// `cuStreamIsCapturing`: whether the stream is capturing.
pub fn is_capturing(handle: usize) -> Result<bool, CUresult> {
    let state = state::lock();
    device(&state, handle)?;
    Ok(state
        .streams
        .get(&handle)
        .is_some_and(|s| s.capture.is_some()))
}

/// The graph a stream is capturing into, if it is (checking the handle).
fn capture_graph(state: &State, handle: usize) -> Result<Option<usize>, CUresult> {
    device(state, handle)?;
    Ok(state.streams.get(&handle).and_then(|s| s.capture))
}

/// An allocation on a capturing stream: an allocation node on `device` (`None`: a host
/// pool's) and the address the graph's memory will have; nothing is allocated. `None`
/// when the stream is not capturing.
pub fn capture_allocation(
    handle: usize,
    size: usize,
    device: impl FnOnce(&State) -> Result<Option<usize>, CUresult>,
) -> Result<Option<u64>, CUresult> {
    let mut state = state::lock();
    let Some(graph) = capture_graph(&state, handle)? else {
        return Ok(None);
    };
    let device = device(&state)?;
    crate::graphs::capture_alloc(&mut state, graph, size, device).map(Some)
}

/// A free on a capturing stream: a free node (true), if the pointer is a graph allocation
/// or a device allocation; `Ok(false)` when the stream is not capturing.
pub fn capture_free(handle: usize, dptr: u64) -> Result<bool, CUresult> {
    let mut state = state::lock();
    let Some(graph) = state.streams.get(&handle).and_then(|s| s.capture) else {
        return Ok(false);
    };
    crate::graphs::capture_free(&mut state, graph, dptr).map(|()| true)
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
    let device = context::current_device(&state)?;
    let handle = state::new_handle();
    state.events.insert(handle, device);
    Ok(handle)
}

pub fn destroy_event(handle: usize) -> Result<(), CUresult> {
    if state::lock().events.remove(&handle).is_some() {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

pub fn check_event(handle: usize) -> Result<(), CUresult> {
    if state::lock().events.contains_key(&handle) {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

/// The device of the context an event was created in.
pub fn event_device(state: &State, event: usize) -> Result<usize, CUresult> {
    state
        .events
        .get(&event)
        .copied()
        .ok_or(CUDA_ERROR_INVALID_HANDLE)
}

/// `cuEventRecord` / `cuStreamWaitEvent`: both handles must be valid.
pub fn check_event_and_stream(event: usize, stream: usize) -> Result<(), CUresult> {
    let state = state::lock();
    if !state.events.contains_key(&event) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    device(&state, stream).map(|_| ())
}
