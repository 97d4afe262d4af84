//! The simulated source's past. A simulated fleet is a pure function of
//! time, so the history it would have produced before Foresight started can
//! be computed rather than waited for: the demo then forecasts with its
//! seasons from the first minute instead of extrapolating a start-up ramp.
//!
//! The history is read the way a live scrape reads it (each pod's `/metrics`
//! body rendered, parsed and derived into signals), so backfilled and live
//! points are the same quantity.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{exposition, vllm, Signals};
use crate::fake_vllm::{render, Fleet};

/// Run `fleet` (built with its origin at `from`) to `to`, reading its
/// signals once per `step` seconds. Element `k` holds what a scrape at the
/// end of `[from + k step, from + (k + 1) step)` would have read: rates over
/// that interval, gauges at its end. The fleet is left at `to`, ready to
/// serve live.
pub(crate) fn history(fleet: &mut Fleet, from: f64, to: f64, step: f64) -> Vec<Signals> {
    let mut deriver = vllm::Deriver::default();
    // A first reading at the origin: rates need a previous one.
    read(fleet, &mut deriver, from);
    let n = if step > 0.0 && to > from { ((to - from) / step).floor() as usize } else { 0 };
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        // Just inside the interval's end, so the reading belongs to bucket k.
        let t = from + (k + 1) as f64 * step - 1e-3;
        fleet.advance_to(t);
        out.push(read(fleet, &mut deriver, t));
    }
    fleet.advance_to(to);
    out
}

fn read(fleet: &Fleet, deriver: &mut vllm::Deriver, t: f64) -> Signals {
    let at = UNIX_EPOCH + Duration::from_secs_f64(t.max(0.0));
    let model = &fleet.config().model_name;
    let readings = fleet
        .pods()
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let body = render(&p.metrics(), model);
            // The fleet renders what it parses; a failure here would be a bug in one of
            // them, and a gap in history is the right answer to it, not a panic.
            let families = exposition::parse(&body, exposition::Format::Text).ok()?;
            let reading = vllm::read(&families, at, None).ok()?;
            Some((format!("pod-{i}"), reading))
        })
        .collect();
    deriver.round(readings)
}

/// The start of the store bucket holding `t`, for a store of `resolution`
/// (so a backfill of `s` seconds covers at least `s`).
pub(crate) fn bucket_start(t: SystemTime, resolution: Duration) -> f64 {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    let res = resolution.as_secs_f64().max(1e-3);
    (secs / res).floor() * res
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{fake_vllm::SimConfig, sources::Signal};

    fn fleet(origin: f64) -> Fleet {
        let cfg: SimConfig = serde_yaml_ng::from_str(
            "pods: 2\nmax_num_seqs: 256\ndemand: {requests_per_sec: 20, daily_amplitude: 0.8, \
             weekend_factor: 1.0, day_length_secs: 600, seed: 4}",
        )
        .unwrap();
        Fleet::new(cfg, None, origin)
    }

    #[test]
    fn history_follows_the_demand_and_hands_over_a_running_fleet() {
        let (from, step) = (1_800_000_000.0, 10.0);
        let mut f = fleet(from);
        let h = history(&mut f, from, from + 1200.0, step);
        assert_eq!(h.len(), 120);
        assert_eq!(f.now(), from + 1200.0);
        let rate: Vec<f64> = h.iter().map(|s| s.get(Signal::RequestRate).unwrap_or(f64::NAN)).collect();
        assert!(rate.iter().all(|r| r.is_finite()), "{rate:?}");
        // The envelope's trough (0.2 x 20 req/s) and peak (1.8 x 20) show in the history.
        let (lo, hi) = rate.iter().fold((f64::MAX, 0f64), |(l, h), r| (l.min(*r), h.max(*r)));
        assert!(lo < 8.0 && hi > 28.0, "{lo} {hi}");
        let mean = rate.iter().sum::<f64>() / rate.len() as f64;
        assert!((mean - 20.0).abs() < 2.0, "{mean}");
        assert!(h.iter().all(|s| s.get(Signal::Concurrency).is_some()));
    }
}
