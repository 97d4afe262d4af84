//! The policies the simulator compares. Each sees an [`Observation`] of the
//! fleet's past and present only. The oracle, which is built with the
//! demand itself, is in [`super::oracle`].
//!
//! - [`Static`]: a fixed fleet sized for the trace's peak.
//! - [`Reactive`]: a KEDA threshold trigger through the HPA: desired =
//!   ceil(running + waiting / target per replica), or the capacity rule on
//!   the observed arrival rate.
//! - [`Predictive`]: Foresight's own decision code, unchanged: the
//!   forecaster refitted on the observed history, then
//!   [`crate::sizing::predictive::decide`] on the p90 over the cold start.
//! - [`Fixed`]: a given replica schedule, for testing the physics.

use super::{Capacity, Demand};
use crate::{
    forecast::{auto::Choice, Forecast, Forecaster, ForecasterConfig, Series},
    sizing::{
        headroom::{Headroom, HeadroomConfig},
        learned::{Estimator, Learned},
        predictive::{self, Stabiliser, Upper},
    },
    sources::Signal,
};

/// What a policy can see at a decision: the past and the present.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// Seconds since the start of the simulated window.
    pub(crate) t: f64,
    /// Unix seconds now.
    pub(crate) unix: f64,
    /// Requests in a batch slot (vllm:num_requests_running, summed).
    pub(crate) running: f64,
    /// Requests waiting for one (vllm:num_requests_waiting, summed).
    pub(crate) waiting: f64,
    /// Replicas serving (pods answering /metrics).
    pub(crate) ready: f64,
    /// Reserved nodes of the pool (always there, always paid).
    pub(crate) reserved_nodes: u32,
    /// Arrivals per second over the rate window (like `rate(...[1m])`).
    pub(crate) arrival_rate: f64,
    /// Index of dispersion of arrivals per poll over the last ten minutes
    /// (1 for Poisson): what the counter's increments between scrapes show.
    pub(crate) dispersion: f64,
    /// Share of the requests admitted over the rate window that waited no
    /// longer than the budget (NaN: none admitted).
    pub(crate) wait_attainment: f64,
    /// Observed arrivals per second, one per whole minute so far (warm-up history first).
    pub(crate) history: &'a [f64],
    /// Unix seconds of `history[0]`.
    pub(crate) history_start: i64,
}

/// A policy's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Decision {
    pub(crate) replicas: u32,
    /// Nodes to keep warm beyond what the replicas occupy (placeholder pods).
    pub(crate) warm_nodes: u32,
}

pub trait Policy {
    fn name(&self) -> String;
    fn decide(&mut self, obs: &Observation<'_>) -> Decision;
    /// Goes through the HPA (KEDA-driven policies); `false` sets replicas directly.
    fn via_hpa(&self) -> bool {
        true
    }
    /// The per-replica capacity learned so far, for a policy that learns it.
    fn learned(&self) -> Option<Learned> {
        None
    }
    /// Spare reserved nodes offered for lease: the lease length and, per
    /// offer, when it was made (seconds into the run) and how many nodes.
    fn offers(&self) -> Option<(f64, &[(f64, u32)])> {
        None
    }
}

/// A fixed fleet.
pub struct Static {
    pub replicas: u32,
}

impl Static {
    /// Sized for the highest expected minute of the whole trace.
    pub fn at_peak(demand: &Demand, cap: &Capacity) -> Static {
        let peak = demand.rate.iter().copied().fold(0.0, f64::max);
        Static { replicas: cap.replicas_for_rate(peak).max(cap.min_replicas) }
    }
}

impl Policy for Static {
    fn name(&self) -> String {
        "static".into()
    }
    fn decide(&mut self, _: &Observation<'_>) -> Decision {
        Decision { replicas: self.replicas, warm_nodes: 0 }
    }
    fn via_hpa(&self) -> bool {
        false
    }
}

/// What the reactive trigger watches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReactiveSignal {
    /// running + waiting, `target` per replica: the KEDA prometheus-scaler
    /// threshold on vLLM's in-flight requests.
    Concurrency { target: f64 },
    /// The observed arrival rate through the same capacity rule the
    /// predictive and oracle policies use.
    RequestRate,
}

pub struct Reactive {
    pub signal: ReactiveSignal,
    pub cap: Capacity,
}

impl Policy for Reactive {
    fn name(&self) -> String {
        match self.signal {
            ReactiveSignal::Concurrency { target } => format!("reactive(concurrency>{target})"),
            ReactiveSignal::RequestRate => "reactive(request_rate)".into(),
        }
    }
    fn decide(&mut self, o: &Observation<'_>) -> Decision {
        let want = match self.signal {
            ReactiveSignal::Concurrency { target } => ((o.running + o.waiting) / target).ceil() as u32,
            ReactiveSignal::RequestRate => self.cap.replicas_for_rate(o.arrival_rate),
        };
        Decision { replicas: want.clamp(self.cap.min_replicas, self.cap.max_replicas), warm_nodes: 0 }
    }
}

/// A replica count per minute, held; the last one after the end.
pub struct Fixed(pub Vec<u32>);

impl Policy for Fixed {
    fn name(&self) -> String {
        "fixed".into()
    }
    fn decide(&mut self, o: &Observation<'_>) -> Decision {
        let m = ((o.t / 60.0) as usize).min(self.0.len().saturating_sub(1));
        Decision { replicas: self.0.get(m).copied().unwrap_or(0), warm_nodes: 0 }
    }
    fn via_hpa(&self) -> bool {
        false
    }
}

/// How the predictive policy forecasts.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictiveConfig {
    /// Forecast step: the observed minutes are averaged into buckets this long.
    pub bucket_secs: i64,
    pub refit_secs: f64,
    /// A full model selection (backtest) this often; refits in between reuse it.
    pub reselect_secs: f64,
    /// Train on at most this much history.
    pub train_window_secs: f64,
    pub quantile: f64,
    pub scale_down_window_secs: f64,
    /// How far ahead to size: the profile's cold start.
    pub lookahead_secs: f64,
    /// Size for the arrivals' measured burstiness (else as if Poisson).
    pub measure_dispersion: bool,
    /// Learn the in-flight requests a replica holds at the SLO, as `serve`
    /// does with `sizing.learn_capacity`, starting from the profile's.
    pub learn_capacity: bool,
    /// Offer reserved nodes the forecast leaves idle for this long, every hour
    /// (the spare-capacity forecast, scored against what the run shows).
    pub spare_horizon_secs: Option<f64>,
}

impl Default for PredictiveConfig {
    fn default() -> Self {
        PredictiveConfig {
            bucket_secs: 300,
            refit_secs: 600.0,
            reselect_secs: 6.0 * 3600.0,
            train_window_secs: 28.0 * 86_400.0,
            quantile: 0.9,
            scale_down_window_secs: 300.0,
            lookahead_secs: 450.0,
            measure_dispersion: true,
            learn_capacity: false,
            spare_horizon_secs: None,
        }
    }
}

/// Foresight's predictive sizing, fed what the simulated fleet has shown so far.
pub struct Predictive {
    cfg: PredictiveConfig,
    cap: Capacity,
    forecaster: Forecaster,
    fit: Option<(f64, Forecast)>,
    selected_at: f64,
    stab: Stabiliser,
    headroom: Headroom,
    /// In-flight requests per replica at the SLO, learned (with `learn_capacity`).
    capacity: Option<Estimator>,
    /// Spare reserved nodes offered (seconds into the run, nodes), and when the next offer is due.
    offers: Vec<(f64, u32)>,
    next_offer: f64,
    /// Decisions that fell back to the live load (no usable forecast), and refits that failed.
    pub(crate) fallbacks: u64,
    pub(crate) refits: u64,
}

impl Predictive {
    pub fn new(cfg: PredictiveConfig, cap: &Capacity) -> Result<Predictive, super::SimError> {
        let forecaster = Forecaster::new(ForecasterConfig {
            quantiles: vec![cfg.quantile],
            train_window: Some((cfg.train_window_secs / cfg.bucket_secs as f64) as usize),
            ..ForecasterConfig::default()
        })
        .map_err(|e| super::SimError::Input(e.to_string()))?;
        if cfg.bucket_secs < 60 || cfg.bucket_secs % 60 != 0 {
            return Err(super::SimError::Input(format!(
                "forecast bucket must be a whole number of minutes, got {} s",
                cfg.bucket_secs
            )));
        }
        let capacity = cfg.learn_capacity.then(|| Estimator::new(cap.slots));
        Ok(Predictive {
            cfg,
            cap: cap.clone(),
            forecaster,
            fit: None,
            selected_at: f64::NEG_INFINITY,
            stab: Stabiliser::default(),
            headroom: Headroom::new(HeadroomConfig { target: 1.0 - cap.wait_miss, ..HeadroomConfig::default() }),
            capacity,
            offers: Vec::new(),
            next_offer: 0.0,
            fallbacks: 0,
            refits: 0,
        })
    }

    /// The observed minutes in whole forecast buckets on the calendar grid
    /// (so daily seasons line up); `None` with under two buckets.
    fn series(&self, o: &Observation<'_>) -> Option<Series> {
        let per = (self.cfg.bucket_secs / 60) as usize;
        let skip = (per - (o.history_start / 60).rem_euclid(per as i64) as usize) % per;
        let usable = o.history.len().saturating_sub(skip) / per * per;
        if usable < 2 * per {
            return None;
        }
        let values = o.history[skip..skip + usable].chunks(per).map(|c| c.iter().sum::<f64>() / per as f64).collect();
        Some(Series { start: o.history_start + 60 * skip as i64, step: self.cfg.bucket_secs, values })
    }

    /// Reserved nodes the upper quantile over the next `horizon` leaves idle
    /// throughout, from a forecast selected by its own backtest over that horizon.
    fn offer(&self, o: &Observation<'_>, horizon: f64, reserved: u32) -> u32 {
        let Some(series) = self.series(o) else { return 0 };
        let h = (horizon / self.cfg.bucket_secs as f64).ceil() as usize + 1;
        let Ok(f) = self.forecaster.forecast(&series, h, &Choice::Auto) else { return 0 };
        let Some(q) = f.quantile(self.cfg.quantile) else { return 0 };
        let k0 = ((o.unix - f.start as f64) / f.step as f64).floor().max(0.0) as usize;
        let mut peak = q.iter().skip(k0).take(h).copied().fold(o.arrival_rate, f64::max);
        // The fleet is sized minute by minute, and a forecast in buckets averages
        // away the minute peaks a lease of hours must survive: the same hours a
        // day and a week earlier show them.
        let now_min = o.history.len();
        let lease_min = (horizon / 60.0).ceil() as usize;
        for back in [1440usize, 7 * 1440] {
            if let Some(start) = now_min.checked_sub(back) {
                let end = (start + lease_min).min(now_min);
                peak = o.history[start..end].iter().copied().fold(peak, f64::max);
            }
        }
        // Sized as the policy sizes: for the arrivals' measured burstiness and
        // the learned headroom, and never below what runs now.
        let dispersion = if self.cfg.measure_dispersion { o.dispersion } else { 1.0 };
        let replicas = self.cap.replicas_for(peak * self.headroom.factor(), dispersion);
        let nodes = self.cap.nodes_for(replicas.max(o.ready as u32).max(self.cap.min_replicas));
        reserved.saturating_sub(nodes)
    }

    fn refit(&mut self, o: &Observation<'_>) {
        let Some(series) = self.series(o) else { return };
        let h = ((self.cfg.lookahead_secs + self.cfg.refit_secs) / self.cfg.bucket_secs as f64).ceil() as usize + 2;
        let choice = match &self.fit {
            Some((_, f)) if o.t - self.selected_at < self.cfg.reselect_secs => Choice::Reuse(f.selection.clone()),
            _ => Choice::Auto,
        };
        self.refits += 1;
        match self.forecaster.forecast(&series, h, &choice) {
            Ok(f) => {
                if !f.reused_selection {
                    self.selected_at = o.t;
                }
                self.fit = Some((o.t, f));
            }
            Err(_) => self.fallbacks += 1,
        }
    }
}

impl Policy for Predictive {
    fn name(&self) -> String {
        let learns = if self.capacity.is_some() { ", learned capacity" } else { "" };
        format!("predictive(p{}{learns})", (self.cfg.quantile * 100.0 * 10.0).round() / 10.0)
    }
    fn learned(&self) -> Option<Learned> {
        self.capacity.as_ref().map(Estimator::estimate)
    }
    fn offers(&self) -> Option<(f64, &[(f64, u32)])> {
        self.cfg.spare_horizon_secs.map(|h| (h, self.offers.as_slice()))
    }
    fn decide(&mut self, o: &Observation<'_>) -> Decision {
        if self.fit.as_ref().is_none_or(|(at, _)| o.t - at >= self.cfg.refit_secs) {
            self.refit(o);
        }
        if let Some(h) = self.cfg.spare_horizon_secs.filter(|_| o.t >= self.next_offer) {
            let n = self.offer(o, h, o.reserved_nodes);
            self.offers.push((o.t, n));
            self.next_offer = o.t + 3600.0;
        }
        let upper: Option<Vec<f64>> = self.fit.as_ref().and_then(|(_, f)| {
            let q = f.quantile(self.cfg.quantile)?;
            let k = ((o.unix - f.start as f64) / f.step as f64).floor().max(0.0) as usize;
            (k < q.len()).then(|| q[k..].to_vec())
        });
        let headroom = self.headroom.observe(o.t, o.wait_attainment);
        // As `serve` does: each minute's verdict against the requests each replica had in flight,
        // and every per-replica figure scaled by what was learned.
        let mut scaled = self.cap.clone();
        if let Some(e) = self.capacity.as_mut() {
            if o.ready >= 1.0 && o.wait_attainment.is_finite() {
                e.observe(o.running / o.ready, o.wait_attainment >= 1.0 - self.cap.wait_miss);
            }
            let l = e.estimate();
            let k = l.per_replica / l.prior;
            scaled.slots *= k;
            scaled.requests_per_sec *= k;
        }
        let cap = &scaled;
        let live = o.arrival_rate;
        let Some(values) = upper else {
            self.fallbacks += 1;
            let r = cap.replicas_for_rate(live).max(cap.replicas_for_queue(o.waiting));
            let r = self.stab.apply(o.t, self.cfg.scale_down_window_secs, r);
            return Decision { replicas: r.clamp(cap.min_replicas, cap.max_replicas), warm_nodes: 0 };
        };
        let input = predictive::Input {
            signal: Signal::RequestRate,
            live,
            queue: Some(o.waiting),
            generation_tokens_per_sec: Some(live * cap.output_tokens),
            per_replica: cap.requests_per_sec,
            slots_per_replica: cap.slots,
            wait_budget_secs: cap.wait_budget_secs,
            queueing: predictive::Queueing {
                miss: cap.wait_miss,
                dispersion: if self.cfg.measure_dispersion { o.dispersion } else { 1.0 },
            },
            headroom,
            tokens_per_sec_per_replica: Some(cap.slots / cap.itl_secs),
            forecast: Upper { quantile: self.cfg.quantile, values: &values, step_secs: self.cfg.bucket_secs as f64 },
            lookahead_secs: self.cfg.lookahead_secs,
            min_replicas: cap.min_replicas,
            max_replicas: cap.max_replicas,
            activation_threshold: 0.0,
        };
        match predictive::decide(&input, &mut self.stab, o.t, self.cfg.scale_down_window_secs, "sim") {
            Some(out) => {
                // Warm nodes for what the timeline needs within a node's provisioning plus pod start.
                let steps =
                    ((cap.node_boot_secs + cap.pod_start_secs) / self.cfg.bucket_secs as f64).ceil() as usize + 1;
                let ahead = out.sizing.timeline.iter().take(steps).copied().max().unwrap_or(0);
                let warm = cap.nodes_for(ahead).saturating_sub(cap.nodes_for(out.desired_replicas));
                Decision { replicas: out.desired_replicas, warm_nodes: warm }
            }
            None => {
                self.fallbacks += 1;
                Decision {
                    replicas: cap.replicas_for_rate(live).clamp(cap.min_replicas, cap.max_replicas),
                    warm_nodes: 0,
                }
            }
        }
    }
}
