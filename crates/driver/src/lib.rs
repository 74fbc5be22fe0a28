//! cuquota-driver: the CUDA driver as cuquota sees it. Every function of NVIDIA's `cuda.h`
//! (the `nvidia-cuda-runtime` wheel pinned in `scripts/cuda-runtime-pin.sh`) is one row of
//! [`catalogue::FUNCTIONS`], with its lookup facts (the exported symbol, the name and version
//! a `cuGetProcAddress` caller gives, its per-thread default stream form) and its class:
//! hooked (which part of the footprint, which kind of hook), passes through (why it cannot
//! change the footprint), or not governed (why not). Pure data and text: no FFI, no
//! dependencies.
//!
//! - [`catalogue`]: the rows, and [`catalogue::CALLED`], the functions cuquota calls without
//!   hooking them;
//! - [`classes`]: the classes the rows name, each with its reason (per family of functions);
//! - [`results`]: the error-name table, every `CUresult` with its code, name and description;
//! - [`census`]: reading the header, and holding the catalogue and the error-name table to it
//!   (`cuquota-census`, run by `scripts/census.sh`).
//!
//! The interposer's table (`src/real_driver.rs`), the stand-in's exports (`shim/`) and the
//! C clients' list (`tests/clients/driver_functions.h`) are each held to this catalogue by a
//! test of their own.

pub mod catalogue;
pub mod census;
pub mod classes;
pub mod results;

/// Which default stream a variant was built for (`cudaTypedefs.h`'s `PFN_*_vNNNN[_ptsz]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    /// The plain symbol: the legacy default stream, or a function without a stream.
    Plain,
    /// `_ptsz`: an asynchronous function on the per-thread default stream.
    Ptsz,
    /// `_ptds`: a synchronous function on the per-thread default stream.
    Ptds,
}

impl Stream {
    /// Whether `cuGetProcAddress` hands it out for `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
    pub const fn per_thread(self) -> bool {
        !matches!(self, Stream::Plain)
    }

    /// The symbol's suffix (`""`, `"_ptsz"`, `"_ptds"`).
    pub const fn suffix(self) -> &'static str {
        match self {
            Stream::Plain => "",
            Stream::Ptsz => "_ptsz",
            Stream::Ptds => "_ptds",
        }
    }
}

/// What cuquota does with a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// cuquota hooks it.
    Hooked(Hook),
    /// It cannot change the device-memory footprint; the reason says why.
    PassesThrough(&'static str),
    /// It may change device memory, and cuquota does not govern it; the reason says why.
    NotGoverned(&'static str),
}

impl Class {
    /// The one word the census counts it under.
    pub const fn word(&self) -> &'static str {
        match self {
            Class::Hooked(_) => "hooked",
            Class::PassesThrough(_) => "passes through",
            Class::NotGoverned(_) => "not governed",
        }
    }

    pub const fn is_hooked(&self) -> bool {
        matches!(self, Class::Hooked(_))
    }
}

/// A hooked function: the part of the footprint (or the role) it serves, the kind of hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hook {
    pub role: Role,
    pub kind: Kind,
    /// What the hook does with it.
    pub note: &'static str,
    /// Classified as hooked, but the interposer does not hook it yet (the note says why).
    pub not_yet: bool,
}

/// What a hook serves: a part of the footprint, or what the footprint needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Live allocations (the ledger, VMM handles, arrays).
    Allocations,
    /// What memory pools keep beyond their live allocations.
    PoolCache,
    /// The graph memory pools' reservation.
    Graph,
    /// What contexts themselves take.
    Context,
    /// Where a charge lands and who owns it (contexts, pools, captures).
    Ownership,
    /// The memory figures a program is told (virtualised to the quota).
    Figures,
    /// Lookups that must hand out the other hooks.
    Lookup,
}

/// The kind of hook (`src/exports/mod.rs` has their frames).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Reserve before the call, settle to what the driver did, roll back on failure.
    Charged,
    /// The real call, then the engine is told what it did.
    Watched,
    /// May end a context: its charges are settled around the call.
    Ending,
    /// The engine makes the call and measures what it took.
    Measured,
    /// Answers with figures of its own (the quota).
    Figure,
    /// Hands out hooks for lookups.
    Lookup,
}

/// One function of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function {
    /// The exported symbol, e.g. `cuMemAlloc_v2`.
    pub symbol: &'static str,
    /// The name a `cuGetProcAddress` caller gives, e.g. `cuMemAlloc`.
    pub base: &'static str,
    /// The CUDA version (1000·major + 10·minor) that introduced this variant.
    pub since: u32,
    pub stream: Stream,
    pub class: Class,
}
