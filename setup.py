"""Builds the wheel: one `cargo build --release` of the interposer, the CLI, the audit module
and the shim, copied into the package:

    cuquota/bin/cuquota                   the CLI (the `cuquota` command execs it; it finds
                                          ../lib/libcuquota.so beside itself)
    cuquota/lib/libcuquota.so             the interposer
    cuquota/lib/libcuquota_audit.so       the rtld-audit module `cuquota run` sets as LD_AUDIT
    cuquota/shim/libcuda.so.1             the shim (a stand-in driver, to try it without a GPU)
    cuquota/shim/libcuda.so, libnvidia-ml.so.1
                                          tiny libraries (gcc) that need libcuda.so.1: a wheel
                                          holds no symbolic links, and the shim must be one
                                          object under its three names

Not maturin: it packs one crate (its `bin` binding the binary alone, no cdylib). Not
setuptools-rust: its NoBinding cdylib is renamed with the CPython suffix
(libcuquota.cpython-311-x86_64-linux-gnu.so) and makes the wheel per Python version. These
are no Python extensions: the wheel is py3-none-<platform>, the platform tag
manylinux_2_<N>_<arch> from the newest glibc symbol version the artifacts need (read with
objdump from binutils, which gcc brings, as is strip), which `auditwheel show` confirms.

By default cargo builds for the machine's own glibc (manylinux_2_34 on Debian 12). With
CUQUOTA_GLIBC=2.17 (what `scripts/build-wheel.sh --manylinux2014` sets, with cargo-zigbuild
and zig on PATH) it runs `cargo zigbuild --target x86_64-unknown-linux-gnu.2.17`, which
links against glibc 2.17's symbol versions: the wheel is then manylinux_2_17 (manylinux2014).
"""

import json
import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

# Artifact (its package's manifest, the file cargo writes) → place in the package.
ARTIFACTS = {
    ("crates/cli/Cargo.toml", "cuquota"): "bin/cuquota",
    ("Cargo.toml", "libcuquota.so"): "lib/libcuquota.so",
    ("crates/audit/Cargo.toml", "libcuquota_audit.so"): "lib/libcuquota_audit.so",
    ("shim/Cargo.toml", "libcuda.so"): "shim/libcuda.so.1",
}
PACKAGES = ["cuquota", "cuquota-cli", "cuquota-audit", "cuquota-shim"]
HERE = os.path.dirname(os.path.abspath(__file__))


def cargo_build():
    """Builds the four artifacts; returns {(manifest, file name): path}."""
    command = ["cargo", "build", "--release", "--locked", "--message-format=json-render-diagnostics"]
    glibc = os.environ.get("CUQUOTA_GLIBC", "")
    if glibc:
        if not re.fullmatch(r"2\.\d+", glibc):
            sys.exit(f"cuquota: CUQUOTA_GLIBC={glibc!r}: expected a glibc version such as 2.17")
        command[1:2] = ["zigbuild", "--target", f"{os.uname().machine}-unknown-linux-gnu.{glibc}"]
    for package in PACKAGES:
        command += ["-p", package]
    print("cuquota: " + " ".join(command) + " (minutes the first time)", file=sys.stderr, flush=True)
    out = subprocess.run(command, cwd=HERE, stdout=subprocess.PIPE, check=True).stdout
    found = {}
    for line in out.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact":
            continue
        manifest = os.path.relpath(message["manifest_path"], HERE)
        for path in message.get("filenames", []):
            found[(manifest, os.path.basename(path))] = path
    missing = [key for key in ARTIFACTS if key not in found]
    if missing:
        sys.exit(f"cuquota: cargo built no {missing}")
    return found


def stub(shim_dir, name):
    """A library named `name` with no code of its own that needs libcuda.so.1 beside it."""
    source = os.path.join(shim_dir, "stub.c")
    with open(source, "w") as f:
        f.write("/* " + name + ": the shim is libcuda.so.1 beside this library */\n")
    subprocess.run(
        ["gcc", "-shared", "-nostdlib", "-o", os.path.join(shim_dir, name), source,
         "-Wl,-soname," + name, "-Wl,--no-as-needed", "-L" + shim_dir, "-l:libcuda.so.1",
         "-Wl,-rpath,$ORIGIN"],
        check=True,
    )
    os.unlink(source)


class build_with_cargo(build_py):
    def run(self):
        super().run()
        built = cargo_build()
        package = os.path.join(self.build_lib, "cuquota")
        for key, place in ARTIFACTS.items():
            target = os.path.join(package, place)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(built[key], target)
            os.chmod(target, 0o755)
            # The release profile keeps line tables (debug = 1) for backtraces during
            # development; the wheel drops them (a third of its size). Symbols stay.
            subprocess.run(["strip", "--strip-debug", target], check=True)
        shim_dir = os.path.join(package, "shim")
        for name in ("libcuda.so", "libnvidia-ml.so.1"):
            stub(shim_dir, name)


def glibc_floor(paths):
    """The newest GLIBC_x.y version the files need, as (x, y)."""
    newest = (2, 17)
    for path in paths:
        text = subprocess.run(["objdump", "-p", path], stdout=subprocess.PIPE, check=True, text=True).stdout
        references = text.split("Version References:", 1)[-1] if "Version References:" in text else ""
        for major, minor in re.findall(r"\bGLIBC_(\d+)\.(\d+)", references):
            newest = max(newest, (int(major), int(minor)))
    return newest


class platform_wheel(bdist_wheel):
    """py3-none-manylinux_2_<N>_<arch>: no Python extension inside, binaries for one glibc."""

    def get_tag(self):
        package = os.path.join(self.bdist_dir, "cuquota")
        files = []
        for root, _, names in os.walk(package):
            files += [os.path.join(root, n) for n in names if n.endswith((".so", ".so.1")) or n == "cuquota"]
        major, minor = glibc_floor(files)
        arch = os.uname().machine
        return "py3", "none", f"manylinux_{major}_{minor}_{arch}"


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": build_with_cargo, "bdist_wheel": platform_wheel},
)
