//! `cuquota top` and `cuquota metrics` against real processes on the shim: a group member
//! holds memory in the background while the views read the state directory — `--once` and
//! `--json`, the live view under a real terminal (tmux: start, read the screen, press keys,
//! quit), `promtool check metrics` on the exposition, and a real Prometheus server scraping
//! `cuquota metrics --listen` on loopback. Every process is bounded and killed on drop.
//!
//! tmux, promtool and prometheus come from Debian's packages (scripts/test.sh installs
//! them). Without them a test fails, unless scripts/test.sh found no apt-get and said so
//! (CUQUOTA_TEST_NO_APT=1): then it prints a loud SKIPPED line.

// Views read with members dead: SIGKILLed, exited holding memory, all gone.
mod living;
// Members in PID namespaces: host PIDs in the views, NVML's process list.
mod namespaces;
// Hostile command lines: escaped in the refusal line, top, the live view, report, plot.
mod foreign_strings;

use crate::common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (and reaped) when dropped.
struct Bg(Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `tool` is there; false (with a loud line) only where the script had no apt-get.
fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return true;
    }
    if std::env::var_os("CUQUOTA_TEST_NO_APT").is_some() {
        eprintln!(
            "\n*** SKIPPED: {tool} is not installed and scripts/test.sh had no apt-get to \
             install it: this test did NOT run ***\n"
        );
        return false;
    }
    panic!("{tool} is not installed: apt-get install tmux prometheus (scripts/test.sh does)");
}

/// A group member on the shim holding `size` for up to a minute.
fn member(state: &Path, group: &str, limit: &str, size: &str) -> Bg {
    member_ops(
        state,
        group,
        limit,
        &["init", &format!("alloc:{size}"), "sleep:60000"],
    )
}

/// A group member on the shim running `ops`.
fn member_ops(state: &Path, group: &str, limit: &str, ops: &[&str]) -> Bg {
    let art = artifacts();
    let child = Command::new(Client::Dlsym.path())
        .args(ops)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LD_LIBRARY_PATH", &art.shim_dir)
        .env("LD_PRELOAD", &art.interposer)
        .env("CUQUOTA_STATE_DIR", state)
        .env("CUQUOTA_GROUP", group)
        .env("CUQUOTA_LIMIT", limit)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a group member");
    Bg(child)
}

fn cli(args: &[&str], state: &Path) -> String {
    let out = Command::new(&artifacts().cli)
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .env_remove("CUQUOTA_STATE_DIR")
        .output()
        .expect("run cuquota");
    assert!(out.status.success(), "cuquota {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// `cuquota top --json`'s entry of group `name` on the first GPU it has one.
fn group_json(state: &Path, name: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(&cli(&["top", "--json"], state)).unwrap();
    v["gpus"]
        .as_array()?
        .iter()
        .flat_map(|g| g["groups"].as_array().cloned().unwrap_or_default())
        .find(|g| g["name"] == name)
}

/// Polls `what` every 100 ms until it gives Some, for at most `limit`.
fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A member of `svc` (limit 1 GiB) holding 256 MiB, seen by `top --json` both in the group's
/// counters and in the member's own row (a view may read the group file a moment before the
/// member's registry file shows the same).
fn holding_group(state: &Path) -> (Bg, Value) {
    let bg = member(state, "svc", "1GiB", "256M");
    let g = wait_for(Duration::from_secs(30), "the member's 256 MiB", || {
        group_json(state, "svc")
            .filter(|g| g["in_use"] == 256 * MIB && g["processes"][0]["in_use"] == 256 * MIB)
    });
    (bg, g)
}

#[test]
fn once_and_json_show_a_group_holding_memory() {
    let state = scratch_dir("top-once");
    let (member, g) = holding_group(&state);
    assert_eq!(g["limit"], GIB);
    assert_eq!(g["members"], 1);
    // The member itself, from its registration: its pid, command and figures.
    let pid = member.0.id();
    let p = &g["processes"][0];
    assert_eq!(
        (p["pid"].clone(), p["in_use"].clone()),
        (pid.into(), (256 * MIB).into())
    );
    assert_eq!(p["parts"]["allocations"], 256 * MIB);
    assert!(p["argv"]
        .as_str()
        .unwrap()
        .ends_with("dlsym init alloc:256M sleep:60000"));
    // A process in no group, with a limit of its own, beside the group.
    let own = Bg(Command::new(Client::Dlsym.path())
        .args(["init", "alloc:64M", "sleep:60000"])
        .env_clear()
        .env("LD_LIBRARY_PATH", &artifacts().shim_dir)
        .env("LD_PRELOAD", &artifacts().interposer)
        .env("CUQUOTA_STATE_DIR", &state)
        .env("CUQUOTA_LIMIT", "512MiB")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let alone = wait_for(Duration::from_secs(30), "the ungrouped process", || {
        let v: Value = serde_json::from_str(&cli(&["top", "--json"], &state)).unwrap();
        let p = v["gpus"][0]["processes"][0].clone();
        (p["in_use"] == 64 * MIB).then_some(p)
    });
    assert_eq!(
        (alone["pid"].clone(), alone["limit"].clone()),
        (own.0.id().into(), (512 * MIB).into())
    );
    let metrics = cli(&["metrics"], &state);
    assert!(
        metrics.contains(&format!(
            "cuquota_limit_bytes{{pid=\"{}\",gpu_uuid=",
            own.0.id()
        )),
        "{metrics}"
    );
    let frame = cli(&["top", "--once"], &state);
    let row = frame
        .lines()
        .find(|l| l.contains("group svc (1 member)"))
        .unwrap_or_else(|| panic!("{frame}"));
    assert!(
        row.contains("1.00 GiB") && row.contains("256 MiB") && row.contains("25%"),
        "{frame}"
    );
    let lines: Vec<&str> = frame.lines().collect();
    let at = |needle: &str| lines.iter().position(|l| l.contains(needle));
    let member_row = at(&format!("    {pid} dlsym init")).expect(&frame);
    assert!(at("group svc").unwrap() < member_row, "{frame}");
    let own_row = lines[at(&format!("  {} dlsym init", own.0.id())).expect(&frame)];
    assert!(
        own_row.contains("512 MiB") && own_row.contains("12%"),
        "{frame}"
    );
    for line in frame.lines() {
        assert!(line.chars().count() <= 80, "{line:?}");
    }
}

#[test]
fn promtool_passes_the_exposition() {
    if !have("promtool") {
        return;
    }
    let state = scratch_dir("top-promtool");
    let (_member, _) = holding_group(&state);
    let text = cli(&["metrics"], &state);
    assert!(
        text.contains("cuquota_in_use_bytes{group=\"svc\""),
        "{text}"
    );
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {out:?}\n{text}"
    );
}

/// A tmux server of this test's own, killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// `cuquota top --state-dir STATE` in a terminal of `size` (columns, rows), in a tmux
    /// server named for `tag` and this test process.
    fn top(tag: &str, state: &Path, (columns, rows): (u32, u32)) -> Tmux {
        let tmux = Tmux {
            socket: format!("cuquota-{tag}-test-{}", std::process::id()),
        };
        let command = format!(
            "exec {} top --state-dir {}",
            artifacts().cli.display(),
            state.display()
        );
        let (columns, rows) = (columns.to_string(), rows.to_string());
        let out = tmux.cmd(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &columns,
            "-y",
            &rows,
            &command,
        ]);
        assert!(out.status.success(), "tmux new-session: {out:?}");
        tmux
    }

    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into()
    }

    fn running(&self) -> bool {
        self.cmd(&["has-session", "-t", "top"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

#[test]
fn the_live_view_runs_in_a_real_terminal_and_quits_on_q() {
    if !have("tmux") {
        return;
    }
    let state = scratch_dir("top-live");
    let (_member, _) = holding_group(&state);
    let tmux = Tmux::top("top", &state, (80, 24));
    let screen = wait_for(Duration::from_secs(20), "the first frame", || {
        Some(tmux.screen()).filter(|s| s.contains("group svc (1 member)"))
    });
    assert!(screen.contains("sorted by in use"), "{screen}");
    assert!(screen.contains("q quit"), "{screen}");
    let row = screen.lines().find(|l| l.contains("group svc")).unwrap();
    assert!(row.contains("256 MiB") && row.contains("25%"), "{screen}");
    // s: the next order; the footer and the title say it.
    tmux.cmd(&["send-keys", "-t", "top", "s"]);
    wait_for(Duration::from_secs(10), "the order to change", || {
        Some(tmux.screen()).filter(|s| s.contains("sorted by refusals"))
    });
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    wait_for(Duration::from_secs(10), "cuquota top to quit on q", || {
        (!tmux.running()).then_some(())
    });
}

/// A free loopback port (bound and released; the window before its use is short).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `path` from 127.0.0.1:`port`: (status line, body).
fn get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// Prometheus's instant query: the value of the one series `query` returns.
fn query(port: u16, query: &str) -> Option<u64> {
    let q: String = query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    let (status, body) = get(port, &format!("/api/v1/query?query={q}"))?;
    if !status.contains(" 200") {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    let result = v["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

/// `cuquota metrics --listen` on a loopback port it picks and says: (the exporter, its port).
fn start_exporter(state: &Path) -> (Bg, u16) {
    let mut exporter = Bg(Command::new(&artifacts().cli)
        .args(["metrics", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(state)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap());
    let mut said = String::new();
    BufReader::new(exporter.0.stdout.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    let port: u16 = said
        .trim()
        .rsplit_once(':')
        .and_then(|(_, p)| p.strip_suffix("/metrics"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address in {said:?}"));
    (exporter, port)
}

/// A Prometheus server on loopback scraping the exporter at `port` every second, its data
/// and log under `dir`: (the server, its web port).
fn start_prometheus(dir: &Path, port: u16) -> (Bg, u16) {
    std::fs::create_dir_all(dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
             - job_name: cuquota\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let web = free_port();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let server = Bg(Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{web}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap());
    (server, web)
}

/// Waits (at most 90 s) until `what` gives Some from Prometheus at `web`; on time-out, fails
/// with Prometheus's log (under `dir`).
fn wait_for_prometheus<T>(dir: &Path, what: &str, f: impl FnMut() -> Option<T>) -> T {
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(Duration::from_secs(90), what, f)
    }));
    got.unwrap_or_else(|_| {
        panic!(
            "{what}: Prometheus's log:\n{}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        )
    })
}

#[test]
fn a_real_prometheus_scrapes_the_exporter() {
    if !have("prometheus") {
        return;
    }
    let state = scratch_dir("top-prometheus");
    let (_member, g) = holding_group(&state);
    let (_exporter, port) = start_exporter(&state);
    let (status, body) = get(port, "/metrics").expect("GET /metrics");
    assert!(status.contains(" 200"), "{status}");
    assert!(body.contains("# TYPE cuquota_in_use_bytes gauge"), "{body}");
    assert!(get(port, "/nothing").unwrap().0.contains(" 404"));

    let dir: PathBuf = state.join("prometheus");
    let (_prometheus, web) = start_prometheus(&dir, port);
    let in_use = r#"cuquota_in_use_bytes{group="svc"}"#;
    let limit = r#"cuquota_limit_bytes{group="svc"}"#;
    let got = wait_for_prometheus(&dir, "Prometheus to have scraped the group", || {
        Some((query(web, in_use)?, query(web, limit)?))
    });
    // Exactly what cuquota top --json shows.
    assert_eq!(Value::from(got.0), g["in_use"]);
    assert_eq!(Value::from(got.1), g["limit"]);
    assert_eq!(got, (256 * MIB, GIB));
    let now = group_json(&state, "svc").unwrap();
    assert_eq!(
        (now["in_use"].clone(), now["limit"].clone()),
        (g["in_use"].clone(), g["limit"].clone())
    );
}
