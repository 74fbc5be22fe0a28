//! The values of cuquota's settings that the interposer reads from its environment and
//! `cuquota run` checks before it starts a command: one parser each, so that a value is
//! accepted or refused the same way, with the same words, by both.

use crate::units::{parse_size, Size};

/// The most device ordinals cuquota keeps a quota for (CUDA device ordinals are small).
pub const MAX_DEVICES: usize = 64;

/// The largest byte count `CUQUOTA_LIMIT` accepts. Larger counts are refused rather than
/// read as "unlimited" (the interposer's two counter values above it mean "no limit" and
/// "not resolved yet"): a limit that is given is always a limit.
pub const MAX_LIMIT: u64 = u64::MAX - 2;

pub const LIMIT_EXAMPLES: &str = "e.g. CUQUOTA_LIMIT=6GiB, 6144MiB, 75% or 0:6GiB,1:50%";

/// A GPU as a per-device limit names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceId {
    /// A CUDA device ordinal, as the process sees it (after `CUDA_VISIBLE_DEVICES`).
    Ordinal(u32),
    /// `GPU-8f3a…`, as `nvidia-smi -L` prints it and `cuDeviceGetUuid` returns it: the same
    /// GPU whatever `CUDA_VISIBLE_DEVICES` renumbers.
    Uuid([u8; 16]),
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceId::Ordinal(d) => write!(f, "{d}"),
            DeviceId::Uuid(u) => f.write_str(&format_uuid(u)),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limits {
    /// `CUQUOTA_LIMIT` unset.
    None,
    /// One value for every device.
    All(Size),
    /// `0:6GiB,GPU-8f3a…:50%`: devices not named are unlimited.
    PerDevice(Vec<(DeviceId, Size)>),
}

impl Limits {
    /// The limit of the device with this ordinal; `uuid` gives its UUID, asked only when a
    /// limit names a UUID.
    pub fn for_device(
        &self,
        ordinal: u32,
        uuid: impl FnOnce() -> Option<[u8; 16]>,
    ) -> Option<Size> {
        match self {
            Limits::None => None,
            Limits::All(s) => Some(*s),
            Limits::PerDevice(list) => {
                if let Some((_, s)) = list.iter().find(|(d, _)| *d == DeviceId::Ordinal(ordinal)) {
                    return Some(*s);
                }
                if !list.iter().any(|(d, _)| matches!(d, DeviceId::Uuid(_))) {
                    return None;
                }
                let uuid = uuid()?;
                list.iter()
                    .find(|(d, _)| *d == DeviceId::Uuid(uuid))
                    .map(|(_, s)| *s)
            }
        }
    }

    /// The devices a per-device limit names that are not among `seen` (each device the
    /// process sees: ordinal and UUID, if known).
    pub fn unseen(&self, seen: &[(u32, Option<[u8; 16]>)]) -> Vec<DeviceId> {
        let Limits::PerDevice(list) = self else {
            return Vec::new();
        };
        list.iter()
            .map(|(d, _)| *d)
            .filter(|d| match d {
                DeviceId::Ordinal(o) => !seen.iter().any(|(s, _)| s == o),
                DeviceId::Uuid(u) => !seen.iter().any(|(_, s)| *s == Some(*u)),
            })
            .collect()
    }
}

/// `6GiB` (every device) or `0:6GiB,GPU-8f3a…:50%` (per device). The error says what is
/// wrong; the caller names the variable.
pub fn parse_limits(text: &str) -> Result<Limits, String> {
    if !text.contains(':') {
        return parse_limit_size(text).map(Limits::All);
    }
    let mut list: Vec<(DeviceId, Size)> = Vec::new();
    for entry in text.split(',') {
        let (name, size) = entry
            .split_once(':')
            .ok_or_else(|| format!("\"{}\" has no device ordinal", entry.trim()))?;
        let name = name.trim();
        let device = if name
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case("gpu-"))
        {
            DeviceId::Uuid(parse_uuid(name).ok_or_else(|| {
                format!("\"{name}\" is not a GPU UUID (GPU- and 32 hex digits, as nvidia-smi -L prints)")
            })?)
        } else {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("\"{name}\" is not a device ordinal or GPU UUID"));
            }
            let ordinal: u32 = name
                .parse()
                .ok()
                .filter(|d| (*d as usize) < MAX_DEVICES)
                .ok_or_else(|| format!("device {name} is beyond the {MAX_DEVICES} supported"))?;
            DeviceId::Ordinal(ordinal)
        };
        if list.iter().any(|(d, _)| *d == device) {
            return Err(format!("device {device} is named twice"));
        }
        let size = parse_limit_size(size).map_err(|why| format!("device {device}: {why}"))?;
        list.push((device, size));
    }
    Ok(Limits::PerDevice(list))
}

/// A size that is a limit: a number with no unit is a whole byte count, and at most
/// [`MAX_LIMIT`].
pub fn parse_limit_size(text: &str) -> Result<Size, String> {
    let s = text.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.') && s.contains('.') {
        return Err(format!(
            "\"{s}\" has no unit, so it would be a count of bytes, which is whole; did you mean {s}GiB?"
        ));
    }
    match parse_size(s)? {
        Size::Bytes(b) if b > MAX_LIMIT => Err(format!(
            "\"{s}\" is too large: the largest limit is {MAX_LIMIT} bytes (leave CUQUOTA_LIMIT unset for none)"
        )),
        size => Ok(size),
    }
}

/// Notes on a valid limit that may not say what was meant, one of each kind: a number with no
/// unit below 1 MiB (bytes: `12` refuses every allocation), and a decimal unit (`12GB` is
/// 12·10⁹ bytes, 11.18 GiB). `written` is how the value was given, `--limit ` or
/// `CUQUOTA_LIMIT=`. Nothing changes: the limit is what it was.
pub fn limit_notes(spec: &str, written: &str) -> Vec<String> {
    let entries: Vec<&str> = if spec.contains(':') {
        spec.split(',')
            .filter_map(|e| e.split_once(':').map(|(_, size)| size))
            .collect()
    } else {
        vec![spec]
    };
    let mut notes = Vec::new();
    let bare = entries.iter().map(|e| e.trim()).find(|s| {
        !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit())
            && matches!(parse_size(s), Ok(Size::Bytes(b)) if b > 0 && b < 1 << 20)
    });
    if let Some(size) = bare {
        notes.push(format!(
            "{written}{spec} is {size} bytes (a number with no unit counts bytes: every \
             allocation larger is refused); for {size} GiB write {written}{}",
            rewrite(spec, size, &format!("{size}GiB"))
        ));
    }
    let decimal = entries.iter().map(|e| e.trim()).find_map(|s| {
        let unit_at = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, unit) = s.split_at(unit_at);
        let unit = unit.trim();
        let power = ["kb", "mb", "gb", "tb"]
            .iter()
            .position(|u| unit.eq_ignore_ascii_case(u))?;
        let Ok(Size::Bytes(bytes)) = parse_size(s) else {
            return None;
        };
        Some((s, number, unit, power, bytes))
    });
    if let Some((size, number, unit, power, bytes)) = decimal {
        let binary = format!("{}iB", &"KMGT"[power..=power]);
        let meant = format!("{number}{binary}");
        let meant_bytes = match parse_size(&meant) {
            Ok(Size::Bytes(b)) => format!(" = {b} bytes"),
            _ => String::new(),
        };
        notes.push(format!(
            "{written}{spec}: {size} is {bytes} bytes = {} ({unit} is decimal, 10^{} bytes); \
             for {number} {binary}{meant_bytes} write {written}{}",
            crate::units::human(bytes),
            3 * (power + 1),
            rewrite(spec, size, &meant)
        ));
    }
    notes
}

/// `spec` with its first size `from` written `to` (a per-device entry's size, never its
/// ordinal).
fn rewrite(spec: &str, from: &str, to: &str) -> String {
    if !spec.contains(':') {
        return spec.replacen(from, to, 1);
    }
    let mut done = false;
    spec.split(',')
        .map(|entry| match entry.split_once(':') {
            Some((device, size)) if !done && size.trim() == from => {
                done = true;
                format!("{device}:{}", size.replacen(from, to, 1))
            }
            _ => entry.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `GPU-8f3a1b2c-0d4e-4f5a-8b6c-7d8e9f0a1b2c` (case-insensitive; the dashes after the
/// prefix are optional) → its 16 bytes.
pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex = text.get(4..)?;
    if !text.get(..4)?.eq_ignore_ascii_case("gpu-") {
        return None;
    }
    let digits: Vec<u8> = hex.bytes().filter(|b| *b != b'-').collect();
    if digits.len() != 32
        || !digits.iter().all(u8::is_ascii_hexdigit)
        || hex.starts_with('-')
        || hex.ends_with('-')
        || hex.contains("--")
    {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in digits.chunks(2).enumerate() {
        let pair = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// The 16 bytes as `nvidia-smi -L` prints them: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let mut s = String::from("GPU-");
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The one-line error for a bad `CUQUOTA_LIMIT`, which `cuquota run --limit` prints too
/// (the interposer adds what then happens to CUDA calls).
pub fn limit_error(value: &str, why: &str) -> String {
    format!(
        "CUQUOTA_LIMIT=\"{}\" is not valid: {}; use {LIMIT_EXAMPLES}",
        printable(value),
        printable(why)
    )
}

/// `none` or `unlimited` (any case): no limit, as `--limit` of `cuquota run` and `cuquota set`
/// spell it (the variable spells it by being unset).
pub fn means_no_limit(text: &str) -> bool {
    matches!(
        text.trim().to_ascii_lowercase().as_str(),
        "none" | "unlimited"
    )
}

/// The one-line error for a bad `--limit VALUE`: the words of [`limit_error`], in the
/// option's terms for whoever typed the option.
pub fn option_limit_error(value: &str, why: &str) -> String {
    format!(
        "--limit \"{}\" is not valid: {}; use e.g. --limit 6GiB, 6144MiB, 75%, 0:6GiB,1:50% or none",
        printable(value),
        printable(&option_words(why))
    )
}

/// A parser's reason in `--limit`'s terms: the parsers name the variable where they suggest
/// a value.
pub fn option_words(why: &str) -> String {
    why.replace(
        "leave CUQUOTA_LIMIT unset for none",
        "give --limit none for no limit",
    )
}

/// The value as it can be shown on one line: control characters escaped (`\n`, `\x1b`), by
/// the rule every foreign string is shown by ([`crate::escape::text`]).
pub fn printable(value: &str) -> String {
    crate::escape::text(value).into_owned()
}

/// `CUQUOTA_MODE`: `Some(true)` to enforce, `Some(false)` to observe, `None` if it is
/// neither (which fails closed). Empty is unset: enforce.
pub fn parse_mode(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "" | "enforce" => Some(true),
        "observe" => Some(false),
        _ => None,
    }
}

/// Where cuquota's log lines go (`CUQUOTA_LOG`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogTarget<P> {
    Stderr,
    Off,
    File(P),
}

/// `CUQUOTA_LOG`: the keywords `stderr` and `off` in any case; empty is unset (stderr); any
/// other value is a path, exactly as given.
pub fn parse_log_target(raw: &[u8]) -> LogTarget<&[u8]> {
    if raw.is_empty() || raw.eq_ignore_ascii_case(b"stderr") {
        LogTarget::Stderr
    } else if raw.eq_ignore_ascii_case(b"off") {
        LogTarget::Off
    } else {
        LogTarget::File(raw)
    }
}

/// What `%p %h %r %t` stand for in a `CUQUOTA_TRACE` template.
pub struct TemplateVars<'a> {
    pub pid: u32,
    pub host: &'a str,
    pub rank: u32,
    pub start_unix_secs: u64,
}

/// Rank variables of torchrun, MPI, Slurm and PMI, in the order they are consulted.
const RANK_VARS: [&str; 5] = [
    "RANK",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "SLURM_PROCID",
    "PMI_RANK",
];

/// `%r` of a trace template: the first rank variable that is set (and a number), else 0.
pub fn rank(lookup: impl Fn(&str) -> Option<String>) -> u32 {
    RANK_VARS
        .iter()
        .find_map(|name| lookup(name))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// Expands `%p` (pid), `%h` (host), `%r` (rank), `%t` (start, unix seconds) and `%%` in a
/// `CUQUOTA_TRACE` template. Any other `%` sequence is an error rather than a guess. Works
/// on bytes: a path that is not UTF-8 is used exactly as given.
pub fn expand_template(template: &[u8], vars: &TemplateVars) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(template.len() + 16);
    let mut rest = template.iter();
    while let Some(&b) = rest.next() {
        if b != b'%' {
            out.push(b);
            continue;
        }
        match rest.next() {
            Some(b'p') => out.extend_from_slice(vars.pid.to_string().as_bytes()),
            Some(b'h') => out.extend_from_slice(vars.host.as_bytes()),
            Some(b'r') => out.extend_from_slice(vars.rank.to_string().as_bytes()),
            Some(b't') => out.extend_from_slice(vars.start_unix_secs.to_string().as_bytes()),
            Some(b'%') => out.push(b'%'),
            other => {
                let seq = match other {
                    Some(&c) => format!("%{}", String::from_utf8_lossy(&[c])),
                    None => "%".into(),
                };
                return Err(format!(
                    "CUQUOTA_TRACE=\"{}\": unknown \"{seq}\" (use %p, %h, %r, %t or %%)",
                    String::from_utf8_lossy(template)
                ));
            }
        }
    }
    if out.is_empty() {
        return Err("CUQUOTA_TRACE is empty".into());
    }
    Ok(out)
}

/// The template's error, if it has one (the same as [`expand_template`] would give).
pub fn check_template(template: &[u8]) -> Result<(), String> {
    let vars = TemplateVars {
        pid: 1,
        host: "h",
        rank: 0,
        start_unix_secs: 0,
    };
    expand_template(template, &vars).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "GPU-8f3a1b2c-0d4e-4f5a-8b6c-7d8e9f0a1b2c";

    #[test]
    fn uuids_round_trip() {
        let bytes = parse_uuid(UUID).unwrap();
        assert_eq!(bytes[0], 0x8f);
        assert_eq!(bytes[15], 0x2c);
        assert_eq!(format_uuid(&bytes), UUID);
        assert_eq!(parse_uuid(&UUID.to_ascii_uppercase()), Some(bytes));
        assert_eq!(
            parse_uuid("GPU-8f3a1b2c0d4e4f5a8b6c7d8e9f0a1b2c"),
            Some(bytes)
        );
        for bad in [
            "GPU-8f3a",
            "GPU-",
            "MIG-8f3a1b2c-0d4e-4f5a-8b6c-7d8e9f0a1b2c",
            "GPU-zz3a1b2c-0d4e-4f5a-8b6c-7d8e9f0a1b2c",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
    }

    #[test]
    fn limits_by_uuid_and_ordinal() {
        let l = parse_limits(&format!("0:1GiB, {UUID}:2GiB")).unwrap();
        let uuid = parse_uuid(UUID).unwrap();
        assert_eq!(
            l.for_device(0, || panic!("not asked")),
            Some(Size::Bytes(1 << 30))
        );
        assert_eq!(l.for_device(3, || Some(uuid)), Some(Size::Bytes(2 << 30)));
        assert_eq!(l.for_device(3, || Some([0; 16])), None);
        assert_eq!(l.for_device(3, || None), None);
        assert_eq!(l.unseen(&[(0, Some([0; 16]))]), vec![DeviceId::Uuid(uuid)]);
        assert_eq!(l.unseen(&[(1, Some(uuid))]), vec![DeviceId::Ordinal(0)]);
        assert!(
            parse_limits(&format!("{UUID}:1G,{}:2G", UUID.to_ascii_uppercase()))
                .unwrap_err()
                .contains("named twice")
        );
        assert!(parse_limits("GPU-12:1G")
            .unwrap_err()
            .contains("not a GPU UUID"));
    }

    #[test]
    fn a_number_without_a_unit_is_whole_bytes() {
        assert_eq!(
            parse_limits("1.5").unwrap_err(),
            "\"1.5\" has no unit, so it would be a count of bytes, which is whole; did you mean 1.5GiB?"
        );
        assert!(parse_limits("0:1.5").unwrap_err().contains("1.5GiB"));
        assert_eq!(
            parse_limits("1.5GiB").unwrap(),
            Limits::All(Size::Bytes(1_610_612_736))
        );
        assert_eq!(
            parse_limits("4096").unwrap(),
            Limits::All(Size::Bytes(4096))
        );
    }

    #[test]
    fn surprising_sizes_get_a_note() {
        assert_eq!(
            limit_notes("12", "--limit "),
            [
                "--limit 12 is 12 bytes (a number with no unit counts bytes: every allocation \
              larger is refused); for 12 GiB write --limit 12GiB"
            ]
        );
        assert_eq!(
            limit_notes("12GB", "CUQUOTA_LIMIT="),
            [
                "CUQUOTA_LIMIT=12GB: 12GB is 12000000000 bytes = 11.18 GiB (GB is decimal, 10^9 \
              bytes); for 12 GiB = 12884901888 bytes write CUQUOTA_LIMIT=12GiB"
            ]
        );
        assert!(limit_notes("1:1", "--limit ")[0].ends_with("write --limit 1:1GiB"));
        let both = limit_notes("0:512, 1:1.5mb", "--limit ");
        assert_eq!(both.len(), 2);
        assert!(
            both[0].ends_with("write --limit 0:512GiB, 1:1.5mb"),
            "{}",
            both[0]
        );
        assert!(both[1].contains("1.5mb is 1500000 bytes = 1.43 MiB (mb is decimal, 10^6"));
        assert!(
            both[1].ends_with("write --limit 0:512, 1:1.5MiB"),
            "{}",
            both[1]
        );
        for quiet in [
            "12GiB",
            "0",
            "1048576",
            "75%",
            "6g",
            "none",
            "0:6GiB,1:50%",
            "12 GiB",
        ] {
            assert_eq!(
                limit_notes(quiet, "--limit "),
                Vec::<String>::new(),
                "{quiet}"
            );
        }
    }

    #[test]
    fn the_largest_accepted_limit_is_a_limit() {
        assert_eq!(
            parse_limits(&MAX_LIMIT.to_string()).unwrap(),
            Limits::All(Size::Bytes(MAX_LIMIT))
        );
        for n in [u64::MAX, u64::MAX - 1] {
            assert!(parse_limits(&n.to_string())
                .unwrap_err()
                .contains("too large"));
        }
    }

    #[test]
    fn keywords_in_any_case() {
        assert_eq!(parse_mode("OBSERVE"), Some(false));
        assert_eq!(parse_mode("Enforce"), Some(true));
        assert_eq!(parse_mode(""), Some(true));
        assert_eq!(parse_mode("observing"), None);
        assert_eq!(parse_log_target(b"OFF"), LogTarget::Off);
        assert_eq!(parse_log_target(b"StdErr"), LogTarget::Stderr);
        assert_eq!(parse_log_target(b""), LogTarget::Stderr);
        assert_eq!(
            parse_log_target(b"/tmp/off"),
            LogTarget::File(&b"/tmp/off"[..])
        );
    }

    #[test]
    fn templates() {
        let v = TemplateVars {
            pid: 4242,
            host: "node1",
            rank: 3,
            start_unix_secs: 1700000000,
        };
        assert_eq!(
            expand_template(b"/t/%h-%r-%p-%t.jsonl", &v).unwrap(),
            b"/t/node1-3-4242-1700000000.jsonl"
        );
        assert_eq!(expand_template(b"100%%.%p", &v).unwrap(), b"100%.4242");
        assert!(check_template(b"a%x").unwrap_err().contains("\"%x\""));
        assert!(check_template(b"a%").unwrap_err().contains("\"%\""));
        assert!(check_template(b"ok-%p").is_ok());
    }
}
