//! Contexts: primary contexts (one per device, reference counted), created contexts, and
//! each thread's stack of current contexts.
//!
//! A context owns the memory allocated in it: cuda.h on `cuCtxDestroy`, it "destroys and
//! cleans up all resources associated with the context", among them "memory allocations by
//! cuMemAlloc(), cuMemAllocHost(), cuMemAllocManaged() and cuMemAllocPitch()", and its
//! streams and arrays; `cuDevicePrimaryCtxReset` and the `cuDevicePrimaryCtxRelease` that
//! drops the last reference do the same to the primary context. Pool and `cuMemCreate`
//! memory belongs to no context (see `pools`, `vmm`): a destroy leaves it; a primary reset
//! or last release frees the device's pool allocations, being device-wide
//! (`pools::device_reset`). A primary context keeps its handle after a reset or its last
//! release; its next use finds it fresh, as the driver reinitialises it.
//!
//! A context also takes device memory itself (`CUDA_SHIM_CONTEXT_MEMORY`, and what
//! `cuCtxSetLimit` adds): charged to its device's `context_memory` from its creation (a
//! primary context: the retain that makes it active) to its end. A context that does not
//! fit is not made: `CUDA_ERROR_OUT_OF_MEMORY`, as the driver fails one.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::abi::*;
use crate::state::{self, State};

/// The context version `cuCtxGetApiVersion` reports.
const API_VERSION: u32 = 3020;
/// How deep a thread's current-context stack may grow.
const STACK_CAPACITY: usize = 64;

pub struct Context {
    pub device: usize,
    pub flags: u32,
    pub id: u64,
    pub primary: bool,
    /// `cuCtxAttach`'s extra references (deprecated API): `cuCtxDetach` destroys the
    /// context when none is left.
    pub attached: u32,
    /// Device memory the context takes (charged to its device's `context_memory`); 0 for a
    /// primary context that is not active.
    pub memory: u64,
    /// The `CUcontext` of a green context (`cuCtxFromGreenCtx`): "treated as if it were a
    /// primary context", so what is allocated in it is its device's primary context's.
    pub green: bool,
}

/// A thread's current-context stack: handles (and their devices), the top is the current
/// context. Plain arrays so that the thread-local needs no destructor.
struct Stack {
    handles: [usize; STACK_CAPACITY],
    devices: [usize; STACK_CAPACITY],
    len: usize,
}

thread_local! {
    static STACK: RefCell<Stack> = const {
        RefCell::new(Stack { handles: [0; STACK_CAPACITY], devices: [0; STACK_CAPACITY], len: 0 })
    };
}

/// Set once any context has been destroyed: from then on a handle on a stack may be stale,
/// and the current device must be checked against the context table under the lock. Until
/// then `cuCtxGetDevice` is a thread-local read, as cheap as a real driver's.
static ANY_DESTROYED: AtomicBool = AtomicBool::new(false);

/// The current context's device without the global lock, when that is exact (no context
/// was ever destroyed); `None` means "ask under the lock".
pub fn current_device_unlocked() -> Option<Result<usize, CUresult>> {
    if ANY_DESTROYED.load(Ordering::Acquire) {
        return None;
    }
    Some(STACK.with(|s| {
        let s = s.borrow();
        s.len
            .checked_sub(1)
            .map(|top| s.devices[top])
            .ok_or(CUDA_ERROR_INVALID_CONTEXT)
    }))
}

/// The handle on top of this thread's stack (unchecked: it may have been destroyed since).
pub fn current_handle() -> Option<usize> {
    STACK.with(|s| {
        let s = s.borrow();
        s.len.checked_sub(1).map(|top| s.handles[top])
    })
}

fn push_handle(handle: usize, device: usize) -> Result<(), CUresult> {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if s.len == STACK_CAPACITY {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let len = s.len;
        s.handles[len] = handle;
        s.devices[len] = device;
        s.len += 1;
        Ok(())
    })
}

fn pop_handle() -> Option<usize> {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.len = s.len.checked_sub(1)?;
        Some(s.handles[s.len])
    })
}

/// The current context and its handle, or `CUDA_ERROR_INVALID_CONTEXT` if there is none (or
/// it has been destroyed).
pub fn current(state: &State) -> Result<(usize, &Context), CUresult> {
    let handle = current_handle().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    let context = state
        .contexts
        .get(&handle)
        .ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    Ok((handle, context))
}

/// The device of the current context.
pub fn current_device(state: &State) -> Result<usize, CUresult> {
    current(state).map(|(_, c)| c.device)
}

/// Looks up a context handle; null means the current context.
pub fn get(state: &State, handle: usize) -> Result<&Context, CUresult> {
    if handle == 0 {
        return current(state).map(|(_, c)| c);
    }
    state
        .contexts
        .get(&handle)
        .ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

pub fn add_context(
    state: &mut State,
    device: usize,
    flags: u32,
    primary: bool,
    memory: u64,
) -> usize {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    let handle = state::new_handle();
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    state.contexts.insert(
        handle,
        Context {
            device,
            flags,
            id,
            primary,
            attached: 0,
            memory,
            green: false,
        },
    );
    handle
}

/// Gives back the memory a context took (it ended: destroyed, reset or released for the
/// last time) and forgets its limits, which a primary context's next use starts without.
fn give_back_memory(state: &mut State, handle: usize) {
    if let Some(context) = state.contexts.get_mut(&handle) {
        let (device, memory) = (context.device, std::mem::take(&mut context.memory));
        state.devices[device].uncharge_context(memory);
    }
    state.limits.retain(|&(ctx, _), _| ctx != handle);
}

/// The context that owns what is allocated in context `handle`: itself, or for a green
/// context's, its device's primary context.
pub fn owner(state: &State, handle: usize) -> usize {
    match state.contexts.get(&handle) {
        Some(c) if c.green => state.devices[c.device].primary_context.unwrap_or(handle),
        _ => handle,
    }
}

/// A green context's `CUcontext` ends with it: its own memory goes, and the handle is
/// stale from now on.
pub fn end_green(state: &mut State, handle: usize) {
    give_back_memory(state, handle);
    state.contexts.remove(&handle);
    ANY_DESTROYED.store(true, Ordering::Release);
}

/// The driver took `bytes` more device memory for the current context without a call that
/// says so: the shim's stand-in for lazy module loading, `__device__` globals and local
/// memory at a launch (cuda.h's modules and launches are not simulated here). Charged to
/// the context until its end; out of memory (nothing taken) if it does not fit.
pub fn grow_current(bytes: u64) -> Result<(), CUresult> {
    let mut state = state::lock();
    let (handle, c) = current(&state)?;
    let device = c.device;
    state.devices[device].charge_context(bytes)?;
    if let Some(c) = state.contexts.get_mut(&handle) {
        c.memory += bytes;
    }
    Ok(())
}

/// `cuCtxCreate`: a new context on `device`, made current (pushed) on this thread.
pub fn create(device: CUdevice, flags: u32) -> Result<usize, CUresult> {
    let handle = {
        let mut state = state::lock();
        let cost = state.machine.context_cost;
        state.device_mut(device)?.charge_context(cost)?;
        add_context(&mut state, device as usize, flags, false, cost)
    };
    if let Err(code) = push_handle(handle, device as usize) {
        // Not made after all: nothing is left behind.
        let mut state = state::lock();
        give_back_memory(&mut state, handle);
        state.contexts.remove(&handle);
        return Err(code);
    }
    Ok(handle)
}

/// `cuCtxDestroy`: destroys a created context, its streams, its arrays and its memory (not
/// pool allocations made on its streams), and pops it if it is current on this thread.
pub fn destroy(handle: usize) -> Result<(), CUresult> {
    {
        let mut state = state::lock();
        match state.contexts.get(&handle) {
            // "Destroying pContext via cuCtxDestroy is undefined behavior": refused here.
            Some(c) if !c.primary && !c.green => {}
            _ => return Err(CUDA_ERROR_INVALID_CONTEXT),
        }
        give_back_memory(&mut state, handle);
        state.contexts.remove(&handle);
        crate::arrays::context_ended(&mut state, handle);
        crate::streams::destroy_of_context(&mut state, handle);
        ANY_DESTROYED.store(true, Ordering::Release);
    }
    crate::memory::free_owned_by(handle);
    if current_handle() == Some(handle) {
        pop_handle();
    }
    Ok(())
}

/// `cuCtxAttach` (deprecated): one more reference to the current created context.
pub fn attach(flags: u32) -> Result<usize, CUresult> {
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut state = state::lock();
    let handle = current(&state)?.0;
    match state.contexts.get_mut(&handle) {
        Some(c) if !c.primary && !c.green => c.attached += 1,
        _ => return Err(CUDA_ERROR_INVALID_CONTEXT),
    }
    Ok(handle)
}

/// `cuCtxDetach` (deprecated): drops a reference of a created context current to this
/// thread; the last one destroys it (as `cuCtxDestroy`).
pub fn detach(handle: usize) -> Result<(), CUresult> {
    {
        let mut state = state::lock();
        if current_handle() != Some(handle) {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        match state.contexts.get_mut(&handle) {
            Some(c) if !c.primary && !c.green && c.attached > 0 => {
                c.attached -= 1;
                return Ok(());
            }
            Some(c) if !c.primary && !c.green => {}
            _ => return Err(CUDA_ERROR_INVALID_CONTEXT),
        }
    }
    destroy(handle)
}

pub fn push(handle: usize) -> Result<(), CUresult> {
    let device = device_of(handle)?;
    push_handle(handle, device)
}

fn device_of(handle: usize) -> Result<usize, CUresult> {
    state::lock()
        .contexts
        .get(&handle)
        .map(|c| c.device)
        .ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

pub fn pop() -> Result<usize, CUresult> {
    pop_handle().ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

/// `cuCtxSetCurrent`: replaces the top of the stack; null unbinds (pops) the current one.
pub fn set_current(handle: usize) -> Result<(), CUresult> {
    if handle == 0 {
        pop_handle();
        return Ok(());
    }
    let device = device_of(handle)?;
    pop_handle();
    push_handle(handle, device)
}

pub fn api_version(handle: usize) -> Result<u32, CUresult> {
    get(&state::lock(), handle).map(|_| API_VERSION)
}

pub fn id(handle: usize) -> Result<u64, CUresult> {
    get(&state::lock(), handle).map(|c| c.id)
}

/// `cuDevicePrimaryCtxRetain`: the device's primary context (created on first use). The
/// retain that makes it active (the first, or the first after a reset or the last release)
/// charges its memory, or fails with nothing changed if that does not fit.
pub fn primary_retain(device: CUdevice) -> Result<usize, CUresult> {
    let mut state = state::lock();
    let cost = state.machine.context_cost;
    let dev = state.device_mut(device)?;
    let activates = dev.primary_refs == 0;
    if activates {
        dev.charge_context(cost)?;
    }
    let (flags, existing) = (dev.primary_flags, dev.primary_context);
    let handle = match existing {
        Some(handle) => handle,
        None => add_context(&mut state, device as usize, flags, true, 0),
    };
    if activates {
        if let Some(context) = state.contexts.get_mut(&handle) {
            context.memory += cost;
        }
    }
    let dev = state.device_mut(device)?;
    dev.primary_context = Some(handle);
    dev.primary_refs += 1;
    Ok(handle)
}

/// `cuDevicePrimaryCtxRelease`. The release that drops the last reference resets the
/// context ("The context is automatically reset once the last reference to it is
/// released"): as `cuDevicePrimaryCtxReset`, its memory and the device's pool allocations
/// go (the handle stays, for the next retain).
pub fn primary_release(device: CUdevice) -> Result<(), CUresult> {
    let gone = {
        let mut state = state::lock();
        let dev = state.device_mut(device)?;
        if dev.primary_refs == 0 {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        dev.primary_refs -= 1;
        let gone = (dev.primary_refs == 0)
            .then_some(dev.primary_context)
            .flatten();
        if let Some(handle) = gone {
            give_back_memory(&mut state, handle);
            crate::streams::destroy_of_context(&mut state, handle);
            crate::arrays::context_ended(&mut state, handle);
        }
        gone
    };
    if let Some(handle) = gone {
        crate::memory::free_owned_by(handle);
        crate::pools::device_reset(device as usize);
    }
    Ok(())
}

/// `cuDevicePrimaryCtxReset`: drops every reference and frees all its memory and arrays.
pub fn primary_reset(device: CUdevice) -> Result<(), CUresult> {
    let handle = {
        let mut state = state::lock();
        let dev = state.device_mut(device)?;
        dev.primary_refs = 0;
        let handle = dev.primary_context;
        if let Some(handle) = handle {
            give_back_memory(&mut state, handle);
            crate::streams::destroy_of_context(&mut state, handle);
            crate::arrays::context_ended(&mut state, handle);
        }
        handle
    };
    if let Some(handle) = handle {
        crate::memory::free_owned_by(handle);
    }
    // "All resources associated with the current device in the current process": its pool
    // allocations, whichever context's stream made them, its pools' and graph memory.
    crate::pools::device_reset(device as usize);
    Ok(())
}

/// `cuDevicePrimaryCtxGetState`: (flags, active).
pub fn primary_state(device: CUdevice) -> Result<(u32, bool), CUresult> {
    let state = state::lock();
    let dev = state.device(device)?;
    Ok((dev.primary_flags, dev.primary_refs > 0))
}

pub fn primary_set_flags(device: CUdevice, flags: u32) -> Result<(), CUresult> {
    let mut state = state::lock();
    let dev = state.device_mut(device)?;
    dev.primary_flags = flags;
    if let Some(handle) = dev.primary_context {
        if let Some(context) = state.contexts.get_mut(&handle) {
            context.flags = flags;
        }
    }
    Ok(())
}
