//! The shim: cuquota's stand-in for NVIDIA's CUDA driver library. `shim/` builds a
//! `libcuda.so.1` that simulates GPUs in host memory, so that cuquota can be built and tested
//! on machines without one; everywhere in this crate "the shim" means this library, "the
//! driver" or "the real driver" NVIDIA's.
//!
//! It implements the device, context, stream, event and memory parts of the driver API with
//! the real driver's documented semantics and error codes, returns
//! `CUDA_ERROR_NOT_SUPPORTED` for what it cannot honestly simulate, enforces each simulated
//! device's memory size, and adds fault injection and an accounting query for tests.
//! Device pointers are host addresses; all work completes synchronously.
//!
//! Its settings are the `CUDA_SHIM_*` environment variables (see `config`): "the CUDA
//! shim's", like the `cuda-shim:` prefix of its messages. They keep those names for
//! compatibility: the interposer's tests and scripts and users' setups set them.
//!
//! Install: copy the built `libcuda.so` into a directory as `libcuda.so.1`, add a
//! `libcuda.so -> libcuda.so.1` link there (for linking with `-lcuda`), and put the directory
//! on `LD_LIBRARY_PATH`.
//!
//! Test helpers beyond the CUDA API: `cuShimInjectFault` (see `faults`), `cuShimStats`
//! (the shim's own per-device accounting of live allocations, to cross-check an interposer
//! against) and `cuShimFootprint` (a device's whole footprint by part: live allocations,
//! pool reservations beyond them, graph memory, context memory; what its capacity and
//! `cuMemGetInfo` go by).
//!
//! # Reading order
//!
//! Layers from the bottom up; a module uses only modules of its own layer or below.
//!
//! 1. Words: `abi` (the driver API's C types, result codes and struct layouts),
//!    `errors` (each result code's name and description).
//! 2. Rules without state: `config` (parses the `CUDA_SHIM_*` settings),
//!    `proc_address` (which variant `cuGetProcAddress` hands out for a version and
//!    flags, over a table it is given).
//! 3. The boundary's tools: `faults` (injected failures, counted per export), `ffi` (the
//!    helpers through which caller pointers are read and written).
//! 4. The simulated devices: `state` (the one lock around everything, handles, `cuInit`)
//!    and the modules whose records it holds, in order of use: `devices`, `context`,
//!    `streams`, `vmm`, `arrays`, `memory` and `pools` (a stream-ordered allocation is a
//!    memory allocation charged to its pool, so these two call each other), `graphs`
//!    (memory nodes, executable graphs and the graph memory pool), `copy`.
//!    `state` names their record types and they take its lock, so this layer is one unit.
//! 5. Entry points: `exports`, every C function the shim exports, one file per area,
//!    each declared once with its `cuGetProcAddress` row; the table of all of them; the
//!    process's settings, read at the first call.

#![deny(unsafe_op_in_unsafe_fn)]

mod abi;
mod arrays;
mod config;
mod context;
mod copy;
mod copy2d;
mod devices;
mod errors;
mod exports;
mod faults;
mod ffi;
mod graphs;
mod host_register;
mod limits;
mod memory;
mod pointers;
mod pools;
mod proc_address;
mod state;
mod streams;
mod vmm;
