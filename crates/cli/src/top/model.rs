//! What `cuquota top` and `cuquota metrics` show, as one snapshot of the state directory:
//! per GPU (by UUID), each group with its members and each ungrouped process. Built by a
//! pure function of what the registry and the group files say ([`build`]), so the frame,
//! the JSON and the metrics are all tested on synthetic figures.

use cuquota_format::part::PerPart;
use cuquota_format::settings::format_uuid;
use cuquota_state::group::{self, NO_LIMIT, UNSET};
use cuquota_state::registry::{self, DeviceSnapshot, ProcessSnapshot};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The whole machine's governed memory at one moment (`cuquota top --json`).
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    /// When it was read (wall clock, ns since the epoch).
    pub taken_unix_ns: u64,
    pub state_dir: String,
    pub gpus: Vec<Gpu>,
    /// Governed processes that have used no GPU yet.
    pub idle_processes: Vec<Process>,
    /// Living governed processes, and groups with a living member, in all.
    pub process_count: usize,
    pub group_count: usize,
    /// Groups whose file is there but with no living member: nothing of theirs is held, so
    /// they are listed under no GPU (`cuquota set NAME --remove` removes one).
    pub idle_groups: Vec<String>,
    /// A line per state file skipped (another layout, half-created, not cuquota's).
    pub notes: Vec<String>,
}

/// One GPU, by UUID, as its processes and groups know it.
#[derive(Clone, Debug, Serialize)]
pub struct Gpu {
    pub uuid: String,
    /// The lowest ordinal a process sees it at (None: no living process uses it).
    pub index: Option<u32>,
    /// As a process's driver names it ("" when no living process uses it).
    pub name: String,
    /// Its real memory (0: unknown).
    pub total: u64,
    pub groups: Vec<GroupRow>,
    /// The processes in no group (or in a group whose state could not be read).
    pub processes: Vec<Process>,
}

/// The footprint by part: allocations, then the others (`pool_cache`, `graph`, `context`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ByPart {
    pub allocations: u64,
    #[serde(flatten)]
    pub others: PerPart<u64>,
}

impl ByPart {
    fn add(&mut self, o: &ByPart) {
        self.allocations += o.allocations;
        for (a, b) in self.others.0.iter_mut().zip(o.others.0) {
            *a += b;
        }
    }
}

/// A group's entry for one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct GroupRow {
    pub name: String,
    /// Bytes; None: no limit (counted and shown, nothing refused).
    pub limit: Option<u64>,
    pub in_use: u64,
    pub peak: u64,
    pub refusals: u64,
    /// Its living members' parts on this GPU, added up (None: no member is listed, e.g.
    /// members of a cuquota that does not register processes).
    pub parts: Option<ByPart>,
    /// Living members of the group, whatever GPU they use (dead ones count for nothing).
    pub members: usize,
    /// The members that use this GPU.
    pub processes: Vec<Process>,
    /// The latest of its members' last refusals on this GPU.
    pub last_refusal: Option<LastRefusal>,
}

/// One process (on one GPU, when under a GPU).
#[derive(Clone, Debug, Serialize)]
pub struct Process {
    /// Its PID as it sees itself (in a container: the container's).
    pub pid: u32,
    /// Its PID as this viewer sees it (None: the viewer cannot tell, e.g. another user's
    /// process in another PID namespace).
    pub host_pid: Option<u32>,
    /// The container it runs in, from its cgroup (the short id; None: none).
    pub container: Option<String>,
    /// Its cgroup path.
    pub cgroup: String,
    pub started_unix_ns: u64,
    pub host: String,
    pub argv: String,
    pub group: Option<String>,
    /// `enforce` or `observe`.
    pub mode: &'static str,
    /// `footprint` or `allocations`: what its quota counts.
    pub counts: &'static str,
    /// The GPU's ordinal as this process sees it.
    pub ordinal: Option<u32>,
    /// Its own limit in bytes; None: unlimited, or a group member (the group's applies).
    pub limit: Option<u64>,
    pub in_use: u64,
    pub peak: u64,
    pub allocations: u64,
    pub refusals: u64,
    pub parts: ByPart,
    pub trims: u64,
    pub trimmed: u64,
    /// Its last refusal, when it was on this GPU.
    pub last_refusal: Option<LastRefusal>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LastRefusal {
    pub unix_ns: u64,
    /// The GPU's ordinal as the refused process sees it.
    pub ordinal: u32,
    /// The refusal's log line.
    pub line: String,
}

/// Reads the state directory: every living process and every group. Read-only.
pub fn read(state_dir: &Path) -> Snapshot {
    read_with(state_dir, Path::new("/proc"))
}

/// As [`read`], with the processes seen through `proc`. A registry file that names a
/// process the viewer sees, whose users do not include the file's owner, was written by
/// someone else to pass for it: left out, and counted in a note.
fn read_with(state_dir: &Path, proc: &Path) -> Snapshot {
    let mut scan = registry::scan(state_dir);
    let mut view = cuquota_state::identity::ProcView::new(proc);
    let mut forged = 0;
    scan.processes.retain_mut(|p| {
        p.host_pid = view.host_pid(p.pid, &p.identity);
        let believed = p
            .host_pid
            .is_none_or(|pid| view.may_speak_for(pid, p.owner));
        forged += usize::from(!believed);
        believed
    });
    let (groups, group_notes) = group::GroupFile::read_all(state_dir);
    let mut notes = scan.notes;
    if forged > 0 {
        notes.push(format!(
            "{forged} registry file{} left out: each names a process of another user",
            if forged == 1 { "" } else { "s" }
        ));
    }
    notes.extend(group_notes);
    let mut snapshot = build(
        state_dir,
        scan.processes,
        groups,
        notes,
        cuquota_state::shared::unix_ns(),
    );
    for gpu in snapshot.gpus.iter_mut().filter(|g| g.total == 0) {
        gpu.total = super::gpu_memory::total(&gpu.uuid).unwrap_or(0);
    }
    snapshot
}

fn process(p: &ProcessSnapshot, d: Option<&DeviceSnapshot>) -> Process {
    let counted = !p.allocations_only;
    let (parts, last_refusal) = match d {
        Some(d) => {
            let allocations = if counted {
                d.usage.allocations_bytes()
            } else {
                d.usage.in_use
            };
            (
                ByPart {
                    allocations,
                    others: d.usage.parts,
                },
                p.last_refusal
                    .as_ref()
                    .filter(|r| r.1 == d.ordinal)
                    .map(|(t, o, line)| LastRefusal {
                        unix_ns: *t,
                        ordinal: *o,
                        line: line.clone(),
                    }),
            )
        }
        None => (ByPart::default(), None),
    };
    Process {
        pid: p.pid,
        host_pid: p.host_pid,
        container: cuquota_state::identity::container_of(&p.identity.cgroup),
        cgroup: p.identity.cgroup.clone(),
        started_unix_ns: p.started_unix_ns,
        host: p.host.clone(),
        argv: p.argv.clone(),
        group: p.group.clone(),
        mode: if p.observe { "observe" } else { "enforce" },
        counts: if p.allocations_only {
            "allocations"
        } else {
            "footprint"
        },
        ordinal: d.map(|d| d.ordinal),
        limit: d.and_then(|d| d.usage.limit),
        in_use: d.map_or(0, |d| d.usage.in_use),
        peak: d.map_or(0, |d| d.usage.peak),
        allocations: d.map_or(0, |d| d.usage.allocations),
        refusals: d.map_or(0, |d| d.usage.refusals),
        parts,
        trims: d.map_or(0, |d| d.usage.trims),
        trimmed: d.map_or(0, |d| d.usage.trimmed),
        last_refusal,
    }
}

fn group_limit(limit: u64) -> Option<u64> {
    (limit != NO_LIMIT && limit != UNSET).then_some(limit)
}

fn entry(gpus: &mut BTreeMap<[u8; 16], Gpu>, uuid: [u8; 16]) -> &mut Gpu {
    gpus.entry(uuid).or_insert_with(|| Gpu {
        uuid: format_uuid(&uuid),
        index: None,
        name: String::new(),
        total: 0,
        groups: Vec::new(),
        processes: Vec::new(),
    })
}

/// Puts processes and groups under their GPUs. Pure: `now` is when they were read.
pub fn build(
    state_dir: &Path,
    processes: Vec<ProcessSnapshot>,
    groups: Vec<group::GroupSnapshot>,
    notes: Vec<String>,
    now: u64,
) -> Snapshot {
    let mut gpus: BTreeMap<[u8; 16], Gpu> = BTreeMap::new();
    let (groups, idle): (Vec<_>, Vec<_>) = groups.into_iter().partition(|g| !g.members.is_empty());
    let known: BTreeMap<&str, &group::GroupSnapshot> =
        groups.iter().map(|g| (g.name.as_str(), g)).collect();
    for g in &groups {
        for d in &g.devices {
            let gpu = entry(&mut gpus, d.uuid);
            if gpu.total == 0 {
                gpu.total = d.total;
            }
            gpu.groups.push(GroupRow {
                name: g.name.clone(),
                limit: group_limit(d.limit),
                in_use: d.in_use,
                peak: d.peak,
                refusals: d.refusals,
                parts: None,
                members: g.members.len(),
                processes: Vec::new(),
                last_refusal: None,
            });
        }
    }
    let mut idle_processes = Vec::new();
    for p in &processes {
        if p.devices.is_empty() {
            idle_processes.push(process(p, None));
            continue;
        }
        for d in &p.devices {
            let gpu = entry(&mut gpus, d.uuid);
            gpu.index = Some(gpu.index.map_or(d.ordinal, |i| i.min(d.ordinal)));
            if gpu.name.is_empty() {
                gpu.name = d.name.clone();
            }
            if d.total > 0 {
                gpu.total = d.total;
            }
            let row = process(p, Some(d));
            let group = p
                .group
                .as_deref()
                .filter(|g| known.contains_key(g))
                .and_then(|g| gpu.groups.iter_mut().find(|r| r.name == g));
            match group {
                Some(g) => {
                    g.parts.get_or_insert_with(ByPart::default).add(&row.parts);
                    if row.last_refusal.as_ref().map(|r| r.unix_ns)
                        > g.last_refusal.as_ref().map(|r| r.unix_ns)
                    {
                        g.last_refusal = row.last_refusal.clone();
                    }
                    g.processes.push(row);
                }
                None => gpu.processes.push(row),
            }
        }
    }
    let mut gpus: Vec<Gpu> = gpus.into_values().collect();
    gpus.sort_by(|a, b| {
        (a.index.is_none(), a.index, &a.uuid).cmp(&(b.index.is_none(), b.index, &b.uuid))
    });
    Snapshot {
        taken_unix_ns: now,
        state_dir: state_dir.display().to_string(),
        gpus,
        idle_processes,
        process_count: processes.len(),
        group_count: groups.len(),
        idle_groups: idle.into_iter().map(|g| g.name).collect(),
        notes,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cuquota_format::part::Part;

    pub(crate) fn device(ordinal: u32, uuid: u8, in_use: u64) -> DeviceSnapshot {
        DeviceSnapshot {
            ordinal,
            uuid: [uuid; 16],
            name: "Stand-in GPU".into(),
            total: 8 << 30,
            usage: registry::Usage {
                in_use,
                held: in_use,
                peak: in_use,
                allocations: 1,
                ..registry::Usage::default()
            },
        }
    }

    pub(crate) fn proc(
        pid: u32,
        group: Option<&str>,
        devices: Vec<DeviceSnapshot>,
    ) -> ProcessSnapshot {
        ProcessSnapshot {
            file: format!("/x/{pid}").into(),
            owner: 0,
            pid,
            started_unix_ns: 1,
            host: "h".into(),
            argv: format!("python train.py --rank {pid}"),
            group: group.map(str::to_string),
            observe: false,
            allocations_only: false,
            devices,
            last_refusal: None,
            identity: Default::default(),
            host_pid: Some(pid),
        }
    }

    pub(crate) fn group(
        name: &str,
        uuid: u8,
        limit: u64,
        in_use: u64,
        members: usize,
    ) -> group::GroupSnapshot {
        group::GroupSnapshot {
            name: name.into(),
            default_limit: limit,
            devices: vec![group::GroupGpuSnapshot {
                index: 0,
                uuid: [uuid; 16],
                total: 8 << 30,
                limit,
                in_use,
                peak: in_use,
                refusals: 2,
            }],
            members: (0..members as u64).collect(),
        }
    }

    /// Two GPUs; a group of two on GPU 0 (one member also on GPU 1); an ungrouped process.
    pub(crate) fn sample() -> Snapshot {
        let mut a = device(0, 1, 300 << 20);
        a.usage.parts[Part::Context] = 100 << 20;
        let mut p1 = proc(101, Some("svc"), vec![a, device(1, 2, 64 << 20)]);
        p1.last_refusal = Some((5_000_000_000, 0, "GPU 0 refused 1.00 GiB".into()));
        let p2 = proc(102, Some("svc"), vec![device(0, 1, 200 << 20)]);
        let mut own = device(0, 1, 100 << 20);
        own.usage.limit = Some(1 << 30);
        let p3 = proc(103, None, vec![own]);
        build(
            Path::new("/dev/shm/cuquota"),
            vec![p1, p2, p3, proc(104, None, vec![])],
            vec![group("svc", 1, 1 << 30, 500 << 20, 2)],
            vec!["x: skipped (layout 9)".into()],
            8_000_000_000,
        )
    }

    #[test]
    fn processes_go_under_their_gpu_and_group() {
        let s = sample();
        assert_eq!(s.gpus.len(), 2);
        let g0 = &s.gpus[0];
        assert_eq!((g0.index, g0.name.as_str()), (Some(0), "Stand-in GPU"));
        assert_eq!(g0.uuid, format_uuid(&[1; 16]));
        assert_eq!(g0.groups.len(), 1);
        let svc = &g0.groups[0];
        assert_eq!(svc.limit, Some(1 << 30));
        assert_eq!(svc.processes.len(), 2);
        let parts = svc.parts.unwrap();
        assert_eq!(parts.others[Part::Context], 100 << 20);
        assert_eq!(parts.allocations, 400 << 20);
        assert_eq!(
            svc.last_refusal.as_ref().unwrap().line,
            "GPU 0 refused 1.00 GiB"
        );
        assert_eq!(g0.processes.len(), 1);
        assert_eq!(g0.processes[0].limit, Some(1 << 30));
        // GPU 1 has no group entry of svc: its member is listed on its own there.
        assert_eq!(s.gpus[1].processes[0].pid, 101);
        assert!(s.gpus[1].processes[0].last_refusal.is_none());
        assert_eq!(s.idle_processes[0].pid, 104);
        assert_eq!((s.process_count, s.group_count), (4, 1));
    }

    #[test]
    fn the_json_names_its_fields() {
        let v = serde_json::to_value(sample()).unwrap();
        let svc = &v["gpus"][0]["groups"][0];
        assert_eq!(svc["limit"], 1u64 << 30);
        assert_eq!(svc["parts"]["context"], 100u64 << 20);
        assert_eq!(svc["parts"]["allocations"], 400u64 << 20);
        assert_eq!(svc["processes"][0]["mode"], "enforce");
        assert_eq!(v["gpus"][0]["processes"][0]["pid"], 103);
        assert!(v["gpus"][1]["index"] == 1);
    }

    /// Real state files: hundreds of registered processes, and files that must be skipped
    /// (another layout version, half-created, killed mid-registration, a truncated group).
    #[test]
    fn real_state_files_are_read_and_bad_ones_skipped() {
        use cuquota_state::registry::{ProcessFile, Registration};
        use cuquota_state::shared::SharedFile;
        use std::os::unix::fs::FileExt;
        let d = std::env::temp_dir().join(format!("cuquota-top-model-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let argv = vec!["python".to_string(), "serve.py".to_string()];
        let register = |pid: u32, group: Option<&'static str>| {
            let who = Registration {
                pid,
                started_unix_ns: 1,
                host: "h",
                argv: &argv,
                group,
                observe: false,
                allocations_only: false,
                identity: &cuquota_state::identity::Identity::own(),
            };
            ProcessFile::register(&d, &who).unwrap()
        };
        let mut files = Vec::new();
        for pid in 0..300 {
            let f = register(10_000 + pid, None);
            f.describe_device(0, [7; 16], 8 << 30, "Stand-in GPU");
            f.counters()[0]
                .in_use
                .store(u64::from(pid) << 20, std::sync::atomic::Ordering::Relaxed);
            files.push(f);
        }
        // A group with one living member (this process) and a limit on the GPU.
        let (g, _) = group::GroupFile::join(&d, "svc").unwrap();
        g.set_limit(Some([7; 16]), 1 << 30).unwrap();
        // Another layout version: a living process's file whose version word is the next one.
        let other = register(20_001, None);
        let path = d.join("processes/20001-1");
        let raw = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        raw.write_all_at(&(registry::LAYOUT_VERSION + 1).to_le_bytes(), 8)
            .unwrap();
        // Half-created: locked by its (living) creator, still empty.
        let half = SharedFile::open(&d.join("processes/20002-1"), true).unwrap();
        half.lock_wait(0).unwrap();
        // Killed mid-registration: sized, never published, its lock gone.
        std::fs::write(d.join("processes/20003-1"), vec![0u8; registry::FILE_SIZE]).unwrap();
        // A group file cut short.
        std::fs::write(group::group_path(&d, "cut"), b"short").unwrap();

        // A /proc that shows none of them (their pids are made up).
        let proc = d.join("no-proc");
        std::fs::create_dir(&proc).unwrap();
        let s = read_with(&d, &proc);
        assert_eq!(s.process_count, 300, "{:?}", s.notes);
        assert_eq!(s.gpus.len(), 1);
        assert_eq!(s.gpus[0].processes.len(), 300);
        assert_eq!(s.gpus[0].groups[0].limit, Some(1 << 30));
        assert_eq!(s.notes.len(), 2, "{:?}", s.notes);
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains(&format!("layout {}", registry::LAYOUT_VERSION + 1))),
            "{:?}",
            s.notes
        );
        assert!(s.notes.iter().any(|n| n.contains("cut")), "{:?}", s.notes);
        let frame = super::super::frame::render(
            &s,
            &super::super::frame::View {
                width: 80,
                sort: super::super::frame::Sort::InUse,
            },
        );
        assert!(frame.len() > 300);
        drop((other, half, files, g));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_group_with_no_living_member_is_listed_under_no_gpu() {
        let s = build(
            Path::new("/s"),
            vec![],
            vec![
                group("idle", 3, NO_LIMIT, 0, 0),
                group("svc", 3, NO_LIMIT, 0, 1),
            ],
            vec![],
            0,
        );
        assert_eq!(s.gpus.len(), 1);
        assert_eq!(s.gpus[0].index, None);
        let names: Vec<&str> = s.gpus[0].groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["svc"]);
        assert_eq!(s.gpus[0].groups[0].limit, None);
        assert_eq!(
            (s.group_count, s.idle_groups.clone()),
            (1, vec!["idle".to_string()])
        );
    }
}
