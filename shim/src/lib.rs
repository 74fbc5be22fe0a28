//! A stand-in for NVIDIA's CUDA driver library (`libcuda.so.1`) that simulates GPUs in host
//! memory, so that cuquota can be built and tested on machines without one.
//!
//! It implements the device, context, stream, event and memory parts of the driver API with
//! the real driver's error codes, enforces each simulated device's memory size, and adds
//! fault injection and an accounting query for tests. Device pointers are host addresses;
//! all work completes synchronously. Configuration: see [`config`].
//!
//! Install: copy the built `libcuda.so` into a directory as `libcuda.so.1`, add a
//! `libcuda.so -> libcuda.so.1` link there (for linking with `-lcuda`), and put the directory
//! on `LD_LIBRARY_PATH`.
//!
//! Test helpers beyond the CUDA API: `cuShimInjectFault` (see [`faults`]) and `cuShimStats`
//! (the driver's own per-device accounting, to cross-check an interposer against).

#![deny(unsafe_op_in_unsafe_fn)]

mod abi;
mod config;
mod context;
mod copy;
mod devices;
mod errors;
mod exports;
mod faults;
mod ffi;
mod memory;
mod pools;
mod proc_address;
mod state;
mod streams;
mod vmm;
