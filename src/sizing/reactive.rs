//! The reactive policy: size for the signal as it is now.
//!
//! desired = ceil(signal / per-replica target), clamped to [min, max]. It is
//! what a KEDA threshold trigger would do, stated plainly so a decision can
//! say "reactive" and mean exactly this. Active = there is demand at all
//! (signal above the activation threshold), which is what drives KEDA's
//! 0 <-> 1 step for an external trigger.

pub(crate) use super::decision::{Bound, Decision};
use super::Policy;

/// What the rule needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Input {
    /// Current value of the scaling signal; finite and >= 0.
    pub(crate) signal: f64,
    /// Signal one replica handles; finite and > 0.
    pub(crate) per_replica: f64,
    pub(crate) min_replicas: u32,
    pub(crate) max_replicas: u32,
    /// Signal above which the workload counts as active.
    pub(crate) activation_threshold: f64,
}

/// Apply the rule. Returns `None` when the input is unusable (a NaN, a
/// negative load, a zero target): there is no honest answer then, and the
/// caller must fall back rather than act on a made-up number.
pub(crate) fn decide(input: Input) -> Option<Decision> {
    let Input { signal, per_replica, min_replicas, max_replicas, activation_threshold } = input;
    if !(signal.is_finite() && signal >= 0.0 && per_replica.is_finite() && per_replica > 0.0) {
        return None;
    }
    let raw = (signal / per_replica).ceil();
    // Saturate rather than wrap on absurd inputs; max_replicas caps it anyway.
    let needed = if raw >= f64::from(u32::MAX) { u32::MAX } else { raw as u32 };
    let (desired, bound) = if needed > max_replicas {
        (max_replicas, Some(Bound::MaxReplicas))
    } else if needed < min_replicas {
        (min_replicas, Some(Bound::MinReplicas))
    } else {
        (needed, None)
    };
    let active = signal > activation_threshold;
    let mut reason = format!("reactive: ceil({signal:.3} / {per_replica}) = {needed} replicas");
    match bound {
        Some(Bound::MaxReplicas) => reason.push_str(&format!(", capped at max_replicas {max_replicas}")),
        Some(Bound::MinReplicas) => reason.push_str(&format!(", raised to min_replicas {min_replicas}")),
        None => {}
    }
    Some(Decision {
        policy: Policy::Reactive,
        desired_replicas: desired,
        needed_replicas: needed,
        load: signal,
        per_replica,
        active,
        bound,
        reason,
        binding: None,
        sizing: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(signal: f64, per_replica: f64, min: u32, max: u32) -> Input {
        Input { signal, per_replica, min_replicas: min, max_replicas: max, activation_threshold: 0.0 }
    }

    #[test]
    fn table() {
        // (signal, per replica, min, max) -> (desired, needed, active, bound)
        let cases = [
            ((0.0, 32.0, 0, 10), (0, 0, false, None)),
            ((0.0, 32.0, 1, 10), (1, 0, false, Some(Bound::MinReplicas))),
            ((1.0, 32.0, 0, 10), (1, 1, true, None)),
            ((32.0, 32.0, 0, 10), (1, 1, true, None)),
            ((32.001, 32.0, 0, 10), (2, 2, true, None)),
            ((100.0, 32.0, 0, 10), (4, 4, true, None)),
            ((1000.0, 32.0, 0, 10), (10, 32, true, Some(Bound::MaxReplicas))),
            ((1e30, 0.5, 0, 10), (10, u32::MAX, true, Some(Bound::MaxReplicas))),
        ];
        for ((signal, per, min, max), (desired, needed, active, bound)) in cases {
            let d = decide(input(signal, per, min, max)).unwrap();
            assert_eq!(
                (d.desired_replicas, d.needed_replicas, d.active, d.bound),
                (desired, needed, active, bound),
                "signal {signal} per {per} min {min} max {max}"
            );
        }
    }

    #[test]
    fn unusable_inputs_give_no_decision() {
        for (signal, per) in [(f64::NAN, 1.0), (-1.0, 1.0), (f64::INFINITY, 1.0), (1.0, 0.0), (1.0, f64::NAN)] {
            assert_eq!(decide(input(signal, per, 0, 10)), None, "{signal} / {per}");
        }
    }

    #[test]
    fn activation_threshold_is_strict() {
        let mut i = input(5.0, 32.0, 0, 10);
        i.activation_threshold = 5.0;
        assert!(!decide(i).unwrap().active);
        i.signal = 5.5;
        assert!(decide(i).unwrap().active);
    }

    #[test]
    fn reason_names_the_rule_and_the_bound() {
        let d = decide(input(1000.0, 32.0, 0, 10)).unwrap();
        assert_eq!(d.reason, "reactive: ceil(1000.000 / 32) = 32 replicas, capped at max_replicas 10");
    }
}
