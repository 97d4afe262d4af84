//! The HPA between KEDA's metric and the Deployment, as Kubernetes applies
//! it: tolerance, scale-down stabilisation window, scale-up rate limit.

use serde::Serialize;

use crate::sizing::predictive::Stabiliser;

/// The HPA between KEDA's metric and the Deployment (Kubernetes defaults).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HpaConfig {
    /// Changes within this ratio of the current replicas are ignored.
    pub(crate) tolerance: f64,
    /// `behavior.scaleDown.stabilizationWindowSeconds`.
    pub(crate) scale_down_window_secs: f64,
    /// Scale-up limit per decision: the larger of +percent and +pods (default 100% or 4 pods per 15 s).
    pub(crate) scale_up_percent: f64,
    pub(crate) scale_up_pods: u32,
}

impl Default for HpaConfig {
    fn default() -> Self {
        HpaConfig { tolerance: 0.1, scale_down_window_secs: 300.0, scale_up_percent: 100.0, scale_up_pods: 4 }
    }
}

/// The HPA's replica calculation for one decision.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hpa {
    pub(crate) cfg: HpaConfig,
    stab: Stabiliser,
}

impl Hpa {
    pub(crate) fn new(cfg: HpaConfig) -> Hpa {
        Hpa { cfg, stab: Stabiliser::default() }
    }

    /// Replicas after the HPA's rules, from the current count and what the metric asks for.
    pub(crate) fn step(&mut self, t: f64, current: u32, wanted: u32) -> u32 {
        let mut rec = wanted;
        if current > 0 && (f64::from(wanted) / f64::from(current) - 1.0).abs() <= self.cfg.tolerance {
            rec = current;
        }
        let stabilised = self.stab.apply(t, self.cfg.scale_down_window_secs, rec);
        if current == 0 {
            return stabilised;
        }
        let by_percent = (f64::from(current) * (1.0 + self.cfg.scale_up_percent / 100.0)).ceil() as u32;
        stabilised.min(by_percent.max(current.saturating_add(self.cfg.scale_up_pods)))
    }
}
