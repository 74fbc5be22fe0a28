//! A small spin lock for the hooks' short critical sections (a hash-map insert, a log line).
//! Chosen over a parking mutex for one reason: `fork()`. A child process inherits locks as
//! they were; a parking mutex also carries a queue of waiting threads that do not exist in the
//! child, and unlocking it there can hang. A spin lock is one flag, so the child simply
//! clears it ([`SpinLock::reset_in_child`]).

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// How many tries the exit handler gives a lock (yielding between them) before it goes on
/// without what the lock guards.
pub const EXIT_LOCK_ATTEMPTS: u32 = 1000;

pub struct SpinLock<T> {
    locked: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: access to `data` is serialised by `locked`, as with a mutex.
unsafe impl<T: Send> Sync for SpinLock<T> {}
unsafe impl<T: Send> Send for SpinLock<T> {}

pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    pub const fn new(data: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            data: UnsafeCell::new(data),
        }
    }

    /// Inline, the first try only: the lock is free almost always, and on the hooks' path a
    /// call costs more than the try.
    #[inline(always)]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        SpinGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Wait on a plain load; after a while give the core away, since the holder may
            // have been preempted (more threads than cores).
            while self.locked.load(Ordering::Relaxed) {
                spins += 1;
                if spins < 128 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// The lock if it can be had within `attempts` tries (yielding between them), else None:
    /// for the exit handler, which may run on the very thread that holds the lock (`exit()`
    /// from a signal handler that interrupted a hook) and so must never wait for it.
    pub fn try_lock_for(&self, attempts: u32) -> Option<SpinGuard<'_, T>> {
        for _ in 0..attempts {
            if self
                .locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Some(SpinGuard { lock: self });
            }
            std::thread::yield_now();
        }
        None
    }

    /// In a forked child, which has one thread: frees the lock whoever held it in the parent,
    /// and replaces the data (a parent thread may have been half-way through changing it; the
    /// old value is leaked, never dropped or read).
    ///
    /// # Safety
    /// Only in the child right after `fork()`, before any other thread exists.
    pub unsafe fn reset_in_child(&self, fresh: T) {
        // SAFETY: with one thread and the lock's holder gone, nothing else reads or writes
        // the data; `write` leaves the old value undropped.
        unsafe { std::ptr::write(self.data.get(), fresh) };
        self.locked.store(false, Ordering::Release);
    }

    /// In a forked child: frees the lock and keeps the data.
    ///
    /// # Safety
    /// As for [`Self::reset_in_child`], and the data must be usable as it was left.
    pub unsafe fn unlock_in_child(&self) {
        // Only an atomic store: the caller's promise is what makes it sound.
        self.locked.store(false, Ordering::Release);
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock, so no other reference exists.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_exactly_under_threads() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 160_000);
    }

    #[test]
    fn reset_frees_a_held_lock() {
        let lock = SpinLock::new(vec![1, 2, 3]);
        std::mem::forget(lock.lock());
        // SAFETY: no other thread uses this lock.
        unsafe { lock.reset_in_child(Vec::new()) };
        assert!(lock.lock().is_empty());
    }
}
