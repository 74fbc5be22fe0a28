//! The process-wide engine, made at the first hooked CUDA call (never in a constructor, so
//! a process that never uses CUDA reads no variable, prints nothing and opens no file).

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

pub fn engine() -> &'static Engine {
    ENGINE.get_or_init(|| {
        let config = read_config();
        crate::log::configure(config.as_ref().map_or(&LogTarget::Stderr, |c| &c.log));
        let engine = Engine::new(config, Box::new(RealDriver));
        match &engine.config {
            Err(e) => crate::log::line(&e.message),
            Ok(c) if c.verbose => {
                if let Some(line) = engine.config_line() {
                    crate::log::line(&line);
                }
            }
            Ok(_) => {}
        }
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

/// At exit: one summary line per device used. Hooks keep working afterwards (frameworks free
/// memory during teardown): nothing here is torn down.
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

/// The child has its own quota, summary and trace (with `%p`, its own file).
extern "C" fn after_fork_in_child() {
    if let Some(engine) = ENGINE.get() {
        // SAFETY: this is the pthread_atfork child handler: the child has one thread.
        unsafe {
            engine.reset_in_child();
            crate::log::reset_in_child();
        }
    }
}
