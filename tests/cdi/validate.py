"""Validates what cuquota ships for containers, offline: `cuquota cdi` specs against the CDI
JSON schema (tests/cdi/schema.json and defs.json, from the container-device-interface crate
1.1.1, Apache-2.0, the upstream CNCF schema), and deploy/kubernetes/pod.yaml with
kubernetes-validate --strict, and that the pod's containers mount and set what the spec's
device does (PyYAML comes with kubernetes-validate). A broken spec and a broken pod must be
refused, so the validators are shown to fail. The schema is only the first check: a CDI
library loads the spec in crates/cli's unit tests, and podman runs it in
tests/integration/containers.rs.
Prints one line per check; exits 1 on any failure.
Usage: validate.py CUQUOTA WORKSPACE KUBERNETES_VALIDATE"""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
from referencing import Registry, Resource

cuquota, workspace, kv = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
here = workspace / "tests/cdi"
schema = json.loads((here / "schema.json").read_text())
defs = json.loads((here / "defs.json").read_text())
from referencing.jsonschema import DRAFT7

registry = Registry().with_resource("defs.json", Resource.from_contents(defs, default_specification=DRAFT7))
validator = jsonschema.Draft7Validator(schema, registry=registry)
failed = False


def check(name, ok, detail=""):
    global failed
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    failed |= not ok


# `cuquota cdi` refuses host paths that are not there: a policy, a preload file and a state
# directory of the test's own.
host = Path(tempfile.mkdtemp(prefix="cuquota-cdi-"))
(host / "cuquota.conf").write_text("limit = 1GiB\n")
(host / "ld.so.preload").write_text("/usr/lib/cuquota/libcuquota.so\n")
(host / "state").mkdir()
paths = ["--policy", str(host / "cuquota.conf"), "--state-dir", str(host / "state")]

for args in ([], ["--ld-so-preload", str(host / "ld.so.preload")]):
    out = subprocess.run([cuquota, "cdi", *paths, *args], check=True, capture_output=True, text=True)
    spec = json.loads(out.stdout)
    errors = [e.message for e in validator.iter_errors(spec)]
    check(f"cuquota cdi {' '.join(args)} is a valid CDI spec", not errors, "; ".join(errors))
    # The edits are the device's: CDI libraries refuse a device without edits of its own.
    targets = sorted(m["containerPath"] for m in spec["devices"][0]["containerEdits"]["mounts"])
    want = ["/dev/shm/cuquota", "/etc/cuquota.conf", "/usr/lib/cuquota/libcuquota.so"]
    if args:
        want = sorted(want + ["/etc/ld.so.preload"])
    check(f"cuquota cdi {' '.join(args)} mounts", targets == want, str(targets))
    broken = dict(spec, devices=[{"containerEdits": {}}])
    check("a device without a name is refused", not validator.is_valid(broken))

pod = workspace / "deploy/kubernetes/pod.yaml"
# The pod makes by hand what the spec's device makes: the same paths and LD_PRELOAD.
import yaml

spec = json.loads(subprocess.run([cuquota, "cdi", *paths], check=True, capture_output=True, text=True).stdout)
shutil.rmtree(host)
edits = spec["devices"][0]["containerEdits"]
for c in [d for d in yaml.safe_load_all(pod.read_text()) if d["kind"] == "Pod"][0]["spec"]["containers"]:
    got = (sorted(m["mountPath"] for m in c["volumeMounts"]),
           [f"{e['name']}={e['value']}" for e in c["env"]])
    want = (sorted(m["containerPath"] for m in edits["mounts"]), edits["env"])
    check(f"pod.yaml container {c['name']} mounts and sets what the CDI spec does", got == want,
          "" if got == want else f"{got} != {want}")
run = subprocess.run([kv, "--strict", "-k", "1.31.0", str(pod)], capture_output=True, text=True)
check("deploy/kubernetes/pod.yaml is valid (Kubernetes 1.31, strict)", run.returncode == 0,
      (run.stdout + run.stderr).strip())
bad = Path(sys.argv[4]) if len(sys.argv) > 4 else here / "bad-pod.yaml"
bad.write_text(pod.read_text().replace("medium: Memory", "medium: Memory\n        size: 1Gi"))
run = subprocess.run([kv, "--strict", "-k", "1.31.0", str(bad)], capture_output=True, text=True)
check("a pod with an unknown field is refused", run.returncode != 0, run.stdout.strip()[:200])
sys.exit(1 if failed else 0)
