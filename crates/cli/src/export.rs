//! `cuquota export --format chrome`: Chrome Trace Event JSON (opens in Perfetto and
//! chrome://tracing), written as the traces are read.
//!
//! Per process: `process_name` metadata; per device two counter tracks, "GPU n in use" and
//! "GPU n quota" (bytes), and once the trace reports a part of the footprint, one per part
//! ("GPU n allocations", "GPU n pool cache", "GPU n graph memory", "GPU n context"); an
//! instant event on the calling thread per refusal, per back-off episode and per trim.
//! Timestamps are µs since the earliest trace start, so several files line up.

use crate::walk::{walk, DeviceParts, Visit};
use cuquota_format::part::{Part, PerLayer, LAYERS};
use cuquota_format::read::{Options, Stats};
use cuquota_format::schema::{kind, EventLine, Header, Summary};
use cuquota_format::units::human;
use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub fn chrome(traces: &[PathBuf], output: &Path, options: &Options) -> Result<(), String> {
    let mut t0 = u64::MAX;
    for path in traces {
        t0 = t0.min(crate::traces::header(path)?.start_unix_ns);
    }
    let out_name = output.display().to_string();
    let sink: Box<dyn Write> = if output == Path::new("-") {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(File::create(output).map_err(|e| format!("{out_name}: {e}"))?)
    };
    let mut w = Writer {
        out: BufWriter::with_capacity(1 << 20, sink),
        first: true,
        error: None,
    };
    w.raw("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    let mut export = Export {
        w,
        t0,
        pids: HashSet::new(),
    };
    walk(traces, options, &mut export)?;
    let mut w = export.w;
    w.raw("\n]}\n");
    w.out.flush().map_err(|e| format!("{out_name}: {e}"))?;
    match w.error {
        Some(e) => Err(format!("{out_name}: {e}")),
        None => Ok(()),
    }
}

/// The walk's visitor: each process's tracks, written as its events go by.
struct Export {
    w: Writer,
    t0: u64,
    pids: HashSet<u64>,
}

impl Visit for Export {
    type Process = Process;

    fn start(&mut self, _file: &str, header: &Header) -> Process {
        Process::open(header, self.t0, &mut self.pids, &mut self.w)
    }

    fn event(&mut self, p: &mut Process, e: &EventLine) {
        p.event(e, &mut self.w);
    }

    fn summary(&mut self, p: &mut Process, s: &Summary) {
        p.last_t_ns = p.last_t_ns.max(s.t_ns);
    }

    fn finish(&mut self, p: Process, _stats: Option<Stats>) {
        p.close(&mut self.w);
    }

    fn error(&mut self) -> Option<String> {
        self.w.error.take()
    }
}

struct Writer {
    out: BufWriter<Box<dyn Write>>,
    first: bool,
    /// The first write error, reported once the current line is done.
    error: Option<String>,
}

impl Writer {
    fn raw(&mut self, text: &str) {
        if let Err(e) = self.out.write_all(text.as_bytes()) {
            self.error.get_or_insert(e.to_string());
        }
    }

    /// One element of the traceEvents array.
    fn event(&mut self, args: std::fmt::Arguments) {
        let sep = if self.first { "" } else { ",\n" };
        self.first = false;
        if let Err(e) = self
            .out
            .write_all(sep.as_bytes())
            .and_then(|()| self.out.write_fmt(args))
        {
            self.error.get_or_insert(e.to_string());
        }
    }
}

struct Device {
    quota: Option<u64>,
    /// Last in-use value written, to skip repeats.
    in_use: Option<u64>,
    /// Each part now.
    parts: DeviceParts,
    /// The last values written of the layers' tracks; None until a part appears.
    written: Option<PerLayer<u64>>,
}

impl Device {
    fn new(quota: Option<u64>) -> Device {
        Device {
            quota,
            in_use: None,
            parts: DeviceParts::default(),
            written: None,
        }
    }
}

struct Process {
    pid: u64,
    /// The quota counted the footprint: in use is every part.
    footprint: bool,
    offset_ns: u64,
    last_t_ns: u64,
    devices: BTreeMap<u32, Device>,
}

/// `1234.567` µs from nanoseconds.
struct Micros(u64);

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

fn json(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

impl Process {
    fn open(h: &Header, t0: u64, pids: &mut HashSet<u64>, w: &mut Writer) -> Process {
        // Same pid on two hosts (or a reused pid): keep the tracks apart.
        let mut pid = u64::from(h.pid);
        while !pids.insert(pid) {
            pid += 1 << 32;
        }
        let command = h.argv.first().map_or("", |a| a.as_str());
        let name = format!("rank {} · {} pid {} · {command}", h.rank, h.host, h.pid);
        w.event(format_args!(
            r#"{{"name":"process_name","ph":"M","pid":{pid},"tid":0,"args":{{"name":{}}}}}"#,
            json(&name)
        ));
        w.event(format_args!(
            r#"{{"name":"process_sort_index","ph":"M","pid":{pid},"tid":0,"args":{{"sort_index":{}}}}}"#,
            h.rank
        ));
        Process {
            pid,
            footprint: h.counts_footprint(),
            offset_ns: h.start_unix_ns.saturating_sub(t0),
            last_t_ns: 0,
            devices: h
                .devices
                .iter()
                .map(|d| (d.ordinal, Device::new(d.quota)))
                .collect(),
        }
    }

    fn counter(&self, w: &mut Writer, t_ns: u64, dev: u32, what: &str, bytes: u64) {
        w.event(format_args!(
            r#"{{"name":"GPU {dev} {what}","ph":"C","pid":{},"ts":{},"args":{{"bytes":{bytes}}}}}"#,
            self.pid,
            Micros(self.offset_ns + t_ns)
        ));
    }

    fn event(&mut self, e: &EventLine, w: &mut Writer) {
        let kind = e.kind.as_ref();
        if !matches!(
            kind,
            kind::ALLOC
                | kind::FREE
                | kind::REFUSED
                | kind::MEMINFO
                | kind::BACKOFF
                | kind::CONTEXT
                | kind::FOOTPRINT
                | kind::TRIM
        ) {
            return;
        }
        self.last_t_ns = self.last_t_ns.max(e.t_ns);
        let first = !self.devices.contains_key(&e.dev) || self.devices[&e.dev].in_use.is_none();
        let dev = self
            .devices
            .entry(e.dev)
            .or_insert_with(|| Device::new(None));
        let (quota, changed) = (dev.quota, dev.in_use != Some(e.in_use));
        dev.in_use = Some(e.in_use);
        if kind == kind::FOOTPRINT && dev.parts.line(e).is_some() {
            dev.written.get_or_insert(PerLayer([u64::MAX; LAYERS]));
        }
        // The part tracks, where they changed (all of them at first). A trim's part total
        // comes on the next line: the tracks wait for it.
        let mut parts_changed = Vec::new();
        if let Some(written) = dev.written.as_mut().filter(|_| kind != kind::TRIM) {
            let now = dev.parts.layers(e.in_use, self.footprint);
            for (layer, new) in now.iter() {
                if written[layer] != *new {
                    written[layer] = *new;
                    parts_changed.push((layer.words(), *new));
                }
            }
        }
        if first {
            if let Some(q) = quota {
                self.counter(w, e.t_ns, e.dev, "quota", q);
            }
        }
        if changed {
            self.counter(w, e.t_ns, e.dev, "in use", e.in_use);
        }
        for (name, bytes) in parts_changed {
            self.counter(w, e.t_ns, e.dev, name, bytes);
        }
        let ts = Micros(self.offset_ns + e.t_ns);
        match kind {
            kind::REFUSED => {
                let reason = e.reason.as_deref().unwrap_or("quota");
                let what = crate::report::refused_words(&e.api, e.bytes);
                w.event(format_args!(
                    r#"{{"name":{},"cat":"cuquota","ph":"i","s":"t","pid":{},"tid":{},"ts":{ts},"args":{{"dev":{},"api":{},"bytes":{},"reason":{},"result":{},"in_use":{}}}}}"#,
                    json(&if e.observed {
                        format!("GPU {} would refuse {what} ({reason}, observe mode)", e.dev)
                    } else {
                        format!("GPU {} refused {what} ({reason})", e.dev)
                    }),
                    self.pid,
                    e.tid,
                    e.dev,
                    json(&e.api),
                    e.bytes,
                    json(reason),
                    json(&e.result),
                    e.in_use
                ));
            }
            kind::BACKOFF => {
                let sizes = e.sizes.as_deref().unwrap_or(&[]);
                let steps: Vec<String> = sizes.iter().map(|&b| human(b)).collect();
                let list: Vec<String> = sizes.iter().map(u64::to_string).collect();
                w.event(format_args!(
                    r#"{{"name":{},"cat":"cuquota","ph":"i","s":"t","pid":{},"tid":{},"ts":{ts},"args":{{"dev":{},"sizes":[{}]}}}}"#,
                    json(&format!("GPU {} backed off {}", e.dev, steps.join(" → "))),
                    self.pid,
                    e.tid,
                    e.dev,
                    list.join(",")
                ));
            }
            kind::TRIM => {
                let part = e.part.as_deref().unwrap_or("");
                let name = Part::from_name(part).map_or(part, |p| p.words());
                w.event(format_args!(
                    r#"{{"name":{},"cat":"cuquota","ph":"i","s":"t","pid":{},"tid":{},"ts":{ts},"args":{{"dev":{},"api":{},"part":{},"bytes":{},"in_use":{}}}}}"#,
                    json(&format!("GPU {} trimmed {} of {name}", e.dev, human(e.bytes))),
                    self.pid,
                    e.tid,
                    e.dev,
                    json(&e.api),
                    json(part),
                    e.bytes,
                    e.in_use
                ));
            }
            _ => {}
        }
    }

    /// Extends every track to the end of the trace.
    fn close(self, w: &mut Writer) {
        for (&dev, d) in &self.devices {
            if let Some(in_use) = d.in_use {
                self.counter(w, self.last_t_ns, dev, "in use", in_use);
                if let Some(q) = d.quota {
                    self.counter(w, self.last_t_ns, dev, "quota", q);
                }
                for (layer, &bytes) in d.written.iter().flat_map(PerLayer::iter) {
                    self.counter(w, self.last_t_ns, dev, layer.words(), bytes);
                }
            }
        }
    }
}
