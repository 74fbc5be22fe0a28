//! Call stacks at allocation (`CUQUOTA_STACKS=N`): the native stack of each allocation that
//! reaches the driver, captured in the hook and interned, so that the trace writes each
//! distinct stack once (a `stack` line) and events refer to it by id; the loaded modules
//! (`module` lines, see [`modules`]) let the CLI symbolise the addresses afterwards. Nothing
//! is symbolised in the process.
//!
//! Capture walks the stack with libgcc's `_Unwind_Backtrace` (already linked: Rust's own
//! panics unwind with it), which reads `.eh_frame` and so works for code built without frame
//! pointers. With glibc ≥ 2.35 it finds a module's unwind tables through `_dl_find_object`,
//! which takes no lock. The frames go into a fixed array on the stack; interning takes a
//! spin lock for a bounded number of tries (a hook in a signal handler that interrupted the
//! lock's holder, or one racing the exit, gives up and records no stack: id 0), and the
//! table has fixed capacities (a stack beyond them is recorded as none, and counted).

pub mod modules;

use crate::spin::SpinLock;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};

/// The most frames a stack keeps (`CUQUOTA_STACKS` above it means this).
pub const MAX_DEPTH: u32 = cuquota_format::lenient::MAX_STACK_DEPTH;
/// Distinct stacks a process can intern; later new ones are recorded as none.
const MAX_STACKS: usize = 1 << 16;
/// Frames of all interned stacks together.
const MAX_FRAMES: usize = 1 << 21;
/// Open-addressing slots (a power of two, twice the stacks, so probes stay short).
const SLOTS: usize = 2 * MAX_STACKS;
/// Tries at the interner's lock before a hook goes on without a stack.
const LOCK_ATTEMPTS: u32 = 64;

/// Frames kept per stack; 0: off.
static DEPTH: AtomicU32 = AtomicU32::new(0);

/// The interned stacks. Grows only up to its capacities (reserved when the first stack is
/// interned), so an insert never reallocates.
struct Interner {
    /// Slot → stack id (1-based; 0: empty).
    slots: Vec<u32>,
    /// By id − 1: the stack's hash, and where its frames lie in `frames`.
    stacks: Vec<(u64, u32, u32)>,
    frames: Vec<u64>,
}

static INTERNER: SpinLock<Option<Interner>> = SpinLock::new(None);

/// Turns capture on with `depth` frames per stack (clamped to [`MAX_DEPTH`]; 0: off).
pub fn enable(depth: u32) {
    DEPTH.store(depth.min(MAX_DEPTH), Ordering::Relaxed);
}

/// Frames kept per stack (0: capture is off).
#[inline]
pub fn depth() -> u32 {
    DEPTH.load(Ordering::Relaxed)
}

/// The calling thread's stack, interned: its id (0: none, capture off or failed). The frames
/// of cuquota itself are left out (see [`modules::own_range`]).
#[inline]
pub fn capture() -> u32 {
    match depth() {
        0 => 0,
        depth => capture_walk(depth as usize),
    }
}

/// Cold: off, the hooks' path keeps only the test of the depth.
#[cold]
#[inline(never)]
fn capture_walk(depth: usize) -> u32 {
    let mut walk = Walk {
        frames: [0; MAX_DEPTH as usize],
        len: 0,
        depth,
        own: modules::own_range(),
    };
    // SAFETY: `on_frame` only writes within `walk.frames` and never unwinds; `walk` outlives
    // the call.
    unsafe { _Unwind_Backtrace(on_frame, (&mut walk as *mut Walk).cast()) };
    if walk.len == 0 {
        return 0;
    }
    // 0 when the table is full or its lock was not had: the event then carries no stack
    // (the report counts such allocations).
    intern(&walk.frames[..walk.len])
}

struct Walk {
    frames: [u64; MAX_DEPTH as usize],
    len: usize,
    depth: usize,
    /// cuquota's own code, skipped while the walk is still in it.
    own: (u64, u64),
}

/// libgcc's unwinder (libgcc_s, which every Rust program on linux-gnu links).
#[allow(non_camel_case_types)]
type _Unwind_Trace_Fn = unsafe extern "C" fn(ctx: *mut c_void, arg: *mut c_void) -> c_int;

extern "C" {
    fn _Unwind_Backtrace(trace: _Unwind_Trace_Fn, arg: *mut c_void) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}

const URC_NO_REASON: c_int = 0;
const URC_NORMAL_STOP: c_int = 4;

/// One frame of the walk. Must not panic (it is called from C): only bounds-checked stores.
unsafe extern "C" fn on_frame(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Walk` that `capture` passed, alive and not otherwise borrowed
    // during the walk; `ctx` is the unwinder's context for this frame.
    let (walk, ip) = unsafe { (&mut *arg.cast::<Walk>(), _Unwind_GetIP(ctx) as u64) };
    if ip == 0 {
        return URC_NORMAL_STOP;
    }
    if walk.len == 0 && ip >= walk.own.0 && ip < walk.own.1 {
        return URC_NO_REASON; // still inside cuquota
    }
    match walk.frames.get_mut(walk.len) {
        Some(slot) if walk.len < walk.depth => {
            *slot = ip;
            walk.len += 1;
            if walk.len == walk.depth {
                URC_NORMAL_STOP
            } else {
                URC_NO_REASON
            }
        }
        _ => URC_NORMAL_STOP,
    }
}

fn hash(frames: &[u64]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64 ^ frames.len() as u64;
    for &f in frames {
        h = (h ^ f).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 29;
    }
    h | 1
}

/// The id of `frames` (1-based), added if new; 0 if it cannot be had now.
fn intern(frames: &[u64]) -> u32 {
    let h = hash(frames);
    let Some(mut guard) = INTERNER.try_lock_for(LOCK_ATTEMPTS) else {
        return 0;
    };
    let table = guard.get_or_insert_with(|| Interner {
        slots: vec![0; SLOTS],
        stacks: Vec::with_capacity(MAX_STACKS),
        frames: Vec::with_capacity(MAX_FRAMES),
    });
    let mut slot = h as usize & (SLOTS - 1);
    loop {
        match table.slots[slot] {
            0 => break,
            id => {
                let (hash, at, len) = table.stacks[id as usize - 1];
                let same = hash == h && table.frames[at as usize..(at + len) as usize] == *frames;
                if same {
                    return id;
                }
            }
        }
        slot = (slot + 1) & (SLOTS - 1);
    }
    if table.stacks.len() >= MAX_STACKS || table.frames.len() + frames.len() > MAX_FRAMES {
        return 0;
    }
    let at = table.frames.len() as u32;
    table.frames.extend_from_slice(frames);
    table.stacks.push((h, at, frames.len() as u32));
    let id = table.stacks.len() as u32;
    table.slots[slot] = id;
    id
}

/// For the trace writer: the stacks interned after the first `known` (ids `known + 1` on),
/// appended to `out` as (id, frames). Returns how many stacks exist now.
pub fn since(known: u32, out: &mut Vec<(u32, Vec<u64>)>) -> u32 {
    // The writer may wait: a hook holds the lock for a short probe, never across a call.
    let guard = INTERNER.lock();
    let Some(table) = guard.as_ref() else {
        return known;
    };
    let now = table.stacks.len() as u32;
    for id in known + 1..=now {
        let (_, at, len) = table.stacks[id as usize - 1];
        out.push((id, table.frames[at as usize..(at + len) as usize].to_vec()));
    }
    now
}

/// In a forked child: the child's trace starts afresh, and writes its stacks again; a
/// thread of the parent may have held the lock.
///
/// # Safety
/// Only in the child right after `fork()`, while it has one thread.
pub unsafe fn reset_in_child() {
    // SAFETY: the caller's promise; the old table (possibly mid-insert) is leaked.
    unsafe { INTERNER.reset_in_child(None) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn from_a() -> u32 {
        std::hint::black_box(capture())
    }

    #[inline(never)]
    fn from_b() -> u32 {
        std::hint::black_box(capture())
    }

    /// The same call site interns to one id, another one to another; the frames come back to
    /// the writer in id order. One test: the depth is the process's.
    #[test]
    fn stacks_are_interned_once_per_call_site_within_the_depth() {
        enable(16);
        let a: Vec<u32> = (0..3).map(|_| from_a()).collect();
        let b = from_b();
        assert!(a[0] != 0 && b != 0, "{a:?} {b}");
        assert!(a.iter().all(|&id| id == a[0]), "{a:?}");
        assert_ne!(a[0], b);
        let mut out = Vec::new();
        let now = since(0, &mut out);
        assert!(now >= 2);
        assert_eq!(out.len() as u32, now);
        assert!(out
            .iter()
            .enumerate()
            .all(|(i, (id, _))| *id == i as u32 + 1));
        let frames = &out[a[0] as usize - 1].1;
        assert!(!frames.is_empty() && frames.len() <= 16, "{frames:?}");
        let mut again = Vec::new();
        assert_eq!(since(now, &mut again), now);
        assert!(again.is_empty());

        // The depth is clamped, and bounds the frames kept.
        enable(1000);
        assert_eq!(depth(), MAX_DEPTH);
        enable(2);
        let id = from_a();
        let mut out = Vec::new();
        since(0, &mut out);
        let frames = &out.iter().find(|(i, _)| *i == id).unwrap().1;
        assert!(frames.len() <= 2, "{frames:?}");
        enable(16);
    }
}
