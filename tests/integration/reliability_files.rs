//! Where the trace goes, when that place is hostile: a symbolic link, a directory, an
//! existing file, a file system where nothing can be created (/proc, /sys), a full device
//! (/dev/full), a pipe whose reader goes away mid-run. The job always runs on with its
//! quota and its log lines; an existing file is never written to; a trace that cannot be
//! written costs one warning.

use crate::common::*;
use crate::reliability_util::*;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "1GiB");
const OPS: &str = "init alloc:1G alloc:1 info";

/// The job ran as without a trace: same codes, same figures, same log lines.
fn job_ran_on(out: &Output) {
    out.check_exit(0);
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, 0]);
    out.check(3, "info", &[("free", 0), ("total", GIB)]);
    out.check_log(
        "GPU 0 refused 1 B (1 byte) via cuMemAlloc_v2: quota 1.00 GiB, in use 1.00 GiB, 0 B left",
    );
    out.check_log(
        "GPU 0 summary: peak 1.00 GiB (1073741824 bytes) of quota 1.00 GiB, \
         1 allocation, 1 refusal, 1 live at exit (1.00 GiB)",
    );
    assert!(
        !out.stderr.iter().any(|l| l.contains("panic")),
        "a panic:\n{out}"
    );
}

fn trace_lines(out: &Output) -> Vec<&str> {
    out.cuquota_lines()
        .into_iter()
        .filter(|l| l.contains("trace"))
        .collect()
}

/// A trace with the job's events in it.
fn complete_trace(path: &Path, pid: u32) {
    let t = read_trace(path, false);
    assert_eq!(t.header["pid"], pid, "{}", path.display());
    assert_eq!(t.of("alloc").len(), 1);
    assert_eq!(t.of("refused").len(), 1);
    assert!(t.summary.is_some());
}

#[test]
fn an_existing_file_link_or_directory_is_never_written_to() {
    let dir = scratch_dir("files-existing");
    let file = dir.join("file.jsonl");
    std::fs::write(&file, "precious\n").unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    let link = dir.join("link.jsonl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let dangling = dir.join("dangling.jsonl");
    std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).unwrap();
    let subdir = dir.join("dir.jsonl");
    std::fs::create_dir(&subdir).unwrap();

    for path in [&file, &link, &dangling, &subdir] {
        let out = run(
            Client::Linked,
            OPS,
            &[LIMIT, ("CUQUOTA_TRACE", path.to_str().unwrap())],
        );
        job_ran_on(&out);
        let mut next = path.as_os_str().to_owned();
        next.push(".1");
        complete_trace(Path::new(&next), out.pid);
    }
    // Run again on the same name: the next free suffix, the earlier traces untouched.
    let before = std::fs::read(dir.join("file.jsonl.1")).unwrap();
    let out = run(
        Client::Linked,
        OPS,
        &[LIMIT, ("CUQUOTA_TRACE", file.to_str().unwrap())],
    );
    job_ran_on(&out);
    complete_trace(&dir.join("file.jsonl.2"), out.pid);
    assert_eq!(std::fs::read(dir.join("file.jsonl.1")).unwrap(), before);

    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious\n");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n");
    assert!(
        !dir.join("nowhere").exists(),
        "a dangling link was followed"
    );
    assert!(std::fs::read_dir(&subdir).unwrap().next().is_none());
}

/// When the trace path is a symbolic link or a directory, cuquota writes to PATH.1 instead
/// and says so in one line naming the file actually written ("trace: \"PATH\" exists;
/// writing \"PATH.1\""), so whoever looks at PATH (an old file, or a directory) learns
/// where the trace went.
#[test]
fn a_trace_written_under_another_name_says_so_once() {
    let dir = scratch_dir("files-renamed");
    let victim = dir.join("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    let link = dir.join("link.jsonl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let subdir = dir.join("dir.jsonl");
    std::fs::create_dir(&subdir).unwrap();
    for path in [&link, &subdir] {
        let out = run(
            Client::Linked,
            OPS,
            &[LIMIT, ("CUQUOTA_TRACE", path.to_str().unwrap())],
        );
        job_ran_on(&out);
        let used = format!("{}.1", path.display());
        let lines = trace_lines(&out);
        assert_eq!(lines.len(), 1, "one warning:\n{out}");
        assert!(lines[0].contains(&used), "names {used}:\n{out}");
    }
}

#[test]
fn nowhere_to_create_the_trace_is_one_warning_and_the_job_runs_on() {
    // /proc and /sys take no new files (even as root); a directory that does not exist.
    for path in [
        "/proc/self/cuquota-trace.jsonl",
        "/sys/cuquota-trace.jsonl",
        "/nonexistent-cuquota-dir/t-%p.jsonl",
    ] {
        let out = run(Client::Linked, OPS, &[LIMIT, ("CUQUOTA_TRACE", path)]);
        job_ran_on(&out);
        let lines = trace_lines(&out);
        assert_eq!(lines.len(), 1, "one warning:\n{out}");
        let shown = path.replace("%p", &out.pid.to_string());
        assert!(
            lines[0].ends_with("running on without a trace")
                && lines[0].contains(&format!("\"{shown}\"")),
            "{out}"
        );
    }
}

#[test]
fn a_full_device_is_one_warning_and_the_job_runs_on() {
    let out = run(
        Client::Linked,
        OPS,
        &[LIMIT, ("CUQUOTA_TRACE", "/dev/full")],
    );
    job_ran_on(&out);
    let lines = trace_lines(&out);
    assert_eq!(lines.len(), 1, "one warning:\n{out}");
    assert!(lines[0].contains("\"/dev/full\""), "{out}");
    assert!(lines[0].contains("No space left on device"), "{out}");
}

#[test]
fn a_pipe_whose_reader_leaves_mid_run_is_one_warning_and_no_sigpipe() {
    let dir = scratch_dir("files-fifo");
    let fifo = dir.join("trace.fifo");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string; mkfifo has no other precondition.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // Open the reading end first (non-blocking, so no writer is needed yet), then block.
    // SAFETY: as above; the fd is owned by the File below.
    let fd = unsafe {
        libc::open(
            c_path.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    assert!(fd >= 0);
    // SAFETY: fd is ours.
    unsafe { libc::fcntl(fd, libc::F_SETFL, 0) };
    // SAFETY: fd is open and owned by nothing else.
    let mut reader = unsafe { <std::fs::File as std::os::unix::io::FromRawFd>::from_raw_fd(fd) };
    // A writing end of our own, so that reads wait for data instead of seeing end-of-file
    // before the job has opened the pipe; closed with the reader.
    let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    // The reader takes the header line and goes away; the job writes far more than a pipe
    // holds (8 threads × 4000 allocations), so the writer meets the closed pipe.
    let header = std::thread::spawn(move || {
        let mut line = Vec::new();
        let mut byte = [0u8];
        while reader.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        drop(reader);
        drop(writer);
        String::from_utf8(line).unwrap()
    });
    let out = run(
        Client::Linked,
        "init threads:8:4000:1M info",
        &[LIMIT, ("CUQUOTA_TRACE", fifo.to_str().unwrap())],
    );
    out.check_exit(0);
    out.check(1, "threads", &[("ok", 32000), ("other", 0)]);
    out.check(2, "info", &[("free", GIB)]);
    let header: serde_json::Value = serde_json::from_str(&header.join().unwrap()).unwrap();
    assert_eq!(header["pid"], out.pid);
    let lines = trace_lines(&out);
    assert!(
        lines.iter().filter(|l| l.contains("write failed")).count() == 1,
        "one warning for the broken pipe:\n{out}"
    );
    assert!(
        lines.iter().all(|l| l.contains("write failed")
            || l.contains("did not finish")
            || l.contains("events dropped")),
        "{out}"
    );
    let summary = out.logs_starting("GPU 0 summary: ");
    assert_eq!(summary.len(), 1, "{out}");
    assert!(
        summary[0]
            .ends_with(" of quota 1.00 GiB, 32000 allocations, 0 refusals, 0 live at exit (0 B)"),
        "{out}"
    );
}

// ---- the log, stderr and file names ------------------------------------------------------

fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string; mkfifo has no other precondition.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
}

/// `CUQUOTA_LOG` naming a FIFO nobody reads: the first line would block the refusing hook
/// forever if the log were opened blocking. It is one note, and the lines go to stderr.
#[test]
fn a_log_fifo_without_reader_is_one_note_and_blocks_nothing() {
    let dir = scratch_dir("files-log-fifo");
    let fifo = dir.join("log.fifo");
    mkfifo(&fifo);
    let out = Run::client(Client::Linked)
        .ops(OPS)
        .envs(&[LIMIT, ("CUQUOTA_LOG", fifo.to_str().unwrap())])
        .run();
    job_ran_on(&out);
    let notes: Vec<_> = out
        .cuquota_lines()
        .into_iter()
        .filter(|l| l.contains("cannot open CUQUOTA_LOG file"))
        .collect();
    assert_eq!(notes.len(), 1, "{out}");
    assert!(notes[0].contains("a FIFO with no reader"), "{out}");
    assert!(notes[0].ends_with("; logging to stderr"), "{out}");
}

/// A `CUQUOTA_LOG` FIFO whose reader leaves after the first line: the next line meets a
/// broken pipe, which must not kill the program (SIGPIPE); one note, then stderr.
#[test]
fn a_log_fifo_whose_reader_leaves_costs_one_note_and_no_sigpipe() {
    let dir = scratch_dir("files-log-fifo-gone");
    let fifo = dir.join("log.fifo");
    mkfifo(&fifo);
    let go_on = dir.join("go-on");
    std::fs::write(&go_on, "").unwrap();
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // Open the reading end first (non-blocking, so no writer is needed), then block on it.
    // SAFETY: a valid C string; the fd is owned by the File below.
    let fd = unsafe {
        libc::open(
            c_path.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    assert!(fd >= 0);
    // SAFETY: fd is ours.
    unsafe { libc::fcntl(fd, libc::F_SETFL, 0) };
    // SAFETY: fd is open and owned by nothing else.
    let mut reader = unsafe { <std::fs::File as std::os::unix::io::FromRawFd>::from_raw_fd(fd) };
    // A writing end of our own, so that the read waits for the job's first line instead of
    // seeing end-of-file first; closed with the reader.
    let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let first = {
        let go_on = go_on.clone();
        std::thread::spawn(move || {
            let mut line = Vec::new();
            let mut byte = [0u8];
            while reader.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
                line.push(byte[0]);
            }
            drop(reader);
            drop(writer);
            // Only now may the job log again: its next line meets the closed pipe.
            std::fs::remove_file(&go_on).unwrap();
            String::from_utf8(line).unwrap()
        })
    };
    let out = Run::client(Client::Linked)
        .ops(&format!(
            "init alloc:1G alloc:1 waitgone:{} alloc:2 info",
            go_on.display()
        ))
        .envs(&[LIMIT, ("CUQUOTA_LOG", fifo.to_str().unwrap())])
        .run();
    out.check_exit(0);
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0]);
    out.check(3, "waitgone", &[("gone", 1)]);
    let first = first.join().unwrap();
    assert!(
        first.ends_with(
            "GPU 0 refused 1 B (1 byte) via cuMemAlloc_v2: quota 1.00 GiB, in use 1.00 GiB, 0 B left"
        ),
        "{first}"
    );
    let notes: Vec<_> = out
        .cuquota_lines()
        .into_iter()
        .filter(|l| l.contains("cannot write CUQUOTA_LOG file"))
        .collect();
    assert_eq!(notes.len(), 1, "{out}");
    assert!(notes[0].contains("Broken pipe"), "{out}");
    // The line that met the broken pipe is not lost: it went to stderr after the note.
    out.check_log(
        "GPU 0 refused 2 B (2 bytes) via cuMemAlloc_v2: quota 1.00 GiB, in use 1.00 GiB, 0 B left",
    );
}

/// stderr is a pipe whose reader is gone (`prog 2>&1 | head -1` after head left): the
/// refusal line and the exit summary fail with EPIPE, and neither may kill the program.
#[test]
fn a_broken_stderr_never_kills_the_program() {
    let out = Run::client(Client::Linked)
        .ops(OPS)
        .envs(&[LIMIT])
        .broken_stderr()
        .run();
    out.check_exit(0);
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, 0]);
    out.check(3, "info", &[("free", 0), ("total", GIB)]);
}

/// File names from the environment are bytes: a name that is not UTF-8 is used as given,
/// not rewritten with U+FFFD.
#[test]
fn paths_that_are_not_utf8_are_used_as_given() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let dir = scratch_dir("files-bytes");
    let name = |tail: &[u8]| {
        let mut bytes = dir.as_os_str().as_bytes().to_vec();
        bytes.extend_from_slice(tail);
        OsString::from_vec(bytes)
    };
    let trace = name(b"/trace-\xff\xfe.jsonl");
    let log = name(b"/log-\xe9.txt");
    let out = Run::client(Client::Linked)
        .ops(OPS)
        .envs(&[LIMIT])
        .env_os("CUQUOTA_TRACE", trace.clone())
        .env_os("CUQUOTA_LOG", log.clone())
        .run();
    out.check_exit(0);
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, 0]);
    let mut names: Vec<OsString> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            OsString::from_vec(b"log-\xe9.txt".to_vec()),
            OsString::from_vec(b"trace-\xff\xfe.jsonl".to_vec())
        ]
    );
    complete_trace(Path::new(&trace), out.pid);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("GPU 0 refused 1 B (1 byte) via cuMemAlloc_v2"),
        "{logged}"
    );
}
