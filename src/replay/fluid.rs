//! The two pieces of the fleet's physics the simulator and the oracle share,
//! so the oracle plans against exactly the arrivals and the queue the run
//! then plays: the arrivals per step, and the fluid FIFO queue in front of
//! the batch slots.

use std::collections::VecDeque;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Poisson};

use super::{Demand, SimConfig};

/// Arrivals per step, in step order: the recorded ones when the demand has
/// them, else Poisson draws from the seed (the same for every policy), or
/// exactly the expected rate.
pub(super) struct Arrivals {
    rng: ChaCha8Rng,
    poisson: bool,
}

impl Arrivals {
    pub(super) fn new(cfg: &SimConfig) -> Arrivals {
        Arrivals { rng: ChaCha8Rng::seed_from_u64(cfg.seed), poisson: cfg.poisson }
    }

    /// Arrivals in [t, t + dt), `t` in `minute`; call once per step, in order.
    pub(super) fn next(&mut self, demand: &Demand, minute: usize, t: f64, dt: f64) -> f64 {
        let lambda = demand.rate[minute] * dt;
        if let Some(rec) = &demand.arrivals {
            recorded(rec, t, dt)
        } else if lambda.is_nan() || lambda <= 0.0 {
            0.0
        } else if self.poisson {
            Poisson::new(lambda).map_or(lambda, |p| p.sample(&mut self.rng))
        } else {
            lambda
        }
    }
}

/// Recorded per-second arrivals in the step [t, t + dt): whole seconds
/// summed, a step within a second gets its share.
fn recorded(per_sec: &[f32], t: f64, dt: f64) -> f64 {
    let (from, to) = (t.floor() as usize, (t + dt).ceil() as usize);
    let whole: f64 = per_sec.get(from..to.min(per_sec.len())).map_or(0.0, |s| s.iter().map(|c| f64::from(*c)).sum());
    if dt < 1.0 {
        whole * dt
    } else {
        whole
    }
}

/// What happened to waiting requests in a step.
pub(super) enum Event {
    /// `n` requests that arrived at `at` got a batch slot; `in_budget` when
    /// they waited no longer than the wait budget.
    Admitted { at: f64, n: f64, in_budget: bool },
    /// `n` requests that arrived at `at` gave up waiting.
    Dropped { at: f64, n: f64 },
}

/// The fleet's one FIFO queue and its busy batch slots, as a fluid.
#[derive(Debug, Clone, Default)]
pub(super) struct Queue {
    /// (arrival time, requests) in arrival order.
    waiting: VecDeque<(f64, f64)>,
    /// Requests waiting.
    pub(super) queued: f64,
    /// Batch slots in use.
    pub(super) busy: f64,
}

impl Queue {
    pub(super) fn arrive(&mut self, t: f64, n: f64) {
        if n > 0.0 {
            self.waiting.push_back((t, n));
            self.queued += n;
        }
    }

    /// One step at time `t`: a share `completion` of busy slots frees, the
    /// queue is admitted in arrival order into `slots` (all the ready
    /// replicas' batch slots), and requests older than `max_wait` give up.
    pub(super) fn step(
        &mut self,
        t: f64,
        slots: f64,
        completion: f64,
        budget: f64,
        max_wait: f64,
        mut on: impl FnMut(Event),
    ) {
        self.busy -= self.busy * completion;
        let mut free = (slots - self.busy).max(0.0);
        while free > 1e-12 {
            let Some(front) = self.waiting.front_mut() else { break };
            // A remainder too small to matter goes with this admission.
            let n = if front.1 - free <= 1e-12 { front.1 } else { free };
            on(Event::Admitted { at: front.0, n, in_budget: t - front.0 <= budget + 1e-9 });
            self.busy += n;
            self.queued -= n;
            free -= n;
            front.1 -= n;
            if front.1 <= 1e-12 {
                self.waiting.pop_front();
            }
        }
        while let Some(&(at, n)) = self.waiting.front() {
            if t - at <= max_wait {
                break;
            }
            on(Event::Dropped { at, n });
            self.queued -= n;
            self.waiting.pop_front();
        }
        if self.waiting.is_empty() {
            self.queued = 0.0;
        }
    }

    /// Requests still waiting.
    pub(super) fn left(&self) -> f64 {
        self.waiting.iter().map(|c| c.1).sum()
    }
}
