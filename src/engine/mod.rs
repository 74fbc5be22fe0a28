//! What every hook does, in plain Rust: reserve before the driver is called, commit or roll
//! back after, keep the ledgers and virtualise memory figures. The driver is reached through
//! closures and the [`Queries`] trait, so all of it is unit-tested without FFI (`tests/`,
//! one fake driver); `exports` supplies the real calls.
//!
//! `state` holds the one value, [`Engine`]: the quota's books and one field per part of the
//! footprint, each part's books a plain type of its own outside the engine (`ledger`'s
//! `Allocations`, `pool_cache`, `graph_memory`, `contexts`, `context_memory`, `vmm`). Then
//! one `impl Engine` per room, each importing by name only from rooms listed before it:
//! - `queries` (below `state`): what the engine asks the driver besides the hooked call;
//! - `explain`: the one place that speaks — outcomes become log lines and trace events;
//! - `limits`: a GPU's limit resolved at its first use, a group joined;
//! - `placement`: where a charge lands and which context owns it;
//! - `parts`: charging any part of the footprint besides allocations;
//! - `admission`: reserve → call → commit or roll back, and settlement, written once;
//! - `allocations`: allocations and frees (pointers, pitch, arrays, handles);
//! - `contexts`: contexts as owners, and the end of a context as one guard value;
//! - `vmm`: `cuMemCreate` references and mappings, imports;
//! - the other parts' glue: `pool_cache` (what pools keep), `graph_memory`,
//!   `context_memory` (what contexts take), `green_contexts` (green contexts, their
//!   `CUcontext`s and their end);
//! - `figures`: what the caller is told (memory info, total, summary figures);
//!   `nvml_figures`: the books' figures NVML shows under a quota; `nvml_quota`: what NVML is
//!   told from them, and the quota of a process without books (configuration, group file).

mod admission;
mod allocations;
mod context_memory;
mod contexts;
mod explain;
mod figures;
mod graph_memory;
mod green_contexts;
mod limits;
mod nvml_figures;
mod nvml_quota;
mod parts;
mod placement;
mod pool_cache;
mod queries;
mod state;
#[cfg(test)]
mod tests;
mod vmm;

pub use crate::ledger::Kind;
pub use crate::pool_cache::PoolPlace;
pub use nvml_quota::{
    configured_limit, cuda_ordinal, memory_told, quota_without_books, reserved_told, NvmlQuota,
};
pub use placement::Place;
pub use pool_cache::PoolOf;
pub use queries::GraphNode;
pub use queries::Queries;
pub use state::Engine;
