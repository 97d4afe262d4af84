//! Per-replica capacity learned from what the pods report, with the profile
//! as the prior.
//!
//! A profile's `concurrency_per_replica` is a load test's answer on someone's
//! hardware, prompts and vLLM version. The fleet itself says how many
//! requests one replica runs at once within the SLO: each observation is the
//! requests running per ready replica at that moment and whether the latency
//! SLO held (the measured p99 queue wait within the wait budget). A held SLO
//! at load x says capacity >= x; a miss says capacity < x. (Running, not in
//! flight: requests that wait are the queue the sizing rules model on top
//! of the batch; counting them in would learn a batch larger than it is.) The estimate is the load
//! that best separates the two: the threshold with the fewest observations
//! on the wrong side, and among equally good thresholds the one nearest the
//! prior. That makes it robust by construction:
//! - idle stretches only add "held" at low loads, which every threshold above
//!   them already agrees with: they move nothing;
//! - saturated stretches alone (misses at high loads only) agree with every
//!   threshold below them, the prior included: they move nothing either;
//! - a quiet week adds nothing that disagrees with the current threshold,
//!   so the estimate cannot drift; and no evidence decays with time alone.
//!
//! A few noisy misses below a long run of held observations do not move it:
//! moving would put more observations on the wrong side; and leaving the
//! prior at all costs five observations' worth, so one odd reading cannot. Evidence is kept
//! per load bin (ratio to the prior, geometric), each bin's counts capped so
//! that new evidence can overturn old where it arrives.
//!
//! The threshold found is blended with the prior by how much evidence lies
//! near it: `prior^(1-w) x learned^w`, w = n / (n + `prior_weight`), n the
//! observations within a factor 1.5 of the threshold. Pure: the caller feeds
//! observations.

use serde::Serialize;

/// Bins per doubling of load, and the range of load ratios kept.
const BINS_PER_OCTAVE: f64 = 16.0;
const MIN_RATIO: f64 = 1.0 / 16.0;
const MAX_RATIO: f64 = 16.0;
/// Observations near the threshold worth as much as the prior.
const PRIOR_WEIGHT: f64 = 30.0;
/// A bin keeps at most this many observations (older ones scaled down).
const BIN_CAP: f64 = 200.0;
/// "Near the threshold": within this factor.
const NEAR: f64 = 1.5;
/// Observations on the wrong side of the prior it takes to move off it at all.
const MOVE_COST: f64 = 5.0;

fn bins() -> usize {
    ((MAX_RATIO / MIN_RATIO).log2() * BINS_PER_OCTAVE).round() as usize
}

/// The lower edge of bin `b`, as a ratio to the prior.
fn edge(b: usize) -> f64 {
    MIN_RATIO * 2f64.powf(b as f64 / BINS_PER_OCTAVE)
}

fn bin_of(ratio: f64) -> Option<usize> {
    if !(MIN_RATIO..MAX_RATIO).contains(&ratio) {
        return None;
    }
    Some(((ratio / MIN_RATIO).log2() * BINS_PER_OCTAVE).floor() as usize)
}

/// Evidence about one workload's per-replica capacity.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Estimator {
    prior: f64,
    held: Vec<f64>,
    missed: Vec<f64>,
}

/// What the estimator says now, and why.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Learned {
    /// The profile's `concurrency_per_replica`.
    pub prior: f64,
    /// The load per replica that best separates held from missed observations.
    pub learned: f64,
    /// What sizing uses: the prior and the learned figure, blended by evidence.
    pub per_replica: f64,
    /// Weight of the learned figure in the blend (0..1).
    pub weight: f64,
    /// Observations within a factor 1.5 of the learned figure.
    pub near: f64,
    /// All observations kept, and how many of them missed the SLO.
    pub observations: f64,
    pub missed: f64,
    /// Observations on the wrong side of the learned figure (plus, when it
    /// left the prior, the few it takes to move at all).
    pub disagreeing: f64,
}

impl Estimator {
    /// An estimator starting at `prior` (> 0).
    pub(crate) fn new(prior: f64) -> Estimator {
        Estimator { prior, held: vec![0.0; bins()], missed: vec![0.0; bins()] }
    }

    /// One observation: `load` per ready replica (same unit as the prior) and
    /// whether the SLO held. Loads outside 1/16..16 x the prior, and non-finite
    /// ones, are ignored (an empty fleet, a unit mistake).
    pub(crate) fn observe(&mut self, load: f64, held: bool) {
        let Some(b) = bin_of(load / self.prior) else { return };
        // A replica that misses at under half the load it is believed to take
        // (what sizing uses, or the learned figure if lower) is missing for
        // another reason (a burst inside the minute, a cold start, one huge
        // prompt): counted, such misses would lower the estimate, add
        // replicas, lower the load further and feed on themselves.
        if !held {
            let e = self.estimate();
            if load < 0.5 * e.per_replica.min(e.learned) {
                return;
            }
        }
        if held {
            self.held[b] += 1.0;
        } else {
            self.missed[b] += 1.0;
        }
        let total = self.held[b] + self.missed[b];
        if total > BIN_CAP {
            let k = BIN_CAP / total;
            self.held[b] *= k;
            self.missed[b] *= k;
        }
    }

    /// The current estimate.
    pub(crate) fn estimate(&self) -> Learned {
        let n = self.held.len();
        // Threshold candidates are bin edges 0..=n; at edge c, bins below c are
        // "capacity above their load" (a miss there disagrees), bins at or above
        // c are past capacity (a held one disagrees).
        let held_above: Vec<f64> = {
            let mut v = vec![0.0; n + 1];
            for b in (0..n).rev() {
                v[b] = v[b + 1] + self.held[b];
            }
            v
        };
        let (mut best, mut best_c, mut missed_below) = (f64::INFINITY, 0usize, 0.0);
        let prior_edge = (1.0f64 / MIN_RATIO).log2() * BINS_PER_OCTAVE;
        for (c, held_above) in held_above.iter().enumerate() {
            if c > 0 {
                missed_below += self.missed[c - 1];
            }
            // Leaving the prior costs a few observations' worth: one odd reading cannot move it.
            let loss = missed_below + held_above + if c as f64 == prior_edge { 0.0 } else { MOVE_COST };
            let nearer = (c as f64 - prior_edge).abs() < (best_c as f64 - prior_edge).abs();
            if loss < best - 1e-9 || ((loss - best).abs() <= 1e-9 && nearer) {
                best = loss;
                best_c = c;
            }
        }
        // Where no evidence constrains it (the prior's edge wins a tie), it is the prior exactly.
        let ratio = if best_c as f64 == prior_edge { 1.0 } else { edge(best_c) };
        let learned = self.prior * ratio;
        let near: f64 = (0..n)
            .filter(|b| {
                let mid = edge(*b) * 2f64.powf(0.5 / BINS_PER_OCTAVE);
                mid >= ratio / NEAR && mid <= ratio * NEAR
            })
            .map(|b| self.held[b] + self.missed[b])
            .sum();
        let weight = near / (near + PRIOR_WEIGHT);
        Learned {
            prior: self.prior,
            learned,
            per_replica: self.prior.powf(1.0 - weight) * learned.powf(weight),
            weight,
            near,
            observations: self.held.iter().sum::<f64>() + self.missed.iter().sum::<f64>(),
            missed: self.missed.iter().sum(),
            disagreeing: best,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica that truly holds `cap`: the SLO holds below it, misses above,
    /// with `noise` of the observations flipped.
    fn feed(e: &mut Estimator, loads: impl Iterator<Item = f64>, cap: f64, noise_every: usize) {
        for (i, x) in loads.enumerate() {
            let truth = x <= cap;
            let flip = noise_every > 0 && i % noise_every == 0;
            e.observe(x, truth != flip);
        }
    }

    /// A day of minute observations whose load sweeps 0.2..1.6 x `peak` sinusoidally.
    fn day(peak: f64) -> impl Iterator<Item = f64> {
        (0..1440).map(move |m| peak * (0.9 + 0.7 * (m as f64 / 1440.0 * std::f64::consts::TAU).sin()))
    }

    #[test]
    fn converges_on_the_true_capacity_from_a_prior_thirty_percent_off_either_way() {
        for (prior, truth) in [(22.4, 32.0), (41.6, 32.0), (32.0, 32.0)] {
            let mut e = Estimator::new(prior);
            feed(&mut e, day(truth), truth, 0);
            let l = e.estimate();
            assert!((l.learned / truth - 1.0).abs() < 0.10, "prior {prior}: {l:?}");
            assert!((l.per_replica / truth - 1.0).abs() < 0.10, "prior {prior}: {l:?}");
            assert!(l.weight > 0.9, "{l:?}");
        }
    }

    #[test]
    fn noisy_misses_do_not_drag_it_down() {
        let mut e = Estimator::new(32.0);
        // One observation in 20 flipped.
        feed(&mut e, day(32.0), 32.0, 20);
        let l = e.estimate();
        assert!((l.learned / 32.0 - 1.0).abs() < 0.10, "{l:?}");
    }

    #[test]
    fn idle_or_saturated_stretches_alone_teach_nothing() {
        // Idle: a week of loads far below capacity, every one held.
        let mut idle = Estimator::new(32.0);
        feed(&mut idle, (0..10_080).map(|m| 2.0 + (m % 7) as f64), 32.0, 0);
        assert_eq!(idle.estimate().per_replica, 32.0, "{:?}", idle.estimate());
        // Saturated: loads far above capacity, every one missed.
        let mut sat = Estimator::new(32.0);
        feed(&mut sat, (0..1_000).map(|m| 60.0 + (m % 40) as f64), 32.0, 0);
        assert_eq!(sat.estimate().per_replica, 32.0, "{:?}", sat.estimate());
    }

    #[test]
    fn a_quiet_week_after_learning_never_drifts() {
        let mut e = Estimator::new(45.0);
        feed(&mut e, day(32.0), 32.0, 0);
        let learned = e.estimate();
        feed(&mut e, (0..10_080).map(|m| 3.0 + (m % 11) as f64), 32.0, 0);
        assert_eq!(e.estimate().learned, learned.learned);
        assert!((e.estimate().per_replica - learned.per_replica).abs() < 1e-9);
    }

    #[test]
    fn new_evidence_overturns_old_where_it_arrives() {
        // The fleet got slower (a new vLLM version, longer prompts): capacity 32 -> 24.
        let mut e = Estimator::new(32.0);
        feed(&mut e, day(32.0), 32.0, 0);
        for _ in 0..3 {
            feed(&mut e, day(24.0), 24.0, 0);
        }
        let l = e.estimate();
        assert!((l.learned / 24.0 - 1.0).abs() < 0.10, "{l:?}");
    }

    #[test]
    fn misses_far_below_the_estimate_do_not_feed_on_themselves() {
        // A fleet over-provisioned after learning sees only low loads; bursts still miss
        // there now and then. Counted, they would lower the estimate, add replicas and
        // lower the load further.
        let mut e = Estimator::new(32.0);
        feed(&mut e, day(32.0), 32.0, 0);
        let before = e.estimate();
        for m in 0..2_000 {
            e.observe(6.0 + (m % 8) as f64, m % 3 != 0);
        }
        assert_eq!(e.estimate().learned, before.learned);
    }

    #[test]
    fn one_odd_reading_neither_moves_it_nor_freezes_it() {
        // One held reading at three times the profile (a scrape racing a scale-down, say).
        let mut e = Estimator::new(32.0);
        e.observe(96.0, true);
        assert_eq!(e.estimate().learned, 32.0, "{:?}", e.estimate());
        // A fleet that really takes 24 is still learned afterwards.
        feed(&mut e, day(24.0), 24.0, 0);
        assert!((e.estimate().learned / 24.0 - 1.0).abs() < 0.10, "{:?}", e.estimate());
    }

    #[test]
    fn little_evidence_moves_it_little() {
        let mut e = Estimator::new(40.0);
        // Five misses at 30 are not enough to leave the prior; eight are, but weigh little.
        for _ in 0..5 {
            e.observe(30.0, false);
        }
        assert_eq!(e.estimate().learned, 40.0);
        for _ in 0..3 {
            e.observe(30.0, false);
        }
        let l = e.estimate();
        assert!(l.learned <= 30.0 && l.per_replica > 37.0, "{l:?}");
        // Garbage is ignored.
        for bad in [f64::NAN, -1.0, 0.0, 1e9] {
            e.observe(bad, false);
        }
        assert_eq!(e.estimate(), l);
    }
}
