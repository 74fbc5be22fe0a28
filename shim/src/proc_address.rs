//! The `cuGetProcAddress` rules: which variant of a base name a caller gets for a driver API
//! version and flags. The table they run over is assembled from the exports' own
//! declarations (see `exports`), so this module knows no function itself.

use std::ffi::c_void;

/// The default-stream semantics a variant was built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// The plain symbol (legacy default stream).
    Normal,
    /// `_ptsz`: per-thread default stream, for calls taking a stream.
    Ptsz,
    /// `_ptds`: per-thread default stream, for the synchronous calls.
    Ptds,
}

/// One exported function: the base name callers ask for, the driver API version that
/// introduced this variant (from the `PFN_*_vNNNN` typedefs of `cudaTypedefs.h`) and its
/// default-stream flavour.
#[derive(Debug, PartialEq, Eq)]
pub struct Row {
    pub base: &'static str,
    pub symbol: &'static str,
    pub version: i32,
    pub stream: StreamKind,
    /// A second row for an export that also answers an older base name from some version
    /// on (`cuGraphInstantiate` from CUDA 12.0 is `cuGraphInstantiateWithFlags`).
    pub alias: bool,
    address: Address,
}

impl Row {
    pub const fn new(
        base: &'static str,
        symbol: &'static str,
        version: i32,
        stream: StreamKind,
        address: *const (),
    ) -> Row {
        Row {
            base,
            symbol,
            version,
            stream,
            alias: false,
            address: Address(address),
        }
    }

    /// The row of `symbol` (declared with its own row elsewhere) under another base name.
    pub const fn alias(
        base: &'static str,
        symbol: &'static str,
        version: i32,
        stream: StreamKind,
        address: *const (),
    ) -> Row {
        let mut row = Row::new(base, symbol, version, stream, address);
        row.alias = true;
        row
    }

    pub fn address(&self) -> *mut c_void {
        self.address.0 as *mut c_void
    }
}

/// The address of one of the shim's exported functions.
#[derive(Debug, PartialEq, Eq)]
struct Address(*const ());

// SAFETY: the pointer is the address of code; it is never written through and is valid for
// the life of the library, so sharing it between threads is harmless.
unsafe impl Sync for Address {}

/// Every exported function, as one list of rows per area of the driver API.
pub struct Table(&'static [&'static [Row]]);

impl Table {
    pub const fn new(areas: &'static [&'static [Row]]) -> Table {
        Table(areas)
    }

    pub fn rows(&self) -> impl Iterator<Item = &'static Row> + Clone {
        self.0.iter().flat_map(|area| area.iter())
    }

    /// The newest variant of `base` introduced no later than `version`; with the per-thread
    /// default stream flag, a `_ptsz`/`_ptds` variant is preferred where one qualifies.
    pub fn lookup(&self, base: &str, version: i32, flags: u64) -> Lookup {
        let variants = || self.rows().filter(move |row| row.base == base);
        if variants().next().is_none() {
            return Lookup::NotFound;
        }
        let newest = |per_thread: bool| {
            variants()
                .filter(|row| (row.stream != StreamKind::Normal) == per_thread)
                .filter(|row| row.version <= version)
                .max_by_key(|row| row.version)
        };
        let per_thread = if flags & PER_THREAD_DEFAULT_STREAM != 0 {
            newest(true)
        } else {
            None
        };
        match per_thread.or_else(|| newest(false)) {
            Some(row) => Lookup::Found(row),
            None => Lookup::VersionNotSufficient,
        }
    }

    /// Whether `symbol` is one of the functions the shim exports.
    pub fn is_exported(&self, symbol: &str) -> bool {
        self.rows().any(|row| row.symbol == symbol)
    }
}

/// The outcome of a lookup, as `CUdriverProcAddressQueryResult` describes it.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Found(&'static Row),
    /// The base name is known, but every variant is newer than the version asked for.
    VersionNotSufficient,
    NotFound,
}

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;
