//! Real clients' driver loaders load the shim: ffmpeg's (`dlopen` + `dlsym` of a
//! fixed list, refusing to start when a name is missing) and PyCUDA's (an extension linked
//! against every function it uses, loaded with `-z now`), imitated by
//! `tests/clients/loaders.c` over the lists in `tests/clients/loader_names.h`. Both then do
//! what ffmpeg really does with the driver (pitched 2D frame copies, a context limit), what PyCUDA does with pointers (attributes,
//! advice, registered host memory) and
//! see `CUDA_ERROR_NOT_SUPPORTED` from what the shim cannot simulate; with and without the
//! interposer in front.

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the loader client in a scratch directory: `linked` against the shim with `-z now`.
fn build(linked: bool) -> PathBuf {
    let art = artifacts();
    let src = art.workspace.join("tests/clients");
    let dir = scratch_dir(if linked {
        "loader-linked"
    } else {
        "loader-dlsym"
    });
    let out = dir.join("loader");
    let mut cmd = Command::new("gcc");
    cmd.args(["-O1", "-Wall", "-Werror", "-I"])
        .arg(&src)
        .arg(src.join("loaders.c"))
        .arg("-o")
        .arg(&out);
    if linked {
        cmd.arg("-DLINKED").arg("-L").arg(&art.shim_dir).args([
            "-Wl,--no-as-needed",
            "-lcuda",
            "-Wl,-z,now",
        ]);
    }
    cmd.arg("-ldl");
    let res = cmd.output().expect("run gcc");
    assert!(
        res.status.success(),
        "gcc failed for the loader client:\n{}",
        String::from_utf8_lossy(&res.stderr)
    );
    out
}

const EXPECTED: &str = "\
init 0
ctx 0
setlimit 0
getlimit 0 67108864
pitch 0
htod2d 0
dtoh2d 0
frame same
badpitch 1
attr-type 0 2
attr-ordinal 0 0
attr-range 0 1 1536
advise 0
free 0
attr-freed 1
register 0
register-again 712
attr-host 0 1
registered-alias 0 1
memset-registered 0 7
unregister 0
unregister-again 713
moduleload 801
launch 801
glgetdevices 801
";

fn check(program: &Path, preload: bool) {
    let mut run = Run::program(program).arg("run");
    if !preload {
        run = run.no_preload();
    }
    let out = run.run();
    assert!(out.status.success(), "{out}");
    let (resolved, rest) = out.stdout.split_once('\n').unwrap();
    assert!(resolved.starts_with("resolved "), "{out}");
    assert_eq!(rest, EXPECTED, "{out}");
}

#[test]
fn an_ffmpeg_style_loader_finds_every_name_and_copies_frames() {
    let program = build(false);
    check(&program, false);
    check(&program, true);
}

#[test]
fn a_pycuda_style_binary_linked_with_z_now_loads() {
    let program = build(true);
    check(&program, false);
    check(&program, true);
}
