use super::*;

/// The kept entries stay exact when more distinct allocations than TOP go by.
#[test]
fn largest_keeps_the_top_distinct_ones_exactly() {
    let mut top = Largest::default();
    let d = |bytes, t_ns, ptr| Distinct {
        bytes,
        t_ns,
        dev: 0,
        ptr,
        api: 0,
        count: 1,
        stack: 0,
    };
    for i in 0..100u64 {
        top.add(d(i % 25, i, i % 25)); // 25 distinct, each 4 times
    }
    let got: Vec<(u64, u64, u64)> = top
        .sorted()
        .iter()
        .map(|e| (e.bytes, e.count, e.t_ns))
        .collect();
    let want: Vec<(u64, u64, u64)> = (15..25).rev().map(|b| (b, 4, b)).collect();
    assert_eq!(got, want);
}

/// The live set by stack is kept as it was at the peak, however the events go on.
#[test]
fn sites_at_the_peak_are_the_peaks() {
    let mut b = SiteBooks::default();
    // (stack, bytes, alloc?, new peak?)
    let steps = [
        (1, 10, true, true),   // 10
        (2, 20, true, true),   // 30: peak
        (1, 10, false, false), // 20
        (3, 5, true, false),   // 25
        (4, 1, true, false),   // 26
    ];
    let apply = |b: &mut SiteBooks, (stack, bytes, alloc, peak): (u64, u64, bool, bool)| {
        b.before(peak);
        if alloc {
            b.add(stack, bytes);
        } else {
            b.remove(stack, bytes);
        }
        b.after(peak);
    };
    for step in steps {
        apply(&mut b, step);
    }
    let mut at: Vec<_> = b.peak().iter().map(|(&s, &v)| (s, v)).collect();
    at.sort();
    assert_eq!(at, [(1, (1, 10)), (2, (1, 20))]);
    // A new, higher peak: the live set now.
    apply(&mut b, (5, 100, true, true));
    assert_eq!(b.peak().len(), 4);
    assert_eq!(b.peak().get(&5), Some(&(1, 100)));
    assert_eq!(b.peak().get(&1), None);
}
