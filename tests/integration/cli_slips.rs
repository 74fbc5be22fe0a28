//! Slips a newcomer makes with `cuquota run` and `cuquota set`, each caught before the
//! command starts with a line naming it and exit status 2 (as clap's own usage errors):
//! an option cuquota does not know, a unit split from its size, a per-GPU limit naming no
//! GPU the command would see (it would run with no limit at all), a misspelt or bad
//! `CUQUOTA_*` variable inherited, a trace path that cannot be written. Sizes that are valid
//! but may not say what was meant get a note. And `run --group` and `run --driver`.

use crate::common::{artifacts, scratch_dir, Client, Run, GIB, MIB};
use std::path::Path;

const OUT_OF_MEMORY: u64 = 2;

/// `cuquota ARGS…` with the shim as the driver and the test build's library.
fn cuquota(args: &[&str]) -> Run {
    Run::program(&artifacts().cli)
        .no_preload()
        .env_os("CUQUOTA_LIB", &artifacts().interposer)
        .args(args)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `cuquota run ARGS… touch MARKER` and asserts it was refused with exit status 2 and
/// the command never started; returns stderr.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = scratch_dir("cli-slips-refused");
    let marker = dir.join("ran");
    let _ = std::fs::remove_file(&marker);
    let out = cuquota(&["run"])
        .args(args)
        .args(&["touch", s(&marker)])
        .envs(env)
        .run();
    out.check_exit(2);
    assert!(!marker.exists(), "{args:?}: the command ran:\n{out}");
    out.stderr.join("\n")
}

#[test]
fn an_unknown_option_before_the_command_is_refused_naming_it() {
    let err = refused(&["--limt", "1GiB", "--"], &[]);
    assert!(
        err.contains("error: unexpected argument '--limt' found"),
        "{err}"
    );
    assert!(
        err.contains("a similar argument exists: '--limit'"),
        "{err}"
    );
    assert!(err.contains("use '-- --limt'"), "how to pass it: {err}");

    // The unit as a word of its own would have been the command.
    let err = refused(&["--limit", "1", "GiB", "--"], &[]);
    assert_eq!(
        err,
        "cuquota: --limit 1 GiB: the unit is a word of its own, so GiB would be the command; \
         write --limit 1GiB"
    );

    // Options after the command are the command's, with or without `--`.
    let client = Client::Linked.path();
    for args in [
        vec!["--limit", "1GiB", s(&client)],
        vec!["--limit", "1GiB", "--", s(&client)],
    ] {
        let out = cuquota(&["run"])
            .args(&args)
            .args(&["init", "alloc:2G", "alloc:512M"])
            .run();
        out.check_exit(0);
        out.check_rcs(&[0, OUT_OF_MEMORY, 0]);
    }
}

#[test]
fn limit_errors_speak_of_the_option_and_usage_errors_exit_2() {
    let err = refused(&["--limit", "6GBB"], &[]);
    assert_eq!(
        err,
        "cuquota: --limit \"6GBB\" is not valid: unknown unit \"GBB\"; use e.g. --limit 6GiB, \
         6144MiB, 75%, 0:6GiB,1:50% or none"
    );
    let err = refused(&["--limit", "18446744073709551615"], &[]);
    assert!(err.contains("give --limit none for no limit"), "{err}");
    assert!(!err.contains("CUQUOTA_LIMIT"), "{err}");

    // `set`: a bad value or name is a usage error (2), what the state refuses is not (1).
    let dir = scratch_dir("cli-slips-set");
    let state = dir.join("state");
    for (args, line) in [
        (
            vec!["set", "g", "--limit", "lots"],
            "cuquota: --limit lots: \"lots\" does not start with a number",
        ),
        (
            vec!["set", "a/b", "--limit", "1GiB"],
            "cuquota: group \"a/b\": a group name is 1 to 64 characters of A-Z a-z 0-9 . _ - (got \"a/b\")",
        ),
    ] {
        let out = cuquota(&args).args(&["--state-dir", s(&state)]).run();
        out.check_exit(2);
        assert_eq!(out.stderr, [line], "{args:?}");
    }
    assert!(!state.exists(), "a refused set made no state");
    let out = cuquota(&["set", "g", "--remove", "--state-dir", s(&state)]).run();
    out.check_exit(1);
}

#[test]
fn none_means_no_limit_in_run_as_in_set() {
    let client = Client::Linked.path();
    let ops = ["init", "alloc:2G"];
    // The environment's limit applies without --limit, and is lifted by --limit none.
    let out = cuquota(&["run", s(&client)])
        .args(&ops)
        .env("CUQUOTA_LIMIT", "1GiB")
        .run();
    out.check_rcs(&[0, OUT_OF_MEMORY]);
    for none in ["none", "Unlimited"] {
        let out = cuquota(&["run", "--limit", none, s(&client)])
            .args(&ops)
            .env("CUQUOTA_LIMIT", "1GiB")
            .run();
        out.check_exit(0);
        out.check_rcs(&[0, 0]);
        out.check_log(&format!(
            "GPU 0 summary: peak 2.00 GiB ({} bytes), no quota, 1 allocation, 0 refusals, 1 live at exit (2.00 GiB)",
            2 * GIB
        ));
    }
    let dir = scratch_dir("cli-slips-none");
    let out = cuquota(&["set", "g", "--limit", "none", "--state-dir", s(&dir)]).run();
    out.check_exit(0);
    assert!(
        out.stdout.contains("GPUs joining from now on get none"),
        "{out}"
    );
}

/// The stand-in's UUIDs: GPU-63757175-6f74-412d-b368-696d0000000N for physical device N.
fn uuid(n: u32) -> String {
    format!("GPU-63757175-6f74-412d-b368-696d{n:08x}")
}

#[test]
fn a_per_gpu_limit_naming_no_gpu_the_command_sees_fails_closed() {
    let hint = "(CUDA_VISIBLE_DEVICES renumbers from 0: name a GPU by its UUID, nvidia-smi -L, \
                to follow it)";
    let err = refused(&["--limit", "3:1GiB"], &[]);
    assert_eq!(
        err,
        format!(
            "cuquota: --limit 3:1GiB names GPU 3, which the command would not see, so it would \
             run with no limit; it sees GPU 0 ({}) {hint}",
            uuid(0)
        )
    );
    // Two GPUs, the second made the only one visible: it is GPU 0 to the command.
    let two = [("CUDA_SHIM_DEVICES", "2"), ("CUDA_VISIBLE_DEVICES", "1")];
    let err = refused(&["--limit", "1:1GiB"], &two);
    assert!(
        err.ends_with(&format!("it sees GPU 0 ({}) {hint}", uuid(1))),
        "{err}"
    );
    let other = uuid(0);
    let err = refused(&["--limit", &format!("{other}:1GiB")], &two);
    assert!(err.contains(&format!("names {other}, which")), "{err}");
    let err = refused(&["--limit", "0:1GiB"], &[("CUDA_VISIBLE_DEVICES", "")]);
    assert!(err.contains("it sees no GPU"), "{err}");

    // Named by its UUID, the visible GPU is capped.
    let client = Client::Linked.path();
    let limit = format!("{}:1GiB", uuid(1));
    let out = cuquota(&["run", "--limit", &limit, s(&client), "init", "alloc:2G"])
        .envs(&two)
        .run();
    out.check_exit(0);
    out.check_rcs(&[0, OUT_OF_MEMORY]);

    // A seen GPU beside an unseen one: the limit holds where it can, and the interposer
    // warns of the other, as before.
    let out = cuquota(&["run", "--limit", "0:1GiB,3:1GiB", s(&client)])
        .args(&["init", "alloc:2G"])
        .run();
    out.check_exit(0);
    out.check_rcs(&[0, OUT_OF_MEMORY]);
    assert!(
        out.cuquota_lines().iter().any(|l| l.contains(
            "CUQUOTA_LIMIT names GPU 3, which this process does not see, so that limit applies to no device"
        )),
        "{out}"
    );
}

/// `run --group` and `--state-dir` set what the interposer reads; run's checks and its audit
/// module (the deep-bound plugin is caught) stay.
#[test]
fn run_joins_a_group() {
    let dir = scratch_dir("cli-slips-group");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = cuquota(&["set", "team", "--limit", "64MiB", "--state-dir"])
        .arg(s(&dir.join("state")))
        .run();
    out.check_exit(0);

    let plugin = artifacts().clients_dir.join("deep_plugin.so");
    let host = artifacts().clients_dir.join("deep_host");
    let size = (48 * MIB).to_string();
    // A relative state directory is the one under run's working directory, whatever the
    // command does with its own.
    let out = cuquota(&["run", "--group", "team", "--state-dir", "state", "--"])
        .args(&[s(&host), s(&plugin), "deep", "dlsym", &size, &size])
        .cwd(&dir)
        .run();
    out.check_exit(0);
    out.check(0, "alloc", &[("rc", 0)]);
    out.check(1, "alloc", &[("rc", OUT_OF_MEMORY)]);

    // The same without --group: no limit, both fit.
    let out = cuquota(&["run", "--"])
        .args(&[s(&host), s(&plugin), "deep", "dlsym", &size, &size])
        .run();
    out.check(0, "alloc", &[("rc", 0)]);
    out.check(1, "alloc", &[("rc", 0)]);

    let err = refused(&["--group", "a/b"], &[]);
    assert_eq!(
        err,
        "cuquota: --group \"a/b\" is not valid: a group name is 1 to 64 characters of \
         A-Z a-z 0-9 . _ - (got \"a/b\")"
    );
    let file = dir.join("file");
    std::fs::write(&file, "").unwrap();
    let err = refused(&["--group", "team", "--state-dir", s(&file)], &[]);
    assert_eq!(
        err,
        format!("cuquota: --state-dir {}: not a directory", s(&file))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// With cuquota's library preloaded into `cuquota` itself (LD_PRELOAD exported, or
/// /etc/ld.so.preload), `run` does not ask the driver (that would make itself a governed
/// process): the command starts, and the interposer's own check at its first CUDA call is
/// what stands.
#[test]
fn run_leaves_the_check_to_the_interposer_when_preloaded_itself() {
    let client = Client::Linked.path();
    let out = Run::program(&artifacts().cli)
        .env_os("CUQUOTA_LIB", &artifacts().interposer)
        .args(&["run", "--limit", "3:1GiB", s(&client), "init"])
        .run();
    assert!(
        !out.stderr.iter().any(|l| l.starts_with("cuquota: --limit")),
        "{out}"
    );
    out.op(0, "init");
}

/// Every `CUQUOTA_*` variable the command would inherit is checked before it starts: an
/// unknown name (with the likely one), a bad value (in the variable's words); and the trace's
/// directory, given as an option or a variable.
#[test]
fn run_checks_the_inherited_variables_and_the_trace_path() {
    for (env, line) in [
        (
            ("CUQUOTA_LIMT", "6GiB"),
            "cuquota: CUQUOTA_LIMT is not a cuquota variable (did you mean CUQUOTA_LIMIT?); \
             correct or unset it",
        ),
        (
            ("CUQUOTA_LIMIT", "abc"),
            "cuquota: CUQUOTA_LIMIT=\"abc\" is not valid: \"abc\" does not start with a number; \
             use e.g. CUQUOTA_LIMIT=6GiB, 6144MiB, 75% or 0:6GiB,1:50%",
        ),
        (
            ("CUQUOTA_LOG_LEVEL", "loud"),
            "cuquota: CUQUOTA_LOG_LEVEL=\"loud\" is not valid (use warn, info or debug): the \
             command would run with the default, warn",
        ),
        (
            ("CUQUOTA_TRACE", "/nonexistent-cuquota-dir/t-%p.jsonl"),
            "cuquota: CUQUOTA_TRACE=\"/nonexistent-cuquota-dir/t-%p.jsonl\": there is no \
             directory /nonexistent-cuquota-dir",
        ),
    ] {
        assert_eq!(refused(&[], &[env]), line, "{env:?}");
    }
    let err = refused(&["--trace", "/nonexistent-cuquota-dir/t.jsonl"], &[]);
    assert_eq!(
        err,
        "cuquota: --trace \"/nonexistent-cuquota-dir/t.jsonl\": there is no directory \
         /nonexistent-cuquota-dir"
    );
    // An option replaces its variable, which is then not checked.
    let client = Client::Linked.path();
    let out = cuquota(&["run", "--limit", "1GiB", s(&client), "init", "alloc:2G"])
        .env("CUQUOTA_LIMIT", "abc")
        .run();
    out.check_exit(0);
    out.check_rcs(&[0, OUT_OF_MEMORY]);

    // An existing trace is never overwritten: the note says where this run's goes.
    let dir = scratch_dir("cli-slips-trace");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("t.jsonl");
    std::fs::write(&trace, "").unwrap();
    let out = cuquota(&["run", "--trace", s(&trace), s(&client), "init", "alloc:1M"]).run();
    out.check_exit(0);
    assert_eq!(
        out.stderr[0],
        format!(
            "cuquota: note: --trace \"{0}\": {0} exists, and a trace never overwrites a file: \
             this run's goes to {0}.1",
            s(&trace)
        )
    );
    assert!(std::fs::read_to_string(dir.join("t.jsonl.1"))
        .unwrap()
        .contains("\"type\":\"alloc\""));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The interposer itself names a misspelt variable once, at its first CUDA call, and never
/// in a process that does not use CUDA.
#[test]
fn the_library_names_a_misspelt_variable_once_at_the_first_cuda_call() {
    let out = Run::client(Client::Linked)
        .ops("init alloc:2G alloc:1G")
        .env("CUQUOTA_LIMT", "1GiB")
        .run();
    out.check_rcs(&[0, 0, 0]);
    out.check_log(
        "CUQUOTA_LIMT is not a cuquota variable (did you mean CUQUOTA_LIMIT?); it is ignored",
    );
    assert_eq!(
        out.cuquota_lines().len(),
        2,
        "that line and the summary: {out}"
    );
    let quiet = Run::program("/bin/sh")
        .args(&["-c", "echo ran"])
        .env("CUQUOTA_LIMT", "1GiB")
        .run();
    quiet.check_exit(0);
    assert!(quiet.stderr.is_empty(), "{quiet}");
}

/// Valid sizes that may not say what was meant get one note each, and run as before: a
/// number with no unit is bytes, a decimal unit is powers of ten, a limit above the GPU's
/// memory is never reached.
#[test]
fn surprising_sizes_get_a_note_and_run_as_given() {
    let client = Client::Linked.path();
    let notes = |out: &crate::common::Output| -> Vec<String> {
        out.stderr
            .iter()
            .filter(|l| l.starts_with("cuquota: note: "))
            .cloned()
            .collect()
    };
    let out = cuquota(&["run", "--limit", "12", s(&client), "init", "alloc:1K"]).run();
    out.check_exit(0);
    out.check_rcs(&[0, OUT_OF_MEMORY]);
    assert_eq!(
        notes(&out),
        [
            "cuquota: note: --limit 12 is 12 bytes (a number with no unit counts bytes: every \
          allocation larger is refused); for 12 GiB write --limit 12GiB"
        ]
    );
    // 12GB on the stand-in's 8 GiB GPU: decimal, and above its memory.
    let out = cuquota(&["run", "--limit", "12GB", s(&client), "init", "info"]).run();
    out.check_exit(0);
    assert_eq!(
        notes(&out),
        [
            "cuquota: note: --limit 12GB: 12GB is 12000000000 bytes = 11.18 GiB (GB is \
             decimal, 10^9 bytes); for 12 GiB = 12884901888 bytes write --limit 12GiB",
            "cuquota: note: --limit 12GB is more than the memory of GPU 0 (8.00 GiB): there the \
             GPU runs out before the quota does",
        ]
    );
    out.check(1, "info", &[("total", 8 * GIB)]);
    // The same from the environment, in the variable's words.
    let out = cuquota(&["run", s(&client), "init"])
        .env("CUQUOTA_LIMIT", "512")
        .run();
    assert_eq!(
        notes(&out),
        [
            "cuquota: note: CUQUOTA_LIMIT=512 is 512 bytes (a number with no unit counts bytes: \
          every allocation larger is refused); for 512 GiB write CUQUOTA_LIMIT=512GiB"
        ]
    );
    for quiet in ["6GiB", "75%", "0:1GiB"] {
        let out = cuquota(&["run", "--limit", quiet, s(&client), "init"]).run();
        out.check_exit(0);
        assert_eq!(notes(&out), Vec::<String>::new(), "{quiet}");
    }
}

/// `--driver DIR` loads the driver from DIR for the command alone, and asks that driver
/// which GPUs the command would see.
#[test]
fn run_driver_names_the_driver_for_the_command_alone() {
    let client = Client::Linked.path();
    let shim = artifacts().shim_dir.clone();
    let out = cuquota(&["run", "--driver", s(&shim), "--limit", "1GiB", s(&client)])
        .args(&["init", "alloc:2G"])
        .env("LD_LIBRARY_PATH", "/nonexistent-cuquota-dir")
        .run();
    out.check_exit(0);
    out.check_rcs(&[0, OUT_OF_MEMORY]);
    let err = refused(
        &["--driver", s(&shim), "--limit", "3:1GiB"],
        &[("LD_LIBRARY_PATH", "/nonexistent-cuquota-dir")],
    );
    assert!(err.contains("it sees GPU 0 (GPU-"), "{err}");
    let err = refused(&["--driver", "/nonexistent-cuquota-dir"], &[]);
    assert_eq!(
        err,
        "cuquota: --driver /nonexistent-cuquota-dir: there is no libcuda.so.1 in it \
         (scripts/shim.sh prints the stand-in's directory; python3 -m cuquota.shim after pip \
         install)"
    );
}

/// `cuquota cdi` names only paths that exist on the host (a missing mount fails every
/// container that asks for the device): the library defaults to the one `run` would preload.
#[test]
fn cdi_refuses_a_path_that_is_not_there() {
    let dir = scratch_dir("cli-slips-cdi");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("cuquota.conf");
    std::fs::write(&policy, "limit = 1GiB\n").unwrap();
    let missing = dir.join("nowhere.conf");
    let out = cuquota(&["cdi", "--policy", s(&missing)]).run();
    out.check_exit(2);
    assert_eq!(
        out.stderr,
        [format!(
            "cuquota: --policy {}: there is no such file (write the policy first, e.g. the line \
             limit = 6GiB; see the README's policy section)",
            s(&missing)
        )]
    );
    assert!(out.stdout.is_empty(), "no spec: {out}");
    let out = cuquota(&[
        "cdi",
        "--policy",
        s(&policy),
        "--ld-so-preload",
        s(&missing),
    ])
    .run();
    out.check_exit(2);
    // The defaults: the library beside cuquota (here CUQUOTA_LIB's), a state directory that
    // is there.
    let out = cuquota(&["cdi", "--policy", s(&policy), "--state-dir", s(&dir)]).run();
    out.check_exit(0);
    let spec: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let mounts = &spec["devices"][0]["containerEdits"]["mounts"];
    let interposer = artifacts().interposer.canonicalize().unwrap();
    assert_eq!(mounts[0]["hostPath"], s(&interposer));
    assert_eq!(mounts[1]["hostPath"], s(&policy.canonicalize().unwrap()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run --stacks N` records call stacks (CUQUOTA_STACKS) in the trace, as the variable does;
/// a depth beyond the most is refused before the command starts.
#[test]
fn run_stacks_records_call_stacks() {
    let dir = scratch_dir("cli-slips-stacks");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("t.jsonl");
    let client = Client::Linked.path();
    let out = cuquota(&["run", "--stacks", "8", "--trace", s(&trace), s(&client)])
        .args(&["init", "alloc:1M", "alloc:2M"])
        .run();
    out.check_exit(0);
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().any(|l| l["type"] == "stack"), "{text}");
    let allocs: Vec<_> = lines.iter().filter(|l| l["type"] == "alloc").collect();
    assert_eq!(allocs.len(), 2, "{text}");
    assert!(allocs.iter().all(|a| a["stack"].is_u64()), "{text}");
    let err = refused(&["--stacks", "129"], &[]);
    assert_eq!(
        err,
        "cuquota: --stacks 129: give frames from 0 (off) to 128"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Usage slips outside `run`: `set NAME` alone shows both forms of `set`; `metrics --listen`
/// with no address is a usage error (2) while a port that cannot be bound is not (1); `plot
/// -o -` writes the SVG to standard output, as its help says; `-h` lists `run` first and
/// `cdi` last.
#[test]
fn usage_slips_outside_run() {
    let out = cuquota(&["set", "g"]).run();
    out.check_exit(2);
    let err = out.stderr.join("\n");
    assert!(
        err.contains(
            "Usage: cuquota set NAME --limit SPEC [--state-dir DIR]\n       cuquota set NAME \
             --remove [--state-dir DIR]"
        ),
        "{err}"
    );
    let out = cuquota(&["metrics", "--listen", "bad"]).run();
    out.check_exit(2);
    assert_eq!(
        out.stderr,
        ["cuquota: --listen bad: invalid socket address (give HOST:PORT, e.g. 127.0.0.1:9400)"]
    );
    // A port already taken: an address, but not one to serve at.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = cuquota(&["metrics", "--listen", &addr]).run();
    out.check_exit(1);
    assert!(
        out.stderr[0].starts_with(&format!("cuquota: --listen {addr}: ")),
        "{out}"
    );

    let help = cuquota(&["-h"]).run();
    help.check_exit(0);
    let commands: Vec<&str> = help
        .stdout
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        commands,
        ["run", "report", "export", "plot", "set", "top", "metrics", "cdi", "help"]
    );
    let plot_help = cuquota(&["plot", "--help"]).run();
    assert!(
        plot_help.stdout.contains("(`-`: standard output)"),
        "{plot_help}"
    );
    let dir = scratch_dir("cli-slips-plot");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("t.jsonl");
    let client = Client::Linked.path();
    cuquota(&["run", "--trace", s(&trace), s(&client), "init", "alloc:1M"])
        .run()
        .check_exit(0);
    let out = cuquota(&["plot", s(&trace), "-o", "-"]).run();
    out.check_exit(0);
    assert!(out.stdout.trim_end().ends_with("</svg>"), "{out}");
    assert!(out.stdout.contains("<svg"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
