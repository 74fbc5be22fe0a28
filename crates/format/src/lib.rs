//! cuquota-format: the trace and its vocabulary — what the interposer (`libcuquota.so`)
//! writes and the `cuquota` CLI reads, in one place so that the two cannot drift apart.
//! Pure code: no FFI, no global state, no file but the traces it reads. What processes share
//! at run time (group and registry files, locks, the policy) is `cuquota-state`'s.
//!
//! - [`part`]: the footprint's parts besides allocations ([`part::Part`]) and the tables
//!   indexed by them;
//! - [`schema`]: the trace file's lines (JSON Lines, schema 1) and its version;
//! - [`units`]: the size parser behind `CUQUOTA_LIMIT` and the human units of every line;
//! - [`settings`]: the values of the `CUQUOTA_*` variables, which `cuquota run` checks too;
//! - [`lenient`]: the settings whose bad value has a warning and the default;
//! - [`variables`]: the names of the `CUQUOTA_*` variables, for a misspelt one's note;
//! - [`read`] (with its fast path, `fastline`): the streaming trace reader;
//! - [`episodes`]: the one rule that groups refusals into back-off episodes;
//! - [`hash`]: the one hasher for maps keyed by device addresses;
//! - [`holder`]: a holder of a group's quota as a refusal's trace line names it;
//! - [`escape`]: text from another process or file made safe to show (terminal, log, SVG).

pub mod episodes;
pub mod escape;
pub mod fastline;
pub mod hash;
pub mod holder;
pub mod lenient;
pub mod part;
pub mod read;
pub mod schema;
pub mod settings;
pub mod units;
pub mod variables;
