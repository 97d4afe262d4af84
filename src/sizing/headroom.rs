//! Headroom learned from the SLO itself: a multiplier on the load the
//! predictive rule sizes for, raised when the measured queue wait misses
//! the target and let down slowly while it holds.
//!
//! The queueing rule assumes a shape for arrivals (Poisson slowed by their
//! measured dispersion). Real LLM demand has dumps of hundreds of requests
//! in a second that no such shape captures, and how much room they need
//! differs by fleet and by hour. What is measured directly is whether
//! requests wait past the budget (vLLM's `request_queue_time_seconds`), so
//! that measurement corrects the rule: up multiplicatively at once (a
//! missed minute is the costly error), down gently (a multiplier that fell
//! as fast would give the room back before the next dump of a bursty hour).
//! Pure: the caller feeds measurements and times.

/// Bounds and rates of the multiplier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HeadroomConfig {
    /// Share of requests that must start within the wait budget.
    pub(crate) target: f64,
    /// Multiplier per observation that misses the target.
    pub(crate) up: f64,
    /// Seconds for the multiplier's excess over 1 to halve while the target holds.
    pub(crate) half_life_secs: f64,
    pub(crate) max: f64,
}

impl Default for HeadroomConfig {
    fn default() -> Self {
        HeadroomConfig { target: 0.99, up: 1.2, half_life_secs: 7200.0, max: 3.0 }
    }
}

/// The learned multiplier (>= 1).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Headroom {
    pub(crate) cfg: HeadroomConfig,
    factor: f64,
    last: Option<f64>,
}

impl Headroom {
    pub(crate) fn new(cfg: HeadroomConfig) -> Headroom {
        Headroom { cfg, factor: 1.0, last: None }
    }

    pub(crate) fn factor(&self) -> f64 {
        self.factor
    }

    /// Record the share of requests that started within the budget since the
    /// last observation (NaN: none started) at `now_secs`; returns the factor.
    pub(crate) fn observe(&mut self, now_secs: f64, attainment: f64) -> f64 {
        let dt = self.last.map_or(0.0, |t| (now_secs - t).max(0.0));
        self.last = Some(now_secs);
        if attainment.is_finite() && attainment < self.cfg.target {
            self.factor = (self.factor * self.cfg.up).min(self.cfg.max);
        } else if self.cfg.half_life_secs > 0.0 {
            let keep = 0.5f64.powf(dt / self.cfg.half_life_secs);
            self.factor = 1.0 + (self.factor - 1.0) * keep;
        }
        self.factor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misses_raise_it_at_once_and_it_halves_its_excess_per_half_life() {
        let mut h = Headroom::new(HeadroomConfig { up: 2.0, half_life_secs: 100.0, max: 3.0, target: 0.99 });
        assert_eq!(h.observe(0.0, 1.0), 1.0);
        assert_eq!(h.observe(15.0, 0.5), 2.0);
        assert_eq!(h.observe(30.0, 0.9), 3.0); // capped
        assert!((h.observe(130.0, 1.0) - 2.0).abs() < 1e-9); // excess 2 -> 1 in one half-life
                                                             // No requests started: no evidence either way, only time passes.
        assert!((h.observe(230.0, f64::NAN) - 1.5).abs() < 1e-9);
    }
}
