//! Every function the shim exports, one file per area of the driver API, each a thin C-ABI
//! wrapper around the module that implements it.
//!
//! An export is declared once, inside its area's `exports!` block: its symbol, its
//! prototype, the `cuGetProcAddress` row it answers to (base name, introducing version,
//! default-stream flavour) and its body. The macro defines the `#[no_mangle]` function and
//! the area's `ROWS`; [`TABLE`] gathers every area's rows, and is what `cuGetProcAddress`
//! resolves against and what fault rules may name. So adding a function is one entry in
//! its area's block, and it cannot be missing from the table.
//!
//! Each body runs inside [`entry`] (the settings, fault injection, the `cuInit` check,
//! panics caught). The bodies are where C's pointer arguments become Rust values, through
//! the [`crate::ffi`] helpers: every pointer is trusted to follow the CUDA driver API's
//! documented contract, which is the safety requirement of every export.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::OnceLock;

use crate::abi::*;
use crate::config::{self, Config};
use crate::faults;
use crate::proc_address::Table;
use crate::state;

/// Declares exports. Each entry is
///
/// ```text
/// /// docs
/// fn SYMBOL(ARG: TYPE, ...) as BASE since VERSION [Ptsz|Ptds] [, before_init|, helper] {
///     BODY (returns Result<(), CUresult>)
/// }
/// ```
///
/// `BASE since VERSION` is the row `cuGetProcAddress` finds it by (`cudaTypedefs.h`'s
/// `PFN_*_vNNNN`), `Ptsz`/`Ptds` marks a per-thread default stream variant. A driver
/// function returns a `CUresult` and needs `cuInit` first unless marked `before_init`; a
/// `helper` is one of the shim's own test functions (no fault injection, no `cuInit`
/// check, returns `c_int`).
macro_rules! exports {
    ($(
        $(#[$attr:meta])*
        fn $symbol:ident($($arg:ident: $ty:ty),* $(,)?)
            as $base:ident since $version:literal $($stream:ident)? $(, $mode:ident)?
            { $($body:tt)* }
    )*) => {
        $(exports!(@define [$($mode)?] [$(#[$attr])*] $symbol ($($arg: $ty),*) { $($body)* });)*

        /// This area's exports, for `cuGetProcAddress`.
        pub(super) static ROWS: &[$crate::proc_address::Row] = &[$(
            $crate::proc_address::Row::new(
                stringify!($base),
                stringify!($symbol),
                $version,
                exports!(@stream $($stream)?),
                $symbol as *const (),
            ),
        )*];
    };

    (@stream) => { $crate::proc_address::StreamKind::Normal };
    (@stream $stream:ident) => { $crate::proc_address::StreamKind::$stream };

    (@define [] $attrs:tt $symbol:ident $args:tt $body:tt) => {
        exports!(@driver Init $attrs $symbol $args $body);
    };
    (@define [before_init] $attrs:tt $symbol:ident $args:tt $body:tt) => {
        exports!(@driver Nothing $attrs $symbol $args $body);
    };
    (@define [helper] [$(#[$attr:meta])*] $symbol:ident ($($arg:ident: $ty:ty),*)
        { $($body:tt)* }
    ) => {
        $(#[$attr])*
        #[no_mangle]
        #[allow(non_snake_case, unused_unsafe, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $symbol($($arg: $ty),*) -> ::std::ffi::c_int {
            // SAFETY: the caller passes pointers as the function's documentation says,
            // which is what the `ffi` helpers the body uses require.
            $crate::exports::helper(|| unsafe { $($body)* })
        }
    };
    (@driver $needs:ident [$(#[$attr:meta])*] $symbol:ident ($($arg:ident: $ty:ty),*)
        { $($body:tt)* }
    ) => {
        $(#[$attr])*
        #[no_mangle]
        #[allow(non_snake_case, unused_unsafe, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $symbol($($arg: $ty),*) -> $crate::abi::CUresult {
            $crate::exports::entry(stringify!($symbol), $crate::exports::Needs::$needs, || {
                // SAFETY: the caller passes pointers as the driver API documents for this
                // function, which is what the `ffi` helpers the body uses require.
                unsafe { $($body)* }
            })
        }
    };
}

mod arrays;
mod context;
mod copy;
mod devices;
mod graphs;
mod green;
mod imports;
mod init;
mod memory;
// A driver newer than 13.5 (`CUDA_SHIM_DRIVER_VERSION` 13060 or more): not in `TABLE`.
mod newer;
mod pools;
mod streams;
mod test_helpers;
mod vmm;
// What real clients' loaders resolve up front.
mod host_access;
mod unsupported;
// NVML: the shim also answers as libnvidia-ml.so.1.
mod nvml;
mod nvml_unsupported;

/// Every export, area by area.
pub static TABLE: Table = Table::new(&[
    init::ROWS,
    devices::ROWS,
    context::ROWS,
    streams::ROWS,
    memory::ROWS,
    copy::ROWS,
    pools::ROWS,
    vmm::ROWS,
    arrays::ROWS,
    imports::ROWS,
    test_helpers::ROWS,
    host_access::ROWS,
    unsupported::ROWS,
    graphs::ROWS,
    green::ROWS,
    graphs::ALIASES,
    nvml::ROWS,
]);

/// The process's settings, or the `NAME=value` text of the first bad one. Read from the
/// environment at the first call of any export, which also loads the fault rules they name;
/// a bad setting is reported once on stderr.
fn settings() -> Result<&'static Config, &'static str> {
    static SETTINGS: OnceLock<Result<Config, String>> = OnceLock::new();
    SETTINGS
        .get_or_init(|| {
            let parsed = config::parse(|name| std::env::var_os(name), |f| TABLE.is_exported(f));
            match &parsed {
                Ok(cfg) => faults::load(&cfg.faults),
                Err(bad) => eprintln!("cuda-shim: bad {bad}"),
            }
            parsed
        })
        .as_ref()
        .map_err(String::as_str)
}

/// Whether an export needs `cuInit` to have succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Needs {
    Init,
    Nothing,
}

/// Runs the body of the export `symbol`: an injected fault first, then the initialization
/// check, then the body, with any panic caught and reported as `CUDA_ERROR_UNKNOWN`.
fn entry(symbol: &str, needs: Needs, body: impl FnOnce() -> Result<(), CUresult>) -> CUresult {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // Loads the environment's fault rules before the first call is counted.
        let _ = settings();
        match faults::check(symbol) {
            Some(config::Fault::Fail(code)) => return code,
            // SAFETY: raise(3) with a valid signal number; the handler is the program's.
            Some(config::Fault::Raise(sig)) => unsafe {
                libc::raise(sig);
            },
            None => {}
        }
        if needs == Needs::Init && !state::is_initialized() {
            return CUDA_ERROR_NOT_INITIALIZED;
        }
        match body() {
            Ok(()) => CUDA_SUCCESS,
            Err(code) => code,
        }
    }));
    result.unwrap_or(CUDA_ERROR_UNKNOWN)
}

/// Runs a test helper's body (no fault injection, no init check), catching panics.
fn helper(body: impl FnOnce() -> Result<(), CUresult>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(code)) => code as c_int,
        Err(_) => CUDA_ERROR_UNKNOWN as c_int,
    }
}

/// A handle's value.
fn h(handle: Handle) -> usize {
    handle as usize
}

/// A handle value as the pointer type C sees.
fn handle_ptr(handle: usize) -> Handle {
    ptr::without_provenance_mut(handle)
}

/// A 32-bit device pointer or size, for the legacy entry points.
fn to_u32<T: TryInto<u32>>(value: T) -> Result<u32, CUresult> {
    value.try_into().map_err(|_| CUDA_ERROR_INVALID_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc_address::{Lookup, StreamKind};

    fn found(base: &str, version: i32, flags: u64) -> &'static str {
        match TABLE.lookup(base, version, flags) {
            Lookup::Found(row) => row.symbol,
            other => panic!("{base}@{version}/{flags}: {other:?}"),
        }
    }

    #[test]
    fn versions_pick_the_newest_qualifying_variant() {
        assert_eq!(found("cuMemAlloc", 2000, 0), "cuMemAlloc");
        assert_eq!(found("cuMemAlloc", 3010, 0), "cuMemAlloc");
        assert_eq!(found("cuMemAlloc", 3020, 0), "cuMemAlloc_v2");
        assert_eq!(found("cuMemAlloc", 12080, 0), "cuMemAlloc_v2");
        assert_eq!(
            TABLE.lookup("cuMemAlloc", 1000, 0),
            Lookup::VersionNotSufficient
        );
        assert_eq!(found("cuGetProcAddress", 11030, 0), "cuGetProcAddress");
        assert_eq!(found("cuGetProcAddress", 11080, 0), "cuGetProcAddress");
        assert_eq!(found("cuGetProcAddress", 12000, 0), "cuGetProcAddress_v2");
        assert_eq!(found("cuCtxCreate", 12080, 0), "cuCtxCreate_v4");
        assert_eq!(found("cuEventElapsedTime", 12060, 0), "cuEventElapsedTime");
        assert_eq!(
            found("cuEventElapsedTime", 12080, 0),
            "cuEventElapsedTime_v2"
        );
        assert_eq!(
            TABLE.lookup("cuMemAllocAsync", 11000, 0),
            Lookup::VersionNotSufficient
        );
        assert_eq!(
            TABLE.lookup("cuMemAllocAsync", 11000, 2),
            Lookup::VersionNotSufficient
        );
        // cuGraphInstantiate: the CUDA 10 form, _v2 (11.0), the flags form from 12.0.
        assert_eq!(found("cuGraphInstantiate", 10020, 0), "cuGraphInstantiate");
        assert_eq!(
            found("cuGraphInstantiate", 11080, 0),
            "cuGraphInstantiate_v2"
        );
        assert_eq!(
            found("cuGraphInstantiate", 12000, 0),
            "cuGraphInstantiateWithFlags"
        );
        assert_eq!(found("cuGraphLaunch", 12000, 2), "cuGraphLaunch_ptsz");
    }

    #[test]
    fn per_thread_flag_prefers_ptsz_and_ptds() {
        assert_eq!(found("cuMemAllocAsync", 12000, 0), "cuMemAllocAsync");
        assert_eq!(found("cuMemAllocAsync", 12000, 1), "cuMemAllocAsync");
        assert_eq!(found("cuMemAllocAsync", 12000, 2), "cuMemAllocAsync_ptsz");
        assert_eq!(found("cuMemcpyHtoD", 12000, 2), "cuMemcpyHtoD_v2_ptds");
        assert_eq!(found("cuMemcpyHtoD", 12000, 0), "cuMemcpyHtoD_v2");
        // The per-thread variant is too new: fall back to the plain one.
        assert_eq!(found("cuMemcpyHtoD", 3020, 2), "cuMemcpyHtoD_v2");
        // No per-thread variant at all.
        assert_eq!(found("cuMemAlloc", 12000, 2), "cuMemAlloc_v2");
    }

    #[test]
    fn variant_names_and_unknown_names_are_not_found() {
        assert_eq!(TABLE.lookup("cuMemAlloc_v2", 12000, 0), Lookup::NotFound);
        assert_eq!(TABLE.lookup("cuNoSuchThing", 12000, 0), Lookup::NotFound);
        assert_eq!(TABLE.lookup("", 12000, 0), Lookup::NotFound);
    }

    #[test]
    fn every_row_is_reachable_and_distinct() {
        for row in TABLE.rows() {
            let flags = if row.stream == StreamKind::Normal {
                0
            } else {
                2
            };
            assert_eq!(found(row.base, row.version, flags), row.symbol);
            assert!(row.symbol.starts_with(row.base), "{}", row.symbol);
        }
        let own_rows = || TABLE.rows().filter(|r| !r.alias);
        let mut symbols: Vec<_> = own_rows().map(|r| r.symbol).collect();
        symbols.sort();
        symbols.dedup();
        assert_eq!(symbols.len(), own_rows().count());
        let mut addresses: Vec<_> = own_rows().map(|r| r.address() as usize).collect();
        addresses.sort();
        addresses.dedup();
        assert_eq!(
            addresses.len(),
            own_rows().count(),
            "each export has its own address"
        );
        // An alias answers for an export that has its own row.
        for alias in TABLE.rows().filter(|r| r.alias) {
            assert!(own_rows().any(|r| r.symbol == alias.symbol && r.address() == alias.address()));
        }
    }

    /// A per-thread variant is marked as one, and only those are.
    #[test]
    fn stream_kinds_match_the_symbols() {
        for row in TABLE.rows() {
            let kind = if row.symbol.ends_with("_ptsz") {
                StreamKind::Ptsz
            } else if row.symbol.ends_with("_ptds") {
                StreamKind::Ptds
            } else {
                StreamKind::Normal
            };
            assert_eq!(row.stream, kind, "{}", row.symbol);
        }
    }

    /// Every export goes through `exports!` (so it has a row and reports its own name to
    /// `entry`) or, for NVML's functions, `nvml_exports!`: the only `#[no_mangle]` functions
    /// in the sources are those macros' two each, and every driver function an area
    /// declares is in the table.
    #[test]
    fn table_covers_every_export() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut no_mangle = 0;
        let mut declared = 0;
        let mut stack = vec![src];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                // (The escaped newline keeps this line from counting itself.)
                no_mangle += text.matches("#[no_mangle]\n").count();
                if path.parent().unwrap().ends_with("exports") {
                    for line in text.lines() {
                        let Some(name) = line.strip_prefix("    fn cu") else {
                            continue;
                        };
                        let name = format!("cu{}", &name[..name.find('(').unwrap()]);
                        // A newer driver's variants are in `newer::NEWER` instead.
                        let newer = newer::NEWER.iter().any(|r| r.symbol == name);
                        assert!(
                            TABLE.is_exported(&name) != newer,
                            "{name} is missing from the table"
                        );
                        declared += usize::from(!newer);
                    }
                }
            }
        }
        assert_eq!(
            no_mangle, 5,
            "an export defined outside exports!, nvml_exports! and not_supported!"
        );
        assert_eq!(declared, TABLE.rows().filter(|r| !r.alias).count());
    }

    /// Fault rules may name exactly the exported functions.
    #[test]
    fn settings_check_fault_rules_against_the_table() {
        let env = |rules: &'static str| {
            move |name: &str| (name == "CUDA_SHIM_FAIL").then(|| rules.into())
        };
        let parse = |rules| config::parse(env(rules), |f| TABLE.is_exported(f));
        assert!(parse("cuMemAlloc_v2:1:2,cuShimStats:*:1,cuMemcpyHtoD_v2_ptds:1:2").is_ok());
        assert!(parse("cuMemAloc_v2:1:2").is_err());
        assert!(parse("cuMemAlloc:1:2,cuNoSuchThing:1:2").is_err());
    }

    /// The exports of other headers (cudaGL.h, cudaProfiler.h) and the shim's own helpers,
    /// which cuda.h does not declare.
    fn outside_cuda_h(symbol: &str) -> bool {
        assert!(
            !TABLE.is_exported("cuMemAlloc_v3"),
            "the newer driver's variant is apart"
        );
        ["cuShim", "cuGL", "cuGraphicsGL", "cuProfiler", "nvml"]
            .iter()
            .any(|p| symbol.starts_with(p))
    }

    /// Each export answers `cuGetProcAddress` with the facts of cuda.h (the catalogue's row).
    #[test]
    fn exports_have_the_catalogues_facts() {
        use cuquota_driver::{catalogue, Stream};
        for row in TABLE.rows() {
            if outside_cuda_h(row.symbol) {
                continue;
            }
            let Some(f) = catalogue::function(row.symbol) else {
                panic!("{} is exported but is not a function of cuda.h", row.symbol);
            };
            let stream = match row.stream {
                StreamKind::Normal => Stream::Plain,
                StreamKind::Ptsz => Stream::Ptsz,
                StreamKind::Ptds => Stream::Ptds,
            };
            let alias = catalogue::ALIASES
                .iter()
                .any(|a| (a.base, a.since as i32, a.symbol) == (row.base, row.version, row.symbol));
            assert!(
                alias == row.alias,
                "{}: an alias row the catalogue does not know",
                row.symbol
            );
            if !row.alias {
                assert_eq!(
                    (f.base, f.since as i32, f.stream),
                    (row.base, row.version, stream),
                    "{}",
                    row.symbol
                );
            }
        }
    }

    /// Every driver function the interposer resolves (its hooks and the questions it asks,
    /// which its own test holds to the catalogue) is exported: implemented, or a stub that
    /// answers `CUDA_ERROR_NOT_SUPPORTED`.
    #[test]
    fn every_function_the_interposer_resolves_is_exported() {
        use cuquota_driver::{catalogue, Class};
        let resolved = catalogue::FUNCTIONS
            .iter()
            .filter(|f| matches!(f.class, Class::Hooked(h) if !h.not_yet))
            .map(|f| f.symbol)
            .chain(catalogue::CALLED.iter().copied());
        let missing: Vec<_> = resolved.filter(|s| !TABLE.is_exported(s)).collect();
        assert!(
            missing.is_empty(),
            "the interposer resolves, the shim lacks: {missing:?}"
        );
    }
}
