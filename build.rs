//! Link flags of the interposer (the cdylib only).
//!
//! - `-Bsymbolic-functions`: every reference this library makes to its own functions (the
//!   addresses `hooks!` hands out, its internal calls) binds to its own code at link time.
//!   Without it they go through the global scope, where an executable exporting its own
//!   `cuMemAlloc_v2` (linked with `-rdynamic`) or an earlier preload would win.
//! - Versioned `dlsym` (`dlsym@GLIBC_2.2.5`, `dlsym@@GLIBC_2.34`): rustc hands the linker an
//!   anonymous version script, which GNU ld (bfd) refuses to combine with named versions;
//!   gold merges them. Where gold is missing the library keeps one unversioned `dlsym`
//!   (reached by every plain reference, but not by `dlvsym`), and the build says so.
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/dlsym.map");
    println!("cargo:rustc-check-cfg=cfg(versioned_dlsym)");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    let map = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("link/dlsym.map");
    let x86_64 = std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64");
    if x86_64 && linker_has_gold() {
        println!("cargo:rustc-cfg=versioned_dlsym");
        println!("cargo:rustc-cdylib-link-arg=-fuse-ld=gold");
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
            map.display()
        );
    } else if x86_64 {
        println!(
            "cargo:warning=no gold linker: dlsym is exported unversioned, so interposers \
             that find dlsym with dlvsym skip cuquota"
        );
    }
}

/// Whether the C compiler (rustc's linker driver) can link with gold.
fn linker_has_gold() -> bool {
    let cc = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".into());
    let out = std::env::temp_dir().join(format!("cuquota-gold-probe-{}", std::process::id()));
    let ok = Command::new(cc)
        .args(["-fuse-ld=gold", "-shared", "-x", "c", "/dev/null", "-o"])
        .arg(&out)
        .output()
        .is_ok_and(|o| o.status.success());
    let _ = std::fs::remove_file(&out);
    ok
}
