//! Context memory, a part of the footprint: what a context takes is measured around the
//! calls that make or grow one (the engine and `crate::context_memory` say how); one that
//! does not fit is undone and refused. Module and library loads are charged to the current
//! context until their unload.

use super::{hooked, measured, out_handle, table, watched};
use crate::cuda_abi::{CuContext, CuDevice, CuResult};
use crate::lookup::{CFunction, Real};
use crate::real_driver as real;
use std::ffi::{c_char, c_int, c_uint, c_void};

/// Destroys a context the caller never got (it did not fit).
fn destroy_context(context: usize) {
    let destroy = real::cuCtxDestroy_v2.get().or(real::cuCtxDestroy.get());
    if let Some(f) = destroy {
        // SAFETY: the driver just made this context for this call; nobody else has it.
        unsafe { f(context as CuContext) };
    }
}

fn create_context<F: CFunction>(
    real: &'static Real<F>,
    ctx: *mut CuContext,
    dev: CuDevice,
    call: impl Fn(F) -> CuResult,
) -> CuResult {
    measured(
        real,
        |f, e| {
            // SAFETY: `ctx` is the caller's out-pointer, null or valid.
            let create = || unsafe { out_handle(call(f), ctx) };
            e.context_create(real.name(), dev, create, destroy_context)
        },
        &call,
    )
}

hooked!(cuCtxCreate, |ctx: *mut CuContext,
                      flags: c_uint,
                      dev: CuDevice| {
    // SAFETY: the caller's arguments, passed on.
    create_context(&real::cuCtxCreate, ctx, dev, |f| unsafe {
        f(ctx, flags, dev)
    })
});

hooked!(cuCtxCreate_v2, |ctx: *mut CuContext,
                         flags: c_uint,
                         dev: CuDevice| {
    // SAFETY: the caller's arguments, passed on.
    create_context(&real::cuCtxCreate_v2, ctx, dev, |f| unsafe {
        f(ctx, flags, dev)
    })
});

hooked!(cuCtxCreate_v3, |ctx: *mut CuContext,
                         params: *mut c_void,
                         num_params: c_int,
                         flags: c_uint,
                         dev: CuDevice| {
    // SAFETY: the caller's arguments, passed on.
    create_context(&real::cuCtxCreate_v3, ctx, dev, |f| unsafe {
        f(ctx, params, num_params, flags, dev)
    })
});

hooked!(cuCtxCreate_v4, |ctx: *mut CuContext,
                         params: *mut c_void,
                         flags: c_uint,
                         dev: CuDevice| {
    // SAFETY: the caller's arguments, passed on.
    create_context(&real::cuCtxCreate_v4, ctx, dev, |f| unsafe {
        f(ctx, params, flags, dev)
    })
});

// A larger stack, heap or FIFO takes device memory: measured, charged to the current
// context; a limit that does not fit is set back and refused.
hooked!(cuCtxSetLimit, |limit: c_int, value: usize| {
    measured(
        &real::cuCtxSetLimit,
        |f, e| {
            let old = real::context_limit(limit);
            // SAFETY (both calls): the caller's limit; the new value is the caller's, the
            // old one what the driver just reported.
            let set = || (unsafe { f(limit, value) }, ());
            let undo = |()| old.is_some_and(|old| unsafe { f(limit, old) }.is_ok());
            e.context_grows(real::cuCtxSetLimit.name(), set, |()| None, undo)
        },
        // SAFETY: the caller's arguments, passed on.
        |f| unsafe { f(limit, value) },
    )
});

/// A module or library load: what it takes is measured and charged to the current context
/// until its unload; one that does not fit is unloaded and refused.
fn load_module<F: CFunction>(
    real: &'static Real<F>,
    call: impl Fn(F) -> (CuResult, usize),
    unload: fn(usize),
) -> CuResult {
    measured(
        real,
        |f, e| {
            let undo = |module: usize| {
                unload(module);
                true
            };
            e.context_grows(real.name(), || call(f), |m| (m != 0).then_some(m), undo)
        },
        |f| call(f).0,
    )
}

fn unload_module(module: usize) {
    if let Some(f) = real::cuModuleUnload.get() {
        // SAFETY: the driver just loaded this module for this call; nobody else has it.
        unsafe { f(module as real::CuModule) };
    }
}

fn unload_library(library: usize) {
    if let Some(f) = real::cuLibraryUnload.get() {
        // SAFETY: as for unload_module.
        unsafe { f(library as real::CuModule) };
    }
}

hooked!(cuModuleLoad, |module: *mut real::CuModule,
                       name: *const c_char| {
    // SAFETY: the caller's arguments, passed on; `module` is its out-pointer.
    let call = |f: real::cuModuleLoad| unsafe { out_handle(f(module, name), module) };
    load_module(&real::cuModuleLoad, call, unload_module)
});

hooked!(
    cuModuleLoadData,
    |module: *mut real::CuModule, image: *const c_void| {
        // SAFETY: the caller's arguments, passed on; `module` is its out-pointer.
        let call = |f: real::cuModuleLoadData| unsafe { out_handle(f(module, image), module) };
        load_module(&real::cuModuleLoadData, call, unload_module)
    }
);

hooked!(
    cuModuleLoadDataEx,
    |module: *mut real::CuModule,
     image: *const c_void,
     num_options: c_uint,
     options: *mut c_int,
     values: *mut *mut c_void| {
        let call = |f: real::cuModuleLoadDataEx| {
            // SAFETY: the caller's arguments, passed on; `module` is its out-pointer.
            unsafe { out_handle(f(module, image, num_options, options, values), module) }
        };
        load_module(&real::cuModuleLoadDataEx, call, unload_module)
    }
);

hooked!(
    cuModuleLoadFatBinary,
    |module: *mut real::CuModule, image: *const c_void| {
        // SAFETY: the caller's arguments, passed on; `module` is its out-pointer.
        let call = |f: real::cuModuleLoadFatBinary| unsafe { out_handle(f(module, image), module) };
        load_module(&real::cuModuleLoadFatBinary, call, unload_module)
    }
);

hooked!(
    cuLibraryLoadData,
    |library: *mut real::CuModule,
     code: *const c_void,
     jit_options: *mut c_int,
     jit_values: *mut *mut c_void,
     num_jit: c_uint,
     library_options: *mut c_int,
     library_values: *mut *mut c_void,
     num_library: c_uint| {
        let call = |f: real::cuLibraryLoadData| {
            // SAFETY: the caller's arguments, passed on; `library` is its out-pointer.
            unsafe {
                let rc = f(
                    library,
                    code,
                    jit_options,
                    jit_values,
                    num_jit,
                    library_options,
                    library_values,
                    num_library,
                );
                out_handle(rc, library)
            }
        };
        load_module(&real::cuLibraryLoadData, call, unload_library)
    }
);

hooked!(
    cuLibraryLoadFromFile,
    |library: *mut real::CuModule,
     name: *const c_char,
     jit_options: *mut c_int,
     jit_values: *mut *mut c_void,
     num_jit: c_uint,
     library_options: *mut c_int,
     library_values: *mut *mut c_void,
     num_library: c_uint| {
        let call = |f: real::cuLibraryLoadFromFile| {
            // SAFETY: the caller's arguments, passed on; `library` is its out-pointer.
            unsafe {
                let rc = f(
                    library,
                    name,
                    jit_options,
                    jit_values,
                    num_jit,
                    library_options,
                    library_values,
                    num_library,
                );
                out_handle(rc, library)
            }
        };
        load_module(&real::cuLibraryLoadFromFile, call, unload_library)
    }
);

fn module_unloaded(real: &'static Real<real::cuModuleUnload>, module: real::CuModule) -> CuResult {
    watched(
        real,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(module) },
        |e| e.module_unloaded(real.name(), module as usize),
    )
}

hooked!(cuModuleUnload, |module: real::CuModule| {
    module_unloaded(&real::cuModuleUnload, module)
});

hooked!(cuLibraryUnload, |library: real::CuModule| {
    module_unloaded(&real::cuLibraryUnload, library)
});

table!(
    cuCtxCreate,
    cuCtxCreate_v2,
    cuCtxCreate_v3,
    cuCtxCreate_v4,
    cuCtxSetLimit,
    cuModuleLoad,
    cuModuleLoadData,
    cuModuleLoadDataEx,
    cuModuleLoadFatBinary,
    cuLibraryLoadData,
    cuLibraryLoadFromFile,
    cuModuleUnload,
    cuLibraryUnload
);
