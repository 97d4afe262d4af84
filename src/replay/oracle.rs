//! The oracle: the cheapest per-minute fleet that meets the SLO on the
//! arrivals each minute really brings, started a cold start early. It is
//! planned with the demand itself (which is what makes it an oracle) and
//! against the same physics the run then plays, so its cost is the mark
//! the other policies are measured against and its SLO is met wherever a
//! minute can be met at all. A sizing rule fed a perfect forecast of the
//! rate is not such a mark: on bursty arrivals it misses the minutes whose
//! requests come in seconds-long dumps.

use super::{
    fluid::{Arrivals, Event, Queue},
    Capacity, Decision, Demand, Observation, Policy, SimConfig,
};

/// Perfect foresight of every arrival.
pub struct Oracle {
    pub(super) name: String,
    /// Ready replicas each minute needs.
    pub(super) need: Vec<u32>,
    /// How far ahead it starts replicas: the cold start plus a poll, so a
    /// replica asked for at the poll before is ready when its minute begins.
    pub(super) ahead_secs: f64,
    pub(super) cap: Capacity,
}

impl Oracle {
    /// Plans `demand` (the simulated window, run with `cfg`) minute by
    /// minute: the fewest ready replicas that admit the minute's target
    /// share of its requests within the wait budget, given the queue the
    /// minutes before left. Replicas start `lead_secs` (the cold start) and
    /// a poll early.
    pub fn new(demand: &Demand, cap: &Capacity, cfg: &SimConfig, lead_secs: f64) -> Oracle {
        // An invalid step is refused by the run itself; plan on seconds meanwhile.
        let dt = if cfg.step_secs > 0.0 && 60.0 % cfg.step_secs == 0.0 { cfg.step_secs } else { 1.0 };
        let steps = (60.0 / dt).round() as usize;
        // A minute's requests are settled once the budget has passed since its end.
        let settle = steps + (cap.wait_budget_secs / dt).ceil() as usize + 1;
        let completion = (dt / cap.service_secs).min(1.0);
        let (lo_bound, hi_bound) = (i64::from(cap.min_replicas), i64::from(cap.max_replicas.max(cap.min_replicas)));
        let mut arrivals = Arrivals::new(cfg);
        let mut queue = Queue::default();
        let mut arr = vec![0.0; steps];
        let mut need = Vec::with_capacity(demand.minutes());
        let mut guess = lo_bound.max(1);
        for m in 0..demand.minutes() {
            let t0 = m as f64 * 60.0;
            for (k, a) in arr.iter_mut().enumerate() {
                *a = arrivals.next(demand, m, t0 + k as f64 * dt, dt);
            }
            let total: f64 = arr.iter().sum();
            let meets = |r: i64| {
                if total <= 0.0 {
                    return true;
                }
                let mut q = queue.clone();
                let mut met = 0.0;
                for k in 0..settle {
                    let t = t0 + k as f64 * dt;
                    q.arrive(t, arr.get(k).copied().unwrap_or(0.0));
                    q.step(t, r as f64 * cap.slots, completion, cap.wait_budget_secs, cfg.max_wait_secs, |e| {
                        if let Event::Admitted { at, n, in_budget: true } = e {
                            met += if at >= t0 { n } else { 0.0 };
                        }
                    });
                }
                met >= cfg.minute_slo_target * total
            };
            let r = fewest(guess.clamp(lo_bound, hi_bound), lo_bound, hi_bound, meets);
            guess = r;
            for (k, a) in arr.iter().enumerate() {
                let t = t0 + k as f64 * dt;
                queue.arrive(t, *a);
                queue.step(t, r as f64 * cap.slots, completion, cap.wait_budget_secs, cfg.max_wait_secs, |_| {});
            }
            need.push(u32::try_from(r).unwrap_or(u32::MAX));
        }
        Oracle { name: "oracle".into(), need, ahead_secs: lead_secs + cfg.poll_secs, cap: cap.clone() }
    }
}

/// The smallest r in [lo, hi] with `ok(r)` (`ok` rising with r), searched
/// outward from `guess` (the minute before's answer, usually close); `hi`
/// when none is.
fn fewest(guess: i64, lo: i64, hi: i64, mut ok: impl FnMut(i64) -> bool) -> i64 {
    // Invariant: `fail` fails (or is below the range), `pass` passes (or is the top).
    let (mut fail, mut pass);
    let mut d = 1;
    if ok(guess) {
        pass = guess;
        loop {
            if pass <= lo {
                fail = lo - 1;
                break;
            }
            let c = (pass - d).max(lo);
            if ok(c) {
                pass = c;
                d *= 2;
            } else {
                fail = c;
                break;
            }
        }
    } else {
        fail = guess;
        loop {
            if fail >= hi {
                return hi;
            }
            let c = (fail + d).min(hi);
            if ok(c) {
                pass = c;
                break;
            }
            fail = c;
            d *= 2;
        }
    }
    while pass - fail > 1 {
        let mid = fail + (pass - fail) / 2;
        if ok(mid) {
            pass = mid;
        } else {
            fail = mid;
        }
    }
    pass
}

impl Policy for Oracle {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn decide(&mut self, o: &Observation) -> Decision {
        let from = (o.t / 60.0) as usize;
        let to = ((o.t + self.ahead_secs) / 60.0) as usize;
        let peak = self
            .need
            .get(from..=to.min(self.need.len().saturating_sub(1)))
            .map_or(0, |w| w.iter().copied().max().unwrap_or(0));
        Decision { replicas: peak.clamp(self.cap.min_replicas, self.cap.max_replicas), warm_nodes: 0 }
    }
    fn via_hpa(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::fewest;

    #[test]
    fn the_search_finds_the_smallest_passing_count_from_any_guess() {
        for need in [1, 2, 7, 64, 500] {
            for guess in [1, 3, 64, 1000] {
                let mut calls = 0;
                let r = fewest(guess, 1, 1000, |r| {
                    calls += 1;
                    r >= need
                });
                assert_eq!(r, need, "guess {guess}");
                assert!(calls <= 24, "{calls} evaluations for need {need} from {guess}");
            }
        }
        // Nothing in range passes: the top of the range.
        assert_eq!(fewest(5, 1, 10, |_| false), 10);
        // Everything passes: the bottom.
        assert_eq!(fewest(5, 1, 10, |_| true), 1);
    }
}
