//! `cuquota cdi`: a CDI (Container Device Interface) specification that puts a container
//! under cuquota: the library mounted read-only and preloaded (`LD_PRELOAD`, or a file
//! mounted over the container's `/etc/ld.so.preload`), the site's policy read-only, and the
//! state directory shared read-write, so that containers of a pod that mount one directory
//! are one group when the policy names one. containerd and CRI-O read CDI specs from
//! `/etc/cdi` or `/var/run/cdi`; a container asks for `cuquota.io/quota=default`.

use serde_json::{json, Value};
use std::path::Path;

/// The CDI version written (the fields used are in every version from 0.3.0).
pub const CDI_VERSION: &str = "0.6.0";
/// The kind a container requests.
pub const KIND: &str = "cuquota.io/quota";
/// Where the library is inside the container.
pub const CONTAINER_LIBRARY: &str = "/usr/lib/cuquota/libcuquota.so";

pub struct Options<'a> {
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
        mount(o.policy, cuquota_format::policy::DEFAULT_PATH, &ro),
        mount(
            o.state_dir,
            cuquota_format::group::DEFAULT_STATE_DIR,
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
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": [{ "name": "default", "containerEdits": {} }],
        "containerEdits": Value::Object(edits),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_by_file_or_variable() {
        let o = Options {
            library: Path::new("/opt/cuquota/lib/libcuquota.so"),
            policy: Path::new("/etc/cuquota.conf"),
            state_dir: Path::new("/dev/shm/cuquota"),
            ld_so_preload: None,
        };
        let s = spec(&o);
        assert_eq!(s["kind"], KIND);
        assert_eq!(
            s["containerEdits"]["env"][0],
            "LD_PRELOAD=/usr/lib/cuquota/libcuquota.so"
        );
        assert_eq!(s["containerEdits"]["mounts"].as_array().unwrap().len(), 3);
        let s = spec(&Options {
            ld_so_preload: Some(Path::new("/etc/cuquota/ld.so.preload")),
            ..o
        });
        assert!(s["containerEdits"].get("env").is_none());
        assert_eq!(
            s["containerEdits"]["mounts"][3]["containerPath"],
            "/etc/ld.so.preload"
        );
    }
}
