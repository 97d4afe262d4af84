//! The spare-capacity forecast, each tick: every workload's replicas over
//! the next hours from its hours-ahead forecast (the sizing quantile), packed
//! onto the pools, and the reserved nodes left idle throughout each lease
//! length ([`crate::capacity::spare`]).

use std::sync::Arc;

use super::{
    decide::{forecast_from_now, predictive_input},
    refit::ForecastView,
    state::{PoolSpare, WorkloadState},
};
use crate::{
    capacity::{self, Demand, PlanInput, Pool, Reservation},
    config::SizingSettings,
    sizing::predictive,
    store::Store,
    workload::{series, Workload},
};

/// One workload as the spare plan sees it.
pub(super) struct Input<'a> {
    pub(super) workload: &'a Workload,
    pub(super) state: &'a WorkloadState,
    /// Its target forecast hours ahead, once fitted.
    pub(super) forecast: Option<&'a Arc<ForecastView>>,
    /// The highest target reading over the same hours a day and a week ago.
    pub(super) floor: Option<f64>,
}

/// Offers per pool (in `pools` order), or `None` when off or without pools.
pub(super) fn plan(
    now_unix: i64,
    sizing: &SizingSettings,
    pools: &[Pool],
    reservations: &[Reservation],
    inputs: &[Input<'_>],
) -> Option<Vec<PoolSpare>> {
    let longest = *sizing.spare_horizons_secs.last()?;
    if pools.is_empty() {
        return None;
    }
    let step = sizing.plan_step_secs.max(60);
    let mut held = Vec::new();
    let demands: Vec<Demand> = inputs
        .iter()
        .map(|i| {
            let w = i.workload;
            let now = i.state.decision.as_ref().map_or(w.min_replicas, |d| d.desired_replicas);
            let timeline = match (w.roles.is_empty(), i.forecast) {
                (true, Some(f)) => timeline(i, f, sizing, now_unix, step, now),
                _ => None,
            };
            let replicas = timeline.unwrap_or_else(|| {
                held.push(w.key());
                vec![now]
            });
            Demand {
                workload: w.key(),
                shape: w.config_shape(),
                replicas,
                pod_start_secs: w.profile.pod_start_secs(),
                running: now,
            }
        })
        .collect();
    let steps = (longest as f64 / step as f64).ceil() as usize + 1;
    let p = capacity::plan(PlanInput { now: now_unix, step_secs: step, steps, pools, reservations, demands: &demands });
    Some(
        pools
            .iter()
            .zip(&p.pools)
            .map(|(pool, pp)| PoolSpare {
                offers: capacity::spare::spare(pool, pp, step, &sizing.spare_horizons_secs),
                held_at_current: held.clone(),
            })
            .collect(),
    )
}

/// Replicas at each `step` from now: the sizing quantile of `f`, never below
/// the same hours' peak a day and a week ago, through the workload's own
/// sizing rule, within its bounds, and never below what it runs now at the
/// first step.
fn timeline(
    i: &Input<'_>,
    f: &ForecastView,
    sizing: &SizingSettings,
    now_unix: i64,
    step: i64,
    now: u32,
) -> Option<Vec<u32>> {
    let (w, floor) = (i.workload, i.floor.unwrap_or(0.0));
    let values = forecast_from_now(f, sizing.quantile, now_unix as f64).ok()?;
    let input = predictive_input(w, i.state, sizing, f, values);
    let per = ((step as f64 / f.step_secs.max(1) as f64).round() as usize).max(1);
    let mut out: Vec<u32> = values
        .chunks(per)
        .map(|c| {
            let peak = c.iter().copied().fold(floor, f64::max);
            predictive::replicas_for(&input, peak).clamp(w.min_replicas, w.max_replicas.max(w.min_replicas))
        })
        .collect();
    let first = out.first_mut()?;
    *first = (*first).max(now);
    Some(out)
}

/// The highest stored reading of `w`'s target over [now, now + `secs`] a day
/// and a week earlier. The spare plan sizes a lease of hours for it too: the
/// fleet is sized minute by minute, and a forecast's quantile at one step
/// does not promise that no minute of the lease peaks above it.
pub(super) fn seasonal_peak(store: &Store, w: &Workload, now: std::time::SystemTime, secs: f64) -> Option<f64> {
    let series = series(&w.key(), w.target.signal);
    [86_400u64, 7 * 86_400]
        .iter()
        .filter_map(|back| {
            let from = now.checked_sub(std::time::Duration::from_secs(*back))?;
            let to = from + std::time::Duration::from_secs_f64(secs);
            store.range(&series, from, to).ok()
        })
        .flat_map(|h| h.values.into_iter().filter(|v| v.is_finite()))
        .reduce(f64::max)
}
