//! The group file alone: slots, the living and the dead, limits, trust, removal.

use super::*;
use std::fs;

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cuquota-group-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A reader that is no member creates nothing, sees the living members' figures and
/// leaves a dead member's charges out.
#[test]
fn a_read_only_reader_sees_living_members_and_creates_nothing() {
    let d = dir("reader");
    assert!(GroupFile::open_read_only(&d, "svc").unwrap().is_none());
    assert!(!d.exists(), "a reader created the state directory");
    let uuid = [7u8; 16];
    let member = GroupFile::open(&d, "svc").unwrap();
    let (slot, g) = {
        let locked = member.lock().unwrap();
        let slot = member.claim_slot(&locked).unwrap();
        (
            slot,
            member.device(&locked, uuid, 1 << 30, 16 << 30).unwrap(),
        )
    };
    let layout = member.layout();
    layout.devices[g].in_use.store(300 << 20, Relaxed);
    layout.slots[slot].charged[g].store(300 << 20, Relaxed);
    let reader = GroupFile::open_read_only(&d, "svc").unwrap().unwrap();
    let pid = std::process::id() as u64;
    let seen = reader.read_gpu(uuid);
    assert_eq!(seen.default_limit, UNSET);
    assert_eq!(
        seen.gpu,
        Some(GpuFigures {
            limit: 1 << 30,
            in_use: 300 << 20,
            members: vec![(pid, 300 << 20)],
        })
    );
    assert_eq!(reader.read_gpu([8u8; 16]).gpu, None);
    // The member dies (its description closes): its charges are left out, unreaped.
    drop(member);
    let seen = reader.read_gpu(uuid).gpu.unwrap();
    assert_eq!((seen.in_use, seen.members.len()), (0, 0));
    assert_eq!(reader.layout().devices[g].in_use.load(Relaxed), 300 << 20);
    let _ = fs::remove_dir_all(&d);
}

/// `cuquota set` and the views see the living only: a dead member's slot and charges
/// count for nothing, reaped or not, and with no member alive nothing is in use.
#[test]
fn a_snapshot_counts_only_living_members() {
    let d = dir("snapshot");
    let (a, slot_a) = GroupFile::join(&d, "svc").unwrap();
    let (b, slot_b) = GroupFile::join(&d, "svc").unwrap();
    let g = a.device(&a.lock().unwrap(), [3; 16], 1 << 30, 0).unwrap();
    let layout = a.layout();
    layout.devices[g].in_use.store(700, Relaxed);
    layout.slots[slot_a].charged[g].store(400, Relaxed);
    layout.slots[slot_b].charged[g].store(300, Relaxed);
    let viewer = GroupFile::open_read_only(&d, "svc").unwrap().unwrap();
    let pid = std::process::id() as u64;
    let snap = viewer.snapshot();
    assert_eq!(
        (snap.devices[0].in_use, snap.members),
        (700, vec![pid, pid])
    );
    drop(a);
    let snap = viewer.snapshot();
    assert_eq!((snap.devices[0].in_use, snap.members), (300, vec![pid]));
    drop(b);
    let snap = viewer.snapshot();
    assert_eq!((snap.devices[0].in_use, snap.members.len()), (0, 0));
    assert_eq!(
        viewer.layout().devices[g].in_use.load(Relaxed),
        700,
        "reaped"
    );
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn trust_by_owner_group_and_mode() {
    let me = Credentials {
        uid: 1000,
        groups: vec![1000, 50],
    };
    let ok = |uid, gid, mode| check_trust(uid, gid, mode, &me);
    assert!(ok(1000, 1000, 0o600).is_ok());
    assert!(ok(0, 0, 0o644).is_ok(), "root's");
    assert!(
        ok(1001, 50, 0o660).is_ok(),
        "shared through a group it is in"
    );
    assert!(ok(1000, 50, 0o660).is_ok());
    for (uid, gid, mode, why) in [
        (1000, 1000, 0o666, "writable by every user"),
        (0, 0, 0o602, "writable by every user"),
        (1001, 1001, 0o600, "belongs to another user"),
        (1001, 1001, 0o644, "belongs to another user"),
        (
            1001,
            60,
            0o660,
            "writable by group 60, which this process (uid 1000) is not in",
        ),
        (1000, 60, 0o620, "writable by group 60"),
    ] {
        let e = ok(uid, gid, mode).unwrap_err();
        assert!(e.contains(why), "{uid} {gid} {mode:o}: {e}");
    }
}

#[test]
fn cuquota_set_writes_only_what_members_trust() {
    let me = Credentials {
        uid: 1000,
        groups: vec![1000, 50],
    };
    let root = Credentials {
        uid: 0,
        groups: vec![0],
    };
    assert!(check_write_trust(1000, 1000, 0o600, &me).is_ok());
    assert!(check_write_trust(1001, 50, 0o660, &me).is_ok());
    assert!(check_write_trust(1001, 1001, 0o600, &root).is_ok(), "root");
    for who in [&me, &root] {
        let e = check_write_trust(1001, 1001, 0o666, who).unwrap_err();
        assert_eq!(e, "is writable by every user, so no member may trust it");
    }
    assert!(check_write_trust(1001, 1001, 0o600, &me).is_err());
}

/// A group is named by its file: a file renamed over another group's, or whose header
/// names another group, is refused to members, `cuquota set` and readers, and the views
/// list it under no name.
#[test]
fn a_renamed_or_forged_group_file_is_refused() {
    let d = dir("renamed");
    GroupFile::open(&d, "big")
        .unwrap()
        .set_limit(None, 6 << 30)
        .unwrap();
    GroupFile::open(&d, "small")
        .unwrap()
        .set_limit(None, 512 << 20)
        .unwrap();
    fs::rename(group_path(&d, "big"), group_path(&d, "small")).unwrap();
    let want = format!(
        "{}: its header names group \"big\": a group file renamed or written to pass for \
         another is never used",
        group_path(&d, "small").display()
    );
    assert_eq!(GroupFile::join(&d, "small").err().unwrap().0, want);
    assert_eq!(GroupFile::open(&d, "small").err().unwrap().0, want);
    assert_eq!(
        GroupFile::open_read_only(&d, "small").err().unwrap().0,
        want
    );
    let (groups, notes) = GroupFile::read_all(&d);
    assert!(groups.is_empty());
    assert_eq!(notes, [format!("skipped {want}")]);
    // A copy under another name (two files, one header): one row, the true one.
    GroupFile::open(&d, "svc")
        .unwrap()
        .set_limit(None, 1 << 30)
        .unwrap();
    fs::remove_file(group_path(&d, "small")).unwrap();
    fs::copy(group_path(&d, "svc"), group_path(&d, "a")).unwrap();
    let (groups, notes) = GroupFile::read_all(&d);
    let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["svc"]);
    assert_eq!(notes.len(), 1);
    assert!(
        notes[0].contains("a: its header names group \"svc\""),
        "{notes:?}"
    );
    let _ = fs::remove_dir_all(&d);
}

/// A FIFO or a link where a group's file should be: refused at once by members, `cuquota
/// set`, readers and the views (a FIFO's open never waits for a writer).
#[test]
fn a_fifo_or_link_in_place_of_a_group_file_is_refused_at_once() {
    use std::os::unix::ffi::OsStrExt;
    let d = dir("fifo");
    GroupFile::open(&d, "svc").unwrap();
    let fifo = group_path(&d, "pipe");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    std::os::unix::fs::symlink(group_path(&d, "svc"), group_path(&d, "link")).unwrap();
    for (name, what) in [
        ("pipe", "is a FIFO, not a regular file"),
        ("link", "is a symbolic link"),
    ] {
        let join = GroupFile::join(&d, name).err().unwrap().0;
        let read = GroupFile::open_read_only(&d, name).err().unwrap().0;
        for e in [&join, &read] {
            assert!(
                e.starts_with(&format!("{} (owner uid ", group_path(&d, name).display()))
                    && e.contains(what),
                "{e}"
            );
        }
    }
    let (groups, notes) = GroupFile::read_all(&d);
    assert_eq!(groups.len(), 1);
    assert_eq!(notes.len(), 2, "{notes:?}");
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn a_group_is_removed_only_with_no_living_member() {
    let d = dir("remove");
    let (member, _) = GroupFile::join(&d, "svc").unwrap();
    let e = GroupFile::remove(&d, "svc").unwrap_err().0;
    let pid = std::process::id();
    assert!(
        e.contains(&format!("1 living member (pid {pid}): stop it first")),
        "{e}"
    );
    // A file opened before the removal is known removed; the path is opened anew.
    let before = GroupFile::open(&d, "svc").unwrap();
    drop(member);
    GroupFile::remove(&d, "svc").unwrap();
    assert!(!group_path(&d, "svc").exists());
    assert!(before.removed());
    let (again, _) = GroupFile::join(&d, "svc").unwrap();
    assert!(!again.removed());
    let e = GroupFile::remove(&d, "nope").unwrap_err().0;
    assert!(e.contains("no group nope under"), "{e}");
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn names() {
    assert!(check_name("svc-1.a_B").is_ok());
    for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(65)] {
        assert!(check_name(bad).is_err(), "{bad:?}");
    }
    assert!(check_name(&"x".repeat(64)).is_ok());
}

#[test]
fn created_once_reopened_and_refused_when_not_ours() {
    let d = dir("open");
    let a = GroupFile::open(&d, "svc").unwrap();
    assert_eq!(a.name(), "svc");
    let b = GroupFile::open(&d, "svc").unwrap();
    assert_eq!(b.layout().header.default_limit.load(Relaxed), UNSET);
    let path = group_path(&d, "svc");
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(100)
        .unwrap();
    let e = GroupFile::open(&d, "svc").err().unwrap().0;
    assert!(e.contains("100 bytes, not a cuquota group"), "{e}");
    fs::write(group_path(&d, "other"), vec![7u8; FILE_SIZE]).unwrap();
    let e = GroupFile::open(&d, "other").err().unwrap().0;
    assert!(e.contains("not a cuquota group file"), "{e}");
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn slots_are_claimed_and_a_dead_members_charges_go_back() {
    let d = dir("slots");
    let member = GroupFile::open(&d, "g").unwrap();
    let other = GroupFile::open(&d, "g").unwrap();
    let locked = member.lock().unwrap();
    let mine = member.claim_slot(&locked).unwrap();
    let g = member.device(&locked, [1; 16], 1000, 0).unwrap();
    drop(locked);
    let dev = &member.layout().devices[g];
    dev.in_use.fetch_add(300, Relaxed);
    member.layout().slots[mine].charged[g].fetch_add(300, Relaxed);
    // Alive: another description cannot reap it.
    let locked = other.lock().unwrap();
    assert_eq!(other.reap(&locked, None), 0);
    assert_eq!(dev.in_use.load(Relaxed), 300);
    drop(locked);
    // Its description closed (as at death): the next reap gives its charges back.
    drop(member);
    let locked = other.lock().unwrap();
    assert_eq!(other.reap(&locked, None), 1);
    assert_eq!(other.layout().devices[g].in_use.load(Relaxed), 0);
    assert_eq!(other.snapshot().members.len(), 0);
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn limits_default_and_per_gpu() {
    let d = dir("limits");
    let f = GroupFile::open(&d, "g").unwrap();
    let locked = f.lock().unwrap();
    let a = f.device(&locked, [1; 16], 500, 0).unwrap();
    drop(locked);
    assert_eq!(f.layout().devices[a].limit.load(Relaxed), 500);
    f.set_limit(None, 700).unwrap();
    assert_eq!(f.layout().devices[a].limit.load(Relaxed), 700);
    let locked = f.lock().unwrap();
    let b = f.device(&locked, [2; 16], 500, 0).unwrap();
    drop(locked);
    assert_eq!(
        f.layout().devices[b].limit.load(Relaxed),
        700,
        "the default"
    );
    f.set_limit(Some([2; 16]), 900).unwrap();
    assert_eq!(f.layout().devices[b].limit.load(Relaxed), 900);
    assert_eq!(f.layout().devices[a].limit.load(Relaxed), 700);
    let _ = fs::remove_dir_all(&d);
}
