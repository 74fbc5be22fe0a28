//! cuquota: an LD_PRELOAD library that puts a per-device byte quota on the device memory of
//! any CUDA process, reports the quota as the device's memory, and explains every refusal.
//!
//! Reading order: `exports` (the C entry points) → `engine` (what each hook does) →
//! `quota`, `ledger` (the accounting) → `dlsym_entry`, `lookup` (how programs reach the
//! hooks), `real_driver` (every driver function cuquota resolves, declared once) →
//! `ffi`, `cuda_abi` (caller pointers, the driver's types) → `config`, `units`, `report`,
//! `log`.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod config;
pub mod cuda_abi;
mod dlsym_entry;
pub mod engine;
mod exports;
mod ffi;
pub mod ledger;
pub mod log;
mod lookup;
pub mod quota;
mod real_driver;
pub mod report;
mod spin;
mod state;
pub mod trace;
pub mod units;
