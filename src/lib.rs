//! cuquota: an LD_PRELOAD library that puts a per-device byte quota on the device memory of
//! any CUDA process, reports the quota as the device's memory, and explains every refusal.
//!
//! Reading order, by layer; each module imports only from its own layer and the layers
//! below it (no import circle). Sizes, the trace schema, the settings' words, the episode
//! rule and the hasher come from `crates/format` (`cuquota_format`); what governed processes
//! on one machine share (group and process files, the policy, the trust rule for the state
//! directory) from `crates/state` (`cuquota_state`):
//! - entry points: `dlsym_entry` (our `dlsym`), `exports` (the C entry points by area,
//!   and `CUDA_HOOKS`, the table their slices make), `process` (the one engine, made at
//!   the first hooked call; the exit handler and the fork handler, which resets everything
//!   in one order);
//! - lookup: `real_driver` (every driver function cuquota resolves, declared once with its
//!   prototype; the questions the engine asks the driver), `nvml` (NVML, a second real
//!   library, called — its memory figures are hooked in `exports/nvml.rs` — for free memory
//!   before a context exists and this process's own usage), `lookup` (finding a function
//!   in a real library; routing `dlsym` and `cuGetProcAddress` to the hooks it is handed);
//! - engine, beside lookup (neither imports the other): `engine` (one room per part of
//!   the footprint and kind of lifetime: reserve, call, commit or roll back; the virtualised
//!   figures; `engine/explain.rs`, the one room that speaks), `episodes` (each thread's run
//!   of refusals), `watcher` (the thread of a governed process that says the summary on
//!   SIGTERM/SIGINT, ends back-off episodes when their gap passes, and reconciles context
//!   memory with NVML's figure once a second while a context takes memory), `trace` (the trace
//!   file, started at its first event), `stacks` (an allocation's call stack, interned,
//!   and the loaded modules, for the trace), `messages` (the
//!   words of the log lines), `log` (where they go), `config` (the environment variables);
//! - books: `quota` (`Books`, every GPU's counters, kept in this process's registry file
//!   or its memory), `group` (this process as a member of a group: its slot, its hold on
//!   each GPU's shared counters); then each part of the footprint's books, one type each,
//!   one field of the engine each: `ledger` (live allocations, in `key_map`'s tables),
//!   `pool_cache` (what pools keep, and the pool allocations), `graph_memory` (what
//!   executable graphs' memory nodes take), `contexts` (the contexts that own charges, each
//!   one's device, primary contexts and contexts ending), `vmm` (references and mappings of
//!   `cuMemCreate` allocations), `context_memory` (what contexts themselves take: how it is
//!   measured, charged per context and corrected from NVML); `captures`
//!   (how many stream captures may be live: whether a stream-ordered call asks the driver);
//! - words: `cuda_abi` (the driver's types), `array_shape` (a CUDA array's shape and its
//!   estimated size), `ffi` (caller pointers), `output` (cuquota's own writes: bounded,
//!   never SIGPIPE), `in_hook` (each thread's flag that it runs a hook), `spin` (the lock a
//!   forked child can clear), `sys` (the monotonic clock and the OS thread id).
#![deny(unsafe_op_in_unsafe_fn)]

mod array_shape;
mod captures;
mod config;
mod context_memory;
mod contexts;
mod cuda_abi;
mod dlsym_entry;
mod engine;
mod episodes;
mod exports;
mod ffi;
mod graph_memory;
mod group;
mod in_hook;
mod key_map;
mod ledger;
mod log;
mod lookup;
mod messages;
mod nvml;
mod output;
mod pool_cache;
mod process;
mod quota;
mod real_driver;
mod spin;
mod stacks;
mod sys;
mod trace;
mod vmm;
mod watcher;
