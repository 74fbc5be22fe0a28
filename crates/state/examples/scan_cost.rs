//! What reading other users' registry files with `pread` (a private copy) costs against
//! mapping one's own: `scan_cost N [CUQUOTA]` registers N living processes (held by this
//! process's locks) in a fresh state directory under /dev/shm, then times, with the files
//! first its own user's (mapped) and then uid 1's (copied; run it as root):
//! - `scan`: one read of every registry file, which a refusal's holder lookup makes;
//! - `top --json` and `metrics` of the `cuquota` binary at CUQUOTA, when given.
//!
//! Prints one `what owner ms` line per case (the median of 7 runs, each after a warm-up).

use cuquota_state::identity::Identity;
use cuquota_state::registry::{self, ProcessFile, Registration};
use std::path::Path;
use std::time::Instant;

fn median_ms(mut f: impl FnMut()) -> f64 {
    f();
    let mut runs: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[3]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u32 = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .expect("scan_cost N [CUQUOTA]");
    let cli = args.get(2);
    let dir = Path::new("/dev/shm").join(format!("cuquota-scan-cost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let argv = vec!["python".to_string(), "train.py".to_string()];
    let identity = Identity::default();
    let files: Vec<ProcessFile> = (0..n)
        .map(|i| {
            let who = Registration {
                pid: 1_000_000 + i,
                started_unix_ns: 1,
                host: "h",
                argv: &argv,
                group: None,
                observe: false,
                allocations_only: false,
                identity: &identity,
            };
            let f = ProcessFile::register(&dir, &who).expect("register");
            f.describe_device(0, [7; 16], 8 << 30, "Stand-in GPU");
            f
        })
        .collect();
    let processes = dir.join("processes");
    for (owner, uid) in [("own", None), ("foreign", Some(1))] {
        if let Some(uid) = uid {
            for e in std::fs::read_dir(&processes).unwrap().flatten() {
                std::os::unix::fs::chown(e.path(), Some(uid), Some(uid)).unwrap();
            }
        }
        let ms = median_ms(|| {
            let scan = registry::scan(&dir);
            assert_eq!(scan.processes.len(), n as usize, "{:?}", scan.notes);
        });
        println!("scan {owner} {n} {ms:.2}");
        for view in [&["top", "--json"][..], &["metrics"][..]] {
            let Some(cli) = cli else { continue };
            let ms = median_ms(|| {
                let out = std::process::Command::new(cli)
                    .args(view)
                    .arg("--state-dir")
                    .arg(&dir)
                    .output()
                    .unwrap();
                assert!(out.status.success());
            });
            println!("{} {owner} {n} {ms:.2}", view.join(" "));
        }
    }
    drop(files);
    let _ = std::fs::remove_dir_all(&dir);
}
