//! The spec as a real CDI implementation loads it: the crates.io
//! `container-device-interface` crate (the CNCF project's Rust library) parses it, checks it
//! against the CDI schema, validates the version, the kind and each device, and computes the
//! minimum version, which must be ours.

use super::*;
use container_device_interface::spec::new_spec;
use container_device_interface::specs::config::Spec as CdiSpec;
use container_device_interface::version::minimum_required_version;
use std::path::PathBuf;

fn options(ld_so_preload: Option<&Path>) -> Options<'_> {
    Options {
        name: "default",
        library: Path::new("/opt/cuquota/lib/libcuquota.so"),
        policy: Path::new("/etc/cuquota.conf"),
        state_dir: Path::new("/dev/shm/cuquota"),
        ld_so_preload,
    }
}

/// Loads `spec` as a runtime would (parse, schema, version, devices).
fn load(spec: &Value) -> Result<container_device_interface::spec::Spec, String> {
    let raw: CdiSpec = serde_json::from_value(spec.clone()).map_err(|e| e.to_string())?;
    new_spec(&raw, &PathBuf::from("/etc/cdi/cuquota.json"), 0).map_err(|e| format!("{e:#}"))
}

/// The minimum version the crate computes for `spec`.
fn crate_minimum(spec: &Value) -> String {
    let raw: CdiSpec = serde_json::from_value(spec.clone()).unwrap();
    minimum_required_version(&raw).unwrap().to_string()
}

#[test]
fn both_forms_load_with_the_edits_on_the_device() {
    let preload = Path::new("/etc/cuquota/ld.so.preload");
    for (file, env, mounts) in [(None, Some(1), 3), (Some(preload), None, 4)] {
        let s = spec(&options(file));
        assert_eq!(s["cdiVersion"], "0.3.0");
        assert!(s.get("containerEdits").is_none(), "{s}");
        let loaded = load(&s).unwrap_or_else(|e| panic!("{e}\n{s:#}"));
        let device = loaded.get_device("default").expect("device default");
        assert_eq!(device.get_qualified_name(), "cuquota.io/quota=default");
        let edits = device.edits().container_edits;
        assert_eq!(edits.env.as_ref().map(Vec::len), env);
        assert_eq!(edits.mounts.as_ref().map(Vec::len), Some(mounts));
        let d = &s["devices"][0]["containerEdits"];
        match file {
            None => assert_eq!(d["env"][0], "LD_PRELOAD=/usr/lib/cuquota/libcuquota.so"),
            Some(_) => assert_eq!(d["mounts"][3]["containerPath"], "/etc/ld.so.preload"),
        }
        assert_eq!(crate_minimum(&s), "0.3.0");
    }
}

/// What cuquota wrote before: every edit at the spec level, none on the device. The schema
/// takes it; the loader refuses it, so these tests can see a bad spec.
#[test]
fn a_device_without_edits_is_refused() {
    let mut s = spec(&options(None));
    let edits = s["devices"][0]["containerEdits"].take();
    s["containerEdits"] = edits;
    s["devices"][0]["containerEdits"] = json!({});
    let err = load(&s).unwrap_err();
    assert!(err.contains("empty device edits"), "{err}");
}

#[test]
fn a_version_lower_than_the_fields_need_is_refused() {
    let mut s = spec(&options(None));
    s["devices"][0]["containerEdits"]["mounts"][0]["type"] = "bind".into();
    assert_eq!(required_version(&s), "0.4.0");
    let err = load(&s).unwrap_err();
    assert!(err.contains("must be at least v0.4.0"), "{err}");
    s["cdiVersion"] = required_version(&s).into();
    load(&s).unwrap();
}

/// Each rule, alone, on the spec `cuquota cdi` writes: our version, the crate's, and the
/// crate loads the spec at that version.
#[test]
fn each_field_raises_the_version_it_needs() {
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 12] = [
        ("0.3.0", |_| {}),
        (
            "0.3.0",
            |s| {
                s["devices"][0]["containerEdits"]["hooks"] =
                    json!([{ "hookName": "createContainer", "path": "/bin/true" }])
            },
        ),
        ("0.4.0", |s| {
            s["devices"][0]["containerEdits"]["mounts"][2]["type"] = "bind".into()
        }),
        ("0.4.0", |s| {
            s["containerEdits"] = json!({ "mounts": [
            { "hostPath": "/a", "containerPath": "/b", "type": "tmpfs" }] })
        }),
        ("0.5.0", |s| s["devices"][0]["name"] = "0".into()),
        ("0.5.0", |s| {
            s["devices"][0]["containerEdits"]["deviceNodes"] =
                json!([{ "path": "/dev/x", "hostPath": "/dev/null" }])
        }),
        ("0.6.0", |s| {
            s["annotations"] = json!({ "cuquota.io/a": "b" })
        }),
        ("0.6.0", |s| {
            s["devices"][0]["annotations"] = json!({ "cuquota.io/a": "b" })
        }),
        ("0.6.0", |s| s["kind"] = "cuquota.io/quota.v1".into()),
        ("0.7.0", |s| {
            s["devices"][0]["containerEdits"]["additionalGids"] = json!([5])
        }),
        ("0.7.0", |s| {
            s["devices"][0]["containerEdits"]["intelRdt"] = json!({ "closID": "c" })
        }),
        ("1.1.0", |s| {
            s["devices"][0]["containerEdits"]["netDevices"] =
                json!([{ "hostInterfaceName": "eth0", "name": "eth1" }])
        }),
    ];
    for (i, (want, edit)) in cases.iter().enumerate() {
        let mut s = spec(&options(None));
        edit(&mut s);
        assert_eq!(required_version(&s), *want, "case {i}: {s}");
        assert_eq!(crate_minimum(&s), *want, "case {i}: the crate's, {s}");
        s["cdiVersion"] = (*want).into();
        load(&s).unwrap_or_else(|e| panic!("case {i}: {e}\n{s}"));
    }
    // Empty lists and maps need nothing.
    let mut s = spec(&options(None));
    s["annotations"] = json!({});
    s["devices"][0]["containerEdits"]["additionalGids"] = json!([]);
    s["devices"][0]["containerEdits"]["netDevices"] = json!([]);
    assert_eq!(required_version(&s), "0.3.0");
    assert_eq!(crate_minimum(&s), "0.3.0");
}

/// Another device name (another limit, through another policy) loads the same way.
#[test]
fn a_named_device_loads() {
    let mut o = options(None);
    o.name = "small";
    let s = spec(&o);
    let loaded = load(&s).unwrap();
    let device = loaded.get_device("small").expect("device small");
    assert_eq!(device.get_qualified_name(), "cuquota.io/quota=small");
    assert_eq!(s["cdiVersion"], "0.3.0");
}

/// Paths that are not there are refused before a spec names them; relative ones are made
/// absolute; a missing state directory is a note.
#[test]
fn paths_are_checked_and_made_absolute() {
    let dir = std::env::temp_dir().join(format!("cuquota-cdi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let library = dir.join("libcuquota.so");
    let policy = dir.join("cuquota.conf");
    let preload = dir.join("ld.so.preload");
    std::fs::write(&library, "").unwrap();
    std::fs::write(&policy, "limit = 1GiB\n").unwrap();
    std::fs::write(&preload, "/usr/lib/cuquota/libcuquota.so\n").unwrap();
    let paths = |library: &Path, policy: &Path, preload: Option<&Path>| Paths {
        library: library.into(),
        policy: policy.into(),
        state_dir: dir.clone(),
        ld_so_preload: preload.map(Into::into),
    };
    let mut ok = paths(&library, &policy, Some(&preload));
    assert_eq!(ok.check("default"), Ok(vec![]));
    let missing = dir.join("nowhere.conf");
    assert_eq!(
        paths(&library, &missing, None)
            .check("default")
            .unwrap_err(),
        format!(
            "--policy {}: there is no such file (write the policy first, e.g. the line limit = \
             6GiB; see the README's policy section)",
            missing.display()
        )
    );
    assert!(paths(&missing, &policy, None)
        .check("default")
        .unwrap_err()
        .starts_with(&format!(
            "--library {}: there is no such file",
            missing.display()
        )));
    assert!(paths(&library, &policy, Some(&missing))
        .check("default")
        .unwrap_err()
        .starts_with("--ld-so-preload"));
    std::fs::write(&preload, "/usr/local/lib/libcuquota.so\n").unwrap();
    assert!(paths(&library, &policy, Some(&preload))
        .check("default")
        .unwrap_err()
        .contains("it does not name /usr/lib/cuquota/libcuquota.so"));
    assert!(paths(&library, &policy, None)
        .check("a/b")
        .unwrap_err()
        .contains("a device name is"));
    // Relative paths become absolute.
    let cwd = std::env::current_dir().unwrap();
    let relative = pathdiff(&policy, &cwd);
    let mut rel = paths(&library, &relative, None);
    rel.check("default").unwrap();
    assert_eq!(rel.policy, policy.canonicalize().unwrap());
    let mut gone = paths(&library, &policy, None);
    gone.state_dir = dir.join("state");
    let notes = gone.check("default").unwrap();
    assert!(notes[0].contains("not there yet; it must be when a container starts"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `path` relative to `base` (both absolute): `../..` up to their common part, then down.
fn pathdiff(path: &Path, base: &Path) -> PathBuf {
    let common = path
        .components()
        .zip(base.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = PathBuf::new();
    for _ in base.components().skip(common) {
        out.push("..");
    }
    for c in path.components().skip(common) {
        out.push(c);
    }
    out
}
