//! The plugin's `plugin_version` must equal the running Slurm's major.minor, so it is built
//! for one Slurm release: `CUQUOTA_SLURM_VERSION=MAJOR.MINOR[.MICRO]` at build time, else
//! the version in the installed `slurm/slurm_version.h` (libslurm-dev), else 22.05.
fn main() {
    println!("cargo:rerun-if-env-changed=CUQUOTA_SLURM_VERSION");
    println!("cargo:rerun-if-changed=/usr/include/slurm/slurm_version.h");
    let from_env = std::env::var("CUQUOTA_SLURM_VERSION").ok();
    // `#define SLURM_VERSION_NUMBER 0x160508`: 22.05.8.
    let from_header = std::fs::read_to_string("/usr/include/slurm/slurm_version.h")
        .ok()
        .and_then(|h| {
            let hex = h
                .lines()
                .find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER"))?;
            let n = u32::from_str_radix(hex.trim().trim_start_matches("0x"), 16).ok()?;
            Some(format!("{}.{:02}.{}", n >> 16, (n >> 8) & 0xff, n & 0xff))
        });
    let text = from_env.or(from_header).unwrap_or_else(|| "22.05".into());
    let mut parts = text.split(['.', '-']).map(|p| p.parse::<u32>());
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        panic!("CUQUOTA_SLURM_VERSION={text:?}: use MAJOR.MINOR, e.g. 23.11");
    };
    let micro = parts.next().and_then(Result::ok).unwrap_or(0);
    println!(
        "cargo:rustc-env=CUQUOTA_SLURM_VERSION_NUMBER={}",
        (major << 16) | (minor << 8) | micro
    );
    println!("cargo:rustc-env=CUQUOTA_SLURM_VERSION_TEXT={major}.{minor}");
}
