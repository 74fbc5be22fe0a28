//! cuquota-format: what the interposer (`libcuquota.so`) writes and the `cuquota` CLI reads,
//! in one place so that the two cannot drift apart. Pure code: no FFI, no global state.
//!
//! - [`part`]: the footprint's parts besides allocations ([`part::Part`]) and the tables
//!   indexed by them;
//! - [`schema`]: the trace file's lines (JSON Lines, schema 1) and its version;
//! - [`units`]: the size parser behind `CUQUOTA_LIMIT` and the human units of every line;
//! - [`settings`]: the values of the `CUQUOTA_*` variables, which `cuquota run` checks too;
//! - [`read`] (with its fast path, `fastline`): the streaming trace reader;
//! - [`episodes`]: the one rule that groups refusals into back-off episodes;
//! - [`hash`]: the one hasher for maps keyed by device addresses.

pub mod episodes;
pub mod fastline;
pub mod group;
pub mod hash;
pub mod holders;
pub mod identity;
pub mod part;
pub mod policy;
pub mod read;
pub mod registry;
pub mod schema;
pub mod settings;
pub mod shared;
pub mod units;
