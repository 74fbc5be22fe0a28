//! `cuquota cdi`: a CDI (Container Device Interface) specification that puts a container
//! under cuquota: the library mounted read-only and preloaded (`LD_PRELOAD`, or a file
//! mounted over the container's `/etc/ld.so.preload`), the site's policy read-only, and the
//! state directory shared read-write, so that containers of a pod that mount one directory
//! are one group when the policy names one. containerd, CRI-O and podman read CDI specs from
//! `/etc/cdi` or `/var/run/cdi`; a container asks for `cuquota.io/quota=default`.
//!
//! Two rules of the loaders runtimes really ship decide the shape: every CDI library refuses
//! a device whose own `containerEdits` is empty, whatever the spec-level edits hold, so the
//! edits are the device's; and runtimes vendor old libraries that refuse any version newer
//! than they know (Debian 12's podman refuses 0.6.0), so the spec declares the lowest
//! version its fields need, computed from them.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The kind a container requests.
pub const KIND: &str = "cuquota.io/quota";
/// Where the library is inside the container.
pub const CONTAINER_LIBRARY: &str = "/usr/lib/cuquota/libcuquota.so";

pub struct Options<'a> {
    /// The device's name: a container asks for `cuquota.io/quota=NAME`.
    pub name: &'a str,
    /// The library on the host.
    pub library: &'a Path,
    /// The policy on the host (mounted at /etc/cuquota.conf).
    pub policy: &'a Path,
    /// The state directory on the host (mounted at /dev/shm/cuquota).
    pub state_dir: &'a Path,
    /// A host file naming CONTAINER_LIBRARY, mounted over /etc/ld.so.preload; None:
    /// LD_PRELOAD is set instead (which a process in the container can unset).
    pub ld_so_preload: Option<&'a Path>,
}

fn mount(host: &Path, container: &str, options: &[&str]) -> Value {
    json!({
        "hostPath": host.to_string_lossy(),
        "containerPath": container,
        "options": options,
    })
}

/// The specification, as JSON.
pub fn spec(o: &Options) -> Value {
    let ro = ["ro", "nosuid", "nodev", "bind"];
    let mut mounts = vec![
        mount(o.library, CONTAINER_LIBRARY, &ro),
        mount(o.policy, cuquota_state::policy::DEFAULT_PATH, &ro),
        mount(
            o.state_dir,
            cuquota_state::group::DEFAULT_STATE_DIR,
            &["rw", "nosuid", "nodev", "bind"],
        ),
    ];
    let mut edits = serde_json::Map::new();
    match o.ld_so_preload {
        Some(file) => mounts.push(mount(file, "/etc/ld.so.preload", &ro)),
        None => {
            edits.insert(
                "env".into(),
                json!([format!("LD_PRELOAD={CONTAINER_LIBRARY}")]),
            );
        }
    }
    edits.insert("mounts".into(), Value::Array(mounts));
    let mut spec = json!({
        "cdiVersion": "",
        "kind": KIND,
        "devices": [{ "name": o.name, "containerEdits": Value::Object(edits) }],
    });
    spec["cdiVersion"] = required_version(&spec).into();
    spec
}

/// The host paths a spec names, made absolute (CDI wants absolute host paths) and checked:
/// a mount of a path that is not there fails every container that asks for the device, so
/// the spec is refused now. The state directory alone may be missing (the first governed
/// process makes it): a note says so.
pub struct Paths {
    pub library: PathBuf,
    pub policy: PathBuf,
    pub state_dir: PathBuf,
    pub ld_so_preload: Option<PathBuf>,
}

impl Paths {
    /// Returns the notes, or why the spec cannot be written.
    pub fn check(&mut self, name: &str) -> Result<Vec<String>, String> {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            return Err(format!(
                "--name {name:?}: a device name is letters, digits, _ . and -"
            ));
        }
        let absolute = |option: &str, path: &Path| {
            std::path::absolute(path).map_err(|e| format!("{option} {}: {e}", path.display()))
        };
        let file = |option: &str, path: &Path, what: &str| -> Result<PathBuf, String> {
            let shown = absolute(option, path)?;
            match path.canonicalize() {
                Ok(real) if real.is_file() => Ok(real),
                _ => Err(format!(
                    "{option} {}: there is no such file ({what})",
                    shown.display()
                )),
            }
        };
        self.library = file(
            "--library",
            &self.library,
            "scripts/install.sh PREFIX puts it in PREFIX/lib, pip in the package's lib/",
        )?;
        self.policy = file(
            "--policy",
            &self.policy,
            "write the policy first, e.g. the line limit = 6GiB; see the README's policy section",
        )?;
        if let Some(preload) = &self.ld_so_preload {
            let preload = file(
                "--ld-so-preload",
                preload,
                &format!("write a file holding the line {CONTAINER_LIBRARY}"),
            )?;
            let text = std::fs::read_to_string(&preload)
                .map_err(|e| format!("--ld-so-preload {}: {e}", preload.display()))?;
            if !text.split_whitespace().any(|w| w == CONTAINER_LIBRARY) {
                return Err(format!(
                    "--ld-so-preload {}: it does not name {CONTAINER_LIBRARY}, where the \
                     library is inside the container",
                    preload.display()
                ));
            }
            self.ld_so_preload = Some(preload);
        }
        self.state_dir = absolute("--state-dir", &self.state_dir)?;
        let mut notes = Vec::new();
        if self.state_dir.exists() && !self.state_dir.is_dir() {
            return Err(format!(
                "--state-dir {}: not a directory",
                self.state_dir.display()
            ));
        }
        if !self.state_dir.exists() {
            notes.push(format!(
                "--state-dir {0}: not there yet; it must be when a container starts (mkdir -m \
                 1777 {0}, again after each boot for one under /dev/shm)",
                self.state_dir.display()
            ));
        }
        Ok(notes)
    }
}

/// Whether a spec uses a field that needs a given version.
type Needs = fn(&Value) -> bool;

/// The oldest version loaders accept (0.1.0 and 0.2.0 had another layout).
const EARLIEST: &str = "0.3.0";

/// The lowest CDI version whose loaders accept every field `spec` uses, by the
/// specification's version rules (newest first): 1.1.0 network devices and Intel RDT
/// schemata or monitoring; 0.7.0 Intel RDT and additional GIDs; 0.6.0 annotations and a
/// class with a dot; 0.5.0 a device name not starting with a letter and device nodes with a
/// host path; 0.4.0 a mount with a type; else 0.3.0.
pub fn required_version(spec: &Value) -> &'static str {
    let rules: [(&str, Needs); 5] = [
        ("1.1.0", |s| {
            edits(s).any(|e| {
                non_empty(&e["netDevices"])
                    || ["schemata", "enableMonitoring"]
                        .iter()
                        .any(|k| !e["intelRdt"][k].is_null())
            })
        }),
        ("0.7.0", |s| {
            edits(s).any(|e| !e["intelRdt"].is_null() || non_empty(&e["additionalGids"]))
        }),
        ("0.6.0", |s| {
            let class = s["kind"].as_str().and_then(|k| k.split_once('/'));
            non_empty(&s["annotations"])
                || devices(s).any(|d| non_empty(&d["annotations"]))
                || class.is_some_and(|(vendor, class)| !vendor.is_empty() && class.contains('.'))
        }),
        ("0.5.0", |s| {
            devices(s).any(|d| {
                let name = d["name"].as_str().unwrap_or_default();
                !name.chars().next().is_some_and(char::is_alphabetic)
            }) || edits(s).any(|e| {
                list(&e["deviceNodes"]).any(|n| !n["hostPath"].as_str().unwrap_or("").is_empty())
            })
        }),
        ("0.4.0", |s| {
            edits(s)
                .any(|e| list(&e["mounts"]).any(|m| !m["type"].as_str().unwrap_or("").is_empty()))
        }),
    ];
    rules
        .iter()
        .find(|(_, needs)| needs(spec))
        .map_or(EARLIEST, |(version, _)| version)
}

fn list(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

fn non_empty(v: &Value) -> bool {
    match v {
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => false,
    }
}

fn devices(spec: &Value) -> impl Iterator<Item = &Value> {
    list(&spec["devices"])
}

/// The spec-level edits and every device's.
fn edits(spec: &Value) -> impl Iterator<Item = &Value> {
    std::iter::once(&spec["containerEdits"])
        .chain(devices(spec).map(|d| &d["containerEdits"]))
        .filter(|e| e.is_object())
}

#[cfg(test)]
mod tests;
