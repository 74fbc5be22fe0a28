//! A group that cannot be used fails closed: bad names, corrupt or foreign state, a state
//! directory that cannot be made, a full table.

use super::*;
use cuquota_state::group::LAYOUT_VERSION;

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// A bad group name is a configuration error: one line naming CUQUOTA_GROUP, and every
/// hooked call fails with CUDA_ERROR_INVALID_VALUE. An empty one means no group.
#[test]
fn a_bad_group_name_fails_every_call() {
    let dir = scratch_dir("group-names");
    let long = "x".repeat(65);
    for (name, why) in [
        (
            "a/b",
            "a group name is 1 to 64 characters of A-Z a-z 0-9 . _ - (got \"a/b\")".to_string(),
        ),
        ("..", "\"..\" is not a group name".to_string()),
        (".", "\".\" is not a group name".to_string()),
        (
            long.as_str(),
            format!("a group name is 1 to 64 characters of A-Z a-z 0-9 . _ - (got \"{long}\")"),
        ),
    ] {
        let out = Run::client(Client::Dlsym)
            .ops("init alloc:1M info")
            .env("CUQUOTA_STATE_DIR", dir.to_str().unwrap())
            .env("CUQUOTA_GROUP", name)
            .env("CUQUOTA_LIMIT", "1GiB")
            .timeout(PROCESS_TIMEOUT)
            .run();
        out.check_exit(0);
        out.check_rcs(&[INVALID_VALUE, INVALID_VALUE, INVALID_VALUE]);
        out.check_log(&format!(
            "CUQUOTA_GROUP=\"{name}\" is not valid: {why}. CUDA calls fail with \
             CUDA_ERROR_INVALID_VALUE until it is fixed"
        ));
        assert_eq!(out.cuquota_lines().len(), 1, "{out}");
    }
    // 64 characters is a name.
    let longest = "y".repeat(64);
    let out = Run::client(Client::Dlsym)
        .ops("init alloc:1M")
        .env("CUQUOTA_STATE_DIR", dir.to_str().unwrap())
        .env("CUQUOTA_GROUP", &longest)
        .env("CUQUOTA_LIMIT", "1GiB")
        .timeout(PROCESS_TIMEOUT)
        .run();
    out.check_rcs(&[0, 0]);
    assert!(dir.join("groups").join(&longest).is_file());
    fs::remove_dir_all(dir.join("groups")).unwrap();

    // Empty: no group at all.
    let out = Run::client(Client::Dlsym)
        .ops("init alloc:1M info")
        .env("CUQUOTA_STATE_DIR", dir.to_str().unwrap())
        .env("CUQUOTA_GROUP", "")
        .env("CUQUOTA_LIMIT", "1GiB")
        .timeout(PROCESS_TIMEOUT)
        .run();
    out.check_rcs(&[0, 0, 0]);
    out.check_log(
        "GPU 0 summary: peak 1.00 MiB (1048576 bytes) of quota 1.00 GiB, 1 allocation, \
         0 refusals, 1 live at exit (1.00 MiB)",
    );
    assert!(!dir.join("groups").exists());
    fs::remove_dir_all(&dir).unwrap();
}

/// A member that finds its group's file unusable says why in one line, and every call
/// fails; the file is left as it was.
fn check_unusable(g: &Group, why: &str) {
    let before = fs::read(g.file()).ok();
    let out = g.member(Some("1GiB"), "init alloc:1M info").run();
    out.check_exit(0);
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE, INVALID_VALUE]);
    out.check_log(&format!(
        "CUQUOTA_GROUP={}: its quota cannot be used ({why}). CUDA calls fail with \
         CUDA_ERROR_INVALID_VALUE until it is fixed",
        g.name
    ));
    assert_eq!(out.cuquota_lines().len(), 1, "{out}");
    assert_eq!(fs::read(g.file()).ok(), before, "the file was changed");
}

#[test]
fn a_corrupt_or_foreign_state_file_fails_every_call() {
    // A real group file cut to 100 bytes.
    let g = Group::new("group-corrupt", "svc");
    g.member(Some("1GiB"), "init alloc:1M").run().check_exit(0);
    let file = g.file();
    assert_eq!(fs::metadata(&file).unwrap().len(), FILE_SIZE as u64);
    fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(100)
        .unwrap();
    check_unusable(
        &g,
        &format!(
            "{}: 100 bytes, not a cuquota group of layout {LAYOUT_VERSION} ({FILE_SIZE} bytes)",
            file.display()
        ),
    );

    // Random bytes of the right size.
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let noise: Vec<u8> = (0..FILE_SIZE).map(|_| rng.next() as u8).collect();
    assert_ne!(noise[..8], [0; 8]);
    fs::write(&file, &noise).unwrap();
    check_unusable(&g, &format!("{}: not a cuquota group file", file.display()));

    // A group file of another layout.
    let mut other = vec![0u8; FILE_SIZE];
    other[..8].copy_from_slice(b"CUQGROUP");
    other[8..16].copy_from_slice(&(LAYOUT_VERSION + 1).to_le_bytes());
    other[16..24].copy_from_slice(&(FILE_SIZE as u64).to_le_bytes());
    fs::write(&file, &other).unwrap();
    check_unusable(
        &g,
        &format!(
            "{}: a cuquota group of layout {}; this cuquota reads layout {LAYOUT_VERSION}",
            file.display(),
            LAYOUT_VERSION + 1
        ),
    );

    // Not a regular file.
    fs::remove_file(&file).unwrap();
    fs::create_dir(&file).unwrap();
    let out = g.member(Some("1GiB"), "init alloc:1M").run();
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE]);
    assert_eq!(
        out.logs_starting("CUQUOTA_GROUP=svc: its quota cannot be used (")
            .len(),
        1,
        "{out}"
    );
}

#[test]
fn a_state_dir_that_cannot_be_made_fails_every_call() {
    let g = Group::new("group-dir", "svc");
    let plain = g.dir.join("plain");
    fs::write(&plain, b"a regular file").unwrap();
    let under = plain.join("state");
    let out = Run::client(Client::Dlsym)
        .ops("init alloc:1M info")
        .env("CUQUOTA_STATE_DIR", under.to_str().unwrap())
        .env("CUQUOTA_GROUP", "svc")
        .env("CUQUOTA_LIMIT", "1GiB")
        .timeout(PROCESS_TIMEOUT)
        .run();
    out.check_exit(0);
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE, INVALID_VALUE]);
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(&plain).unwrap().permissions().mode() & 0o7777;
    out.check_log(&format!(
        "CUQUOTA_GROUP=svc: its quota cannot be used ({} (owner uid {}, mode {mode:o}) is not a \
         directory). CUDA calls fail with CUDA_ERROR_INVALID_VALUE until it is fixed",
        plain.display(),
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() },
    ));
}

/// 256 members alive at once fill the table (taken here by 256 opens of the group's file,
/// each an open file description with its own slot lock); a newcomer is told the group is
/// full and every call fails. One slot given back, a newcomer joins.
#[test]
fn a_full_table_turns_newcomers_away() {
    let g = Group::new("group-full", "svc");
    let mut held: Vec<GroupFile> = (0..SLOTS)
        .map(|i| {
            let file = GroupFile::open(&g.dir, g.name).unwrap();
            let slot = {
                let locked = file.lock().unwrap();
                file.claim_slot(&locked).unwrap()
            };
            assert_eq!(slot, i);
            file
        })
        .collect();
    assert_eq!(g.snapshot().members.len(), SLOTS);
    check_unusable(
        &g,
        &format!("group svc is full: {SLOTS} members at once, all alive"),
    );
    held.pop();
    let out = g.member(Some("1GiB"), "init alloc:1M info").run();
    out.check_exit(0);
    out.check_rcs(&[0, 0, 0]);
    out.check(2, "info", &[("free", GIB - MIB), ("total", GIB)]);
}
