//! A decision as the node plan reads it: its replicas at each plan step
//! from now (the highest within each step, never below the desired count at
//! the first).

use crate::sizing::{reactive::Decision, roles::RoleDecision};

/// A decision's replicas at each `step` seconds from now.
pub(super) fn timeline(d: &Decision, step: i64) -> Vec<u32> {
    match d.sizing.as_ref() {
        Some(s) => resample(&s.timeline, s.step_secs, d.desired_replicas, step),
        None => vec![d.desired_replicas],
    }
}

/// A role decision's replicas at each `step` seconds from now.
pub(super) fn role_timeline(d: &RoleDecision, step: i64) -> Vec<u32> {
    resample(&d.timeline, d.step_secs, d.desired_replicas, step)
}

/// `timeline` (one value per `every` seconds) at `step` seconds: the highest
/// within each step, and never below `desired` at the first.
fn resample(timeline: &[u32], every: f64, desired: u32, step: i64) -> Vec<u32> {
    if timeline.is_empty() {
        return vec![desired];
    }
    let per = (step as f64 / every.max(1e-9)).max(1.0);
    let len = timeline.len();
    let n = ((len as f64 / per).ceil() as usize).max(1);
    let mut out: Vec<u32> = (0..n)
        .map(|j| {
            let lo = ((j as f64 * per) as usize).min(len - 1);
            let hi = (((j + 1) as f64 * per) as usize).clamp(lo + 1, len);
            timeline[lo..hi].iter().copied().max().unwrap_or(0)
        })
        .collect();
    out[0] = out[0].max(desired);
    out
}
