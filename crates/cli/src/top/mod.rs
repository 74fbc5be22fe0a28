//! `cuquota top`: every governed process and group on the machine, per GPU, live.
//!
//! - [`model`]: one snapshot of the state directory (also `--json` and the metrics' source);
//! - [`frame`]: a frame as a pure function of a snapshot and a width;
//! - [`live`]: the terminal loop (keys, redraws);
//! - [`gpu_memory`]: a GPU's memory from NVML, where no process recorded it.

pub mod frame;
mod gpu_memory;
mod live;
pub mod model;

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

/// The width to lay a printed frame out for: the terminal's, else `COLUMNS`, else 80.
fn print_width() -> usize {
    if std::io::stdout().is_terminal() {
        if let Ok((w, _)) = ratatui::crossterm::terminal::size() {
            return usize::from(w);
        }
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(80)
}

/// `cuquota top [--once] [--json]`.
pub fn run(state_dir: &Path, once: bool, json: bool, interval: Duration) -> Result<(), String> {
    if json {
        let snap = model::read(state_dir);
        let text = serde_json::to_string_pretty(&snap).map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(());
    }
    if once || !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        let snap = model::read(state_dir);
        let view = frame::View {
            width: print_width(),
            sort: frame::Sort::InUse,
        };
        print!("{}", frame::plain(&frame::render(&snap, &view)));
        return Ok(());
    }
    live::run(state_dir, interval)
}
