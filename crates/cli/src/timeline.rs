//! A time series of in-use bytes in constant memory: a fixed number of buckets whose width
//! doubles (merging neighbours) whenever an event lands past the last one, so a trace of any
//! length is summarised in one pass without knowing its duration in advance.

#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct Bucket {
    pub used: bool,
    /// Highest value in the bucket, and the value after its last event.
    pub max: u64,
    pub last: u64,
    /// In-use bytes at the bucket's refusals (the highest), if it had any, and how many.
    pub refusal: Option<u64>,
    pub refusals: u32,
    /// cuquota trimmed the process's pools or graph memory in the bucket.
    pub trimmed: bool,
}

impl Bucket {
    fn merge(self, later: Bucket) -> Bucket {
        match (self.used, later.used) {
            (_, false) => Bucket {
                refusal: self.refusal.max(later.refusal),
                refusals: self.refusals + later.refusals,
                trimmed: self.trimmed || later.trimmed,
                ..self
            },
            (false, true) => Bucket {
                refusal: self.refusal.max(later.refusal),
                refusals: self.refusals + later.refusals,
                trimmed: self.trimmed || later.trimmed,
                ..later
            },
            (true, true) => Bucket {
                used: true,
                max: self.max.max(later.max),
                last: later.last,
                refusal: self.refusal.max(later.refusal),
                refusals: self.refusals + later.refusals,
                trimmed: self.trimmed || later.trimmed,
            },
        }
    }
}

#[derive(Clone)]
pub struct Timeline {
    width_ns: u64,
    buckets: Vec<Bucket>,
    end_ns: u64,
}

impl Timeline {
    /// `n` buckets (even, at least 2), starting 1 µs wide.
    pub fn new(n: usize) -> Timeline {
        Timeline {
            width_ns: 1000,
            buckets: vec![Bucket::default(); n.max(2) & !1],
            end_ns: 0,
        }
    }

    /// `value` bytes in use from `t_ns` on. Times should not go backwards (they may repeat).
    pub fn add(&mut self, t_ns: u64, value: u64) {
        let b = self.bucket(t_ns);
        if b.used {
            b.max = b.max.max(value);
        } else {
            b.used = true;
            b.max = value;
        }
        b.last = value;
    }

    /// A refusal at `t_ns` while `in_use` bytes were in use.
    pub fn refusal(&mut self, t_ns: u64, in_use: u64) {
        let b = self.bucket(t_ns);
        b.refusal = b.refusal.max(Some(in_use));
        b.refusals += 1;
    }

    /// cuquota trimmed pools or graph memory at `t_ns`.
    pub fn trim(&mut self, t_ns: u64) {
        self.bucket(t_ns).trimmed = true;
    }

    pub fn end_ns(&self) -> u64 {
        self.end_ns
    }

    pub fn width_ns(&self) -> u64 {
        self.width_ns
    }

    /// `(start_ns, bucket)` for each bucket that saw an event or a refusal.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, &Bucket)> {
        let width = self.width_ns;
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.used || b.refusal.is_some())
            .map(move |(i, b)| (i as u64 * width, b))
    }

    /// The highest value in use during each of `columns` equal slices of `[0, end_ns]`: the
    /// value a slice starts with (memory stays as the last event left it) or any event's in it.
    /// Exact to the bucket width.
    pub fn columns(&self, end_ns: u64, columns: usize) -> Vec<u64> {
        let span = u128::from(end_ns) + 1;
        let n = self.buckets.len();
        let width = u128::from(self.width_ns);
        let mut out = Vec::with_capacity(columns);
        // `carry`: the value after the last used bucket before `scanned`.
        let (mut carry, mut scanned) = (0u64, 0usize);
        for c in 0..columns as u128 {
            let lo = span * c / columns as u128;
            let hi = (span * (c + 1) / columns as u128).max(lo + 1);
            let first = ((lo / width) as usize).min(n - 1);
            let last = (((hi - 1) / width) as usize).min(n - 1);
            while scanned < first {
                if self.buckets[scanned].used {
                    carry = self.buckets[scanned].last;
                }
                scanned += 1;
            }
            let inside = self.buckets[first..=last].iter().filter(|b| b.used);
            out.push(inside.fold(carry, |v, b| v.max(b.max)));
        }
        out
    }

    fn bucket(&mut self, t_ns: u64) -> &mut Bucket {
        self.end_ns = self.end_ns.max(t_ns);
        while t_ns / self.width_ns >= self.buckets.len() as u64 {
            self.halve();
        }
        let idx = (t_ns / self.width_ns) as usize;
        &mut self.buckets[idx]
    }

    /// Merges neighbouring buckets pairwise: twice the width, half the buckets used.
    fn halve(&mut self) {
        let n = self.buckets.len();
        for i in 0..n / 2 {
            self.buckets[i] = self.buckets[2 * i].merge(self.buckets[2 * i + 1]);
        }
        for b in &mut self.buckets[n / 2..] {
            *b = Bucket::default();
        }
        self.width_ns *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_widen_and_keep_the_maximum() {
        let mut t = Timeline::new(4);
        t.add(0, 5);
        t.add(500, 9);
        t.add(600, 2);
        assert_eq!(t.width_ns(), 1000);
        t.add(10_000, 3); // past 4 µs: widens to 4 µs, then 8, then 16
        assert_eq!(t.width_ns(), 4000);
        let used: Vec<(u64, u64, u64)> = t.buckets().map(|(s, b)| (s, b.max, b.last)).collect();
        assert_eq!(used, [(0, 9, 2), (8000, 3, 3)]);
        t.refusal(10_500, 3);
        assert_eq!(t.buckets().last().unwrap().1.refusal, Some(3));
        assert_eq!(t.end_ns(), 10_500);
        t.trim(200);
        assert!(t.buckets().next().unwrap().1.trimmed);
        t.add(40_000, 1); // widens again: the mark stays with its bucket
        let trimmed: Vec<u64> = t
            .buckets()
            .filter(|(_, b)| b.trimmed)
            .map(|(s, _)| s)
            .collect();
        assert_eq!(trimmed, [0]);
    }

    #[test]
    fn columns_carry_values_across_quiet_stretches() {
        let mut t = Timeline::new(256);
        t.add(0, 10);
        t.add(100_000, 50); // 100 µs
        t.add(100_100, 20);
        t.add(200_000, 0);
        let cols = t.columns(249_999, 10); // 25 µs a column
        assert_eq!(cols, [10, 10, 10, 10, 50, 20, 20, 20, 20, 0]);
    }

    #[test]
    fn many_events_stay_in_fixed_memory() {
        let mut t = Timeline::new(64);
        for i in 0..1_000_000u64 {
            t.add(i * 1000, i % 1000);
        }
        assert_eq!(t.buckets.len(), 64);
        assert!(t.buckets().all(|(_, b)| b.max == 999));
        let cols = t.columns(t.end_ns(), 60);
        assert!(cols.iter().all(|&v| v == 999), "{cols:?}");
    }
}
