//! Stream capture sequences: what a capturing stream records, for the four ways one begins.
//!
//! cuda.h on each:
//!
//! * `cuStreamBeginCapture`: "all operations pushed into the stream will not be executed, but
//!   will instead be captured into a graph, which will be returned via cuStreamEndCapture.
//!   Capture may not be initiated if stream is CU_STREAM_LEGACY. [...] it may only be
//!   initiated if the stream is not already in capture mode."
//! * `cuStreamBeginCaptureToGraph`: the same, "placing new nodes into an existing graph";
//!   `dependencies` are "Dependencies of the first node captured in the stream" (nodes of
//!   that graph).
//! * `cuStreamBeginRecaptureToGraph` (CUDA 13.3): "Begin graph capture on hStream to the
//!   existing hGraph. The node creation order while recapturing the graph must be identical
//!   to the original graph. The recapture will fail immediately for: Topology mismatches
//!   between the existing graph and the recaptured graph; Parameter mismatches for memory
//!   allocation or free nodes." Other mismatches go to the caller's callback; every node
//!   here is a memory node, so the callback is never called. A recaptured allocation is the
//!   graph's own node again: its address is the node's, and nothing new is recorded. A
//!   mismatch terminates the recapture with `CUDA_ERROR_GRAPH_RECAPTURE_FAILURE` ("a graph
//!   recapture failed and had to be terminated"): the capture is invalidated, its later
//!   operations fail with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`, and its end says so.
//! * `cuStreamBeginCaptureToCig` (CUDA 13.1): "The context must be also created in CIG mode
//!   previously, otherwise this operation will fail and CUDA_ERROR_INVALID_CONTEXT will be
//!   returned." The shim's devices support no CIG (their `CU_DEVICE_ATTRIBUTE_*_CIG_*`
//!   attributes are 0, and "Context creation in CIG mode will fail with
//!   CUDA_ERROR_NOT_SUPPORTED if CIG is not supported"), so no stream is ever in CIG capture:
//!   the begin fails as documented, and `cuStreamEndCaptureToCig` ("Capture must have been
//!   initiated on hStream via a call to cuStreamBeginCaptureToCig") fails with
//!   `CUDA_ERROR_INVALID_VALUE`.

use crate::abi::*;
use crate::graphs::{self, Recorded};
use crate::state::{self, State};
use crate::streams;

/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`.
pub const CAPTURE_INVALIDATED: CUresult = 901;
/// `CUDA_ERROR_GRAPH_RECAPTURE_FAILURE`.
pub const RECAPTURE_FAILURE: CUresult = 918;

/// A stream's capture sequence.
pub struct Capture {
    /// The graph it records into.
    graph: usize,
    /// A recapture: the position (creation order) of the graph's next node to match.
    recapture: Option<usize>,
    /// A previous error ended what the sequence may do: only its end.
    invalidated: bool,
}

impl Capture {
    /// `CUstreamCaptureStatus`: `ACTIVE` (1) or `INVALIDATED` (2).
    /// An error (its green context destroyed) invalidated it.
    pub fn invalidate(&mut self) {
        self.invalidated = true;
    }

    pub fn status(&self) -> i32 {
        if self.invalidated {
            2
        } else {
            1
        }
    }
}

/// How a capture begins.
pub enum Begin<'a> {
    /// `cuStreamBeginCapture`: into a new graph.
    New,
    /// `cuStreamBeginCaptureToGraph`: new nodes into `graph`, after `dependencies`.
    Into {
        graph: usize,
        dependencies: &'a [usize],
    },
    /// `cuStreamBeginRecaptureToGraph`: `graph`'s own nodes, again.
    Recapture { graph: usize },
}

/// Begins a capture on `handle` (a default stream cannot capture).
pub fn begin(handle: usize, how: Begin<'_>) -> Result<(), CUresult> {
    let mut state = state::lock();
    if matches!(handle, 0 | STREAM_LEGACY | STREAM_PER_THREAD) {
        crate::context::current(&state)?;
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    streams::device(&state, handle)?;
    if state
        .streams
        .get(&handle)
        .is_some_and(|s| s.capture.is_some())
    {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    }
    let capture = match how {
        Begin::New => Capture {
            graph: graphs::create(&mut state, 0)?,
            recapture: None,
            invalidated: false,
        },
        Begin::Into {
            graph,
            dependencies,
        } => {
            graphs::check_graph(&state, graph)?;
            graphs::check_dependencies(&state, graph, dependencies)?;
            Capture {
                graph,
                recapture: None,
                invalidated: false,
            }
        }
        Begin::Recapture { graph } => {
            graphs::check_graph(&state, graph)?;
            Capture {
                graph,
                recapture: Some(0),
                invalidated: false,
            }
        }
    };
    if let Some(stream) = state.streams.get_mut(&handle) {
        stream.capture = Some(capture);
    }
    Ok(())
}

/// `cuStreamEndCapture`: the graph. A recapture that matched fewer nodes than the graph has
/// is a topology mismatch; an invalidated capture ends with its error. Either way the
/// stream leaves capture mode.
pub fn end(handle: usize) -> Result<usize, CUresult> {
    let mut state = state::lock();
    let stream = state
        .streams
        .get_mut(&handle)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if stream.detached {
        return Err(streams::STREAM_DETACHED);
    }
    let capture = stream.capture.take().ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
    if capture.invalidated {
        return Err(CAPTURE_INVALIDATED);
    }
    if let Some(next) = capture.recapture {
        if next != graphs::node_count(&state, capture.graph) {
            return Err(RECAPTURE_FAILURE);
        }
    }
    Ok(capture.graph)
}

/// The capture on a stream, if it captures (checking the handle).
fn capture_of(state: &mut State, handle: usize) -> Result<Option<&mut Capture>, CUresult> {
    streams::device(state, handle)?;
    Ok(state
        .streams
        .get_mut(&handle)
        .and_then(|s| s.capture.as_mut()))
}

/// What a recapture met at its next node: the node's own address if it matches, else the
/// recapture ends in failure.
fn rematch(
    state: &mut State,
    handle: usize,
    matches: impl FnOnce(Option<Recorded>) -> Option<u64>,
) -> Result<u64, CUresult> {
    let Some(c) = capture_of(state, handle)? else {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    };
    let (graph, next) = (c.graph, c.recapture.unwrap_or(0));
    let found = matches(graphs::recorded(state, graph, next));
    let Some(c) = capture_of(state, handle)? else {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    };
    match found {
        Some(address) => {
            c.recapture = Some(next + 1);
            Ok(address)
        }
        None => {
            c.invalidated = true;
            Err(RECAPTURE_FAILURE)
        }
    }
}

/// An allocation on a capturing stream: an allocation node on `device` (`None`: a host
/// pool's) and the address the graph's memory will have; nothing is allocated. A
/// recapture matches the graph's next node instead (same size and place). `None` when
/// the stream is not capturing.
pub fn allocation(
    handle: usize,
    size: usize,
    device: impl FnOnce(&State) -> Result<Option<usize>, CUresult>,
) -> Result<Option<u64>, CUresult> {
    let mut state = state::lock();
    let Some(c) = capture_of(&mut state, handle)? else {
        return Ok(None);
    };
    if c.invalidated {
        return Err(CAPTURE_INVALIDATED);
    }
    let (graph, recapture) = (c.graph, c.recapture.is_some());
    let device = device(&state)?;
    if !recapture {
        return graphs::capture_alloc(&mut state, graph, size, device).map(Some);
    }
    let same = |r: Option<Recorded>| match r {
        Some(Recorded::Alloc {
            address,
            size: s,
            device: d,
        }) if s == size as u64 && d == device => Some(address),
        _ => None,
    };
    rematch(&mut state, handle, same).map(Some)
}

/// A free on a capturing stream: a free node (true), if the pointer is a graph allocation
/// or a device allocation; a recapture matches the graph's next node instead (a free of
/// the same address). `Ok(false)` when the stream is not capturing.
pub fn free(handle: usize, dptr: u64) -> Result<bool, CUresult> {
    let mut state = state::lock();
    let Some(c) = state.streams.get(&handle).and_then(|s| s.capture.as_ref()) else {
        return Ok(false);
    };
    if c.invalidated {
        return Err(CAPTURE_INVALIDATED);
    }
    let (graph, recapture) = (c.graph, c.recapture.is_some());
    if !recapture {
        return graphs::capture_free(&mut state, graph, dptr).map(|()| true);
    }
    let same = |r: Option<Recorded>| match r {
        Some(Recorded::Free { address }) if address == dptr => Some(address),
        _ => None,
    };
    rematch(&mut state, handle, same).map(|_| true)
}

/// `cuStreamBeginCaptureToCig`: `CUstreamCigCaptureParams` "streamCigParams must be
/// non-NULL"; not on `CU_STREAM_LEGACY`; and the stream's context must be a CIG context,
/// which no context here is.
pub fn begin_cig(handle: usize, params_given: bool) -> Result<(), CUresult> {
    if !params_given || handle == STREAM_LEGACY {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    streams::check(handle)?;
    Err(CUDA_ERROR_INVALID_CONTEXT)
}

/// `cuStreamEndCaptureToCig`: no stream here is in CIG capture.
pub fn end_cig(handle: usize) -> Result<(), CUresult> {
    streams::check(handle)?;
    Err(CUDA_ERROR_INVALID_VALUE)
}
