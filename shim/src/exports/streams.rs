//! Streams and events. Work completes as it is issued, so these mostly check handles.

use std::ffi::{c_int, c_uint, c_void};

use super::graphs::dependencies_of;
use super::{h, handle_ptr};
use crate::abi::*;
use crate::captures::{self, Begin};
use crate::ffi::{self, Out};
use crate::{pools, streams};

exports! {
    fn cuStreamCreate(stream: *mut Handle, flags: c_uint) as cuStreamCreate since 2000 {
        let out = Out::new(stream)?;
        out.write(handle_ptr(streams::create(flags, 0)?));
        Ok(())
    }

    fn cuStreamCreateWithPriority(
        stream: *mut Handle,
        flags: c_uint,
        priority: c_int,
    ) as cuStreamCreateWithPriority since 5050 {
        let out = Out::new(stream)?;
        out.write(handle_ptr(streams::create(flags, priority)?));
        Ok(())
    }

    fn cuStreamDestroy(stream: Handle) as cuStreamDestroy since 2000 {
        streams::destroy(h(stream))
    }

    fn cuStreamDestroy_v2(stream: Handle) as cuStreamDestroy since 4000 {
        streams::destroy(h(stream))
    }

    // A synchronisation: memory pools release what they keep above their thresholds.
    fn cuStreamSynchronize(stream: Handle) as cuStreamSynchronize since 2000 {
        pools::synchronize_stream(h(stream))
    }

    fn cuStreamSynchronize_ptsz(stream: Handle) as cuStreamSynchronize since 7000 Ptsz {
        pools::synchronize_stream(h(stream))
    }

    fn cuStreamQuery(stream: Handle) as cuStreamQuery since 2000 {
        streams::check(h(stream))
    }

    fn cuStreamQuery_ptsz(stream: Handle) as cuStreamQuery since 7000 Ptsz {
        streams::check(h(stream))
    }

    fn cuStreamWaitEvent(
        stream: Handle,
        event: Handle,
        _flags: c_uint,
    ) as cuStreamWaitEvent since 3020 {
        streams::check_event_and_stream(h(event), h(stream))
    }

    fn cuStreamWaitEvent_ptsz(
        stream: Handle,
        event: Handle,
        _flags: c_uint,
    ) as cuStreamWaitEvent since 7000 Ptsz {
        streams::check_event_and_stream(h(event), h(stream))
    }

    fn cuStreamGetFlags(stream: Handle, flags: *mut c_uint) as cuStreamGetFlags since 5050 {
        stream_flags(stream, Out::new(flags)?)
    }

    fn cuStreamGetFlags_ptsz(
        stream: Handle,
        flags: *mut c_uint,
    ) as cuStreamGetFlags since 7000 Ptsz {
        stream_flags(stream, Out::new(flags)?)
    }

    fn cuStreamGetPriority(stream: Handle, priority: *mut c_int) as cuStreamGetPriority since 5050 {
        stream_priority(stream, Out::new(priority)?)
    }

    fn cuStreamGetPriority_ptsz(
        stream: Handle,
        priority: *mut c_int,
    ) as cuStreamGetPriority since 7000 Ptsz {
        stream_priority(stream, Out::new(priority)?)
    }

    fn cuStreamIsCapturing(stream: Handle, status: *mut c_int) as cuStreamIsCapturing since 10000 {
        stream_is_capturing(stream, Out::new(status)?)
    }

    fn cuStreamIsCapturing_ptsz(
        stream: Handle,
        status: *mut c_int,
    ) as cuStreamIsCapturing since 10000 Ptsz {
        stream_is_capturing(stream, Out::new(status)?)
    }

    // -- a stream's context
    fn cuStreamGetCtx(stream: Handle, ctx: *mut Handle) as cuStreamGetCtx since 9020 {
        let out = Out::new(ctx)?;
        out.write(handle_ptr(streams::properties(h(stream))?.2));
        Ok(())
    }

    fn cuStreamGetCtx_ptsz(
        stream: Handle,
        ctx: *mut Handle,
    ) as cuStreamGetCtx since 9020 Ptsz {
        let out = Out::new(ctx)?;
        out.write(handle_ptr(streams::properties(h(stream))?.2));
        Ok(())
    }

    // -- capture: a capturing stream's allocations allocate nothing (see `captures`)
    fn cuStreamBeginCapture(stream: Handle) as cuStreamBeginCapture since 10000 {
        captures::begin(h(stream), Begin::New)
    }

    fn cuStreamBeginCapture_ptsz(stream: Handle) as cuStreamBeginCapture since 10000 Ptsz {
        captures::begin(h(stream), Begin::New)
    }

    fn cuStreamBeginCapture_v2(
        stream: Handle,
        _mode: c_int,
    ) as cuStreamBeginCapture since 10010 {
        captures::begin(h(stream), Begin::New)
    }

    fn cuStreamBeginCapture_v2_ptsz(
        stream: Handle,
        _mode: c_int,
    ) as cuStreamBeginCapture since 10010 Ptsz {
        captures::begin(h(stream), Begin::New)
    }

    /// Edge data is optional ("Can be NULL") and carries nothing a memory node uses.
    fn cuStreamBeginCaptureToGraph(
        stream: Handle,
        graph: Handle,
        dependencies: *const Handle,
        _edge_data: *const c_void,
        num_dependencies: usize,
        _mode: c_int,
    ) as cuStreamBeginCaptureToGraph since 12030 {
        let deps = dependencies_of(dependencies, num_dependencies)?;
        captures::begin(h(stream), Begin::Into { graph: h(graph), dependencies: &deps })
    }

    fn cuStreamBeginCaptureToGraph_ptsz(
        stream: Handle,
        graph: Handle,
        dependencies: *const Handle,
        _edge_data: *const c_void,
        num_dependencies: usize,
        _mode: c_int,
    ) as cuStreamBeginCaptureToGraph since 12030 Ptsz {
        let deps = dependencies_of(dependencies, num_dependencies)?;
        captures::begin(h(stream), Begin::Into { graph: h(graph), dependencies: &deps })
    }

    /// The callback is for mismatches of other nodes than memory nodes: never called here.
    fn cuStreamBeginRecaptureToGraph(
        stream: Handle,
        _mode: c_int,
        graph: Handle,
        _callback: *mut c_void,
        _user_data: *mut c_void,
    ) as cuStreamBeginRecaptureToGraph since 13030 {
        captures::begin(h(stream), Begin::Recapture { graph: h(graph) })
    }

    fn cuStreamBeginRecaptureToGraph_ptsz(
        stream: Handle,
        _mode: c_int,
        graph: Handle,
        _callback: *mut c_void,
        _user_data: *mut c_void,
    ) as cuStreamBeginRecaptureToGraph since 13030 Ptsz {
        captures::begin(h(stream), Begin::Recapture { graph: h(graph) })
    }

    fn cuStreamEndCapture(stream: Handle, graph: *mut Handle) as cuStreamEndCapture since 10000 {
        end_capture(stream, Out::new(graph)?)
    }

    fn cuStreamEndCapture_ptsz(
        stream: Handle,
        graph: *mut Handle,
    ) as cuStreamEndCapture since 10000 Ptsz {
        end_capture(stream, Out::new(graph)?)
    }

    fn cuStreamBeginCaptureToCig(
        stream: Handle,
        params: *mut CigCaptureParams,
    ) as cuStreamBeginCaptureToCig since 13010 {
        captures::begin_cig(h(stream), cig_params_given(params)?)
    }

    fn cuStreamBeginCaptureToCig_ptsz(
        stream: Handle,
        params: *mut CigCaptureParams,
    ) as cuStreamBeginCaptureToCig since 13010 Ptsz {
        captures::begin_cig(h(stream), cig_params_given(params)?)
    }

    fn cuStreamEndCaptureToCig(stream: Handle) as cuStreamEndCaptureToCig since 13010 {
        captures::end_cig(h(stream))
    }

    fn cuStreamEndCaptureToCig_ptsz(stream: Handle) as cuStreamEndCaptureToCig since 13010 Ptsz {
        captures::end_cig(h(stream))
    }

    fn cuEventCreate(event: *mut Handle, flags: c_uint) as cuEventCreate since 2000 {
        let out = Out::new(event)?;
        out.write(handle_ptr(streams::create_event(flags)?));
        Ok(())
    }

    fn cuEventRecord(event: Handle, stream: Handle) as cuEventRecord since 2000 {
        streams::check_event_and_stream(h(event), h(stream))
    }

    fn cuEventRecord_ptsz(event: Handle, stream: Handle) as cuEventRecord since 7000 Ptsz {
        streams::check_event_and_stream(h(event), h(stream))
    }

    fn cuEventRecordWithFlags(
        event: Handle,
        stream: Handle,
        _flags: c_uint,
    ) as cuEventRecordWithFlags since 11010 {
        streams::check_event_and_stream(h(event), h(stream))
    }

    fn cuEventRecordWithFlags_ptsz(
        event: Handle,
        stream: Handle,
        _flags: c_uint,
    ) as cuEventRecordWithFlags since 11010 Ptsz {
        streams::check_event_and_stream(h(event), h(stream))
    }

    fn cuEventQuery(event: Handle) as cuEventQuery since 2000 {
        streams::check_event(h(event))
    }

    fn cuEventSynchronize(event: Handle) as cuEventSynchronize since 2000 {
        pools::synchronize_event(h(event))
    }

    fn cuEventDestroy(event: Handle) as cuEventDestroy since 2000 {
        streams::destroy_event(h(event))
    }

    fn cuEventDestroy_v2(event: Handle) as cuEventDestroy since 4000 {
        streams::destroy_event(h(event))
    }

    fn cuEventElapsedTime(
        ms: *mut f32,
        start: Handle,
        end: Handle,
    ) as cuEventElapsedTime since 2000 {
        elapsed_time(Out::new(ms)?, start, end)
    }

    fn cuEventElapsedTime_v2(
        ms: *mut f32,
        start: Handle,
        end: Handle,
    ) as cuEventElapsedTime since 12080 {
        elapsed_time(Out::new(ms)?, start, end)
    }
}

fn stream_flags(stream: Handle, out: Out<c_uint>) -> Result<(), CUresult> {
    out.write(streams::properties(h(stream))?.0);
    Ok(())
}

fn stream_priority(stream: Handle, out: Out<c_int>) -> Result<(), CUresult> {
    out.write(streams::properties(h(stream))?.1);
    Ok(())
}

/// `CU_STREAM_CAPTURE_STATUS_ACTIVE` (1) or `_INVALIDATED` (2) between begin and end, else
/// `_NONE` (0).
fn stream_is_capturing(stream: Handle, out: Out<c_int>) -> Result<(), CUresult> {
    out.write(streams::capture_status(h(stream))?);
    Ok(())
}

fn end_capture(stream: Handle, out: Out<Handle>) -> Result<(), CUresult> {
    out.write(handle_ptr(captures::end(h(stream))?));
    Ok(())
}

/// Whether `CUstreamCigCaptureParams` and its `streamCigParams` ("must be non-NULL") are
/// given.
///
/// # Safety
/// `params` is null or points at a `CUstreamCigCaptureParams`.
unsafe fn cig_params_given(params: *mut CigCaptureParams) -> Result<bool, CUresult> {
    if params.is_null() {
        return Ok(false);
    }
    // SAFETY: by this function's contract.
    let params = unsafe { ffi::read(params)? };
    Ok(!params.stream_cig_params.is_null())
}

/// Work completes as it is issued, so no time ever passes between two events.
fn elapsed_time(out: Out<f32>, start: Handle, end: Handle) -> Result<(), CUresult> {
    streams::check_event(h(start))?;
    streams::check_event(h(end))?;
    out.write(0.0);
    Ok(())
}
