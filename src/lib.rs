//! cuquota: an LD_PRELOAD library that puts a per-device byte quota on the device memory of
//! any CUDA process, reports the quota as the device's memory, and explains every refusal.
//!
//! Reading order: `exports` (the C entry points) → `engine` (what each hook does) →
//! `quota`, `ledger` (the accounting) → `proc_address`, `dlsym_entry`, `hook_table`
//! (how programs reach the hooks) → `config`, `report`, `log`
//! (sizes, the trace schema, the episode rule and the hasher are in `crates/format`).

pub mod config;
pub mod cuda_abi;
mod dlsym_entry;
pub mod engine;
mod exports;
pub mod hook_table;
pub mod ledger;
pub mod log;
mod proc_address;
pub mod quota;
mod real_driver;
pub mod report;
mod spin;
mod state;
pub mod trace;
