//! `cuquota`: run a command under the interposer, and read the traces it writes.
//!
//! This crate never links the hooks: it depends on `cuquota-format` (the trace schema, the
//! reader, sizes, the episode rule), not on the interposer.

mod export;
mod plot;
mod report;
mod run;
mod timeline;

use clap::{Parser, Subcommand, ValueEnum};
use cuquota_format::read;
use std::path::PathBuf;
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
    Run {
        /// Quota, e.g. 6GiB, 75%, or 0:6GiB,1:50% (CUQUOTA_LIMIT).
        #[arg(long, value_name = "SPEC")]
        limit: Option<String>,
        /// Write a trace (CUQUOTA_TRACE; %p pid, %h host, %r rank, %t start time, %% a %).
        #[arg(long, value_name = "PATH")]
        trace: Option<String>,
        /// Refuse nothing, only log what would have been refused (CUQUOTA_MODE=observe).
        #[arg(long)]
        observe: bool,
        /// Write cuquota's log lines to PATH, or `off` (CUQUOTA_LOG).
        #[arg(long, value_name = "PATH")]
        log: Option<String>,
        /// The command and its arguments.
        #[arg(required = true, last = true, value_name = "COMMAND")]
        command: Vec<std::ffi::OsString>,
    },
    /// Summarise traces: peaks, a chart of memory in use, back-off episodes, largest and
    /// leaked allocations, API mix; several files (ranks, hosts) make one job view.
    Report {
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<PathBuf>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
        /// Warn about malformed lines and go on, instead of stopping at the first.
        #[arg(long)]
        skip_bad: bool,
    },
    /// Convert traces to another format (Chrome Trace Event JSON, which Perfetto opens).
    Export {
        #[arg(long, value_enum, default_value_t = Format::Chrome)]
        format: Format,
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<PathBuf>,
        /// Output file (`-` for stdout).
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        #[arg(long)]
        skip_bad: bool,
    },
    /// Draw memory in use over time per process and device as an SVG chart, with the quota
    /// and the refusals.
    Plot {
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<PathBuf>,
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        #[arg(long)]
        skip_bad: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// Chrome Trace Event JSON (chrome://tracing, ui.perfetto.dev).
    Chrome,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Run {
            limit,
            trace,
            observe,
            log,
            command,
        } => {
            let settings = run::Settings {
                limit,
                trace,
                observe,
                log,
            };
            // Only returns if the command could not be started.
            return run::exec(&settings, &command);
        }
        Command::Report {
            traces,
            json,
            skip_bad,
        } => report::run(&traces, json, &read::Options::new(skip_bad)),
        Command::Export {
            format: Format::Chrome,
            traces,
            output,
            skip_bad,
        } => export::chrome(&traces, &output, &read::Options::new(skip_bad)),
        Command::Plot {
            traces,
            output,
            skip_bad,
        } => plot::svg(&traces, &output, &read::Options::new(skip_bad)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cuquota: {e}");
            ExitCode::FAILURE
        }
    }
}
