//! The one walk over traces that `report`, `export` and `plot` share: files in order, each
//! process once (the same trace given twice is skipped whole), its events and its summary;
//! and the per-device footprint that each of them tracks alike. Each subcommand implements
//! [`Visit`] with only what it does with them.

use crate::traces::Seen;
use cuquota_format::part::{Part, PerLayer, PerPart};
use cuquota_format::read::{self, Options, Record, Stats};
use cuquota_format::schema::{kind, EventLine, Header, Summary};
use std::path::PathBuf;

/// What a subcommand does with each process of the traces.
pub trait Visit {
    /// What it keeps of one process.
    type Process;
    /// A process's header, the first time this process is seen.
    fn start(&mut self, file: &str, header: &Header) -> Self::Process;
    /// One event line of the process, of any type (newer ones included).
    fn event(&mut self, process: &mut Self::Process, e: &EventLine);
    /// The process's summary line.
    fn summary(&mut self, _process: &mut Self::Process, _s: &Summary) {}
    /// The process's records are done; `stats`: its file's, when it was the file's last.
    fn finish(&mut self, process: Self::Process, stats: Option<Stats>);
    /// An error that stops the walk (a failed write), asked after every record.
    fn error(&mut self) -> Option<String> {
        None
    }
}

/// Every process of `traces`, in order, through `visit`.
pub fn walk<V: Visit>(traces: &[PathBuf], options: &Options, visit: &mut V) -> Result<(), String> {
    let mut seen = Seen::default();
    for path in traces {
        let file = path.display().to_string();
        let mut current: Option<V::Process> = None;
        let stats = read::read(path, options, |record| {
            match record {
                Record::Header(h) => {
                    if let Some(done) = current.take() {
                        visit.finish(done, None);
                    }
                    // A process already read (the same trace given twice): skip its records.
                    if seen.first(h, &file) {
                        current = Some(visit.start(&file, h));
                    }
                }
                Record::Event(e) => {
                    if let Some(p) = current.as_mut() {
                        visit.event(p, e);
                    }
                }
                Record::Summary(s) => {
                    if let Some(p) = current.as_mut() {
                        visit.summary(p, s);
                    }
                }
            }
            visit.error().map_or(Ok(()), Err)
        })?;
        if let Some(p) = current {
            visit.finish(p, Some(stats));
        }
    }
    Ok(())
}

/// A device's footprint besides allocations as the trace goes: what `footprint` lines last
/// said of each part.
#[derive(Clone, Debug, Default)]
pub struct DeviceParts {
    /// Each part's bytes now.
    pub now: PerPart<u64>,
    /// Any `footprint` or `trim` line seen on the device.
    pub seen: bool,
}

impl DeviceParts {
    /// A `footprint` or `trim` line of the device: a footprint line sets its part's total
    /// (returned; None for a part this version does not know, or a trim, whose part's total
    /// comes on the next line).
    pub fn line(&mut self, e: &EventLine) -> Option<Part> {
        self.seen = true;
        if e.kind != kind::FOOTPRINT {
            return None;
        }
        let part = Part::from_name(e.part.as_deref()?)?;
        self.now[part] = e.bytes;
        Some(part)
    }

    /// Every layer with `in_use` charged (see [`PerPart::layers`]).
    pub fn layers(&self, in_use: u64, counted: bool) -> PerLayer<u64> {
        self.now.layers(in_use, counted)
    }
}
