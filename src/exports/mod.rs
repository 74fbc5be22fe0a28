//! Every C entry point cuquota exports, each a thin call into the engine, and the table of
//! them that the routing (`lookup`) hands out for `dlsym` and `cuGetProcAddress`. One file
//! per area: `allocations`, `frees`, `vmm` (lifetimes and imports), `contexts` (contexts
//! and primary contexts as owners: their ends, attaches, retains), `pools` (pools'
//! placement), `figures` (the memory figures), `lookups` (`cuGetProcAddress`), `arrays`,
//! `context_memory`, `green_contexts`, `graphs`, `captures` (stream captures begun and
//! ended, counted); here, the
//! frames they share and `cuInit`. NVML's memory figures are hooked in `nvml`, with a table
//! of their own ([`NVML_HOOKS`]).
//!
//! A hook is named as the driver symbol it stands in for; its real function is the slot of
//! that name in `real_driver`. The kinds of hook, by their frame:
//! - a plain counted hook, [`hook`]: resolve the real function, pass nested calls straight
//!   through, fail closed on a bad configuration, else the engine charges or credits the
//!   call (allocations, frees, arrays, the figures, graph instantiations and launches);
//! - a watched one, [`watched`]: the real call, then on success the engine is told what it
//!   did (a pool's place, an attach, an unload); it never fails the call;
//! - one that ends a context, [`watched_ending`]: watched, and the context is marked ending
//!   while the driver ends it (a sure end takes its charges out first);
//! - a measured one, [`measured`]: the engine makes the call and measures what it took
//!   (context creation, limits, module loads); a bad configuration passes it through.
//!
//! All of them, and NVML's hooks, open with the one [`frame`] (panics caught, a missing real
//! function answered, nested calls passed straight through), whose status type — `CUresult`
//! or `nvmlReturn_t` — is a parameter ([`Status`]). [`plain`] passes a call on unchanged.
//!
//! Adding a hooked function: its row in the driver catalogue (`crates/driver`) classed as
//! hooked, and its line in `real_driver`'s table; in its area's file, the
//! hook, `hooked!(symbol, |arg: Type, …| { body })`, and its name in the file's `table!` at
//! the end (a new file: also its name in `every_area!` below). The compiler checks the
//! steps: `table!` that the hook has the real function's prototype, `hooked!` that the
//! file's `table!` lists it, and `table!` that `every_area!` joins the file's table.
//!
//! Why `hooked!`: it defines the `#[no_mangle]` function and checks at compile time that its
//! file's table lists it, so no exported hook can be missing from `CUDA_HOOKS` and no test
//! reads the sources. The body is its last argument, in a closure's form inside
//! parentheses, which rustfmt formats as ordinary code (it leaves `macro! { … }` alone);
//! the files' tables are joined into one flat array at compile time, so lookups walk one
//! table, as before.
//!
//! These are `unsafe extern "C"` because they are the CUDA driver's own prototypes: the
//! caller promises what the driver documentation asks (valid out-pointers, a valid
//! `CUmemAllocationProp`), and we read and write those pointers (through `ffi`) exactly
//! where the real driver would, only after the real call succeeded. Calls to the real
//! function pass the caller's arguments on unchanged, so they carry the caller's promise.
//! No panic leaves these functions.
#![allow(non_snake_case, clippy::missing_safety_doc)]
// A hand-written `#[no_mangle]` (an export that skips `hooked!` and its table check) does
// not compile here: `hooked!` writes `#[unsafe(no_mangle)]`.
#![deny(unsafe_attr_outside_unsafe)]

mod allocations;
mod arrays;
mod captures;
mod context_memory;
mod contexts;
mod figures;
mod frees;
mod graphs;
mod green_contexts;
mod lookups;
mod nvml;
mod pools;
mod vmm;

use crate::cuda_abi::{CuResult, CuStream};
use crate::engine::Engine;
use crate::ffi::{written, Out};
use crate::in_hook;
use crate::lookup::{self, CFunction, Hook, Hooks, Real};
use crate::process::engine;
use crate::real_driver as real;
use std::cell::Cell;
use std::ffi::c_uint;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use nvml::NVML_HOOKS;

/// `hooked!(symbol, |arg: Type, …| { body })`: the exported hook `symbol`
/// (`#[no_mangle] pub unsafe extern "C" fn symbol(arg: Type, …) -> CuResult { body }`: every
/// driver function returns a `CUresult`), and a compile-time check that its file's `table!`
/// lists it. `hooked!(nvml symbol, …)`: the same for an NVML function (`nvmlReturn_t`).
macro_rules! hooked {
    (nvml $symbol:ident, |$($arg:ident: $ty:ty),* $(,)?| $body:block) => {
        $crate::exports::hooked!(@ $crate::nvml::NvmlReturn, $symbol, |$($arg: $ty),*| $body);
    };
    ($symbol:ident, |$($arg:ident: $ty:ty),* $(,)?| $body:block) => {
        $crate::exports::hooked!(@ $crate::cuda_abi::CuResult, $symbol, |$($arg: $ty),*| $body);
    };
    (@ $status:ty, $symbol:ident, |$($arg:ident: $ty:ty),*| $body:block) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $symbol($($arg: $ty),*) -> $status $body

        const _: () = assert!(
            $crate::lookup::listed(HOOKED, stringify!($symbol)),
            concat!(stringify!($symbol), " is exported but missing from its file's table!"),
        );
    };
}
use hooked;

/// `table!(hook, …)`, at the end of each file: the file's slice of `CUDA_HOOKS`, in the
/// order lookups try them. The compiler checks that each hook has the prototype of the real
/// function of the same name in `real_driver`. `table!(nvml: hook, …)`: NVML's whole table,
/// [`NVML_HOOKS`], checked against `crate::nvml`.
macro_rules! table {
    (nvml: $($hook:ident),* $(,)?) => {
        /// The names this file's `hooked!` look for.
        const HOOKED: &[&str] = &[$(stringify!($hook)),*];

        /// Our hook for each hooked function of NVML.
        pub static NVML_HOOKS: $crate::lookup::Hooks = $crate::lookup::Hooks {
            library: &$crate::nvml::LIBNVML,
            hooks: $crate::lookup::hook_slice!(in $crate::nvml: $($hook),*),
        };
    };
    ($($hook:ident),* $(,)?) => {
        /// The names this file's `hooked!` look for.
        pub(super) const HOOKED: &[&str] = &[$(stringify!($hook)),*];

        /// This file's slice of `CUDA_HOOKS` (unused: the file is missing from `every_area!`).
        #[deny(dead_code)]
        pub(super) static HOOKS: &[$crate::lookup::Hook] =
            $crate::lookup::hook_slice!(in $crate::real_driver: $($hook),*);
    };
}
use table;

/// `every_area!(area, …)`: `EVERY_HOOK`, the areas' slices joined, in this order.
macro_rules! every_area {
    ($($area:ident),* $(,)?) => {
        static EVERY_HOOK: [Hook; 0 $(+ $area::HOOKED.len())*] =
            lookup::joined(&[$($area::HOOKS),*]);
    };
}

/// Our hook for each hooked function of the CUDA driver.
pub static CUDA_HOOKS: Hooks = Hooks {
    library: &real::LIBCUDA,
    hooks: &EVERY_HOOK,
};

every_area!(
    self,
    allocations,
    frees,
    vmm,
    contexts,
    pools,
    figures,
    lookups,
    arrays,
    context_memory,
    graphs,
    captures,
    green_contexts,
);

// ---- the frames ------------------------------------------------------------------------
//
// Each is `#[inline]`: the hooks that use them are in the area files, which the compiler may
// put in other codegen units, where a function without it is never inlined (the frames then
// cost a call of their own on every hooked call; bench/README.md has the figures).

/// Marks this thread as in cuquota's own code while a hook runs (see [`crate::in_hook`]);
/// keeps the flag's address so that leaving reads no thread-local storage again.
struct InHook(*const Cell<u8>);

/// Where a hooked call finds its thread.
enum Entry {
    /// Outside every hook: the call is the program's, and the hook runs.
    Entered(InHook),
    /// In the real driver call of a hook: the driver calling an exported symbol.
    InDriver,
    /// In cuquota's own code: a signal handler that interrupted a hook.
    Interrupted,
}

impl InHook {
    #[inline]
    fn enter() -> Entry {
        let flag = in_hook::flag();
        // SAFETY: this thread's flag, which lives as long as the thread; only this thread
        // (and a signal handler on it, which leaves it as it found it) touches it.
        let state = unsafe { (*flag).get() };
        // The program's call first: every hooked call takes this test.
        if state == in_hook::OUTSIDE {
            // SAFETY: as above.
            unsafe { (*flag).set(in_hook::OURS) };
            return Entry::Entered(InHook(flag));
        }
        nested_entry(state)
    }
}

/// A call made inside a hook (out of line: rare).
#[cold]
fn nested_entry(state: u8) -> Entry {
    match state {
        in_hook::DRIVER => Entry::InDriver,
        _ => Entry::Interrupted,
    }
}

impl Drop for InHook {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the flag has no destructor, so it lives as long as this thread, and this
        // guard never leaves the thread that made it.
        unsafe { (*self.0).set(in_hook::OUTSIDE) };
    }
}

/// What a hook returns: its library's status, with its answers for a real function that is
/// missing and for a panic caught at the boundary.
trait Status: Copy {
    const NOT_FOUND: Self;
    const UNKNOWN: Self;
    /// The answer to a call made by a signal handler that interrupted a hook.
    const INTERRUPTED: Self;
}

impl Status for CuResult {
    const NOT_FOUND: Self = CuResult::NOT_FOUND;
    const UNKNOWN: Self = CuResult::UNKNOWN;
    const INTERRUPTED: Self = CuResult::NOT_PERMITTED;
}

impl Status for crate::nvml::NvmlReturn {
    const NOT_FOUND: Self = crate::nvml::NVML_ERROR_FUNCTION_NOT_FOUND;
    const UNKNOWN: Self = crate::nvml::NVML_ERROR_UNKNOWN;
    const INTERRUPTED: Self = crate::nvml::NVML_ERROR_NO_PERMISSION;
}

/// Catches a panic at the FFI boundary: the caller gets its library's "unknown error", never
/// an abort.
#[inline]
fn guard<R: Status>(body: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(R::UNKNOWN)
}

/// The one prologue of every hook, the CUDA driver's and NVML's: no panic leaves it; a real
/// function that is missing answers "not found"; a call the driver makes from inside a
/// hook's real call goes to `nested` (straight through: the hook counts what its call
/// does), a program's call to `body`. A call made while a hook is in cuquota's own code
/// comes from a signal handler that interrupted it: it is refused (`INTERRUPTED`), as it
/// could be neither counted (the interrupted hook may hold the books' locks: waiting for
/// them would never end) nor granted uncounted.
#[inline]
fn frame<F: CFunction, R: Status>(
    real: &'static Real<F>,
    nested: impl FnOnce(F) -> R,
    body: impl FnOnce(F) -> R,
) -> R {
    guard(|| {
        let Some(f) = real.get() else {
            return R::NOT_FOUND;
        };
        match InHook::enter() {
            Entry::Entered(_in_hook) => body(f),
            Entry::InDriver => nested(f),
            Entry::Interrupted => R::INTERRUPTED,
        }
    })
}

/// The frame of every charged hook: resolve the real function, pass nested calls straight
/// through, fail closed on a bad configuration, else run `charged`.
#[inline]
fn hook<F: CFunction>(
    real: &'static Real<F>,
    charged: impl FnOnce(F, &'static Engine) -> CuResult,
    plain: impl FnOnce(F) -> CuResult,
) -> CuResult {
    frame(real, plain, |f| {
        let engine = engine();
        match engine.check_config() {
            Ok(()) => charged(f, engine),
            Err(rc) => rc,
        }
    })
}

/// A call passed to the driver unchanged (no panic leaves it).
#[inline]
fn plain<F: CFunction>(real: &'static Real<F>, call: impl FnOnce(F) -> CuResult) -> CuResult {
    guard(|| match real.get() {
        Some(f) => call(f),
        None => CuResult::NOT_FOUND,
    })
}

/// The frame of a hook that only watches: the real call, then (on success, outside nested
/// calls, with a good configuration) `then` tells the engine. Never fails the call itself.
#[inline]
fn watched<F: CFunction>(
    real: &'static Real<F>,
    call: impl Fn(F) -> CuResult,
    then: impl FnOnce(&'static Engine),
) -> CuResult {
    frame(real, &call, |f| {
        let rc = in_hook::driver(|| call(f));
        let engine = engine();
        if rc.is_ok() && engine.check_config().is_ok() {
            then(engine);
        }
        rc
    })
}

/// How surely a call ends its context if it succeeds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ends {
    /// `cuCtxDestroy`, `cuDevicePrimaryCtxReset`: its charges leave the books before the
    /// driver runs it (`Engine::context_end`).
    Surely,
    /// `cuCtxDetach`, `cuDevicePrimaryCtxRelease`: only the last one does, known after.
    Maybe,
}

/// [`watched`] for a call that may end a context (destroy, detach, primary reset or
/// release): the context is marked ending while the driver runs it and cuquota credits it
/// (see `ContextEnd`), and a sure end takes its charges out first.
#[inline]
fn watched_ending<F: CFunction>(
    real: &'static Real<F>,
    ends: Ends,
    context: impl FnOnce(&'static Engine) -> usize,
    call: impl Fn(F) -> CuResult,
    then: impl FnOnce(&'static Engine),
) -> CuResult {
    frame(real, &call, |f| {
        let engine = engine();
        let context = context(engine);
        let surely = ends == Ends::Surely && engine.check_config().is_ok();
        let mut end = engine.context_end(real.name(), context, surely);
        let rc = in_hook::driver(|| call(f));
        end.conclude(rc.is_ok());
        if rc.is_ok() && engine.check_config().is_ok() {
            then(engine);
        }
        // `end` goes here: the context is no longer marked ending.
        rc
    })
}

/// The frame of a measured hook: as `watched` (a bad configuration never fails the call:
/// it passes through), but the engine makes the call.
#[inline]
fn measured<F: CFunction>(
    real: &'static Real<F>,
    counted: impl FnOnce(F, &'static Engine) -> CuResult,
    plain: impl Fn(F) -> CuResult,
) -> CuResult {
    frame(real, &plain, |f| {
        let engine = engine();
        match engine.check_config() {
            Ok(()) => counted(f, engine),
            Err(_) => in_hook::driver(|| plain(f)),
        }
    })
}

/// The call's result and the new pointer (0 if the call failed or had no out-pointer).
///
/// # Safety
/// `p` is the caller's out-pointer: null or valid for reads (see `ffi::Out::new`).
#[inline]
unsafe fn out<T: Copy + Into<u64>>(rc: CuResult, p: *mut T) -> (CuResult, u64) {
    // SAFETY: passed on from the caller.
    (rc, unsafe { written(rc.is_ok(), p) })
}

/// The call's result and the handle it wrote (0 if it failed or had no out-pointer).
///
/// # Safety
/// `p` is the caller's out-pointer: null or valid for reads (see `ffi::Out::new`).
#[inline]
unsafe fn out_handle<T>(rc: CuResult, p: *mut *mut T) -> (CuResult, usize) {
    // SAFETY: passed on from the caller.
    match (rc.is_ok(), unsafe { Out::new(p) }) {
        (true, Some(out)) => (rc, out.get() as usize),
        _ => (rc, 0),
    }
}

/// The stream a `_ptsz` variant means by 0: the per-thread default stream.
#[inline]
fn per_thread(stream: CuStream) -> usize {
    match stream as usize {
        0 => PER_THREAD_STREAM,
        s => s,
    }
}

/// `CU_STREAM_PER_THREAD`.
const PER_THREAD_STREAM: usize = 2;

hooked!(cuInit, |flags: c_uint| {
    hook(
        &real::cuInit,
        // SAFETY: the caller's argument, passed on.
        |real, _| unsafe { real(flags) },
        // SAFETY: the caller's argument, passed on.
        |real| unsafe { real(flags) },
    )
});

table!(cuInit);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lookup::{hooked_symbol, variant_by_rules};

    fn symbol(name: &[u8]) -> Option<&'static str> {
        hooked_symbol(name, &CUDA_HOOKS).map(|h| h.real.name())
    }

    #[test]
    fn exact_names() {
        assert_eq!(symbol(b"cuMemAlloc_v2"), Some("cuMemAlloc_v2"));
        assert_eq!(symbol(b"cuMemAlloc"), Some("cuMemAlloc"));
        assert_eq!(symbol(b"cuCtxGetDevice"), None, "called, not hooked");
        assert_eq!(symbol(b"malloc"), None);
        assert_eq!(symbol(b"cuGetExportTable"), None);
    }

    fn by_rules(base: &[u8], version: u32, per_thread: bool) -> Option<&'static str> {
        variant_by_rules(base, version, per_thread, &CUDA_HOOKS).map(|h| h.real.name())
    }

    #[test]
    fn version_and_flag_rules() {
        assert_eq!(by_rules(b"cuMemAlloc", 3020, false), Some("cuMemAlloc_v2"));
        assert_eq!(by_rules(b"cuMemAlloc", 12000, true), Some("cuMemAlloc_v2"));
        assert_eq!(by_rules(b"cuMemAlloc", 2000, false), Some("cuMemAlloc"));
        assert_eq!(
            by_rules(b"cuMemAllocAsync", 11020, true),
            Some("cuMemAllocAsync_ptsz")
        );
        assert_eq!(
            by_rules(b"cuMemAllocAsync", 12000, false),
            Some("cuMemAllocAsync")
        );
        assert_eq!(by_rules(b"cuMemAllocAsync", 11000, false), None);
        assert_eq!(
            by_rules(b"cuGetProcAddress", 11030, false),
            Some("cuGetProcAddress")
        );
        assert_eq!(
            by_rules(b"cuGetProcAddress", 12000, false),
            Some("cuGetProcAddress_v2")
        );
        assert_eq!(by_rules(b"cuLaunchKernel", 12000, false), None);
    }

    #[test]
    fn every_hook_is_listed_once() {
        let mut names: Vec<_> = CUDA_HOOKS.hooks.iter().map(|h| h.real.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CUDA_HOOKS.hooks.len());
    }

    /// The hooks are the catalogue's hooked functions; one it classes as hooked "not yet"
    /// must not be hooked (when it is, its row says so).
    #[test]
    fn hooks_are_the_catalogues() {
        use cuquota_driver::{catalogue, Class};
        let mut hooks: Vec<_> = CUDA_HOOKS.hooks.iter().map(|h| h.real.name()).collect();
        let mut hooked: Vec<_> = catalogue::FUNCTIONS
            .iter()
            .filter(|f| matches!(f.class, Class::Hooked(h) if !h.not_yet))
            .map(|f| f.symbol)
            .collect();
        hooks.sort();
        hooked.sort();
        assert_eq!(hooks, hooked);
    }
}
