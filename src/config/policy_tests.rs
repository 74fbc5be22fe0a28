//! The policy and the variables together: every combination the variables can try, and the
//! variables may only narrow.

use super::*;
use cuquota_state::policy::{parse, Loaded};
use std::collections::HashMap;
use std::path::Path;

const GIB: u64 = 1 << 30;

type Vars<'a> = &'a [(&'a str, &'a str)];

fn sources(main: Option<&str>, job: Option<&str>) -> Sources {
    let load = |text: Option<&str>, path: &str, is_job: bool| match text {
        None => Loaded::Absent,
        Some(t) => Loaded::Trusted(path.into(), parse(t, is_job).unwrap()),
    };
    Sources {
        main: load(main, "/etc/cuquota.conf", false),
        job: load(job, "/run/cuquota/jobs/42", true),
        asked: false,
        secure: false,
    }
}

fn config(s: &Sources, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::with_policy(|k| map.get(k).map(OsString::from), s)
}

/// The limit of GPU 0 (8 GiB) and GPU 1 (16 GiB).
fn limits(c: &Config) -> [Option<u64>; 2] {
    let total = |d: u32| move || Ok::<u64, ()>(if d == 0 { 8 * GIB } else { 16 * GIB });
    [0, 1].map(|d| c.own_limit(d, || None, total(d)).unwrap())
}

#[test]
fn no_policy_and_nothing_asked_is_untouched() {
    let c = config(&sources(None, None), &[]).unwrap();
    assert!(c.untouched);
    assert_eq!(c.log, LogTarget::Off);
    assert_eq!(limits(&c), [None, None]);
    let asked = Sources {
        asked: true,
        ..sources(None, None)
    };
    let c = config(&asked, &[]).unwrap();
    assert!(!c.untouched);
    assert_eq!(c.log, LogTarget::Stderr);
    // A variable alone is as before.
    let c = config(&asked, &[("CUQUOTA_LIMIT", "1GiB")]).unwrap();
    assert_eq!((limits(&c), c.policies.len()), ([Some(GIB); 2], 0));
}

#[test]
fn a_policy_that_cannot_be_trusted_fails_closed_in_one_line() {
    for refused in [
        Sources {
            main: Loaded::Refused(
                "the policy /etc/cuquota.conf is owned by uid 1000, not root".into(),
            ),
            ..sources(None, None)
        },
        Sources {
            job: Loaded::Refused(
                "the policy /run/cuquota/jobs/42 is writable by its group or others (mode 666)"
                    .into(),
            ),
            ..sources(Some("jobs = /run/cuquota/jobs"), None)
        },
    ] {
        for vars in [&[][..], &[("CUQUOTA_LIMIT", "1GiB")][..]] {
            let e = config(&refused, vars).unwrap_err().message;
            assert!(e.starts_with("the policy /"), "{e}");
            assert!(e.contains(": it is ignored, and CUDA calls fail"), "{e}");
            assert!(!e.contains('\n'));
        }
    }
}

#[test]
fn the_variable_only_lowers_the_policys_limit() {
    let s = sources(Some("limit = 0:6GiB,1:50%"), None);
    let cases: [(Vars, [Option<u64>; 2]); 6] = [
        (&[], [Some(6 * GIB), Some(8 * GIB)]),
        (&[("CUQUOTA_LIMIT", "1GiB")], [Some(GIB), Some(GIB)]),
        (
            &[("CUQUOTA_LIMIT", "100GiB")],
            [Some(6 * GIB), Some(8 * GIB)],
        ),
        (
            &[("CUQUOTA_LIMIT", "1:2GiB")],
            [Some(6 * GIB), Some(2 * GIB)],
        ),
        (
            &[("CUQUOTA_LIMIT", "0:100%")],
            [Some(6 * GIB), Some(8 * GIB)],
        ),
        (&[("CUQUOTA_LIMIT", "25%")], [Some(2 * GIB), Some(4 * GIB)]),
    ];
    for (vars, want) in cases {
        let c = config(&s, vars).unwrap();
        assert_eq!(limits(&c), want, "{vars:?}");
        assert_eq!(c.policies, [Path::new("/etc/cuquota.conf")]);
    }
    // A bad or empty value is still an error, never "the policy alone".
    assert!(config(&s, &[("CUQUOTA_LIMIT", "")]).is_err());
    assert!(config(&s, &[("CUQUOTA_LIMIT", "lots")]).is_err());
    // A policy with no limit: the variable may add one; nothing is untouched.
    let c = config(&sources(Some("mode = enforce"), None), &[]).unwrap();
    assert_eq!((limits(&c), c.untouched), ([None, None], false));
    let c = config(
        &sources(Some("mode = enforce"), None),
        &[("CUQUOTA_LIMIT", "0:1GiB")],
    );
    assert_eq!(limits(&c.unwrap()), [Some(GIB), None]);
}

#[test]
fn observe_never_lifts_an_enforcing_policy() {
    let ignored = "CUQUOTA_MODE=\"observe\" is ignored: the policy /etc/cuquota.conf says \
                   enforce, and the environment may only narrow it";
    for (policy, var, mode, warned) in [
        ("mode = enforce", None, Mode::Enforce, false),
        ("mode = enforce", Some("observe"), Mode::Enforce, true),
        ("mode = enforce", Some("enforce"), Mode::Enforce, false),
        ("limit = 1GiB", None, Mode::Enforce, false),
        ("limit = 1GiB", Some("observe"), Mode::Enforce, true),
        ("mode = observe", None, Mode::Observe, false),
        ("mode = observe", Some("observe"), Mode::Observe, false),
        ("mode = observe", Some("enforce"), Mode::Enforce, false),
    ] {
        let vars: Vec<(&str, &str)> = var.map(|v| ("CUQUOTA_MODE", v)).into_iter().collect();
        let c = config(&sources(Some(policy), None), &vars).unwrap();
        assert_eq!(c.mode, mode, "{policy} {var:?}");
        let want: &[&str] = if warned { &[ignored] } else { &[] };
        assert_eq!(c.warnings, want, "{policy} {var:?}");
    }
    assert!(config(
        &sources(Some("mode = observe"), None),
        &[("CUQUOTA_MODE", "lax")]
    )
    .is_err());
}

#[test]
fn the_policys_group_cannot_be_left() {
    let s = sources(Some("group = site\nlimit = 2GiB"), None);
    let c = config(&s, &[]).unwrap();
    assert_eq!(
        c.group_spec(),
        Some(("/dev/shm/cuquota".into(), "site".into()))
    );
    for (vars, warning) in [
        (&[("CUQUOTA_GROUP", "site")][..], None),
        (
            &[("CUQUOTA_GROUP", "mine")][..],
            Some("CUQUOTA_GROUP=\"mine\" is ignored: the policy /etc/cuquota.conf says group = site"),
        ),
        (
            &[("CUQUOTA_STATE_DIR", "/tmp/mine")][..],
            Some("CUQUOTA_STATE_DIR=\"/tmp/mine\" is ignored: the policy /etc/cuquota.conf says state_dir = /dev/shm/cuquota"),
        ),
        (&[("CUQUOTA_STATE_DIR", "/dev/shm/cuquota")][..], None),
    ] {
        let c = config(&s, vars).unwrap();
        assert_eq!(c.group_spec(), Some(("/dev/shm/cuquota".into(), "site".into())), "{vars:?}");
        match warning {
            None => assert!(c.warnings.is_empty(), "{:?}", c.warnings),
            Some(w) => {
                assert_eq!(c.warnings.len(), 1);
                assert!(c.warnings[0].starts_with(w), "{}", c.warnings[0]);
            }
        }
    }
    // A bad name is still an error.
    assert!(config(&s, &[("CUQUOTA_GROUP", "a/b")]).is_err());
    // No group in the policy: the variable may join one, in the policy's state directory.
    let s = sources(Some("state_dir = /run/cq"), None);
    let c = config(
        &s,
        &[("CUQUOTA_GROUP", "g"), ("CUQUOTA_STATE_DIR", "/tmp/x")],
    );
    assert_eq!(
        c.unwrap().group_spec(),
        Some(("/run/cq".into(), "g".into()))
    );
    let s = sources(Some("limit = 1GiB"), None);
    let c = config(
        &s,
        &[("CUQUOTA_GROUP", "g"), ("CUQUOTA_STATE_DIR", "/tmp/x")],
    );
    assert_eq!(c.unwrap().group_spec(), Some(("/tmp/x".into(), "g".into())));
}

#[test]
fn a_jobs_policy_narrows_the_main_one() {
    let main = "limit = 6GiB\nmode = observe\njobs = /run/cuquota/jobs\nstate_dir = /run/cq";
    let job = "limit = 1GiB\ngroup = slurm-job-42\nmode = enforce";
    let c = config(
        &sources(Some(main), Some(job)),
        &[("CUQUOTA_MODE", "observe")],
    )
    .unwrap();
    assert_eq!(limits(&c), [Some(GIB); 2]);
    assert_eq!(c.mode, Mode::Enforce);
    assert_eq!(
        c.group_spec(),
        Some(("/run/cq".into(), "slurm-job-42".into()))
    );
    assert_eq!(c.policies.len(), 2);
    assert!(
        c.warnings[0].contains("the policy /run/cuquota/jobs/42 says enforce"),
        "{:?}",
        c.warnings
    );
    // A job's larger limit does not lift the main one; the variable still narrows both.
    let c = config(&sources(Some(main), Some("limit = 10GiB")), &[]).unwrap();
    assert_eq!(limits(&c), [Some(6 * GIB); 2]);
    let c = config(
        &sources(Some(main), Some(job)),
        &[("CUQUOTA_LIMIT", "0:512MiB")],
    )
    .unwrap();
    assert_eq!(limits(&c), [Some(GIB / 2), Some(GIB)]);
    // Unsetting every variable changes nothing the policies set.
    let c = config(&sources(Some(main), Some(job)), &[]).unwrap();
    assert_eq!((limits(&c), c.mode), ([Some(GIB); 2], Mode::Enforce));
    assert_eq!(c.group.as_deref(), Some("slurm-job-42"));
}

/// A program with more privileges than its caller takes no file, directory, group or stack
/// depth from the variables (one line names them), keeps the policy's group and state
/// directory, and still lets a variable narrow the limit.
#[test]
fn a_privileged_program_ignores_the_variables_that_name_files() {
    let secure = |main: Option<&str>| Sources {
        secure: true,
        asked: true,
        ..sources(main, None)
    };
    let vars = [
        ("CUQUOTA_LOG", "/etc/passwd"),
        ("CUQUOTA_TRACE", "/root/t.jsonl"),
        ("CUQUOTA_STATE_DIR", "/tmp/mine"),
        ("CUQUOTA_GROUP", "theirs"),
        ("CUQUOTA_STACKS", "8"),
        ("CUQUOTA_LIMIT", "1GiB"),
    ];
    let c = config(&secure(None), &vars).unwrap();
    assert_eq!(c.log, LogTarget::Stderr);
    assert_eq!(
        (c.trace.is_none(), c.group.is_none(), c.stacks),
        (true, true, 0)
    );
    assert_eq!(c.state_dir, PathBuf::from(group::DEFAULT_STATE_DIR));
    assert_eq!(limits(&c), [Some(GIB); 2]);
    assert_eq!(
        c.warnings,
        [
            "CUQUOTA_LOG, CUQUOTA_TRACE, CUQUOTA_STATE_DIR, CUQUOTA_GROUP, CUQUOTA_STACKS are \
          ignored: this program runs with more privileges than the user who started it \
          (setuid, setgid or file capabilities), so no variable may name its files, \
          directories or groups"
        ]
    );
    // The policy's group and state directory stand; the variable cannot widen its limit.
    let main = "limit = 2GiB\ngroup = svc\nstate_dir = /run/cuquota\n";
    let c = config(
        &secure(Some(main)),
        &[("CUQUOTA_GROUP", "theirs"), ("CUQUOTA_LIMIT", "4GiB")],
    )
    .unwrap();
    assert_eq!(c.group.as_deref(), Some("svc"));
    assert_eq!(c.state_dir, PathBuf::from("/run/cuquota"));
    assert_eq!(limits(&c), [Some(2 * GIB); 2]);
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(c.warnings[0].starts_with("CUQUOTA_GROUP is ignored: this program"));
    // The same variables in an ordinary program are taken.
    let c = config(
        &Sources {
            secure: false,
            ..secure(None)
        },
        &vars,
    )
    .unwrap();
    assert_eq!(
        (c.trace.is_some(), c.group.as_deref(), c.stacks),
        (true, Some("theirs"), 8)
    );
}
