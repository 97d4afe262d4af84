//! The arrival-blind yardstick: what a perfect forecast of the rate can do.
//! It knows each ten-minute window's true mean rate and the burstiness its
//! arrivals realised (the index of dispersion of their counts per poll),
//! sizes each window with the capacity rule at a constant headroom, and
//! starts replicas as early as the oracle does. It cannot see where in the
//! window the requests fall. Run at several headrooms, the best one in
//! hindsight for each SLO level splits the gap between a policy and the
//! oracle into what no rate forecast can see and what the forecaster and
//! controller lose.

use super::{fluid::Arrivals, oracle::Oracle, Capacity, Demand, SimConfig};

/// Seconds of the windows the yardstick knows.
const WINDOW_SECS: usize = 600;

/// The yardstick for `demand` run with `cfg`, sizing for `headroom` x each
/// window's rate, replicas started `lead_secs` and a poll early.
pub fn arrival_blind(demand: &Demand, cap: &Capacity, cfg: &SimConfig, lead_secs: f64, headroom: f64) -> Oracle {
    let dt = if cfg.step_secs > 0.0 && 60.0 % cfg.step_secs == 0.0 { cfg.step_secs } else { 1.0 };
    let steps_per_min = (60.0 / dt).round() as usize;
    let steps_per_poll = (cfg.poll_secs / dt).round().max(1.0) as usize;
    let per_window = WINDOW_SECS / 60;
    // The same draws the run makes.
    let mut arrivals = Arrivals::new(cfg);
    let mut need = Vec::with_capacity(demand.minutes());
    let mut polls: Vec<f64> = Vec::new();
    let (mut total, mut in_poll) = (0.0, 0.0);
    for m in 0..demand.minutes() {
        for k in 0..steps_per_min {
            let a = arrivals.next(demand, m, (m * steps_per_min + k) as f64 * dt, dt);
            total += a;
            in_poll += a;
            if (m * steps_per_min + k + 1) % steps_per_poll == 0 {
                polls.push(in_poll);
                in_poll = 0.0;
            }
        }
        let last = m + 1 == demand.minutes();
        if (m + 1) % per_window == 0 || last {
            let minutes = m + 1 - need.len();
            let rate = total / (minutes * 60) as f64;
            let r = cap.replicas_for(rate * headroom, super::dispersion(&polls));
            let r = r.clamp(cap.min_replicas, cap.max_replicas.max(cap.min_replicas));
            need.extend(std::iter::repeat_n(r, minutes));
            polls.clear();
            total = 0.0;
        }
    }
    Oracle { name: format!("yardstick(x{headroom:.2})"), need, ahead_secs: lead_secs + cfg.poll_secs, cap: cap.clone() }
}
