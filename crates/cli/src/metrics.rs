//! `cuquota metrics`: the same snapshot as `cuquota top`, in the Prometheus text exposition
//! format (0.0.4) — printed once (for node_exporter's textfile collector) or served at
//! `/metrics` (`--listen ADDR`, through tiny_http). Only reads the state directory.
//!
//! Per group and per ungrouped process, per GPU: limit, in use (and by part), peak,
//! refusals; per group its members. The names are listed in the README with the HAMi
//! vGPUmonitor metric each replaces, where there is one.

use crate::top::model::{self, Snapshot};
use std::fmt::Write;
use std::path::Path;

/// A metric family: its name, type and help line.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

const GPU_TOTAL: Family = Family {
    name: "cuquota_gpu_total_bytes",
    kind: "gauge",
    help: "The GPU's real memory, as a governed process's driver reports it.",
};
const GPU_INFO: Family = Family {
    name: "cuquota_gpu_info",
    kind: "gauge",
    help: "1 for each GPU a living governed process sees: its lowest CUDA ordinal and its name (the other series name a GPU by UUID alone, so their labels never change).",
};
const LIMIT: Family = Family {
    name: "cuquota_limit_bytes",
    kind: "gauge",
    help: "The quota of a group, or of a process in no group, on a GPU (no series: no limit).",
};
const IN_USE: Family = Family {
    name: "cuquota_in_use_bytes",
    kind: "gauge",
    help: "Memory charged to the quota on a GPU now (the footprint, or allocations where that is what the quota counts).",
};
const PART: Family = Family {
    name: "cuquota_in_use_part_bytes",
    kind: "gauge",
    help: "Memory in use on a GPU by part: allocations, pool_cache, graph, context (a group's: its living members' added up).",
};
const PEAK: Family = Family {
    name: "cuquota_peak_bytes",
    kind: "gauge",
    help: "The highest in use on a GPU since the process started, or since the group first used the GPU.",
};
const REFUSALS: Family = Family {
    name: "cuquota_refusals_total",
    kind: "counter",
    help: "Requests refused (or, in observe mode, that would have been) for the quota on a GPU.",
};
const MEMBER_IN_USE: Family = Family {
    name: "cuquota_member_in_use_bytes",
    kind: "gauge",
    help:
        "What one living member of a group holds on a GPU, within its group's cuquota_in_use_bytes.",
};
const MEMBERS: Family = Family {
    name: "cuquota_group_members",
    kind: "gauge",
    help: "Living processes in a group now (0: a group with no living member, whose other series are gone).",
};
const PROCESSES: Family = Family {
    name: "cuquota_processes",
    kind: "gauge",
    help: "Living governed processes on this machine (under this state directory).",
};
const SKIPPED: Family = Family {
    name: "cuquota_state_files_skipped",
    kind: "gauge",
    help:
        "State files not read at this scrape (another layout version, half-created, not cuquota's).",
};

/// A label value as the format escapes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// Samples collected per family, written family by family.
struct Exposition {
    samples: Vec<(&'static str, String, u64)>,
}

impl Exposition {
    fn add(&mut self, f: &Family, pairs: &[(&str, &str)], value: u64) {
        self.samples.push((f.name, labels(pairs), value));
    }

    fn text(&self, families: &[&Family]) -> String {
        let mut out = String::new();
        for f in families {
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
            for (name, labels, value) in &self.samples {
                if *name == f.name {
                    let _ = writeln!(out, "{name}{labels} {value}");
                }
            }
        }
        out
    }
}

/// One group's or process's figures on a GPU: (labels, limit, in use, parts, peak, refusals).
type Series<'a> = (
    Vec<(&'a str, &'a str)>,
    Option<u64>,
    u64,
    Option<&'a model::ByPart>,
    u64,
    u64,
);

/// A process's PID labels: `pid` as the exporter sees it (its own where the exporter cannot
/// tell), and `ns_pid`, the PID it sees itself, when that differs (a PID namespace).
struct ProcessLabels {
    pid: String,
    ns_pid: Option<String>,
}

impl ProcessLabels {
    fn of(p: &model::Process) -> ProcessLabels {
        let seen = p.host_pid.unwrap_or(p.pid);
        ProcessLabels {
            pid: seen.to_string(),
            ns_pid: (seen != p.pid || p.host_pid.is_none()).then(|| p.pid.to_string()),
        }
    }

    /// Appends `pid`, `ns_pid` where it differs, and `container` where there is one.
    fn push<'a>(&'a self, l: &mut Vec<(&'static str, &'a str)>, p: &'a model::Process) {
        l.push(("pid", &self.pid));
        if let Some(own) = &self.ns_pid {
            l.push(("ns_pid", own));
        }
        if let Some(c) = &p.container {
            l.push(("container", c));
        }
    }
}

/// The exposition of a snapshot.
pub fn exposition(s: &Snapshot) -> String {
    let mut e = Exposition {
        samples: Vec::new(),
    };
    for gpu in &s.gpus {
        let on_gpu = [("gpu_uuid", gpu.uuid.as_str())];
        if let Some(index) = gpu.index {
            let index = index.to_string();
            let l = [
                on_gpu[0],
                ("gpu_index", index.as_str()),
                ("gpu_name", gpu.name.as_str()),
            ];
            e.add(&GPU_INFO, &l, 1);
        }
        if gpu.total > 0 {
            e.add(&GPU_TOTAL, &on_gpu, gpu.total);
        }
        let mut rows: Vec<Series> = Vec::new();
        let ids: Vec<ProcessLabels> = gpu.processes.iter().map(ProcessLabels::of).collect();
        for g in &gpu.groups {
            let mut l = vec![("group", g.name.as_str())];
            l.extend(on_gpu);
            rows.push((l, g.limit, g.in_use, g.parts.as_ref(), g.peak, g.refusals));
            for p in &g.processes {
                let id = ProcessLabels::of(p);
                let mut l = vec![("group", g.name.as_str())];
                id.push(&mut l, p);
                l.extend(on_gpu);
                e.add(&MEMBER_IN_USE, &l, p.in_use);
            }
        }
        for (p, id) in gpu.processes.iter().zip(&ids) {
            let mut l = Vec::new();
            if let Some(g) = &p.group {
                l.push(("group", g.as_str()));
            }
            id.push(&mut l, p);
            l.extend(on_gpu);
            rows.push((l, p.limit, p.in_use, Some(&p.parts), p.peak, p.refusals));
        }
        for (l, limit, in_use, parts, peak, refusals) in rows {
            if let Some(limit) = limit {
                e.add(&LIMIT, &l, limit);
            }
            e.add(&IN_USE, &l, in_use);
            // A group's parts are known when its members are listed.
            if let Some(parts) = parts {
                let mut with_part = l.clone();
                with_part.push(("part", "allocations"));
                e.add(&PART, &with_part, parts.allocations);
                for (part, bytes) in parts.others.iter() {
                    let mut with_part = l.clone();
                    with_part.push(("part", part.name()));
                    e.add(&PART, &with_part, *bytes);
                }
            }
            e.add(&PEAK, &l, peak);
            e.add(&REFUSALS, &l, refusals);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for g in s.gpus.iter().flat_map(|gpu| &gpu.groups) {
        if seen.insert(g.name.as_str()) {
            e.add(&MEMBERS, &[("group", &g.name)], g.members as u64);
        }
    }
    for name in &s.idle_groups {
        e.add(&MEMBERS, &[("group", name)], 0);
    }
    e.add(&PROCESSES, &[], s.process_count as u64);
    e.add(&SKIPPED, &[], s.notes.len() as u64);
    e.text(&[
        &GPU_INFO,
        &GPU_TOTAL,
        &LIMIT,
        &IN_USE,
        &PART,
        &PEAK,
        &REFUSALS,
        &MEMBER_IN_USE,
        &MEMBERS,
        &PROCESSES,
        &SKIPPED,
    ])
}

/// The exposition's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the exposition at `http://ADDR/metrics` until killed, reading the state at every
/// scrape. Says where on stdout (the port, when ADDR asks for any).
pub fn serve(addr: &str, state_dir: &Path) -> Result<(), String> {
    let server = tiny_http::Server::http(addr).map_err(|e| format!("--listen {addr}: {e}"))?;
    let bound = server
        .server_addr()
        .to_ip()
        .map_or(addr.to_string(), |a| a.to_string());
    println!("cuquota: serving metrics at http://{bound}/metrics");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("").to_string();
        let (status, body, kind) = match path.as_str() {
            "/metrics" => (
                200,
                exposition(&model::read(state_dir)),
                CONTENT_TYPE.to_string(),
            ),
            "/" => (
                200,
                "cuquota metrics: see /metrics\n".to_string(),
                "text/plain; charset=utf-8".to_string(),
            ),
            _ => (
                404,
                "not found: the metrics are at /metrics\n".to_string(),
                "text/plain; charset=utf-8".to_string(),
            ),
        };
        let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], kind.as_bytes())
            .map_err(|()| "a bad header".to_string())?;
        let response = tiny_http::Response::from_string(body)
            .with_status_code(status)
            .with_header(header);
        let _ = request.respond(response); // a scraper that went away: serve the next
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::model::tests::sample;

    /// A GPU's series keep their labels whether or not a living process sees it (its index
    /// and name go only to `cuquota_gpu_info`); a process in another PID namespace is
    /// labelled by the PID the exporter sees, its own PID and its container beside.
    #[test]
    fn labels_stay_when_no_living_process_sees_the_gpu() {
        let mut s = sample();
        let seen = exposition(&s);
        for gpu in &mut s.gpus {
            gpu.index = None;
            gpu.name.clear();
        }
        let unseen = exposition(&s);
        let series = |t: &str| -> Vec<String> {
            (t.lines())
                .filter(|l| !l.starts_with('#') && !l.starts_with("cuquota_gpu_info"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(series(&seen), series(&unseen));
        assert!(!unseen.contains("cuquota_gpu_info{"));
        let p = &mut s.gpus[0].processes[0];
        (p.pid, p.host_pid, p.container) = (1, Some(4242), Some("0123456789ab".into()));
        let t = exposition(&s);
        assert!(
            t.contains("cuquota_in_use_bytes{pid=\"4242\",ns_pid=\"1\",container=\"0123456789ab\",gpu_uuid="),
            "{t}"
        );
    }

    #[test]
    fn every_family_has_help_and_type_and_its_series() {
        let t = exposition(&sample());
        println!("{t}");
        for f in [
            &GPU_INFO, &LIMIT, &IN_USE, &PART, &PEAK, &REFUSALS, &MEMBERS,
        ] {
            assert!(t.contains(&format!("# HELP {} ", f.name)), "{}", f.name);
            assert!(t.contains(&format!("# TYPE {} {}\n", f.name, f.kind)));
        }
        let uuid = "GPU-01010101-0101-0101-0101-010101010101";
        let group = format!("group=\"svc\",gpu_uuid=\"{uuid}\"");
        assert!(
            t.contains(&format!("cuquota_limit_bytes{{{group}}} 1073741824\n")),
            "{t}"
        );
        assert!(t.contains(&format!("cuquota_in_use_bytes{{{group}}} 524288000\n")));
        assert!(t.contains(&format!(
            "cuquota_in_use_part_bytes{{{group},part=\"context\"}} 104857600\n"
        )));
        assert!(t.contains(&format!("cuquota_refusals_total{{{group}}} 2\n")));
        assert!(t.contains("cuquota_group_members{group=\"svc\"} 2\n"));
        assert!(t.contains(&format!(
            "cuquota_member_in_use_bytes{{group=\"svc\",pid=\"102\",gpu_uuid=\"{uuid}\"}} 209715200\n"
        )));
        let own = format!("pid=\"103\",gpu_uuid=\"{uuid}\"");
        assert!(t.contains(&format!("cuquota_limit_bytes{{{own}}} 1073741824\n")));
        assert!(t.contains(&format!("cuquota_in_use_bytes{{{own}}} 104857600\n")));
        assert!(t.contains("cuquota_gpu_total_bytes{gpu_uuid=\""));
        assert!(t.contains(&format!(
            "cuquota_gpu_info{{gpu_uuid=\"{uuid}\",gpu_index=\"0\",gpu_name=\"Stand-in GPU\"}} 1\n"
        )));
        assert!(t.contains("cuquota_processes 4\n"));
        assert!(t.contains("cuquota_state_files_skipped 1\n"));
        // Every sample line is `name{labels} value` or `name value`.
        for line in t.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            value.parse::<u64>().unwrap();
        }
    }

    #[test]
    fn a_group_with_no_listed_member_has_no_part_series_and_no_limit_none() {
        use crate::top::model::{build, tests::group};
        use cuquota_state::group::NO_LIMIT;
        let s = build(
            Path::new("/s"),
            vec![],
            vec![group("a", 1, 1 << 30, 5, 1), group("b", 1, NO_LIMIT, 7, 1)],
            vec![],
            0,
        );
        let t = exposition(&s);
        assert!(!t.contains("cuquota_in_use_part_bytes{"), "{t}");
        assert!(t.contains("cuquota_limit_bytes{group=\"a\""), "{t}");
        assert!(!t.contains("cuquota_limit_bytes{group=\"b\""), "{t}");
        assert!(t.contains("cuquota_in_use_bytes{group=\"b\""), "{t}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
