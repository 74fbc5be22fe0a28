//! Who holds a GPU's quota when a request is refused: in a group, each other living member
//! with its command, container and parts, as the refused process's log line, its trace's
//! `refused` event and `cuquota report` name them. Read from the group's slots (who, and how
//! much) and the registry files (what each one is), never under a lock.

use crate::group::MemberShare;
use crate::identity::container_of;
use crate::part::Part;
use crate::registry::ProcessSnapshot;
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

/// The holders among `members` (a group's living members on a GPU other than the refused
/// process), each with what its registry file among `processes` says of it on GPU `uuid`.
/// A member is matched by its PID, its outermost PID and its group; one whose file cannot
/// be found is named by its PIDs and share alone. In the order given (most first).
pub fn holders(
    members: &[MemberShare],
    processes: &[ProcessSnapshot],
    group: &str,
    uuid: [u8; 16],
) -> Vec<Holder> {
    members
        .iter()
        .map(|m| {
            let process = processes.iter().find(|p| {
                p.pid == m.pid
                    && p.identity.outer_pid == m.outer_pid
                    && p.group.as_deref() == Some(group)
            });
            let parts = (process.and_then(|p| p.devices.iter().find(|d| d.uuid == uuid)))
                .map(|d| {
                    (d.parts.iter())
                        .filter(|(_, b)| **b > 0)
                        .map(|(part, b)| (part.name().to_string(), *b))
                        .collect()
                })
                .unwrap_or_default();
            Holder {
                pid: m.pid,
                outer_pid: m.outer_pid,
                command: process.map_or(String::new(), |p| short_command(&p.argv)),
                container: process.and_then(|p| container_of(&p.identity.cgroup)),
                in_use: m.charged,
                parts,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identity;
    use crate::part::PerPart;
    use crate::registry::DeviceSnapshot;

    fn process(pid: u32, outer: u32, group: &str, pool_cache: u64) -> ProcessSnapshot {
        let mut parts = PerPart::default();
        parts[Part::PoolCache] = pool_cache;
        ProcessSnapshot {
            file: "/x".into(),
            pid,
            started_unix_ns: 1,
            host: "h".into(),
            argv: "/usr/bin/python3 serve.py --port 8080".into(),
            group: Some(group.into()),
            observe: false,
            allocations_only: false,
            devices: vec![DeviceSnapshot {
                ordinal: 0,
                uuid: [7; 16],
                name: String::new(),
                total: 0,
                limit: None,
                in_use: 700,
                held: 700,
                peak: 700,
                allocations: 1,
                refusals: 0,
                parts,
                part_peaks: PerPart::default(),
                trims: 0,
                trimmed: 0,
            }],
            last_refusal: None,
            identity: Identity {
                outer_pid: outer,
                pid_ns: 1,
                cgroup: format!("/libpod_parent/libpod-{}", "ab".repeat(32)),
            },
            host_pid: None,
        }
    }

    #[test]
    fn members_are_named_from_their_registry_files() {
        let members = [
            MemberShare {
                pid: 1,
                outer_pid: 4242,
                charged: 700,
            },
            MemberShare {
                pid: 1,
                outer_pid: 4343,
                charged: 100,
            },
        ];
        // Two PID-1 processes; the second's file is another group's.
        let processes = [process(1, 4242, "svc", 500), process(1, 4343, "other", 0)];
        let h = holders(&members, &processes, "svc", [7; 16]);
        assert_eq!(h[0].command, "python3 serve.py --port 8080");
        assert_eq!(h[0].container.as_deref(), Some("abababababab"));
        assert_eq!((h[0].part(Part::PoolCache), h[0].allocations()), (500, 200));
        assert_eq!((h[1].command.as_str(), h[1].in_use), ("", 100));
        let text = serde_json::to_string(&h[0]).unwrap();
        assert_eq!(serde_json::from_str::<Holder>(&text).unwrap(), h[0]);
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
