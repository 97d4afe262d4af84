//! The trace-replay simulator: how many GPU-hours and how many SLO misses a
//! scaling policy costs on a given demand. Pure code: demand and policy in,
//! report out; no I/O, no clock, and the same seed gives the same answer.
//!
//! The model, stepped every `step_secs` (1 s by default):
//! - **Arrivals**: the demand's recorded arrivals per second when it has
//!   them (a ServeGen trace, [`servegen`]); else Poisson with the expected
//!   rate for the minute (the same draws for every policy, from `seed`), or
//!   exactly the rate when `poisson` is off. Arrivals join one FIFO queue
//!   for the fleet.
//! - **Service**: a ready replica has `slots` batch slots (the profile's
//!   concurrency at the SLO); a request holds one for output tokens x
//!   inter-token latency on average (the token mix x the profile), and
//!   slots drain as a fluid at that rate. A request meets the TTFT target
//!   when it waits for a slot no longer than the profile's queue-wait
//!   budget (the rest of the TTFT is its prefill); clients give up after
//!   `max_wait_secs` (dropped, and a miss).
//! - **Replicas**: a new replica first needs room on a ready node; then it
//!   takes the profile's image pull + weights load to serve. Removing a
//!   replica lets its in-flight requests finish but admits no more.
//! - **Nodes** (one GPU pool): the cluster autoscaler boots nodes for
//!   pending replicas and for warm-node requests (placeholder pods), taking
//!   the pool's provisioning time, and removes a node only after it has been
//!   unneeded for `node_scale_down_secs`. Reserved nodes are always there and
//!   always paid; everything above them is on-demand. Booting nodes are billed.
//! - **The HPA loop**: KEDA-driven policies are asked every `poll_secs`; their
//!   answer passes through the HPA's tolerance, scale-down stabilisation
//!   window and scale-up rate limit ([`Hpa`]). Static, oracle and fixed
//!   schedules set replicas directly.
//!
//! Conservation holds at every step: arrived = admitted + dropped + queued.
//!
//! Beside the replay, [`roles`] sizes a real token mix window by window as
//! one monolithic fleet and as prefill/decode roles (`foresight compare-roles`).

pub(crate) mod demand;
mod fleet;
mod fluid;
pub mod frontier;
mod hpa;
mod ledger;
mod oracle;
#[cfg(test)]
mod parity_tests;
pub mod policy;
pub(crate) mod roles;
pub(crate) mod servegen;
pub mod shipped;
mod spare;
pub mod yardstick;

use fleet::Fleet;
use fluid::{Arrivals, Event, Queue};
use ledger::{Ledger, Windows};

use serde::Serialize;

pub use demand::{Demand, Synthetic, TokenMix};
pub(crate) use hpa::{Hpa, HpaConfig};
pub use oracle::Oracle;
pub(crate) use policy::{Decision, Observation, Policy};

use crate::sizing::{predictive::Queueing, profile::Profile};

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SimError {
    #[error("{0}")]
    Input(String),
}

/// The GPU node pool the fleet runs on, and its prices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pool {
    pub gpus_per_node: u32,
    /// Seconds from asking for a node to it joining the cluster.
    pub provisioning_secs: f64,
    /// On-demand price of one node for an hour.
    pub price_per_node_hour: f64,
    /// Nodes reserved (and paid) for the whole window.
    pub reserved_nodes: u32,
    pub reserved_price_per_node_hour: f64,
}

/// What one replica of the model serves and occupies, from its profile, the
/// token mix and the pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Capacity {
    pub slots: f64,
    pub(crate) itl_secs: f64,
    pub(crate) prompt_tokens: f64,
    pub(crate) output_tokens: f64,
    /// Mean time a request holds a slot.
    pub(crate) service_secs: f64,
    /// Requests per second one replica completes when every slot is busy.
    pub(crate) requests_per_sec: f64,
    pub(crate) wait_budget_secs: f64,
    /// Share of requests the sizing lets wait past the budget: one minus the
    /// per-minute attainment target the run is scored on.
    pub(crate) wait_miss: f64,
    pub(crate) gpus_per_replica: u32,
    pub(crate) nodes_per_replica: u32,
    pub(crate) gpus_per_node: u32,
    pub(crate) node_boot_secs: f64,
    /// Pod start on a Ready node that has the image (weights load and engine warm-up).
    pub(crate) pod_start_secs: f64,
    /// Pod start on a node that has never run the image: its pull too.
    pub(crate) pod_start_new_node_secs: f64,
    pub(crate) min_replicas: u32,
    pub(crate) max_replicas: u32,
}

impl Capacity {
    pub fn new(profile: &Profile, mix: TokenMix, pool: &Pool) -> Result<Capacity, SimError> {
        let slots = profile.concurrency_per_replica.floor().max(1.0);
        // Inter-token latency at full batch: from the profiled token throughput
        // when there is one (it was measured at that concurrency), else the SLO.
        let itl_secs = match (profile.generation_tokens_per_sec, &profile.slo) {
            (Some(tps), _) => slots / tps,
            (None, Some(slo)) => slo.itl_secs,
            (None, None) => {
                return Err(SimError::Input(format!(
                "profile {} states neither generation_tokens_per_sec nor an slo.itl_secs: no service time to simulate",
                profile.name
            )))
            }
        };
        if !(mix.output_tokens.is_finite() && mix.output_tokens > 0.0) {
            return Err(SimError::Input(format!("mean output tokens must be > 0, got {}", mix.output_tokens)));
        }
        let per_node = profile.gpus_per_replica / profile.nodes_per_replica.max(1);
        if pool.gpus_per_node == 0 || per_node > pool.gpus_per_node {
            return Err(SimError::Input(format!(
                "a replica of {} needs {per_node} GPUs per node; the pool's nodes have {}",
                profile.name, pool.gpus_per_node
            )));
        }
        let service_secs = mix.output_tokens * itl_secs;
        Ok(Capacity {
            slots,
            itl_secs,
            prompt_tokens: mix.prompt_tokens,
            output_tokens: mix.output_tokens,
            service_secs,
            requests_per_sec: slots / service_secs,
            wait_budget_secs: profile.wait_budget_secs(),
            wait_miss: 1.0 - SimConfig::default().minute_slo_target,
            gpus_per_replica: profile.gpus_per_replica,
            nodes_per_replica: profile.nodes_per_replica.max(1),
            gpus_per_node: pool.gpus_per_node,
            node_boot_secs: pool.provisioning_secs,
            pod_start_secs: profile.pod_start_secs(),
            pod_start_new_node_secs: profile.pod_start_secs(),
            min_replicas: 1,
            max_replicas: 10_000,
        })
    }

    /// Replicas the capacity rule (G/G/c on the wait budget, as Foresight
    /// sizes) needs for `rate` arriving with `dispersion`.
    pub fn replicas_for(&self, rate: f64, dispersion: f64) -> u32 {
        if rate.is_nan() || rate <= 0.0 {
            return 0;
        }
        let q = Queueing { miss: self.wait_miss, dispersion };
        crate::sizing::predictive::mmc_replicas(rate, self.requests_per_sec, self.slots, self.wait_budget_secs, q)
    }

    /// [`Capacity::replicas_for`] with Poisson arrivals.
    pub fn replicas_for_rate(&self, rate: f64) -> u32 {
        self.replicas_for(rate, 1.0)
    }

    /// Replicas that fit on one node (0 for a replica spanning several).
    fn per_node(&self) -> u32 {
        if self.nodes_per_replica > 1 {
            0
        } else {
            self.gpus_per_node / self.gpus_per_replica.max(1)
        }
    }

    /// Nodes `replicas` occupy.
    pub(crate) fn nodes_for(&self, replicas: u32) -> u32 {
        match self.per_node() {
            0 => replicas.saturating_mul(self.nodes_per_replica),
            k => replicas.div_ceil(k),
        }
    }

    /// Replicas `nodes` hold.
    pub(crate) fn replicas_on(&self, nodes: u32) -> u32 {
        match self.per_node() {
            0 => nodes / self.nodes_per_replica,
            k => nodes.saturating_mul(k),
        }
    }

    /// Cold start on a node that has to boot first (and pull the image).
    pub fn cold_start_secs(&self) -> f64 {
        self.node_boot_secs + self.pod_start_new_node_secs
    }

    /// With pods starting in `secs` on a Ready node that has the image; one
    /// that must pull it still takes the profile's image pull + weights load.
    pub fn with_pod_start(mut self, secs: f64) -> Capacity {
        self.pod_start_secs = secs;
        self.pod_start_new_node_secs = self.pod_start_new_node_secs.max(secs);
        self
    }
}

/// How the fleet is simulated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimConfig {
    pub step_secs: f64,
    /// Poisson arrivals (else exactly the expected rate).
    pub poisson: bool,
    pub seed: u64,
    /// Seconds between policy decisions (the HPA sync / KEDA metric query).
    pub poll_secs: f64,
    /// The window of the observed arrival rate.
    pub rate_window_secs: f64,
    /// The HPA for KEDA-driven policies; `None` applies their answer directly.
    pub hpa: Option<HpaConfig>,
    pub node_scale_down_secs: f64,
    pub max_wait_secs: f64,
    /// A minute is in violation when fewer of its requests than this meet the TTFT target.
    pub minute_slo_target: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            step_secs: 1.0,
            poisson: true,
            seed: 1,
            poll_secs: 15.0,
            rate_window_secs: 60.0,
            hpa: Some(HpaConfig::default()),
            node_scale_down_secs: 600.0,
            max_wait_secs: 60.0,
            minute_slo_target: 0.99,
        }
    }
}

/// What a policy cost and how well it served.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub policy: String,
    pub(crate) minutes: usize,
    /// GPU-hours of every provisioned node (reserved, on-demand, booting).
    pub gpu_hours: f64,
    /// GPU-hours held by replicas on nodes (starting or ready): the cost when
    /// GPUs are billed one by one, as on a shared cluster.
    pub held_gpu_hours: f64,
    /// Node-hours (the GPU-hours over the GPUs per node).
    pub(crate) node_hours: f64,
    /// Share of the minutes with requests in which the SLO target held.
    pub minutes_met: f64,
    /// The 99th percentile queue wait of each five-minute window, seconds:
    /// its median and 95th percentile over the run.
    pub(crate) wait_p99_5min: [f64; 2],
    /// GPU-hours not serving requests: idle nodes, starting replicas, unused batch slots.
    pub(crate) idle_gpu_hours: f64,
    pub(crate) cost: f64,
    pub(crate) reserved_cost: f64,
    pub(crate) on_demand_cost: f64,
    /// Share of finished requests (admitted or dropped) that met the TTFT target.
    pub slo_attainment: f64,
    pub violation_minutes: usize,
    /// Replicas started (each pays the pod start, plus a node boot when no node was free).
    pub(crate) cold_starts: u64,
    pub(crate) node_boots: u64,
    pub(crate) peak_queue: f64,
    pub arrived: f64,
    /// Admitted to a batch slot.
    pub served: f64,
    pub dropped: f64,
    /// Still waiting at the end.
    pub queued: f64,
    pub(crate) mean_replicas: f64,
    pub(crate) max_replicas: u32,
    /// What a policy that learns capacity had learned by the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) learned: Option<crate::sizing::learned::Learned>,
    /// A policy's spare-capacity offers scored against the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) spare: Option<spare::SpareScore>,
}

/// One minute of the run, for plots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Minute {
    pub(crate) minute: usize,
    pub(crate) unix: i64,
    /// Expected requests per second.
    pub(crate) demand_rps: f64,
    /// Arrived requests per second.
    pub(crate) arrived_rps: f64,
    /// Replicas the Deployment asks for at the minute's end.
    pub(crate) replicas: u32,
    pub(crate) ready_replicas: u32,
    pub(crate) nodes: u32,
    pub(crate) queue: f64,
    /// Share of this minute's arrivals that met the TTFT target (NaN: none finished).
    pub(crate) attainment: f64,
    pub arrived: f64,
    pub(crate) served: f64,
    pub(crate) dropped: f64,
    /// The policy's reason for its last decision in the minute, if it gives one.
    pub(crate) reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub report: Report,
    pub timeline: Vec<Minute>,
}

/// Index of dispersion (variance / mean) of arrival counts; 1 (Poisson)
/// until there are enough counts to tell.
pub(crate) fn dispersion(counts: &[f64]) -> f64 {
    if counts.len() < 4 {
        return 1.0;
    }
    let n = counts.len() as f64;
    let mean = counts.iter().sum::<f64>() / n;
    if mean.is_nan() || mean <= 0.0 {
        return 1.0;
    }
    let var = counts.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (var / mean).max(1.0)
}

/// Simulate `policy` on `demand`; `progress` is called with each finished minute.
pub fn simulate(
    demand: &Demand,
    cap: &Capacity,
    pool: &Pool,
    cfg: &SimConfig,
    policy: &mut dyn Policy,
    progress: &mut dyn FnMut(usize),
) -> Result<Run, SimError> {
    if !(cfg.step_secs > 0.0 && 60.0 % cfg.step_secs == 0.0) {
        return Err(SimError::Input(format!("step must divide a minute, got {} s", cfg.step_secs)));
    }
    if !(cfg.poll_secs >= cfg.step_secs && cfg.rate_window_secs >= cfg.step_secs) {
        return Err(SimError::Input("poll interval and rate window must be at least one step".into()));
    }
    let dt = cfg.step_secs;
    // A busy slot frees at 1/S per second, so full replicas complete slots/S
    // requests per second: the rate the sizing rules assume.
    if cap.service_secs.is_nan() || cap.service_secs < dt {
        return Err(SimError::Input(format!(
            "step {dt} s is longer than the mean service time {:.2} s: use a shorter --step",
            cap.service_secs
        )));
    }
    let completion = dt / cap.service_secs;
    let steps_per_min = (60.0 / dt).round() as usize;
    let poll_steps = (cfg.poll_secs / dt).round().max(1.0) as usize;
    let minutes = demand.minutes();
    let mut arrivals = Arrivals::new(cfg);
    let mut hpa = cfg.hpa.clone().filter(|_| policy.via_hpa()).map(Hpa::new);
    // Start in a steady state: the oracle's fleet for the first minute, on ready nodes.
    let ready = cap.replicas_for_rate(demand.rate_at(0.0)).max(cap.min_replicas);
    let mut fleet = Fleet::new(ready, cap.nodes_for(ready).max(pool.reserved_nodes));
    // ... already serving the first minute's load: its slots busy, as in a running fleet.
    let mut queue = Queue::default();
    queue.busy = (demand.rate_at(0.0) * cap.service_secs).min(f64::from(ready) * cap.slots);
    let mut seen = Windows::new(cfg);
    let mut ledger = Ledger::new(minutes, ready);

    for i in 0..minutes * steps_per_min {
        let t = i as f64 * dt;
        let minute = i / steps_per_min;

        let a = arrivals.next(demand, minute, t, dt);
        queue.arrive(t, a);
        ledger.arrived(a);
        seen.arrived(a);

        if i % poll_steps == 0 {
            if i > 0 {
                seen.close_poll();
            }
            let spec = fleet.spec();
            let obs = Observation {
                spec,
                wait_p99: seen.wait_p99(),
                t,
                unix: demand.start as f64 + t,
                running: queue.busy,
                waiting: queue.queued,
                ready: f64::from(fleet.ready),
                arrival_rate: seen.arrival_rate(),
                admitted_rate: if i > 0 { seen.admitted_rate() } else { f64::NAN },
            };
            let d = policy.decide(&obs);
            let target = match hpa.as_mut() {
                Some(h) => h.step(t, spec, d.replicas),
                None => d.replicas,
            };
            fleet.scale_to(target, d.warm_nodes);
        }

        fleet.step(t, cap, pool, cfg.node_scale_down_secs);

        // Service: slots drain, then the queue is admitted in arrival order.
        queue.step(t, f64::from(fleet.ready) * cap.slots, completion, cap.wait_budget_secs, cfg.max_wait_secs, |e| {
            match e {
                Event::Admitted { at, n, in_budget } => {
                    ledger.admitted(at, n, t - at, in_budget);
                    seen.admitted(n, t - at);
                }
                Event::Dropped { at, n } => ledger.dropped(at, n, t - at),
            }
        });
        ledger.step(dt, cap, pool, &fleet, &queue);

        if (i + 1) % steps_per_min == 0 {
            ledger.close_minute(demand, minute, &fleet, &queue, policy.reason());
            progress(minute);
        }
    }
    let mut run =
        ledger.finish(policy.name(), cfg, fleet.cold_starts, fleet.node_boots, queue.left(), cap.gpus_per_node);
    run.report.learned = policy.learned();
    run.report.spare = policy.offers().map(|(h, offers)| spare::score(offers, h, &run.timeline, cap, pool));
    Ok(run)
}
