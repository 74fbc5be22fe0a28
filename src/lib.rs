//! cuquota: an LD_PRELOAD library that puts a per-device byte quota on the device memory of
//! any CUDA process, reports the quota as the device's memory, and explains every refusal.
//!
//! Reading order: `exports` (the C entry points) → `process` (the engine's making, exit and
//! fork) → `engine` (what each hook does) → `quota`, `ledger` (the accounting) → `episodes`
//! (back-off runs per thread) → `proc_address`, `dlsym_entry`, `hook_table` (how programs
//! reach the hooks) → `trace` → `config`, `messages`, `log` (sizes, the trace schema, the
//! episode rule and the hasher are in `crates/format`).

pub mod config;
pub mod cuda_abi;
mod dlsym_entry;
pub mod engine;
mod episodes;
mod exports;
pub mod hook_table;
pub mod ledger;
pub mod log;
pub mod messages;
mod proc_address;
mod process;
pub mod quota;
mod real_driver;
mod spin;
pub mod trace;
