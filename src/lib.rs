//! cuquota: an LD_PRELOAD library that puts a per-device byte quota on the device memory of
//! any CUDA process, reports the quota as the device's memory, and explains every refusal.
//!
//! Reading order, by layer; each module imports only from modules after it in this list,
//! so there is no import circle:
//! - entry points: `dlsym_entry` (our `dlsym`), `exports` (the C entry points, and
//!   `CUDA_HOOKS`, the table of them), `state` (the one engine, made at the first hooked
//!   call and wired to the real driver);
//! - lookup: `real_driver` (every driver function cuquota resolves, declared once with its
//!   prototype; the questions the engine asks the driver), `lookup` (finding a function in
//!   a real library; routing `dlsym` and `cuGetProcAddress` to the hooks it is handed);
//! - engine, beside lookup (neither imports the other): `engine` (what each hook does),
//!   `trace`, `log`, `report`, `config`;
//! - books: `quota`, `ledger`;
//! - words: `cuda_abi` (the driver's types), `ffi` (caller pointers), `units`, `spin`.
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
