//! A holder of a group's quota on one GPU as the trace's `refused` lines name it (the
//! `holders` of a refusal by a group's quota), and how a holder's command is shortened. Who
//! the holders are is worked out from the shared state (`cuquota-state`'s `holders`).

use crate::escape;
use crate::part::Part;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One holder of a group's quota on one GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Its PID as it sees itself.
    pub pid: u32,
    /// Its PID in the outermost PID namespace its /proc showed (the host's where it shared
    /// the host's /proc): what NVML lists.
    pub outer_pid: u32,
    /// Its command line, shortened (empty: its registry file could not be read).
    pub command: String,
    /// The container it runs in, from its cgroup (short id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// What it holds or has reserved of the quota there.
    pub in_use: u64,
    /// Its parts besides allocations there, by their trace names (empty: all allocations,
    /// or unknown).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parts: BTreeMap<String, u64>,
}

impl Holder {
    /// Its part `part`'s bytes (0 when not known).
    pub fn part(&self, part: Part) -> u64 {
        self.parts.get(part.name()).copied().unwrap_or(0)
    }

    /// Its PID as a viewer should name it: the outermost one where it was recorded.
    pub fn shown_pid(&self) -> u32 {
        match self.outer_pid {
            0 => self.pid,
            outer => outer,
        }
    }

    /// `pid 4242`, `pid 4242 (1 in its namespace)`, then ` [container]` and ` (command)`
    /// where known: who it is, in the words of the refusal line and the report. The
    /// container and command came from the holder's own files: shown escaped, so that
    /// they cannot break the line or drive the reader's terminal.
    pub fn who(&self) -> String {
        let mut who = format!("pid {}", self.shown_pid());
        if self.shown_pid() != self.pid {
            who += &format!(" ({} in its namespace)", self.pid);
        }
        if let Some(c) = &self.container {
            who += &format!(" [{}]", escape::text(c));
        }
        if !self.command.is_empty() {
            who += &format!(" ({})", escape::text(&self.command));
        }
        who
    }

    /// What it holds as allocations: its in-use less its parts.
    pub fn allocations(&self) -> u64 {
        let parts: u64 = self.parts.values().sum();
        self.in_use.saturating_sub(parts)
    }
}

/// The longest command a holder keeps.
const COMMAND_CHARS: usize = 48;

/// `argv` with the program's directory left out, cut to [`COMMAND_CHARS`].
pub fn short_command(argv: &str) -> String {
    let (program, args) = argv.split_once(' ').unwrap_or((argv, ""));
    let program = program.rsplit('/').next().unwrap_or(program);
    let whole = format!("{program} {args}").trim_end().to_string();
    match whole.char_indices().nth(COMMAND_CHARS) {
        Some((at, _)) => format!("{}…", &whole[..at]),
        None => whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_names_the_pid_a_viewer_sees_first() {
        let mut h = Holder {
            pid: 1,
            outer_pid: 4242,
            command: "serve".into(),
            container: Some("abababababab".into()),
            ..Holder::default()
        };
        assert_eq!(
            h.who(),
            "pid 4242 (1 in its namespace) [abababababab] (serve)"
        );
        (h.outer_pid, h.container, h.command) = (0, None, String::new());
        assert_eq!(h.who(), "pid 1");
    }

    #[test]
    fn who_shows_a_hostile_command_and_container_escaped() {
        let h = Holder {
            pid: 7,
            command: "x\u{1b}]0;owned\u{7}\ncuquota[1]: GPU 0 summary: all fine".into(),
            container: Some("ab\u{9b}2J".into()),
            ..Holder::default()
        };
        assert_eq!(
            h.who(),
            "pid 7 [ab\\u{9b}2J] (x\\x1b]0;owned\\x07\\ncuquota[1]: GPU 0 summary: all fine)"
        );
    }

    #[test]
    fn commands_are_shortened() {
        assert_eq!(short_command("/opt/x/bin/trainer"), "trainer");
        let long = format!("python {}", "a".repeat(100));
        let short = short_command(&long);
        assert_eq!(short.chars().count(), COMMAND_CHARS + 1);
        assert!(short.ends_with('…'));
    }
}
