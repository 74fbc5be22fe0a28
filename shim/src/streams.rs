//! Streams and events. Everything runs synchronously, so they only need to exist and to
//! remember which device their work would go to.

use crate::abi::*;
use crate::captures::Capture;
use crate::context;
use crate::state::{self, State};

pub struct Stream {
    pub device: usize,
    pub context: usize,
    pub flags: u32,
    pub priority: i32,
    /// Its capture sequence (`cuStreamBeginCapture*` .. `cuStreamEndCapture`; see
    /// `captures`).
    pub capture: Option<Capture>,
    /// Its green context was destroyed: "any subsequent API calls involving these streams
    /// will return CUDA_ERROR_STREAM_DETACHED with the exception of [...] cuStreamDestroy".
    pub detached: bool,
}

/// `CUDA_ERROR_STREAM_DETACHED`.
pub const STREAM_DETACHED: CUresult = 917;

/// `cuStreamCreate*`: a stream on the current context.
pub fn create(flags: u32, priority: i32) -> Result<usize, CUresult> {
    if flags & !1 != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut state = state::lock();
    let (context, ctx) = context::current(&state)?;
    let device = ctx.device;
    Ok(add(&mut state, context, device, flags, priority))
}

/// A new stream of `context` (on `device`).
pub fn add(state: &mut State, context: usize, device: usize, flags: u32, priority: i32) -> usize {
    let stream = Stream {
        device,
        context,
        flags,
        // Like the real driver, clamp to the range cuCtxGetStreamPriorityRange reports.
        priority: priority.clamp(-5, 0),
        capture: None,
        detached: false,
    };
    let handle = state::new_handle();
    state.streams.insert(handle, stream);
    handle
}

/// A green context was destroyed: its streams are detached, and their captures invalidated.
pub fn detach_of_context(state: &mut State, context: usize) {
    for s in state.streams.values_mut().filter(|s| s.context == context) {
        s.detached = true;
        if let Some(c) = s.capture.as_mut() {
            c.invalidate();
        }
    }
}

/// A stream that is known and not detached.
fn live(state: &State, handle: usize) -> Result<&Stream, CUresult> {
    match state.streams.get(&handle) {
        None => Err(CUDA_ERROR_INVALID_HANDLE),
        Some(s) if s.detached => Err(STREAM_DETACHED),
        Some(s) => Ok(s),
    }
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
    live(state, handle).map(|s| s.device)
}

/// The context a stream's work belongs to: the current one for the default streams.
pub fn context(state: &State, handle: usize) -> Result<usize, CUresult> {
    if is_default(handle) {
        return context::current(state).map(|(c, _)| c);
    }
    live(state, handle).map(|s| s.context)
}

/// A context is destroyed: so are its streams.
pub fn destroy_of_context(state: &mut State, context: usize) {
    state.streams.retain(|_, s| s.context != context);
}

/// `cuStreamIsCapturing`: the stream's `CUstreamCaptureStatus` (0: not capturing).
pub fn capture_status(handle: usize) -> Result<i32, CUresult> {
    let state = state::lock();
    device(&state, handle)?;
    let capture = state.streams.get(&handle).and_then(|s| s.capture.as_ref());
    Ok(capture.map_or(0, Capture::status))
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
    live(&state, handle).map(|s| (s.flags, s.priority, s.context))
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
