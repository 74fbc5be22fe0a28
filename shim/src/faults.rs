//! Fault injection: make chosen calls of an exported function return a chosen code without
//! doing anything. Rules come from `CUDA_SHIM_FAIL` (loaded with the settings, before the
//! first call is counted) and from `cuShimInjectFault`.
//!
//! Calls are counted per exported symbol (e.g. `cuMemAlloc_v2` and `cuMemAlloc` separately),
//! across all threads, and only for symbols that have rules. `cuShimInjectFault` replaces a
//! symbol's rules and restarts its count, so its `nth` counts from the injection.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::abi::CUresult;
use crate::config::{Fault, FaultRule, When};

/// The rules of one exported function and how many times it has been called since they
/// were set.
struct FunctionFaults {
    calls: u64,
    rules: Vec<(When, Fault)>,
}

static RULES: Mutex<BTreeMap<String, FunctionFaults>> = Mutex::new(BTreeMap::new());
/// False while there are no rules at all, so that the common case takes no lock.
static ANY_RULES: AtomicBool = AtomicBool::new(false);

/// Locks the rules even if a panic (caught at the FFI boundary) poisoned the lock: each
/// update is a few plain assignments, so there is no half-done invariant to protect.
fn lock_rules() -> MutexGuard<'static, BTreeMap<String, FunctionFaults>> {
    RULES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Adds the rules of `CUDA_SHIM_FAIL`, once, before any call is counted.
pub fn load(env_rules: &[FaultRule]) {
    let mut rules = lock_rules();
    for rule in env_rules {
        rules
            .entry(rule.func.clone())
            .or_insert(FunctionFaults {
                calls: 0,
                rules: Vec::new(),
            })
            .rules
            .push((rule.when, rule.fault));
    }
    ANY_RULES.store(!rules.is_empty(), Ordering::Release);
}

/// Counts a call of `func` and returns what a rule does to it, if one fires. The rules'
/// lock is released before the caller acts on it (a raised signal's handler may call in).
pub fn check(func: &str) -> Option<Fault> {
    if !ANY_RULES.load(Ordering::Acquire) {
        return None;
    }
    let mut rules = lock_rules();
    let faults = rules.get_mut(func)?;
    faults.calls += 1;
    let call = faults.calls;
    faults.rules.iter().find_map(|&(when, fault)| {
        let fires = match when {
            When::Nth(n) => call == n,
            When::From(n) => call >= n,
            When::Always => true,
        };
        fires.then_some(fault)
    })
}

/// Replaces the rules of `func` with one: fail its `nth` call from now on (0: every call)
/// with `code`. Code 0 removes the rules of `func`; `func` None removes every rule. The
/// caller loads the environment's rules first, so that they cannot overwrite these.
pub fn inject(func: Option<&str>, nth: u32, code: CUresult) {
    let mut rules = lock_rules();
    match func {
        None => rules.clear(),
        Some(func) if code == 0 => {
            rules.remove(func);
        }
        Some(func) => {
            let when = if nth == 0 {
                When::Always
            } else {
                When::Nth(u64::from(nth))
            };
            rules.insert(
                func.to_string(),
                FunctionFaults {
                    calls: 0,
                    rules: vec![(when, Fault::Fail(code))],
                },
            );
        }
    }
    ANY_RULES.store(!rules.is_empty(), Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    // The rules are process-wide, so each test uses names no other test touches.

    #[test]
    fn nth_call_after_injection() {
        check("fault_test_a");
        inject(Some("fault_test_a"), 2, 7);
        assert_eq!(check("fault_test_a"), None);
        assert_eq!(check("fault_test_a"), Some(Fault::Fail(7)));
        assert_eq!(check("fault_test_a"), None);
        assert_eq!(check("fault_test_other"), None);
    }

    #[test]
    fn environment_rules_count_from_the_first_call() {
        load(&[FaultRule {
            func: "fault_test_c".into(),
            when: When::From(2),
            fault: Fault::Fail(5),
        }]);
        assert_eq!(check("fault_test_c"), None);
        assert_eq!(check("fault_test_c"), Some(Fault::Fail(5)));
        assert_eq!(check("fault_test_c"), Some(Fault::Fail(5)));
    }

    #[test]
    fn every_call_until_cleared() {
        inject(Some("fault_test_b"), 0, 12345);
        assert_eq!(check("fault_test_b"), Some(Fault::Fail(12345)));
        assert_eq!(check("fault_test_b"), Some(Fault::Fail(12345)));
        inject(Some("fault_test_b"), 0, 0);
        assert_eq!(check("fault_test_b"), None);
    }
}
