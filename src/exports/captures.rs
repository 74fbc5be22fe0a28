//! Stream captures begin and end: only counted (see `crate::captures`), so that the
//! stream-ordered allocations and frees ask the driver whether their stream captures only
//! while a capture may be live. Nothing is charged; the driver's answer passes unchanged.
//! Every form: `cuStreamBeginCapture` (and `_v2`), `cuStreamBeginCaptureToGraph`,
//! `cuStreamBeginRecaptureToGraph` (CUDA 13.3: "Begin graph capture on hStream to the
//! existing hGraph"), `cuStreamBeginCaptureToCig` (CUDA 13.1: "CIG capture mode operates
//! similarly to cuStreamBeginCapture with the CU_STREAM_CAPTURE_MODE_RELAXED option"), each
//! with its `_ptsz`, and their ends.

use super::{guard, hooked, per_thread, table};
use crate::captures;
use crate::cuda_abi::{CuGraph, CuGraphNode, CuResult, CuStream};
use crate::lookup::{CFunction, Real};
use crate::real_driver as real;
use std::ffi::{c_int, c_void};

/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`, `_UNJOINED` and
/// `CUDA_ERROR_GRAPH_RECAPTURE_FAILURE` ("a graph recapture failed and had to be
/// terminated"): an end that fails with these still ends the capture.
const ENDING_ERRORS: [u32; 3] = [901, 904, 918];

/// A begin: counted before the driver runs it, given back if the driver refuses.
fn begin<F: CFunction>(real: &'static Real<F>, call: impl FnOnce(F) -> CuResult) -> CuResult {
    guard(|| {
        let Some(f) = real.get() else {
            return CuResult::NOT_FOUND;
        };
        captures::beginning();
        let rc = call(f);
        if !rc.is_ok() {
            captures::gone();
        }
        rc
    })
}

/// An end on `meant` (the stream as the variant means it): the count falls only if the
/// stream captured before the call and does not after it, and the driver ended it (so
/// that two threads ending one capture at once count one end).
fn end<F: CFunction>(
    real: &'static Real<F>,
    meant: usize,
    call: impl FnOnce(F) -> CuResult,
) -> CuResult {
    guard(|| {
        let Some(f) = real.get() else {
            return CuResult::NOT_FOUND;
        };
        let captured = real::ask_capturing(meant);
        let rc = call(f);
        let ended = rc.is_ok() || ENDING_ERRORS.contains(&rc.0);
        if captured && ended && !real::ask_capturing(meant) {
            captures::gone();
        }
        rc
    })
}

/// The end of a CIG capture: whether `cuStreamIsCapturing` reports one is not documented,
/// so the count falls when the driver ended it ("Capture must have been initiated on
/// hStream via a call to cuStreamBeginCaptureToCig": of two threads ending one, one
/// succeeds).
fn end_cig<F: CFunction>(real: &'static Real<F>, call: impl FnOnce(F) -> CuResult) -> CuResult {
    guard(|| {
        let Some(f) = real.get() else {
            return CuResult::NOT_FOUND;
        };
        let rc = call(f);
        if rc.is_ok() {
            captures::gone();
        }
        rc
    })
}

hooked!(cuStreamBeginCapture, |stream: CuStream| {
    // SAFETY: the caller's argument, passed on.
    begin(&real::cuStreamBeginCapture, |f| unsafe { f(stream) })
});

hooked!(cuStreamBeginCapture_ptsz, |stream: CuStream| {
    // SAFETY: the caller's argument, passed on.
    begin(&real::cuStreamBeginCapture_ptsz, |f| unsafe { f(stream) })
});

hooked!(cuStreamBeginCapture_v2, |stream: CuStream, mode: c_int| {
    // SAFETY: the caller's arguments, passed on.
    begin(&real::cuStreamBeginCapture_v2, |f| unsafe {
        f(stream, mode)
    })
});

hooked!(
    cuStreamBeginCapture_v2_ptsz,
    |stream: CuStream, mode: c_int| {
        // SAFETY: the caller's arguments, passed on.
        begin(&real::cuStreamBeginCapture_v2_ptsz, |f| unsafe {
            f(stream, mode)
        })
    }
);

hooked!(
    cuStreamBeginCaptureToGraph,
    |stream: CuStream,
     graph: CuGraph,
     dependencies: *const CuGraphNode,
     edge_data: *const c_void,
     count: usize,
     mode: c_int| {
        // SAFETY: the caller's arguments, passed on.
        begin(&real::cuStreamBeginCaptureToGraph, |f| unsafe {
            f(stream, graph, dependencies, edge_data, count, mode)
        })
    }
);

hooked!(
    cuStreamBeginCaptureToGraph_ptsz,
    |stream: CuStream,
     graph: CuGraph,
     dependencies: *const CuGraphNode,
     edge_data: *const c_void,
     count: usize,
     mode: c_int| {
        // SAFETY: the caller's arguments, passed on.
        begin(&real::cuStreamBeginCaptureToGraph_ptsz, |f| unsafe {
            f(stream, graph, dependencies, edge_data, count, mode)
        })
    }
);

hooked!(
    cuStreamEndCapture,
    |stream: CuStream, graph: *mut CuGraph| {
        // SAFETY: the caller's arguments, passed on.
        end(&real::cuStreamEndCapture, stream as usize, |f| unsafe {
            f(stream, graph)
        })
    }
);

hooked!(
    cuStreamEndCapture_ptsz,
    |stream: CuStream, graph: *mut CuGraph| {
        let meant = per_thread(stream);
        // SAFETY: the caller's arguments, passed on.
        end(&real::cuStreamEndCapture_ptsz, meant, |f| unsafe {
            f(stream, graph)
        })
    }
);

hooked!(
    cuStreamBeginRecaptureToGraph,
    |stream: CuStream,
     mode: c_int,
     graph: CuGraph,
     callback: *mut c_void,
     user_data: *mut c_void| {
        // SAFETY: the caller's arguments, passed on.
        begin(&real::cuStreamBeginRecaptureToGraph, |f| unsafe {
            f(stream, mode, graph, callback, user_data)
        })
    }
);

hooked!(
    cuStreamBeginRecaptureToGraph_ptsz,
    |stream: CuStream,
     mode: c_int,
     graph: CuGraph,
     callback: *mut c_void,
     user_data: *mut c_void| {
        // SAFETY: the caller's arguments, passed on.
        begin(&real::cuStreamBeginRecaptureToGraph_ptsz, |f| unsafe {
            f(stream, mode, graph, callback, user_data)
        })
    }
);

hooked!(
    cuStreamBeginCaptureToCig,
    |stream: CuStream, params: *mut c_void| {
        // SAFETY: the caller's arguments, passed on.
        begin(&real::cuStreamBeginCaptureToCig, |f| unsafe {
            f(stream, params)
        })
    }
);

hooked!(
    cuStreamBeginCaptureToCig_ptsz,
    |stream: CuStream, params: *mut c_void| {
        // SAFETY: the caller's arguments, passed on.
        begin(&real::cuStreamBeginCaptureToCig_ptsz, |f| unsafe {
            f(stream, params)
        })
    }
);

hooked!(cuStreamEndCaptureToCig, |stream: CuStream| {
    // SAFETY: the caller's argument, passed on.
    end_cig(&real::cuStreamEndCaptureToCig, |f| unsafe { f(stream) })
});

hooked!(cuStreamEndCaptureToCig_ptsz, |stream: CuStream| {
    // SAFETY: the caller's argument, passed on.
    end_cig(&real::cuStreamEndCaptureToCig_ptsz, |f| unsafe {
        f(stream)
    })
});

table!(
    cuStreamBeginCapture,
    cuStreamBeginCapture_ptsz,
    cuStreamBeginCapture_v2,
    cuStreamBeginCapture_v2_ptsz,
    cuStreamBeginCaptureToGraph,
    cuStreamBeginCaptureToGraph_ptsz,
    cuStreamEndCapture,
    cuStreamEndCapture_ptsz,
    cuStreamBeginRecaptureToGraph,
    cuStreamBeginRecaptureToGraph_ptsz,
    cuStreamBeginCaptureToCig,
    cuStreamBeginCaptureToCig_ptsz,
    cuStreamEndCaptureToCig,
    cuStreamEndCaptureToCig_ptsz
);
