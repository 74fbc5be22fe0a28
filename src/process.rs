//! The life of the process around the engine, in one place: the engine is made at the first
//! hooked CUDA call (never in a constructor, so a process that never uses CUDA reads no
//! variable, prints nothing, opens no file, starts no thread and installs no signal
//! handler); the exit handler and the fork handler are registered here and nowhere else,
//! before the engine is begun, so that a child forked at any moment — while another thread
//! is still making the engine, too — starts clean. Once the engine is made, the watcher
//! thread starts (`watcher`: SIGTERM/SIGINT's summary, back-off episodes ended when their
//! gap passes) with the tasks defined here.
//!
//! Fork takes no lock around it (no prepare or parent handler): every lock a hook can hold
//! is a spin lock, which the child simply clears, because a parked mutex inherited mid-wait
//! can hang the child. The child handler resets, in this order:
//! 1. the engine: if a parent thread was still making it, the child makes its own at its
//!    first call; if it was made, its ledgers, pools and quotas are emptied (the parent's
//!    memory is not the child's), and this thread's back-off episode is forgotten;
//! 2. the log: its lock is freed, its target kept;
//! 3. the trace writer: the child forgets the parent's trace and starts its own at its first
//!    event (with `%p` in the path, a file of its own);
//! 4. the watcher: a child of a governed process gets a fresh one (the parent's thread is
//!    not in the child, and its eventfd is shared with the parent).

use crate::config::{Config, ConfigError, LogTarget};
use crate::cuda_abi::CuResult;
use crate::cuda_abi::CU_MEM_LOCATION_TYPE_DEVICE;
use crate::engine::{Engine, GraphNode, Queries};
use crate::group::Group;
use crate::quota::Books;
use crate::real_driver;
use cuquota_state::registry;
use cuquota_state::trusted::Refusal;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};

/// The engine, once made (leaked: it lives as long as the process, exit handler included).
static ENGINE: AtomicPtr<Engine> = AtomicPtr::new(std::ptr::null_mut());
/// Whether a thread is making the engine (`MAKING`) or nobody has begun (`EMPTY`). A
/// `OnceLock` here would hang a child forked mid-making: its "running" state would wait
/// for a thread the child does not have.
static MAKING_STATE: AtomicU8 = AtomicU8::new(EMPTY);
const EMPTY: u8 = 0;
const MAKING: u8 = 1;
/// The exit and fork handlers were registered.
static HANDLERS: AtomicBool = AtomicBool::new(false);

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
    fn device_uuid(&self, device: u32) -> Option<[u8; 16]> {
        real_driver::device_uuid(device)
    }
    // -- context memory (a part of the footprint)
    fn nvml_free(&self, device: u32) -> Option<u64> {
        crate::nvml::free_memory(device)
    }
    fn used_by_process(&self, device: u32) -> Result<u64, crate::context_memory::Unread> {
        crate::nvml::used_by_this_process(device)
    }
    fn nvml_absence(&self) -> Option<String> {
        crate::nvml::absence_note()
    }
    fn driver_version(&self) -> Option<u32> {
        real_driver::driver_version()
    }

    // -- graph memory (a part of the footprint)
    fn graph_nodes(&self, graph: usize) -> Option<Vec<GraphNode>> {
        use real_driver::RawGraphNode as Raw;
        let nodes = real_driver::graph_nodes(graph)?;
        let node = |raw| match raw {
            Raw::Alloc {
                location: (kind, id),
                bytes,
                address,
            } => GraphNode::Alloc {
                device: (kind == CU_MEM_LOCATION_TYPE_DEVICE)
                    .then(|| u32::try_from(id).ok())
                    .flatten(),
                bytes,
                address,
            },
            Raw::Free(address) => GraphNode::Free(address),
            Raw::Child(graph) => GraphNode::Child(graph),
            Raw::Other => GraphNode::Other,
        };
        Some(nodes.into_iter().map(node).collect())
    }
    fn graph_memory(&self, device: u32) -> Option<(u64, u64)> {
        real_driver::graph_memory(device)
    }
    fn graph_memory_trim(&self, device: u32) -> bool {
        real_driver::graph_memory_trim(device)
    }

    // -- pool reservations (the footprint's pool cache) --
    fn pool_usage(&self, pool: usize) -> Result<(u64, u64), CuResult> {
        real_driver::pool_usage(pool)
    }
    fn trim_pool(&self, pool: usize) -> Result<(), CuResult> {
        real_driver::trim_pool(pool)
    }
    fn current_pool(&self, device: u32) -> Result<usize, CuResult> {
        real_driver::current_pool(device)
    }
}

/// The process-wide engine, made (and the process handlers registered) on first use.
#[inline]
pub fn engine() -> &'static Engine {
    // SAFETY: ENGINE holds null or a leaked Engine that is never freed.
    match unsafe { ENGINE.load(Ordering::Acquire).as_ref() } {
        Some(engine) => engine,
        None => make_engine(),
    }
}

/// The engine if a hooked CUDA call made it; never makes it (for the NVML hooks, which
/// must leave a process that never used CUDA as they found it).
#[inline]
pub fn made_engine() -> Option<&'static Engine> {
    // SAFETY: as in `engine`.
    unsafe { ENGINE.load(Ordering::Acquire).as_ref() }
}

#[cold]
fn make_engine() -> &'static Engine {
    register_handlers();
    loop {
        // SAFETY: as in `engine`.
        if let Some(engine) = unsafe { ENGINE.load(Ordering::Acquire).as_ref() } {
            return engine;
        }
        if MAKING_STATE
            .compare_exchange(EMPTY, MAKING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let engine: &'static Engine = Box::leak(Box::new(new_engine()));
            ENGINE.store((engine as *const Engine).cast_mut(), Ordering::Release);
            crate::watcher::start(&WATCHER_TASKS);
            return engine;
        }
        // Another thread is making it (reading the environment, perhaps writing a line):
        // wait for it, giving the core away.
        std::thread::yield_now();
    }
}

fn new_engine() -> Engine {
    let config = read_config();
    // A group member joins now (one file opened and mapped): a group that cannot be used
    // fails every call, as a bad variable does.
    let group = Group::new(config.as_ref().ok().and_then(|c| c.group_spec()));
    let config = match (config, group.name()) {
        (Ok(c), Some(name)) => match group.join() {
            Ok(_) => Ok(c),
            Err(why) => Err(ConfigError {
                message: crate::messages::group_unusable(name, &why),
            }),
        },
        (config, _) => config,
    };
    crate::log::configure(config.as_ref().map_or(&LogTarget::Stderr, |c| &c.log));
    // Here, at the first CUDA call, and never when only NVML asks: a misspelt name
    // (CUQUOTA_LIMT) would otherwise leave the process unlimited without a word.
    if !config.as_ref().is_ok_and(|c| c.untouched) {
        let names: Vec<_> = std::env::vars_os().map(|(k, _)| k).collect();
        let names = names.iter().map(|n| n.as_encoded_bytes());
        for name in cuquota_format::variables::unknown_names(names) {
            if let Some(line) = cuquota_format::variables::unknown(&name, "it is ignored") {
                crate::log::line(&line);
            }
        }
    }
    match &config {
        Err(e) => crate::log::line(&e.message),
        Ok(c) => {
            for warning in &c.warnings {
                crate::log::line(warning);
            }
            if c.verbose() {
                let trace = c.trace.as_deref().and_then(crate::trace::expanded_path);
                crate::log::line(&crate::messages::config_line(c, trace.as_deref()));
            }
        }
    }
    Engine::with_books(config.clone(), Box::new(RealDriver), books(&config, group))
}

/// The books: in this process's registry file (listed by `cuquota top` while it lives), or,
/// when it cannot be written, in memory (said at info).
fn books(config: &Result<Config, ConfigError>, group: Group) -> Books {
    let Some(c) = config.as_ref().ok().filter(|c| !c.untouched) else {
        return Books::new(group);
    };
    let argv = crate::sys::command_line();
    let who = registry::Registration {
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() } as u32,
        started_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        host: &crate::sys::host_name(),
        argv: &argv,
        group: group.name(),
        observe: c.mode == crate::config::Mode::Observe,
        allocations_only: c.count == crate::config::Count::Allocations,
        identity: &cuquota_state::identity::Identity::own(),
    };
    match registry::ProcessFile::register(&c.state_dir, &who) {
        Ok(file) => Books::registered(group, file),
        // A state directory another user could have set up: said always, nothing in it
        // touched.
        Err(Refusal::Untrusted(why)) => {
            crate::log::line(&crate::messages::not_registered(&why));
            Books::new(group)
        }
        Err(why) => {
            if c.verbose() {
                crate::log::line(&crate::messages::not_registered(why.line()));
            }
            Books::new(group)
        }
    }
}

/// Once, before the engine is begun: the exit handler, and the fork handler (so a child
/// forked while the engine is being made, or while a hook holds a lock, is reset too, and
/// every child resets the trace, whose cached thread ids would otherwise be the parent's).
fn register_handlers() {
    if HANDLERS.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: registering plain extern "C" fns with atexit / pthread_atfork has no other
    // precondition.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
    }
}

pub fn read_config() -> Result<Config, ConfigError> {
    use cuquota_state::policy::{self, Loaded};
    let main = policy::load(std::path::Path::new(crate::config::POLICY_PATH), false);
    // The job's policy, keyed by the job's cgroup (which a process in it cannot change).
    let job = match &main {
        Loaded::Trusted(_, p) => match (&p.jobs, std::fs::read_to_string("/proc/self/cgroup")) {
            (Some(jobs), Ok(cgroup)) => match policy::job_key(&cgroup) {
                Some(key) => policy::load_job(jobs, &key),
                None => Loaded::Absent,
            },
            (Some(_), Err(e)) => Loaded::Refused(format!("/proc/self/cgroup cannot be read ({e})")),
            (None, _) => Loaded::Absent,
        },
        _ => Loaded::Absent,
    };
    let asked = std::env::vars_os().any(|(k, _)| k.as_encoded_bytes().starts_with(b"CUQUOTA_"))
        || std::env::var_os("LD_PRELOAD")
            .is_some_and(|p| p.to_string_lossy().contains("libcuquota"));
    // SAFETY: getauxval reads the auxiliary vector the kernel gave the process.
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    let sources = crate::config::Sources {
        main,
        job,
        asked,
        secure,
    };
    // Non-UTF-8 values are kept (lossily) so that they fail to parse rather than read as unset.
    Config::with_policy(|name| std::env::var_os(name), &sources)
}

/// At exit: one summary line per device used, then the trace's end. Hooks keep working
/// afterwards (frameworks free memory during teardown): nothing here is torn down.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        // It may run on a thread interrupted inside a hook (exit() from a signal handler):
        // nothing from here on waits for a lock that thread may hold.
        crate::log::exiting();
        // SAFETY: as in `engine`.
        if let Some(engine) = unsafe { ENGINE.load(Ordering::Acquire).as_ref() } {
            engine.end_episodes();
            engine.note_group_limits();
            for line in engine.summary_lines() {
                crate::log::line(&line);
            }
            engine.flush_held_events();
            crate::trace::finish();
            // At info: where the trace went (its template expanded), for `cuquota run --trace`.
            if engine.config.as_ref().is_ok_and(|c| c.verbose()) {
                if let Some(path) = crate::trace::written_path() {
                    crate::log::line(&format!("trace written to {path}"));
                }
            }
            let dropped = crate::trace::dropped();
            if dropped > 0 {
                crate::log::line(&format!(
                    "trace: {dropped} events dropped because the buffer was full (the summary line counts them too)"
                ));
            }
        }
    });
}

/// What the watcher thread does for the engine.
static WATCHER_TASKS: crate::watcher::Tasks = crate::watcher::Tasks {
    on_signal: summary_on_signal,
    expire: expire_episodes,
    reconcile: reconcile_context_memory,
};

/// How long the watcher waits for the trace's writer on SIGTERM/SIGINT (the signal handler
/// itself lets the process die after 200 ms, whatever is left).
const SIGNAL_TRACE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// SIGTERM/SIGINT, on the watcher thread (the exit handlers will not run): the episodes'
/// outcomes and the summary lines, as at exit, then the trace's remaining events and its
/// summary (`end` names the signal). A trace with a summary means these lines were written.
fn summary_on_signal(sig: i32) {
    // SAFETY: as in `engine`.
    if let Some(engine) = unsafe { ENGINE.load(Ordering::Acquire).as_ref() } {
        engine.end_episodes();
        engine.note_group_limits();
        for line in engine.summary_lines() {
            crate::log::line(&line);
        }
    }
    crate::trace::finish_on_signal(sig, SIGNAL_TRACE_WAIT);
}

/// On the watcher thread: the episodes whose gap has passed end now, with their outcome
/// lines and trace events; returns when the next open one's gap ends.
fn expire_episodes() -> Option<u64> {
    // SAFETY: as in `engine`.
    if let Some(engine) = unsafe { ENGINE.load(Ordering::Acquire).as_ref() } {
        engine.end_expired_episodes();
    }
    crate::episodes::next_expiry()
}

/// On the watcher thread: context memory reconciled with NVML's figure (at most once a
/// second per GPU); true while a context measured to take memory lives.
fn reconcile_context_memory() -> bool {
    // SAFETY: as in `engine`.
    match unsafe { ENGINE.load(Ordering::Acquire).as_ref() } {
        Some(engine) if engine.check_config().is_ok() => engine.reconcile_context_memory(),
        _ => false,
    }
}

/// The child has its own quota, summary and trace; the order is the module's.
extern "C" fn after_fork_in_child() {
    crate::sys::forget_thread_ids_in_child();
    // SAFETY: as in `engine`.
    match unsafe { ENGINE.load(Ordering::Acquire).as_ref() } {
        Some(engine) => {
            // SAFETY: this is the pthread_atfork child handler: the child has one thread.
            unsafe { engine.reset_in_child() };
            // SAFETY: the child of a fork, with one thread (pthread_atfork's child handler).
            unsafe { crate::episodes::reset_in_child() };
        }
        // The thread that was making the engine is not in the child: it makes its own.
        None => MAKING_STATE.store(EMPTY, Ordering::Release),
    }
    // SAFETY: as above.
    unsafe { crate::log::reset_in_child() };
    // SAFETY: as above.
    unsafe { crate::trace::reset_in_child() };
    // SAFETY: as above.
    unsafe { crate::stacks::reset_in_child() };
    // SAFETY: as above.
    unsafe { crate::nvml::unlock_in_child() };
    // Last: the new thread may take any of the locks freed above.
    if !ENGINE.load(Ordering::Acquire).is_null() {
        // SAFETY: as above.
        unsafe { crate::watcher::restart_in_child(&WATCHER_TASKS) };
    }
}

// ---- a driver no call reached ----------------------------------------------------------------

/// At unload: a destructor, not the exit handler, which only a hooked call registers.
#[used]
#[link_section = ".fini_array"]
static REPORT_UNREACHED_DRIVER: extern "C" fn() = report_unreached_driver;

/// The driver was loaded but no call ever reached cuquota (no engine, no hook handed out):
/// whatever the program did with it was not enforced, so say so, with the likely cause.
/// Whether the driver was initialised cannot be asked here (its own destructors may have
/// run), so a program that loads the driver and never uses it gets the line too.
extern "C" fn report_unreached_driver() {
    let _ = std::panic::catch_unwind(|| {
        if !ENGINE.load(Ordering::Acquire).is_null() || crate::lookup::any_hook_handed_out() {
            return;
        }
        let (main, other) = crate::lookup::loaded_in_namespaces(b"libcuda.so");
        if let Some(line) = unreached_driver_line(main, other) {
            crate::log::line(&line);
        }
    });
}

fn unreached_driver_line(in_main: bool, in_other: bool) -> Option<String> {
    let cause = match (in_main, in_other) {
        (true, _) => {
            "an object loaded with RTLD_DEEPBIND (`cuquota run` sets LD_AUDIT to cover it), \
             or a statically linked caller"
        }
        (false, true) => "a dlmopen namespace, which the preload does not reach",
        (false, false) => return None,
    };
    Some(format!(
        "libcuda.so was loaded but no CUDA call reached cuquota: if this program used \
         the GPU, nothing was enforced (likely cause: {cause})"
    ))
}

#[cfg(test)]
mod tests {
    use super::unreached_driver_line;

    #[test]
    fn the_unreached_driver_line_names_the_cause() {
        assert_eq!(unreached_driver_line(false, false), None);
        assert!(unreached_driver_line(true, false)
            .unwrap()
            .contains("RTLD_DEEPBIND"));
        assert!(unreached_driver_line(true, true)
            .unwrap()
            .contains("RTLD_DEEPBIND"));
        assert!(unreached_driver_line(false, true)
            .unwrap()
            .contains("dlmopen"));
    }
}
