//! Link flags of the interposer (the cdylib only).
//!
//! - `-Bsymbolic-functions`: every reference this library makes to its own functions (the
//!   addresses `hooks!` hands out, its internal calls) binds to its own code at link time.
//!   Without it they go through the global scope, where an executable exporting its own
//!   `cuMemAlloc_v2` (linked with `-rdynamic`) or an earlier preload would win.
//! - Versioned `dlsym` (`dlsym@GLIBC_2.2.5`, `dlsym@@GLIBC_2.34`, link/dlsym.map): rustc
//!   hands the linker an anonymous version script of its own, which GNU ld (bfd) refuses to
//!   combine with named versions; lld (rustc's own `rust-lld`, its default linker on x86_64
//!   Linux since 1.90) and gold merge them. So the link uses rust-lld, else gold; with
//!   neither the library keeps one unversioned `dlsym` (reached by every plain reference,
//!   not by `dlvsym`), and the build says so.
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/dlsym.map");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    println!("cargo:rustc-check-cfg=cfg(versioned_dlsym)");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    // zig's linker driver (`cargo zigbuild`, the manylinux2014 wheel) knows only -Bsymbolic,
    // which binds data references too: the same for a library that exports no data.
    let zig = std::env::var("RUSTC_LINKER").is_ok_and(|l| l.contains("zigcc"));
    let symbolic = if zig {
        "-Bsymbolic"
    } else {
        "-Bsymbolic-functions"
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,{symbolic}");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("x86_64") {
        return;
    }
    let linker = if let Some(dir) = rust_lld_dir() {
        vec![format!("-B{}", dir.display()), "-fuse-ld=lld".to_string()]
    } else if links_with(&["-fuse-ld=gold"]) {
        vec!["-fuse-ld=gold".to_string()]
    } else {
        println!(
            "cargo:warning=neither rust-lld nor gold: dlsym is exported unversioned, so \
             interposers that find dlsym with dlvsym skip cuquota"
        );
        return;
    };
    let map = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("link/dlsym.map");
    println!("cargo:rustc-cfg=versioned_dlsym");
    for arg in linker {
        println!("cargo:rustc-cdylib-link-arg={arg}");
    }
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}

/// The directory with rustc's own `ld.lld` for the C compiler driver (`gcc-ld`), if it
/// links.
fn rust_lld_dir() -> Option<PathBuf> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET").ok()?;
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    let dir = sysroot.join("lib/rustlib").join(target).join("bin/gcc-ld");
    let b = format!("-B{}", dir.display());
    (dir.join("ld.lld").is_file() && links_with(&[&b, "-fuse-ld=lld"])).then_some(dir)
}

/// Whether the C compiler (rustc's linker driver) links a shared object with `flags`.
fn links_with(flags: &[&str]) -> bool {
    let cc = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".into());
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("link-probe.so");
    let ok = Command::new(cc)
        .args(flags)
        .args(["-shared", "-x", "c", "/dev/null", "-o"])
        .arg(&out)
        .output()
        .is_ok_and(|o| o.status.success());
    let _ = std::fs::remove_file(&out);
    ok
}
