//! Link settings for the shim (the stand-in libcuda.so.1).
//!
//! * The soname is `libcuda.so.1`, like NVIDIA's driver library, so programs linked against
//!   the shim record the same DT_NEEDED entry as programs linked against the real one.
//! * `-Bsymbolic` binds the library's own references to its own exports. `cuGetProcAddress`
//!   hands out the addresses of the shim's exported functions; without it, an LD_PRELOADed
//!   interposer that defines the same symbols could be returned instead, and a hook that
//!   forwards to the "real" function it got from `cuGetProcAddress` would call itself.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    println!("cargo:rerun-if-changed=build.rs");
}
