//! The names of the `CUQUOTA_*` variables, so that a misspelt one (`CUQUOTA_LIMT=6GiB`, which
//! would leave the process with no limit) is named, with the name it most likely meant,
//! instead of being ignored without a word. `cuquota run` refuses such a name before the
//! command starts; the interposer says it once, at its first CUDA call.

/// What the interposer reads in the governed process.
pub const SETTINGS: [&str; 11] = [
    "CUQUOTA_LIMIT",
    "CUQUOTA_MODE",
    "CUQUOTA_TRACE",
    "CUQUOTA_LOG",
    "CUQUOTA_LOG_LEVEL",
    "CUQUOTA_GROUP",
    "CUQUOTA_STATE_DIR",
    "CUQUOTA_VIRTUALIZE",
    "CUQUOTA_COUNT",
    "CUQUOTA_CONTEXT",
    "CUQUOTA_STACKS",
];

/// What cuquota's command, builds, scripts and tests read: known, never the interposer's.
pub const TOOLS: [&str; 11] = [
    "CUQUOTA_LIB",
    "CUQUOTA_BUILD_POLICY_PATH",
    "CUQUOTA_SLURM_VERSION",
    "CUQUOTA_GLIBC",
    "CUQUOTA_WHEEL",
    "CUQUOTA_WHEELHOUSE",
    "CUQUOTA_INSTALL_FROM",
    "CUQUOTA_TEST_BUILD",
    "CUQUOTA_TEST_NO_APT",
    "CUQUOTA_CRASH_RUNS",
    "CUQUOTA_SOAK_SECS",
];

/// Whether `name` is one of cuquota's variables (or not in its namespace at all).
pub fn is_known(name: &str) -> bool {
    !name.starts_with("CUQUOTA_") || SETTINGS.contains(&name) || TOOLS.contains(&name)
}

/// The one line for an unknown `CUQUOTA_*` name (`None` for a known one or another name).
/// `ignored` says what becomes of it where it is said.
pub fn unknown(name: &str, ignored: &str) -> Option<String> {
    if is_known(name) {
        return None;
    }
    let name = crate::settings::printable(name);
    Some(match closest(&name) {
        Some(meant) => {
            format!("{name} is not a cuquota variable (did you mean {meant}?); {ignored}")
        }
        None => format!(
            "{name} is not a cuquota variable ({}); {ignored}",
            SETTINGS.join(", ")
        ),
    })
}

/// The unknown `CUQUOTA_*` names among `names` (an environment's), each once, in order.
pub fn unknown_names<'a>(names: impl IntoIterator<Item = &'a [u8]>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        let name = String::from_utf8_lossy(name);
        if !is_known(&name) && !out.iter().any(|n| *n == name) {
            out.push(name.into_owned());
        }
    }
    out
}

/// The setting `name` most likely meant: at most two letters apart (added, dropped, changed
/// or swapped), case aside; the closest, the first of equals.
fn closest(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    SETTINGS
        .iter()
        .chain(&["CUQUOTA_LIB"])
        .map(|known| (distance(upper.as_bytes(), known.as_bytes()), *known))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, known)| known)
}

/// Edits (insert, delete, substitute, swap two neighbours) from `a` to `b`.
fn distance(a: &[u8], b: &[u8]) -> usize {
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    rows[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_names_get_the_likely_one() {
        let says = |name| unknown(name, "it is ignored").unwrap();
        assert_eq!(
            says("CUQUOTA_LIMT"),
            "CUQUOTA_LIMT is not a cuquota variable (did you mean CUQUOTA_LIMIT?); it is ignored"
        );
        assert!(says("CUQUOTA_LIMITS").contains("CUQUOTA_LIMIT?"));
        assert!(says("CUQUOTA_MDOE").contains("CUQUOTA_MODE?"));
        assert!(says("CUQUOTA_limit").contains("CUQUOTA_LIMIT?"));
        assert!(says("CUQUOTA_STATEDIR").contains("CUQUOTA_STATE_DIR?"));
        assert!(says("CUQUOTA_LOGLEVEL").contains("CUQUOTA_LOG_LEVEL?"));
        assert!(says("CUQUOTA_LIBS").contains("CUQUOTA_LIB?"));
        // Nothing close: the settings are listed.
        assert_eq!(
            says("CUQUOTA_QUOTA"),
            format!(
                "CUQUOTA_QUOTA is not a cuquota variable ({}); it is ignored",
                SETTINGS.join(", ")
            )
        );
        assert_eq!(
            says("CUQUOTA_X\u{1b}"),
            format!(
                "CUQUOTA_X\\x1b is not a cuquota variable ({}); it is ignored",
                SETTINGS.join(", ")
            )
        );
    }

    #[test]
    fn known_names_and_other_names_are_not_said() {
        for name in SETTINGS
            .iter()
            .chain(&TOOLS)
            .chain(&["CUDA_LIMIT", "PATH", ""])
        {
            assert_eq!(unknown(name, "x"), None, "{name}");
        }
        let env: [&[u8]; 5] = [
            b"PATH",
            b"CUQUOTA_LIMT",
            b"CUQUOTA_LIMIT",
            b"CUQUOTA_LIMT",
            b"CUQUOTA_Z",
        ];
        assert_eq!(unknown_names(env), ["CUQUOTA_LIMT", "CUQUOTA_Z"]);
    }

    #[test]
    fn distances() {
        assert_eq!(distance(b"LIMIT", b"LIMIT"), 0);
        assert_eq!(distance(b"LIMT", b"LIMIT"), 1);
        assert_eq!(distance(b"LMIIT", b"LIMIT"), 1);
        assert_eq!(distance(b"MODE", b"LIMIT"), 5);
        assert_eq!(distance(b"", b"AB"), 2);
    }
}
