//! Where this thread is in our hooks: outside them, in cuquota's own code, or in the real
//! driver call a hook makes. A hooked call made while the thread is in the driver is the
//! driver calling back into an exported symbol: it passes straight through, so nothing is
//! counted twice. One made while the thread is in cuquota's own code cannot come from the
//! driver (cuquota calls no exported hook): it is a signal handler that interrupted the
//! hook, perhaps holding a lock, and it is refused (see `exports::frame`).
//!
//! Every hooked call reads this flag, so where it lives matters. Rust's `thread_local!` in a
//! shared library uses the general-dynamic TLS model: each access calls `__tls_get_addr`
//! through the PLT. cuquota is preloaded, so it loads with the program and may use the
//! initial-exec model instead: the flag sits in the static TLS block at an offset the
//! dynamic linker writes into the GOT once, and reading its address takes no call (the
//! costs of both: bench/README.md). Rust has no stable way to ask for that model, so on
//! x86-64 Linux the flag is declared in assembly; elsewhere it is a `thread_local!`.

use std::cell::Cell;

/// Not inside a hook.
pub const OUTSIDE: u8 = 0;
/// Inside a hook, in cuquota's own code.
pub const OURS: u8 = 1;
/// Inside a hook, in the real driver call it makes for the caller.
pub const DRIVER: u8 = 2;

/// This thread's state. The address is this thread's for its life (the byte has no
/// destructor), so the caller may keep it while the thread runs.
#[inline(always)]
pub fn flag() -> *const Cell<u8> {
    imp::flag()
}

/// Runs a hook's real driver call marked as such, so that a call the driver makes back into
/// an exported hook passes through; cuquota's own code is marked again afterwards. Called
/// only from a hook's own code (the engine), where the thread is marked [`OURS`].
#[inline(always)]
pub fn driver<R>(call: impl FnOnce() -> R) -> R {
    let flag = flag();
    // SAFETY: this thread's flag, which lives as long as the thread; only this thread (and
    // a signal handler on it, which leaves it as it found it) touches it.
    unsafe { (*flag).set(DRIVER) };
    let result = call();
    // SAFETY: as above.
    unsafe { (*flag).set(OURS) };
    result
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
    pub fn flag() -> *const Cell<u8> {
        let address: *const Cell<u8>;
        // SAFETY: the initial-exec sequence: %fs:0 holds the thread pointer (the x86-64
        // TLS ABI), and the GOT entry that `@GOTTPOFF` names holds the flag's offset from
        // it, written by the dynamic linker before any code of ours runs. Both reads are of
        // memory that never changes for this thread, so the result depends on nothing that
        // code can write: `pure, nomem` lets the compiler compute it once per hook.
        unsafe {
            std::arch::asm!(
                "mov {a}, qword ptr fs:[0]",
                "add {a}, qword ptr [rip + cuquota_in_hook@GOTTPOFF]",
                a = out(reg) address,
                options(pure, nomem, nostack),
            );
        }
        address
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use std::cell::Cell;

    thread_local! {
        static IN_HOOK: Cell<u8> = const { Cell::new(super::OUTSIDE) };
    }

    #[inline(always)]
    pub fn flag() -> *const Cell<u8> {
        IN_HOOK.with(|h| h as *const Cell<u8>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_has_its_own_flag_starting_clear() {
        // SAFETY: this thread's flag, read and written on this thread only.
        let here = unsafe { &*flag() };
        assert_eq!(here.get(), OUTSIDE);
        here.set(OURS);
        assert!(
            std::ptr::eq(here, flag()),
            "the same address on the same thread"
        );
        let other = std::thread::spawn(|| {
            // SAFETY: as above, on the spawned thread.
            let f = unsafe { &*flag() };
            (f.get(), f as *const Cell<u8> as usize)
        })
        .join()
        .unwrap();
        assert_eq!(other.0, OUTSIDE, "another thread's flag is clear");
        assert_ne!(other.1, here as *const Cell<u8> as usize);
        here.set(OUTSIDE);
    }

    #[test]
    fn the_driver_call_is_marked_and_our_code_marked_again() {
        // SAFETY: this thread's flag, on this thread only.
        let here = unsafe { &*flag() };
        here.set(OURS);
        assert_eq!(driver(|| here.get()), DRIVER);
        assert_eq!(here.get(), OURS);
        here.set(OUTSIDE);
    }
}
