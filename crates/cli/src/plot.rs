//! `cuquota plot`: an SVG chart of in-use memory over time, one line per process and device,
//! its quota as a thin horizontal line of the same colour, refusals as crosses.
//!
//! Each series is summarised in a fixed number of time buckets while the trace streams by
//! (see `timeline`), so a trace of any length draws at most a few thousand points per line.
//! Text is emitted as SVG `<text>` (plotters without its `ttf` feature): the viewer's fonts
//! render it.

use crate::timeline::Timeline;
use cuquota_format::read::{self, Options, Record};
use cuquota_format::schema::{kind, Header};
use cuquota_format::units::human;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const BUCKETS: usize = 2048;
const SIZE: (u32, u32) = (1200, 600);

struct Series {
    label: String,
    quota: Option<u64>,
    peak: u64,
    timeline: Timeline,
    /// Its refusals are observe mode's would-be ones (the calls went ahead).
    observed: bool,
}

pub fn svg(traces: &[PathBuf], output: &Path, options: &Options) -> Result<(), String> {
    let mut t0 = u64::MAX;
    for path in traces {
        t0 = t0.min(crate::traces::header(path)?.start_unix_ns);
    }
    let mut series: Vec<Series> = Vec::new();
    let mut processes = 0usize;
    for path in traces {
        // The series of the current process, by device.
        let mut current: BTreeMap<u32, Series> = BTreeMap::new();
        let mut header: Option<Header> = None;
        let mut offset = 0u64;
        read::read(path, options, |record| {
            match record {
                Record::Header(h) => {
                    series.extend(std::mem::take(&mut current).into_values());
                    offset = h.start_unix_ns.saturating_sub(t0);
                    processes += 1;
                    header = Some(h.clone());
                }
                Record::Event(e) => {
                    let kind = e.kind.as_ref();
                    if !matches!(
                        kind,
                        kind::ALLOC | kind::FREE | kind::REFUSED | kind::MEMINFO | kind::CONTEXT
                    ) {
                        return Ok(());
                    }
                    let s = current
                        .entry(e.dev)
                        .or_insert_with(|| new_series(header.as_ref(), e.dev));
                    let t = offset + e.t_ns;
                    s.timeline.add(t, e.in_use);
                    s.peak = s.peak.max(e.in_use);
                    if kind == kind::REFUSED {
                        s.timeline.refusal(t, e.in_use);
                        s.observed |= e.observed;
                    }
                }
                Record::Summary(_) => {}
            }
            Ok(())
        })?;
        series.extend(current.into_values());
    }
    if processes == 1 {
        // One process: "GPU 0" says it all.
        for s in &mut series {
            if let Some(at) = s.label.find("GPU ") {
                s.label = s.label[at..].to_string();
            }
        }
    }
    let mut text = String::new();
    draw(&series, &mut text).map_err(|e| format!("drawing the chart: {e}"))?;
    if output == Path::new("-") {
        print!("{text}");
        Ok(())
    } else {
        std::fs::write(output, text).map_err(|e| format!("{}: {e}", output.display()))
    }
}

fn new_series(header: Option<&Header>, dev: u32) -> Series {
    let (label, quota) = match header {
        Some(h) => (
            format!("rank {} pid {} GPU {dev}", h.rank, h.pid),
            h.devices
                .iter()
                .find(|d| d.ordinal == dev)
                .and_then(|d| d.quota),
        ),
        None => (format!("GPU {dev}"), None),
    };
    Series {
        label,
        quota,
        peak: 0,
        timeline: Timeline::new(BUCKETS),
        observed: false,
    }
}

/// Binary unit for the y axis, from the largest value shown.
fn unit(max: u64) -> (&'static str, f64) {
    match max {
        m if m >= 1 << 30 => ("GiB", (1u64 << 30) as f64),
        m if m >= 1 << 20 => ("MiB", (1u64 << 20) as f64),
        m if m >= 1 << 10 => ("KiB", 1024.0),
        _ => ("bytes", 1.0),
    }
}

fn draw(series: &[Series], text: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    let end_ns = series
        .iter()
        .map(|s| s.timeline.end_ns())
        .max()
        .unwrap_or(0)
        .max(1);
    let top = series
        .iter()
        .map(|s| s.peak.max(s.quota.unwrap_or(0)))
        .max()
        .unwrap_or(0)
        .max(1);
    let (unit_name, unit) = unit(top);
    let (time_unit, ns_per_unit) = match end_ns {
        t if t >= 2_000_000_000 => ("s", 1e9),
        t if t >= 2_000_000 => ("ms", 1e6),
        _ => ("µs", 1e3),
    };
    let x_end = end_ns as f64 / ns_per_unit;
    // Headroom above the highest line for the legend.
    let y_end = top as f64 / unit * 1.25;
    let root = SVGBackend::with_string(text, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("cuquota: device memory in use", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_end, 0f64..y_end)?;
    chart
        .configure_mesh()
        .x_desc(format!("time ({time_unit})"))
        .y_desc(format!("in use ({unit_name})"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let y = |bytes: u64| bytes as f64 / unit;
    let x = |t_ns: u64| t_ns as f64 / ns_per_unit;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let width = s.timeline.width_ns();
        let mut points = Vec::new();
        let mut last = 0u64;
        for (start, b) in s.timeline.buckets().filter(|(_, b)| b.used) {
            points.push((x(start), y(last)));
            points.push((x(start), y(b.max)));
            points.push((x(start + width).min(x_end), y(b.last)));
            last = b.last;
        }
        points.push((x_end, y(last)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(s.label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 14, y + 4)], color.filled()));
        if let Some(q) = s.quota {
            let quota_style = color.mix(0.6).stroke_width(1);
            chart
                .draw_series(LineSeries::new([(0.0, y(q)), (x_end, y(q))], quota_style))?
                .label(format!("{} quota {}", s.label, human(q)))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], quota_style));
        }
        let refusals: Vec<(f64, f64)> = s
            .timeline
            .buckets()
            .filter_map(|(start, b)| b.refusal.map(|v| (x(start), y(v))))
            .collect();
        if !refusals.is_empty() {
            let cross = color.stroke_width(2);
            chart
                .draw_series(refusals.into_iter().map(|p| Cross::new(p, 5, cross)))?
                .label(if s.observed {
                    format!("{} would be refused (observe mode)", s.label)
                } else {
                    format!("{} refused", s.label)
                })
                .legend(move |(x, y)| Cross::new((x + 7, y), 4, cross));
        }
    }
    if !series.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
