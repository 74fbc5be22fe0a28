//! `cuquota set NAME --limit SPEC`: changes a group's limit while its members run (they read
//! it at every check), or prepares a group before its first member starts; `--remove` takes
//! away a group none of whose members lives. Who may do it is
//! whoever may write the group's state file.

use cuquota_format::group::{GroupFile, NO_LIMIT};
use cuquota_format::settings::{
    format_uuid, means_no_limit, option_words, parse_limits, DeviceId, Limits,
};
use cuquota_format::units::{human, Size};
use std::path::Path;

/// What SPEC asks: (a GPU's UUID, or every GPU; bytes or [`NO_LIMIT`]).
pub type Wanted = Vec<(Option<[u8; 16]>, u64)>;

/// SPEC read, or a usage error (the caller exits 2 with it, as for any bad option).
pub fn parse(spec: &str) -> Result<Wanted, String> {
    if means_no_limit(spec) {
        return Ok(vec![(None, NO_LIMIT)]);
    }
    let bytes = |size: Size| match size {
        Size::Bytes(b) => Ok(b),
        Size::Fraction { .. } => Err(format!(
            "--limit {spec}: a group's limit is a size (its GPUs may differ): give one size, \
             or GPU-<uuid>:SIZE for each GPU"
        )),
    };
    match parse_limits(spec).map_err(|why| format!("--limit {spec}: {}", option_words(&why)))? {
        Limits::None => Err("--limit needs a value".into()),
        Limits::All(size) => Ok(vec![(None, bytes(size)?)]),
        Limits::PerDevice(entries) => entries
            .into_iter()
            .map(|(id, size)| match id {
                DeviceId::Uuid(uuid) => Ok((Some(uuid), bytes(size)?)),
                DeviceId::Ordinal(d) => Err(format!(
                    "--limit {spec}: GPU {d} is an ordinal, which means something only inside \
                     a process: name the GPU by its UUID (GPU-…, as nvidia-smi -L prints it)"
                )),
            })
            .collect(),
    }
}

/// Sets group `name`'s limit under `state_dir` and returns what the group looks like after.
pub fn run(name: &str, wanted: Wanted, state_dir: &Path) -> Result<String, String> {
    let file = GroupFile::open(state_dir, name).map_err(|e| e.0)?;
    for (uuid, limit) in wanted {
        file.set_limit(uuid, limit).map_err(|e| e.0)?;
    }
    // What dead members held goes back first, so that the figures shown are the living's.
    if let Ok(locked) = file.lock() {
        file.reap(&locked, None);
    }
    Ok(describe(&file))
}

/// Removes group `name` under `state_dir` when no member of it lives.
pub fn remove(name: &str, state_dir: &Path) -> Result<String, String> {
    GroupFile::remove(state_dir, name).map_err(|e| e.0)?;
    Ok(format!(
        "group {name} removed ({})",
        cuquota_format::group::group_path(state_dir, name).display()
    ))
}

fn limit_words(limit: u64) -> String {
    match limit {
        NO_LIMIT => "none".into(),
        cuquota_format::group::UNSET => "each GPU's first member's limit".into(),
        l => human(l),
    }
}

/// `group svc (state …): new GPUs get 12.00 GiB; GPU-…: limit 12.00 GiB, in use 7.85 GiB`.
fn describe(file: &GroupFile) -> String {
    let snap = file.snapshot();
    let mut out = format!(
        "group {} ({}): {} member{}; GPUs joining from now on get {}",
        snap.name,
        file.path.display(),
        snap.members.len(),
        if snap.members.len() == 1 { "" } else { "s" },
        limit_words(snap.default_limit)
    );
    for d in &snap.devices {
        let lowered = if d.in_use > d.limit {
            " (below what is held: new requests are refused until it is freed)"
        } else {
            ""
        };
        out += &format!(
            "\n  {}: limit {}{lowered}, in use {}, peak {}, {} refusal{}",
            format_uuid(&d.uuid),
            limit_words(d.limit),
            human(d.in_use),
            human(d.peak),
            d.refusals,
            if d.refusals == 1 { "" } else { "s" }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(parse("6GiB").unwrap(), [(None, 6 << 30)]);
        assert_eq!(parse("none").unwrap(), [(None, NO_LIMIT)]);
        let uuid = "GPU-00112233-4455-6677-8899-aabbccddeeff";
        let entries = parse(&format!("{uuid}:1GiB")).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].1, 1 << 30);
        assert!(parse("50%")
            .unwrap_err()
            .contains("a group's limit is a size"));
        assert!(parse("0:1GiB").unwrap_err().contains("ordinal"));
        assert!(parse("lots").is_err());
    }
}
