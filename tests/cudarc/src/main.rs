//! A small cudarc program: fills each GPU's quota through cudarc's stream-ordered
//! `alloc_zeros` (`cuMemAllocAsync`) and through `malloc_sync` (`cuMemAlloc_v2`), expects
//! cudarc's `DriverError(CUDA_ERROR_OUT_OF_MEMORY)` next, reads `mem_get_info` and
//! `total_mem`, frees and allocates again. Prints one line per observation, in the
//! integration tests' `op key=value` form; `tests/integration/real_clients.rs` checks them.
//!
//! Usage: cudarc-check CHUNK_BYTES GPU... (the GPUs to fill, in order)

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, CudaSlice, DriverError};

/// The error's name as the driver spells it (`CUDA_ERROR_OUT_OF_MEMORY`).
fn name(e: &DriverError) -> String {
    e.error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0))
}

fn meminfo(ctx: &CudaContext, gpu: usize, when: &str) -> Result<(), DriverError> {
    let (free, total) = ctx.mem_get_info()?;
    println!("meminfo gpu={gpu} when={when} free={free} total={total}");
    Ok(())
}

/// Stream-ordered: `alloc_zeros` until the driver refuses.
fn fill_zeros(ctx: &Arc<CudaContext>, gpu: usize, chunk: usize) -> Result<(), DriverError> {
    let stream = ctx.default_stream();
    let mut held: Vec<CudaSlice<u8>> = Vec::new();
    let err = loop {
        match stream.alloc_zeros::<u8>(chunk) {
            Ok(slice) => held.push(slice),
            Err(e) => break name(&e),
        }
    };
    println!(
        "fill gpu={gpu} api=alloc_zeros chunk={chunk} ok={} err={err}",
        held.len()
    );
    meminfo(ctx, gpu, "alloc_zeros-full")?;
    held.pop();
    stream.synchronize()?;
    meminfo(ctx, gpu, "alloc_zeros-one-freed")?;
    held.push(stream.alloc_zeros::<u8>(chunk)?);
    println!("realloc gpu={gpu} api=alloc_zeros");
    held.clear();
    stream.synchronize()?;
    meminfo(ctx, gpu, "alloc_zeros-empty")
}

/// Synchronous: `result::malloc_sync` / `free_sync` until the driver refuses.
fn fill_sync(ctx: &Arc<CudaContext>, gpu: usize, chunk: usize) -> Result<(), DriverError> {
    ctx.bind_to_thread()?;
    let mut held: Vec<sys::CUdeviceptr> = Vec::new();
    let err = loop {
        // SAFETY: the memory is only freed, never read.
        match unsafe { result::malloc_sync(chunk) } {
            Ok(p) => held.push(p),
            Err(e) => break name(&e),
        }
    };
    println!(
        "fill gpu={gpu} api=malloc_sync chunk={chunk} ok={} err={err}",
        held.len()
    );
    meminfo(ctx, gpu, "malloc_sync-full")?;
    let free = |p| {
        // SAFETY: `p` came from malloc_sync and is freed once.
        unsafe { result::free_sync(p) }
    };
    free(held.pop().expect("at least one piece fits"))?;
    meminfo(ctx, gpu, "malloc_sync-one-freed")?;
    // SAFETY: as above.
    held.push(unsafe { result::malloc_sync(chunk) }?);
    println!("realloc gpu={gpu} api=malloc_sync");
    for p in held.drain(..) {
        free(p)?;
    }
    meminfo(ctx, gpu, "malloc_sync-empty")
}

fn run() -> Result<(), DriverError> {
    let mut args = std::env::args().skip(1);
    let chunk: usize = args.next().expect("CHUNK_BYTES").parse().expect("a number");
    let gpus: Vec<usize> = args.map(|a| a.parse().expect("a GPU ordinal")).collect();
    println!("devices count={}", CudaContext::device_count()?);
    for gpu in gpus {
        let ctx = CudaContext::new(gpu)?;
        println!(
            "total_mem gpu={gpu} bytes={} async_alloc={}",
            ctx.total_mem()?,
            u8::from(ctx.has_async_alloc())
        );
        meminfo(&ctx, gpu, "start")?;
        fill_zeros(&ctx, gpu, chunk)?;
        fill_sync(&ctx, gpu, chunk)?;
    }
    println!("done");
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        println!("error err={}", name(&e));
        std::process::exit(1);
    }
}
