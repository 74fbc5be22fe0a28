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
//! It also answers as NVML (`libnvidia-ml.so.1`: init, device handles by index, PCI bus id
//! and UUID, names, memory info v1/v2, running compute processes v1–v3; see `nvml`), from the
//! same accounting, so that NVML's figures and the driver's agree. `CUDA_VISIBLE_DEVICES` is
//! honoured as the real driver honours it; NVML sees every device regardless.
//!
//! Install: copy the built `libcuda.so` into a directory as `libcuda.so.1`, add a
//! `libcuda.so -> libcuda.so.1` link there (for linking with `-lcuda`) and a
//! `libnvidia-ml.so.1 -> libcuda.so.1` link (a link, not a copy: the loader then maps the one
//! object for both names, so NVML sees this process's driver state), and put the directory on
//! `LD_LIBRARY_PATH`.
//!
//! Test helpers beyond the CUDA API: `cuShimInjectFault` (see `faults`), `cuShimStats`
//! (the shim's own per-device accounting of live allocations, to cross-check an interposer
//! against), `cuShimFootprint` (a device's whole footprint by part: live allocations, pool
//! reservations beyond them, graph memory, context memory; what its capacity and
//! `cuMemGetInfo` go by), `cuShimOtherProcess` (another process's memory on a device, in
//! both APIs' figures) and `cuShimContextGrowth` (the driver takes more context memory
//! without a call that says so, as lazy module loading would).
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
//!    `streams` (and `captures`, their capture sequences), `green` (green contexts), `vmm`,
//!    `arrays`, `memory` and `pools` (a stream-ordered allocation is a memory allocation
//!    charged to its pool, so these two call each other), `graphs`
//!    (memory nodes, executable graphs and the graph memory pool), `copy`; `nvml` (NVML's
//!    view of the same devices, and the simulated other processes).
//!    `state` names their record types and they take its lock, so this layer is one unit.
//! 5. Entry points: `exports`, every C function the shim exports, one file per area,
//!    each declared once with its `cuGetProcAddress` row (NVML's functions have none); the
//!    table of all of them; the process's settings, read at the first call.

#![deny(unsafe_op_in_unsafe_fn)]

mod abi;
mod arrays;
mod captures;
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
mod green;
mod host_register;
mod limits;
mod memory;
mod nvml;
mod pointers;
mod pools;
mod proc_address;
mod state;
mod streams;
mod vmm;
