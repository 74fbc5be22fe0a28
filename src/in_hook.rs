//! Whether this thread is inside one of our hooks: if the driver calls back into an
//! exported hook, that inner call passes straight through, so nothing is counted twice.
//!
//! Every hooked call reads this flag, so where it lives matters. Rust's `thread_local!` in a
//! shared library uses the general-dynamic TLS model: each access calls `__tls_get_addr`
//! through the PLT. cuquota is preloaded, so it loads with the program and may use the
//! initial-exec model instead: the flag sits in the static TLS block at an offset the
//! dynamic linker writes into the GOT once, and reading its address takes no call (the
//! costs of both: bench/README.md). Rust has no stable way to ask for that model, so on
//! x86-64 Linux the flag is declared in assembly; elsewhere it is a `thread_local!`.

use std::cell::Cell;

/// This thread's flag. The address is this thread's for its life (the flag has no
/// destructor), so the caller may keep it while the thread runs.
#[inline(always)]
pub fn flag() -> *const Cell<bool> {
    imp::flag()
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use std::cell::Cell;

    // One zeroed byte of thread-local storage: global, so that code in every object file
    // of the library finds it, and hidden, so that it is not exported.
    std::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".globl cuquota_in_hook",
        ".hidden cuquota_in_hook",
        ".type cuquota_in_hook,@object",
        ".size cuquota_in_hook,1",
        "cuquota_in_hook:",
        ".zero 1",
        ".popsection",
    );

    #[inline(always)]
    pub fn flag() -> *const Cell<bool> {
        let address: *const Cell<bool>;
        // SAFETY: the initial-exec sequence: %fs:0 holds the thread pointer (the x86-64
        // TLS ABI), and the GOT entry that `@GOTTPOFF` names holds the flag's offset from
        // it, written by the dynamic linker before any code of ours runs. Both reads are of
        // memory that never changes for this thread, hence `pure, readonly`.
        unsafe {
            std::arch::asm!(
                "mov {a}, qword ptr fs:[0]",
                "add {a}, qword ptr [rip + cuquota_in_hook@GOTTPOFF]",
                a = out(reg) address,
                options(pure, readonly, nostack),
            );
        }
        address
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use std::cell::Cell;

    thread_local! {
        static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    }

    #[inline(always)]
    pub fn flag() -> *const Cell<bool> {
        IN_HOOK.with(|h| h as *const Cell<bool>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_has_its_own_flag_starting_clear() {
        // SAFETY: this thread's flag, read and written on this thread only.
        let here = unsafe { &*flag() };
        assert!(!here.get());
        here.set(true);
        assert!(
            std::ptr::eq(here, flag()),
            "the same address on the same thread"
        );
        let other = std::thread::spawn(|| {
            // SAFETY: as above, on the spawned thread.
            let f = unsafe { &*flag() };
            (f.get(), f as *const Cell<bool> as usize)
        })
        .join()
        .unwrap();
        assert!(!other.0, "another thread's flag is clear");
        assert_ne!(other.1, here as *const Cell<bool> as usize);
        here.set(false);
    }
}
