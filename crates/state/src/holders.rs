//! Who holds a GPU's quota when a request is refused: in a group, each other living member
//! with its command, container and parts, as the refused process's log line, its trace's
//! `refused` event and `cuquota report` name them. Read from the group's slots (who, and how
//! much) and the registry files (what each one is), never under a lock.

use crate::group::MemberShare;
use crate::identity::container_of;
use crate::registry::ProcessSnapshot;
pub use cuquota_format::holder::{short_command, Holder};

/// The holders among `members` (a group's living members on a GPU other than the refused
/// process), each with what its registry file among `processes` says of it on GPU `uuid`.
/// A member is matched by its PID, its outermost PID, its PID namespace (PIDs repeat across
/// containers), its group and its user: the file must be owned by the user its slot records,
/// so that a file another user wrote to name it is never believed. One whose file cannot be
/// found is named by its PIDs and share alone. In the order given (most first).
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
                    && p.identity.pid_ns == m.pid_ns
                    && p.group.as_deref() == Some(group)
                    && p.owner == m.uid
            });
            let parts = (process.and_then(|p| p.devices.iter().find(|d| d.uuid == uuid)))
                .map(|d| {
                    (d.usage.parts.iter())
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
    use crate::registry::{DeviceSnapshot, Usage};
    use cuquota_format::part::{Part, PerPart};

    fn process(pid: u32, pid_ns: u64, group: &str, pool_cache: u64) -> ProcessSnapshot {
        let mut parts = PerPart::default();
        parts[Part::PoolCache] = pool_cache;
        ProcessSnapshot {
            file: "/x".into(),
            owner: 1000,
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
                usage: Usage {
                    in_use: 700,
                    held: 700,
                    peak: 700,
                    allocations: 1,
                    parts,
                    ..Usage::default()
                },
            }],
            last_refusal: None,
            identity: Identity {
                outer_pid: pid,
                pid_ns,
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
                outer_pid: 1,
                pid_ns: 11,
                uid: 1000,
                charged: 700,
            },
            MemberShare {
                pid: 1,
                outer_pid: 1,
                pid_ns: 12,
                uid: 1000,
                charged: 100,
            },
        ];
        // PID-1 processes, each in a PID namespace of its own (containers with their own
        // /proc): the first member's file is the second; the one in the second member's
        // namespace is another group's.
        let processes = [process(1, 12, "other", 0), process(1, 11, "svc", 500)];
        let h = holders(&members, &processes, "svc", [7; 16]);
        assert_eq!(h[0].command, "python3 serve.py --port 8080");
        assert_eq!(h[0].container.as_deref(), Some("abababababab"));
        assert_eq!((h[0].part(Part::PoolCache), h[0].allocations()), (500, 200));
        assert_eq!((h[1].command.as_str(), h[1].in_use), ("", 100));
        // A file another user wrote to pass for the first member (its PIDs, namespace and
        // group) is not believed: the member is named by its slot alone.
        let mut forged = process(1, 11, "svc", 0);
        forged.owner = 1001;
        forged.argv = "cryptominer --wallet eve".into();
        let h = holders(&members[..1], &[forged.clone()], "svc", [7; 16]);
        assert_eq!(
            (h[0].command.as_str(), h[0].container.as_deref()),
            ("", None)
        );
        assert_eq!((h[0].pid, h[0].in_use), (1, 700));
        // Beside the real one, listed first or last, the real one is named.
        let real = process(1, 11, "svc", 500);
        for list in [[forged.clone(), real.clone()], [real, forged]] {
            let h = holders(&members[..1], &list, "svc", [7; 16]);
            assert_eq!(h[0].command, "python3 serve.py --port 8080");
        }
        let text = serde_json::to_string(&h[0]).unwrap();
        assert_eq!(serde_json::from_str::<Holder>(&text).unwrap(), h[0]);
    }
}
