//! The life of the process around the engine, in one place: the engine is made at the first
//! hooked CUDA call (never in a constructor, so a process that never uses CUDA reads no
//! variable, prints nothing and opens no file); then the exit handler and the fork handler
//! are registered, here and nowhere else.
//!
//! Fork takes no lock around it (no prepare or parent handler): every lock a hook can hold
//! is a spin lock, which the child simply clears, because a parked mutex inherited mid-wait
//! can hang the child. The child handler resets, in this order:
//! 1. the engine (ledgers, pools, quotas) and this thread's back-off episode: the parent's
//!    memory is not the child's;
//! 2. the log: its lock is freed, its target kept;
//! 3. the trace writer: the child forgets the parent's trace and starts its own at its first
//!    event (with `%p` in the path, a file of its own).

use crate::config::{Config, ConfigError, LogTarget};
use crate::cuda_abi::CuResult;
use crate::engine::{Engine, Queries};
use crate::real_driver;
use std::sync::OnceLock;

static ENGINE: OnceLock<Engine> = OnceLock::new();

/// The real driver behind the engine's questions.
struct RealDriver;

impl Queries for RealDriver {
    fn current_device(&self) -> Result<u32, CuResult> {
        real_driver::current_device()
    }
    fn current_context(&self) -> usize {
        real_driver::current_context()
    }
    fn context_device(&self, context: usize) -> Result<u32, CuResult> {
        real_driver::context_device(context)
    }
    fn stream_context(&self, stream: usize) -> Result<usize, CuResult> {
        real_driver::stream_context(stream)
    }
    fn total_memory(&self, device: u32) -> Result<u64, CuResult> {
        real_driver::total_memory(device)
    }
    fn memory_info(&self) -> Result<(u64, u64), CuResult> {
        real_driver::memory_info()
    }
    fn devices(&self) -> Vec<(u32, String, Option<u64>)> {
        real_driver::devices()
    }
}

/// The process-wide engine, made (and the process handlers registered) on first use.
pub fn engine() -> &'static Engine {
    ENGINE.get_or_init(|| {
        let config = read_config();
        crate::log::configure(config.as_ref().map_or(&LogTarget::Stderr, |c| &c.log));
        match &config {
            Err(e) => crate::log::line(&e.message),
            Ok(c) if c.verbose => crate::log::line(&crate::messages::config_line(c)),
            Ok(_) => {}
        }
        let engine = Engine::new(config, Box::new(RealDriver));
        // Registered before any trace event exists: every forked child then resets the
        // trace, whose cached thread ids would otherwise be the parent's.
        // SAFETY: registering plain extern "C" fns with atexit / pthread_atfork has no other
        // precondition.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        }
        engine
    })
}

fn read_config() -> Result<Config, ConfigError> {
    // Non-UTF-8 values are kept (lossily) so that they fail to parse rather than read as unset.
    Config::from_vars(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
}

/// At exit: one summary line per device used, then the trace's end. Hooks keep working
/// afterwards (frameworks free memory during teardown): nothing here is torn down.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(engine) = ENGINE.get() {
            for line in engine.summary_lines() {
                crate::log::line(&line);
            }
            engine.flush_held_events();
            crate::trace::finish();
            let dropped = crate::trace::dropped();
            if dropped > 0 {
                crate::log::line(&format!(
                    "trace: {dropped} events dropped because the buffer was full (the summary line counts them too)"
                ));
            }
        }
    });
}

/// The child has its own quota, summary and trace; the order is the module's.
extern "C" fn after_fork_in_child() {
    if let Some(engine) = ENGINE.get() {
        // SAFETY: this is the pthread_atfork child handler: the child has one thread.
        unsafe { engine.reset_in_child() };
        crate::episodes::reset_in_child();
        // SAFETY: as above.
        unsafe { crate::log::reset_in_child() };
        // SAFETY: as above.
        unsafe { crate::trace::reset_in_child() };
    }
}
