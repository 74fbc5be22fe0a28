//! Command lines are whatever their owner chose: three members of a group hold memory under
//! hostile argv[0]s — ESC `[2J` (clear the screen), an OSC window title (ESC `]0;…` BEL)
//! and a one-character CSI (U+009B); a newline before a forged `cuquota[1]: GPU 0 summary:
//! all fine` line; bytes that are not UTF-8. Every view shows them escaped, each where it
//! belongs and nowhere else: another member's refusal line, `top --once`, the live view
//! under tmux (its window title untouched), `report` of their traces and of the refused
//! member's, and `plot` (well-formed XML). `top --json` keeps them exactly, as JSON does.

use super::*;
use crate::cli::xml;
use crate::common::{h, Run, Running};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// The group's limit, and what each hostile member holds (most first, as holders are named).
const LIMIT: &str = "1GiB";
const HELD: [u64; 3] = [300 * MIB, 200 * MIB, 100 * MIB];

/// The hostile argv[0]s, raw.
fn hostile_arg0s() -> [OsString; 3] {
    [
        OsString::from("\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}2J"),
        OsString::from("x\ncuquota[1]: GPU 0 summary: all fine"),
        OsString::from_vec(b"bad\xff\x9b2J".to_vec()),
    ]
}

/// The same, as a viewer must show them: written out, one line each.
const SHOWN: [&str; 3] = [
    "\\x1b[2J\\x1b]0;pwned\\x07\\u{9b}2J",
    "x\\ncuquota[1]: GPU 0 summary: all fine",
    "bad\\xff\\x9b2J",
];

/// Hostile argv[0] `i` as the interposer keeps a command line: text, with the bytes that
/// are not UTF-8 written out.
fn as_text(i: usize) -> String {
    match i {
        2 => SHOWN[2].to_string(),
        i => hostile_arg0s()[i].to_str().unwrap().to_string(),
    }
}

/// The forged line, which must never start a line of any output.
const FORGED: &str = "cuquota[1]: GPU 0 summary: all fine";

/// The ops after argv[0] of hostile member `i`.
fn ops(i: usize) -> String {
    format!("init alloc:{}M sleep:60000", HELD[i] / MIB)
}

/// Three hostile members of group `svc` holding [`HELD`], each tracing to `hostile-I.jsonl`
/// under the state directory.
struct Hostile {
    state: PathBuf,
    members: Vec<Running>,
}

impl Hostile {
    fn start(tag: &str) -> Hostile {
        let state = scratch_dir(tag);
        let members = (hostile_arg0s().into_iter().enumerate())
            .map(|(i, arg0)| {
                let mut m = Run::client(Client::Dlsym)
                    .arg0(arg0)
                    .ops(&ops(i))
                    .env("CUQUOTA_STATE_DIR", state.to_str().unwrap())
                    .env("CUQUOTA_GROUP", "svc")
                    .env("CUQUOTA_LIMIT", LIMIT)
                    .env(
                        "CUQUOTA_TRACE",
                        Hostile::trace_of(&state, i).to_str().unwrap(),
                    )
                    .timeout(Duration::from_secs(120))
                    .start();
                m.wait_for(|l| l.op == "alloc" && l.get("rc") == Some("0"));
                m
            })
            .collect();
        Hostile { state, members }
    }

    fn trace_of(state: &Path, i: usize) -> PathBuf {
        state.join(format!("hostile-{i}.jsonl"))
    }

    fn trace(&self, i: usize) -> PathBuf {
        Hostile::trace_of(&self.state, i)
    }

    fn pid(&self, i: usize) -> u32 {
        self.members[i].pid()
    }

    /// Each member's row in `top`, under its group: its pid, then its command escaped.
    fn rows(&self) -> Vec<String> {
        (SHOWN.iter().enumerate())
            .map(|(i, shown)| format!("    {} {shown} {}", self.pid(i), ops(i)))
            .collect()
    }

    /// SIGTERM to each (their traces end with a summary), and their exits.
    fn stop(self) {
        for m in self.members {
            // SAFETY: kill has no memory preconditions; the pid is our own living child.
            assert_eq!(unsafe { libc::kill(m.pid() as i32, libc::SIGTERM) }, 0);
            let out = m.wait();
            assert!(!out.timed_out, "{out}");
        }
    }
}

/// Asserts `text` holds no control character but line ends, and no line that starts with
/// the forged one.
fn one_line_each(what: &str, text: &str) {
    for line in text.lines() {
        assert!(!line.chars().any(char::is_control), "{what}: {line:?}");
        assert!(
            !line.contains('\u{fffd}'),
            "{what}: a byte dropped: {line:?}"
        );
        assert!(!line.starts_with(FORGED), "{what}: a forged line:\n{text}");
    }
}

/// The refusal line names the three holders with their commands escaped, on one line;
/// the reports of their traces and of the refused member's show them escaped; the plot of
/// each is well-formed XML with the command in its title.
#[test]
fn a_refusal_names_hostile_holders_on_one_line_and_reports_and_plots_escape_them() {
    let hostile = Hostile::start("foreign-refusal");
    let victim_trace = hostile.state.join("victim.jsonl");
    let victim = Run::client(Client::Dlsym)
        .ops("init alloc:512M")
        .env("CUQUOTA_STATE_DIR", hostile.state.to_str().unwrap())
        .env("CUQUOTA_GROUP", "svc")
        .env("CUQUOTA_LIMIT", LIMIT)
        .env("CUQUOTA_TRACE", victim_trace.to_str().unwrap())
        .run();
    victim.check_exit(0);
    victim.check(1, "alloc", &[("rc", OUT_OF_MEMORY)]);
    // Each holder's command as the refusal names it: shortened, then escaped.
    let commands: Vec<String> = (0..3)
        .map(|i| {
            let short =
                cuquota_format::holder::short_command(&format!("{} {}", as_text(i), ops(i)));
            cuquota_format::escape::text(&short).into_owned()
        })
        .collect();
    assert_eq!(commands[0], format!("{} {}", SHOWN[0], ops(0)));
    // Cut at 48 characters of the command (the newline one of them), past the forged words.
    assert_eq!(commands[1], format!("{} init alloc…", SHOWN[1]));
    assert_eq!(commands[2], format!("{} {}", SHOWN[2], ops(2)));
    victim.check_log(&format!(
        "GPU 0 refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: group svc: quota \
         1.00 GiB, this process 0 B, 3 other members 600.00 MiB, 424.00 MiB left; held by \
         pid {} ({}) {}; pid {} ({}) {}; pid {} ({}) {}",
        hostile.pid(0),
        commands[0],
        h(HELD[0]),
        hostile.pid(1),
        commands[1],
        h(HELD[1]),
        hostile.pid(2),
        commands[2],
        h(HELD[2]),
    ));
    let refusals = victim.stderr.iter().filter(|l| l.contains("GPU 0 refused"));
    assert_eq!(refusals.count(), 1, "{victim}");
    one_line_each("the refused member's stderr", &victim.stderr.join("\n"));

    hostile_reports_and_plots(hostile, &victim_trace, &commands);
}

fn hostile_reports_and_plots(hostile: Hostile, victim_trace: &Path, commands: &[String]) {
    let pids: Vec<u32> = (0..3).map(|i| hostile.pid(i)).collect();
    let traces: Vec<PathBuf> = (0..3).map(|i| hostile.trace(i)).collect();
    hostile.stop();
    // The refused member's trace keeps the holders' commands as they were (JSON escapes).
    let text = std::fs::read_to_string(victim_trace).unwrap();
    let refused: Value = (text.lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["type"] == "refused")
        .unwrap_or_else(|| panic!("no refusal in\n{text}"));
    assert_eq!(
        refused["holders"][0]["command"],
        "\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}2J init alloc:300M sleep:60000"
    );

    let mut args = vec!["report".to_string(), victim_trace.display().to_string()];
    args.extend(traces.iter().map(|t| t.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let report = String::from_utf8(cuquota_ok(&args, None).stdout).unwrap();
    one_line_each("report", &report);
    for i in 0..3 {
        for want in [
            format!(" · rank 0 · pid {} · {} {}\n", pids[i], SHOWN[i], ops(i)),
            format!("pid {} ({}) {}", pids[i], commands[i], h(HELD[i])),
        ] {
            assert!(report.contains(&want), "missing {want:?} in\n{report}");
        }
    }
    assert_eq!(
        report.matches("; stopped by SIGTERM").count(),
        3,
        "{report}"
    );

    for (i, trace) in traces.iter().enumerate() {
        let svg_path = trace.with_extension("svg");
        cuquota_ok(
            &[
                "plot",
                trace.to_str().unwrap(),
                "-o",
                svg_path.to_str().unwrap(),
            ],
            None,
        );
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        xml::parse(&svg).unwrap_or_else(|e| panic!("plot of {}: not XML: {e}", SHOWN[i]));
        assert_eq!(
            xml::texts(&svg)[0],
            format!("Device memory in use: {} {}", SHOWN[i], ops(i))
        );
    }
}

/// `top --once` shows each hostile member on its row, escaped; `top --json` keeps the
/// command exactly.
#[test]
fn top_once_shows_hostile_commands_escaped_and_json_keeps_them() {
    let hostile = Hostile::start("foreign-top");
    let out = Command::new(&artifacts().cli)
        .args(["top", "--once", "--state-dir"])
        .arg(&hostile.state)
        .env("COLUMNS", "200")
        .output()
        .expect("run cuquota top --once");
    assert!(out.status.success(), "{out:?}");
    let frame = String::from_utf8(out.stdout).unwrap();
    one_line_each("top --once", &frame);
    assert!(frame.contains("group svc (3 members)"), "{frame}");
    for row in hostile.rows() {
        let line = frame.lines().find(|l| l.starts_with(&row));
        assert!(line.is_some(), "no row {row:?} in\n{frame}");
    }
    let g = group_json(&hostile.state, "svc").expect("svc in top --json");
    let argv = |pid: u32| {
        let procs = g["processes"].as_array().unwrap();
        let p = procs.iter().find(|p| p["pid"] == pid).unwrap();
        p["argv"].as_str().unwrap().to_string()
    };
    assert_eq!(
        argv(hostile.pid(0)),
        format!("\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}2J {}", ops(0))
    );
    assert_eq!(argv(hostile.pid(1)), format!("x\n{FORGED} {}", ops(1)));
    // Bytes that are not UTF-8 were written out where the command line became text.
    assert_eq!(argv(hostile.pid(2)), format!("bad\\xff\\x9b2J {}", ops(2)));
    hostile.stop();
}

/// The live view in a real terminal: the rows show the escapes as text, the screen is not
/// cleared under them and the window title stays tmux's.
#[test]
fn the_live_view_shows_hostile_commands_and_keeps_its_title() {
    if !have("tmux") {
        return;
    }
    let hostile = Hostile::start("foreign-live");
    let tmux = Tmux::top("foreign", &hostile.state, (200, 30));
    let title = || {
        let out = tmux.cmd(&["display-message", "-p", "-t", "top", "#{pane_title}"]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let before = title();
    // A capture may catch the terminal mid-frame: wait for one with every row drawn.
    let rows = hostile.rows();
    let drawn = |s: &String| {
        s.contains("group svc (3 members)")
            && rows.iter().all(|row| s.lines().any(|l| l.starts_with(row)))
    };
    let screen = wait_for(Duration::from_secs(20), "the members' rows", || {
        Some(tmux.screen()).filter(drawn)
    });
    assert!(screen.starts_with("cuquota top"), "{screen}");
    one_line_each("the live view", &screen);
    assert_ne!(title(), "pwned");
    assert_eq!(title(), before, "the window title changed");
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    wait_for(Duration::from_secs(10), "cuquota top to quit on q", || {
        (!tmux.running()).then_some(())
    });
    hostile.stop();
}
