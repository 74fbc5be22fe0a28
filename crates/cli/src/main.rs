//! `cuquota`: run a command under the interposer, and read the traces it writes.
//!
//! This crate never links the hooks: it depends on `cuquota-format` (the trace schema, the
//! reader, sizes, the episode rule), not on the interposer.

mod cdi;
mod export;
mod metrics;
mod plot;
mod preflight;
mod report;
mod run;
mod set;
mod symbols;
mod timeline;
mod top;
mod traces;
mod visible;
mod walk;

use clap::{Parser, Subcommand, ValueEnum};
use cuquota_format::read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cuquota",
    version,
    about = "Enforce and explain a per-device GPU memory quota for any CUDA process"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run COMMAND with libcuquota.so preloaded; its exit status is passed through.
    ///
    /// The values are checked before COMMAND starts (a bad one exits 2, naming it), and so is
    /// a per-GPU limit naming no GPU that COMMAND would see. The `--` before COMMAND is
    /// optional; a COMMAND that starts with `-` needs it (`cuquota run -- -prog`).
    #[command(after_help = "\
Finding the library: CUQUOTA_LIB=/path/to/libcuquota.so if set, else libcuquota.so next to \
this cuquota, in its parent directory, or in ../lib (the layout of scripts/install.sh PREFIX: \
PREFIX/bin/cuquota, PREFIX/lib/libcuquota.so).

Finding the driver: COMMAND loads libcuda.so.1 as it would without cuquota (the system's \
driver, or the first on LD_LIBRARY_PATH), or from --driver DIR. --stand-in names the stand-in \
driver that comes with cuquota (GPUs simulated in host memory, to try it without one: \
CUDA_SHIM_MEMORY=8GiB and CUDA_SHIM_DEVICES=1 by default), for COMMAND alone: it also answers \
as NVML, so nothing else should see it.

Other settings (CUQUOTA_LOG_LEVEL, CUQUOTA_VIRTUALIZE, CUQUOTA_COUNT, CUQUOTA_CONTEXT, \
CUQUOTA_STACKS) pass through the environment; cuquota checks every CUQUOTA_* variable there \
before COMMAND starts.")]
    Run {
        /// Quota, e.g. 6GiB, 75%, or 0:6GiB,1:50%, or GPU-<uuid>:6GiB, or none (CUQUOTA_LIMIT).
        #[arg(long, value_name = "SPEC")]
        limit: Option<String>,
        /// Write a trace (CUQUOTA_TRACE; %p pid, %h host, %r rank, %t start time, %% a %).
        #[arg(long, value_name = "PATH")]
        trace: Option<String>,
        /// Refuse nothing, only log what would have been refused (CUQUOTA_MODE=observe).
        #[arg(long)]
        observe: bool,
        /// Write cuquota's log lines to PATH, or `stderr` (the default), or `off` (CUQUOTA_LOG).
        #[arg(long, value_name = "PATH")]
        log: Option<String>,
        /// Share one quota per GPU with every process of this group (CUQUOTA_GROUP; its limit:
        /// --limit of its first member, or `cuquota set`).
        #[arg(long, value_name = "NAME")]
        group: Option<String>,
        /// Where groups keep their state and governed processes are listed for `cuquota top`
        /// (CUQUOTA_STATE_DIR; default /dev/shm/cuquota).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// Load the driver (libcuda.so.1) from DIR: put first on COMMAND's LD_LIBRARY_PATH.
        #[arg(long, value_name = "DIR", conflicts_with = "stand_in")]
        driver: Option<PathBuf>,
        /// Use the stand-in driver that comes with cuquota, for COMMAND alone (the wheel's,
        /// PREFIX/share/cuquota/shim of scripts/install.sh, or a clone's after scripts/shim.sh).
        #[arg(long)]
        stand_in: bool,
        /// Record each allocation's call stack in the trace, at most N frames (CUQUOTA_STACKS;
        /// `cuquota report` then lists the call sites).
        #[arg(long, value_name = "N")]
        stacks: Option<u32>,
        /// The command and its arguments (after an optional `--`; an option cuquota does not
        /// know, before COMMAND, is refused).
        #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
        command: Vec<std::ffi::OsString>,
    },
    /// Summarise traces: peaks, a chart of memory in use, back-off episodes, largest and
    /// leaked allocations, API mix; several files (ranks, hosts) make one job view.
    ///
    /// Per GPU also the footprint by part (allocations, pool cache, graph memory, context:
    /// at the end, the highest, at the peak), cuquota's trims, and refused contexts and graph
    /// launches (which are no back-off episodes).
    Report {
        /// Trace files written with CUQUOTA_TRACE (or `cuquota run --trace`).
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<PathBuf>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
        /// Warn about malformed lines and go on, instead of stopping at the first.
        #[arg(long)]
        skip_bad: bool,
        /// Where to find a module of a call stack (CUQUOTA_STACKS) that is no longer at its
        /// path, or is another build there: by GNU build id (DIR/.build-id/xx/rest.debug,
        /// DIR/xx/rest.debug) or by file name with the same build id. /usr/lib/debug is
        /// always searched. Repeatable.
        #[arg(long, value_name = "DIR")]
        debug_dir: Vec<PathBuf>,
    },
    /// Convert traces to another format (Chrome Trace Event JSON, which Perfetto opens).
    ///
    /// Per GPU a counter track for in use, the quota and each part of the footprint; an
    /// instant event per refusal, back-off episode and trim.
    Export {
        /// The format to write.
        #[arg(long, value_enum, default_value_t = Format::Chrome)]
        format: Format,
        /// Trace files written with CUQUOTA_TRACE (or `cuquota run --trace`).
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<PathBuf>,
        /// Output file (`-` for stdout).
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Warn about malformed lines and go on, instead of stopping at the first.
        #[arg(long)]
        skip_bad: bool,
    },
    /// Draw device memory in use over time as an SVG chart: one panel per process and GPU on
    /// a shared time axis that spans the events, with the quota in force (dashed, stepping
    /// where `cuquota set` changed it) and the refusals (crosses, at in use + the request;
    /// refusals within one time bucket share a cross, with their count beside it: ×N).
    ///
    /// When the quota counted the footprint, its parts are stacked under the in-use line
    /// (allocations, pool cache, graph memory, context) and cuquota's trims are marked.
    Plot {
        /// Trace files written with CUQUOTA_TRACE (or `cuquota run --trace`).
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<PathBuf>,
        /// The SVG file to write (`-`: standard output).
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Warn about malformed lines and go on, instead of stopping at the first.
        #[arg(long)]
        skip_bad: bool,
    },
    /// Set a group's limit while its members run (or prepare a group before they start).
    #[command(
        override_usage = "cuquota set NAME --limit SPEC [--state-dir DIR]\n       \
                                cuquota set NAME --remove [--state-dir DIR]"
    )]
    ///
    /// Members read the limit at every check: raised, requests fit again at once; lowered
    /// below what they hold, nothing is taken away and new requests are refused until enough
    /// is freed. Who may do this is whoever may write the group's state file
    /// (STATE_DIR/groups/NAME, made mode 0600 by its first member).
    Set {
        /// The group (CUQUOTA_GROUP of its members).
        #[arg(value_name = "NAME")]
        name: String,
        /// One size for every GPU (6GiB), `none`, or GPU-<uuid>:SIZE entries, comma-separated.
        #[arg(long, value_name = "SPEC", required_unless_present = "remove")]
        limit: Option<String>,
        /// Remove the group's state instead: refused, naming them, while members live.
        #[arg(long, conflicts_with = "limit")]
        remove: bool,
        /// Where groups keep their state (default: CUQUOTA_STATE_DIR, else /dev/shm/cuquota).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Every governed process and group on this machine, per GPU, live (like nvidia-smi or
    /// nvtop): limit, in use (bar, bytes, %), parts, peak, refusals and the last one's words.
    ///
    /// Keys: q (or Esc, Ctrl-C) quits; s cycles the order, m r p n sort by memory in use,
    /// refusals, pid, name; arrows, PgUp/PgDn, Home/End scroll. With stdout not a terminal,
    /// one frame is printed, as with --once. Only reads the state directory.
    Top {
        /// Print one frame and exit.
        #[arg(long)]
        once: bool,
        /// Print one snapshot as JSON and exit (fields: see the README).
        #[arg(long, conflicts_with = "once")]
        json: bool,
        /// Seconds between refreshes.
        #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
        interval: f64,
        /// Where governed processes and groups keep their state (default: CUQUOTA_STATE_DIR,
        /// else /dev/shm/cuquota).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Prometheus metrics of every governed process and group (the text exposition format):
    /// printed once (for node_exporter's textfile collector) or served at /metrics.
    Metrics {
        /// Serve at http://ADDR/metrics instead of printing once (e.g. 127.0.0.1:9400; port 0
        /// picks a free one, said on stdout).
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Where governed processes and groups keep their state (default: CUQUOTA_STATE_DIR,
        /// else /dev/shm/cuquota).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Print a CDI specification (JSON) that puts a container under cuquota: the library
    /// mounted read-only and preloaded, the policy read-only, the state directory shared.
    ///
    /// Save it as /etc/cdi/cuquota.json; a container asks for cuquota.io/quota=default (or
    /// the --name given). The paths must exist on the host: a missing one is refused.
    Cdi {
        /// The device's name, for a second spec with another policy (another limit):
        /// cuquota.io/quota=NAME.
        #[arg(long, value_name = "NAME", default_value = "default")]
        name: String,
        /// The library on the host (default: the one `cuquota run` would preload, beside
        /// this cuquota: PREFIX/lib of scripts/install.sh, the wheel's lib/).
        #[arg(long, value_name = "PATH")]
        library: Option<PathBuf>,
        /// The policy on the host, mounted at /etc/cuquota.conf.
        #[arg(long, value_name = "PATH", default_value = "/etc/cuquota.conf")]
        policy: PathBuf,
        /// The state directory on the host, mounted at /dev/shm/cuquota.
        #[arg(long, value_name = "DIR", default_value = "/dev/shm/cuquota")]
        state_dir: PathBuf,
        /// A host file holding the line /usr/lib/cuquota/libcuquota.so, mounted over the
        /// container's /etc/ld.so.preload (without it, LD_PRELOAD is set, which a process in
        /// the container can unset).
        #[arg(long, value_name = "PATH")]
        ld_so_preload: Option<PathBuf>,
    },
}

/// `--state-dir`, else `CUQUOTA_STATE_DIR`, else the default.
fn state_dir(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| {
            std::env::var_os("CUQUOTA_STATE_DIR")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| cuquota_state::group::DEFAULT_STATE_DIR.into())
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// Chrome Trace Event JSON (chrome://tracing, ui.perfetto.dev).
    Chrome,
}

fn main() -> ExitCode {
    let args = Args::parse();
    default_sigpipe(&args.command);
    match args.command {
        Command::Run {
            limit,
            trace,
            observe,
            log,
            group,
            state_dir,
            driver,
            stand_in,
            stacks,
            command,
        } => {
            let settings = run::Settings {
                limit,
                trace,
                observe,
                log,
                group,
                state_dir,
                driver,
                stacks,
            };
            run_command(settings, stand_in, &command)
        }
        Command::Cdi {
            name,
            library,
            policy,
            state_dir,
            ld_so_preload,
        } => cdi_command(&name, library, policy, state_dir, ld_so_preload),
        Command::Report {
            traces,
            json,
            skip_bad,
            debug_dir,
        } => exit(report::run(
            &traces,
            json,
            &read::Options::new(skip_bad),
            &debug_dir,
        )),
        Command::Export {
            format: Format::Chrome,
            traces,
            output,
            skip_bad,
        } => exit(export::chrome(
            &traces,
            &output,
            &read::Options::new(skip_bad),
        )),
        Command::Plot {
            traces,
            output,
            skip_bad,
        } => exit(plot::svg(&traces, &output, &read::Options::new(skip_bad))),
        Command::Set {
            name,
            limit,
            remove,
            state_dir: dir,
        } => set_command(&name, limit.as_deref(), remove, &state_dir(dir)),
        Command::Top {
            once,
            json,
            interval,
            state_dir: dir,
        } => top_command(once, json, interval, &state_dir(dir)),
        Command::Metrics {
            listen,
            state_dir: dir,
        } => metrics_command(listen, &state_dir(dir)),
    }
}

/// A reader that goes away (`cuquota metrics | head`) ends the output quietly, as with
/// other Unix tools, rather than a panic on the failed write; `run`'s command starts with
/// the default too, as a shell would give it. Not the metrics server: a scraper that hangs
/// up must cost it one response, not its life.
fn default_sigpipe(command: &Command) {
    let serving = matches!(
        command,
        Command::Metrics {
            listen: Some(_),
            ..
        }
    );
    if !serving {
        // SAFETY: setting a signal's disposition to the default, before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
}

/// A command's end: its error (exit 1) said on one line, whatever it quotes of a trace or
/// the state directory.
fn exit(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cuquota: {}", cuquota_format::escape::text(&e));
            ExitCode::FAILURE
        }
    }
}

/// A usage error: said, exit 2 (as clap's are).
fn usage_error(said: impl std::fmt::Display) -> ExitCode {
    eprintln!("cuquota: {said}");
    ExitCode::from(2)
}

/// Prints a check's notes, or its error (a usage error).
fn checked(checked: Result<Vec<String>, String>) -> Result<(), ExitCode> {
    let notes = checked.map_err(usage_error)?;
    for note in notes {
        eprintln!("cuquota: note: {note}");
    }
    Ok(())
}

/// `cuquota run`: checks the settings, then becomes COMMAND; returns only if it could not.
fn run_command(
    mut settings: run::Settings,
    stand_in: bool,
    command: &[std::ffi::OsString],
) -> ExitCode {
    if stand_in {
        match run::stand_in_dir() {
            Ok(dir) => settings.driver = Some(dir),
            Err(e) => return usage_error(format!("--stand-in: {e}")),
        }
    }
    let inherited = preflight::inherited();
    let env_limit = inherited
        .iter()
        .find(|(k, _)| k == "CUQUOTA_LIMIT")
        .map(|(_, v)| v.as_str());
    let notes = settings.check().and_then(|mut notes| {
        notes.extend(preflight::variables(&settings, &inherited)?);
        notes.extend(settings.check_intent(command, env_limit)?);
        Ok(notes)
    });
    if let Err(code) = checked(notes) {
        return code;
    }
    run::exec(&settings, command)
}

/// `cuquota cdi`: the paths checked, then the spec printed as JSON.
fn cdi_command(
    name: &str,
    library: Option<PathBuf>,
    policy: PathBuf,
    state_dir: PathBuf,
    ld_so_preload: Option<PathBuf>,
) -> ExitCode {
    let library = match library.map_or_else(run::find_library, Ok) {
        Ok(library) => library,
        Err(e) => return usage_error(format!("--library: {e}")),
    };
    let mut paths = cdi::Paths {
        library,
        policy,
        state_dir,
        ld_so_preload,
    };
    if let Err(code) = checked(paths.check(name)) {
        return code;
    }
    let spec = cdi::spec(&cdi::Options {
        name,
        library: &paths.library,
        policy: &paths.policy,
        state_dir: &paths.state_dir,
        ld_so_preload: paths.ld_so_preload.as_deref(),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&spec).unwrap_or_default()
    );
    ExitCode::SUCCESS
}

/// `cuquota set`: a bad name or limit is a usage error, as clap's own and `run`'s are;
/// what the group's state refuses (members live, a file that cannot be used) exits 1.
fn set_command(name: &str, limit: Option<&str>, remove: bool, dir: &Path) -> ExitCode {
    let usage = cuquota_state::group::check_name(name)
        .map_err(|why| format!("group {name:?}: {why}"))
        .and_then(|()| limit.map(set::parse).transpose());
    let done = match usage {
        Err(e) => return usage_error(e),
        Ok(Some(wanted)) if !remove => set::run(name, wanted, dir),
        Ok(_) => set::remove(name, dir),
    };
    exit(done.map(|said| println!("{said}")))
}

/// `cuquota top`.
fn top_command(once: bool, json: bool, interval: f64, dir: &Path) -> ExitCode {
    if !(interval.is_finite() && (0.1..=3600.0).contains(&interval)) {
        return usage_error(format!("--interval {interval}: give 0.1 to 3600 seconds"));
    }
    let every = std::time::Duration::from_secs_f64(interval);
    exit(top::run(dir, once, json, every))
}

/// `cuquota metrics`: served at `listen`, or printed once.
fn metrics_command(listen: Option<String>, dir: &Path) -> ExitCode {
    let Some(addr) = listen else {
        print!("{}", metrics::exposition(&top::model::read(dir)));
        return ExitCode::SUCCESS;
    };
    // An address that is no address is a usage error, as clap's are; one that cannot be
    // bound (in use, not ours) is not (exit 1).
    if let Err(e) = std::net::ToSocketAddrs::to_socket_addrs(addr.as_str()) {
        let addr = cuquota_format::settings::printable(&addr);
        return usage_error(format!(
            "--listen {addr}: {e} (give HOST:PORT, e.g. 127.0.0.1:9400)"
        ));
    }
    exit(metrics::serve(&addr, dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument and option of every subcommand has a line in its `--help`.
    #[test]
    fn every_argument_has_help() {
        let mut cli = Args::command();
        cli.build();
        let mut missing = Vec::new();
        for sub in cli.get_subcommands() {
            assert!(sub.get_about().is_some(), "{} has no about", sub.get_name());
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if id != "help" && id != "version" && arg.get_help().is_none() {
                    missing.push(format!("{} {id}", sub.get_name()));
                }
            }
        }
        assert!(missing.is_empty(), "no help for: {missing:?}");
    }

    #[test]
    fn the_command_needs_no_double_dash() {
        let args =
            Args::try_parse_from(["cuquota", "run", "--limit", "1G", "python", "-c", "x"]).unwrap();
        let Command::Run { limit, command, .. } = args.command else {
            panic!("not run");
        };
        assert_eq!(limit.as_deref(), Some("1G"));
        assert_eq!(command, ["python", "-c", "x"]);
        let args = Args::try_parse_from(["cuquota", "run", "--", "ls", "--limit"]).unwrap();
        let Command::Run { limit, command, .. } = args.command else {
            panic!("not run");
        };
        assert_eq!(
            (limit, command),
            (None, vec!["ls".into(), "--limit".into()])
        );
    }
}
