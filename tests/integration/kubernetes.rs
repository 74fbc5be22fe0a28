//! What cuquota ships for containers, checked offline (no cluster runs here; podman runs the
//! spec in containers.rs): `cuquota cdi`'s spec against the CDI JSON schema, and
//! deploy/kubernetes/pod.yaml with
//! kubernetes-validate --strict (tests/cdi/validate.py, in the venv of
//! scripts/k8s-tools-env.sh, which `scripts/test.sh` prepares).

use crate::common::*;
use std::process::Command;

#[test]
fn the_cdi_spec_and_the_pod_example_validate_offline() {
    let art = artifacts();
    let env = Command::new(art.workspace.join("scripts/k8s-tools-env.sh"))
        .output()
        .expect("run scripts/k8s-tools-env.sh");
    assert!(
        env.status.success(),
        "the validators could not be installed (PyPI unreachable?):\n{}",
        String::from_utf8_lossy(&env.stderr)
    );
    let venv = String::from_utf8_lossy(&env.stdout).trim().to_string();
    let bad = scratch_dir("k8s").join("bad-pod.yaml");
    let out = Command::new(format!("{venv}/bin/python"))
        .arg(art.workspace.join("tests/cdi/validate.py"))
        .arg(&art.cli)
        .arg(&art.workspace)
        .arg(format!("{venv}/bin/kubernetes-validate"))
        .arg(&bad)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let passes = text.lines().filter(|l| l.starts_with("PASS ")).count();
    assert_eq!(passes, 10, "{text}");
}
