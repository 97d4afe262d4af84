//! What a sizing rule answers: the decision, what bound it, and for a
//! predictive decision everything that went into it. Both rules
//! ([`super::reactive`], [`super::predictive`]) return these.

use serde::Serialize;

use super::Policy;

/// Which bound, if any, changed the raw answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Bound {
    MinReplicas,
    MaxReplicas,
}

/// A sizing decision and why it was made.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Decision {
    pub policy: Policy,
    /// Replicas to run, after min/max.
    pub desired_replicas: u32,
    /// Replicas the demand alone asks for, before min/max.
    pub(crate) needed_replicas: u32,
    /// The load the decision was made for, in signal units.
    pub(crate) load: f64,
    /// Signal units one replica was taken to handle (the learned capacity when learning is on).
    pub(crate) per_replica: f64,
    pub active: bool,
    /// The bound that changed the answer, if one did.
    pub(crate) bound: Option<Bound>,
    pub reason: String,
    /// Predictive decisions: what set the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
    /// Predictive decisions: the forecast peak, live and token needs, and the replica timeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sizing: Option<Sizing>,
}

/// What set the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Binding {
    /// The forecast peak over the look-ahead.
    Forecast,
    /// The live signal (plus its queue) needs more than the forecast.
    Live,
    /// Generated tokens per second need more than the request count.
    Tokens,
    /// An earlier, higher recommendation still inside the stabilisation window.
    Stabilisation,
    MinReplicas,
    MaxReplicas,
}

/// A predictive decision and everything that went into it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Sizing {
    /// Replicas demand needs now (before min/max and stabilisation).
    pub(crate) needed_replicas: u32,
    /// Replicas needed at each forecast step (after min/max): the timeline pre-warming plans for.
    pub timeline: Vec<u32>,
    /// Seconds between timeline steps.
    pub(crate) step_secs: f64,
    pub forecast_peak: f64,
    /// Seconds from now to the forecast peak.
    pub(crate) peak_in_secs: f64,
    pub quantile: f64,
    pub(crate) live: f64,
    pub(crate) live_replicas: u32,
    /// The learned load multiplier applied to the forecast and the live load.
    pub(crate) headroom: f64,
    pub(crate) token_replicas: Option<u32>,
    pub(crate) binding: Binding,
    pub(crate) active: bool,
}
