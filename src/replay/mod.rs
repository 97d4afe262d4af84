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

pub mod demand;
mod fluid;
mod hpa;
mod oracle;
pub mod policy;
pub mod servegen;

use std::collections::VecDeque;

use fluid::{Arrivals, Event, Queue};

use serde::Serialize;

pub use demand::{Demand, Synthetic, TokenMix};
pub use hpa::{Hpa, HpaConfig};
pub use oracle::Oracle;
pub use policy::{Decision, Observation, Policy};

use crate::sizing::{
    predictive::{Queueing, Stabiliser},
    profile::Profile,
};

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
    pub itl_secs: f64,
    pub output_tokens: f64,
    /// Mean time a request holds a slot.
    pub service_secs: f64,
    /// Requests per second one replica completes when every slot is busy.
    pub requests_per_sec: f64,
    pub wait_budget_secs: f64,
    /// Share of requests the sizing lets wait past the budget: one minus the
    /// per-minute attainment target the run is scored on.
    pub wait_miss: f64,
    pub gpus_per_replica: u32,
    pub nodes_per_replica: u32,
    pub gpus_per_node: u32,
    pub node_boot_secs: f64,
    /// Image pull + weights load.
    pub pod_start_secs: f64,
    pub min_replicas: u32,
    pub max_replicas: u32,
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

    /// Replicas whose slots would hold `queue` waiting requests.
    pub fn replicas_for_queue(&self, queue: f64) -> u32 {
        if queue.is_nan() || queue <= 0.0 {
            return 0;
        }
        (queue / self.slots).ceil() as u32
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
    pub fn nodes_for(&self, replicas: u32) -> u32 {
        match self.per_node() {
            0 => replicas.saturating_mul(self.nodes_per_replica),
            k => replicas.div_ceil(k),
        }
    }

    /// Replicas `nodes` hold.
    pub fn replicas_on(&self, nodes: u32) -> u32 {
        match self.per_node() {
            0 => nodes / self.nodes_per_replica,
            k => nodes.saturating_mul(k),
        }
    }

    /// Cold start on a node that has to boot first.
    pub fn cold_start_secs(&self) -> f64 {
        self.node_boot_secs + self.pod_start_secs
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
    pub minutes: usize,
    /// GPU-hours of every provisioned node (reserved, on-demand, booting).
    pub gpu_hours: f64,
    /// GPU-hours not serving requests: idle nodes, starting replicas, unused batch slots.
    pub idle_gpu_hours: f64,
    pub cost: f64,
    pub reserved_cost: f64,
    pub on_demand_cost: f64,
    /// Share of finished requests (admitted or dropped) that met the TTFT target.
    pub slo_attainment: f64,
    pub violation_minutes: usize,
    /// Replicas started (each pays the pod start, plus a node boot when no node was free).
    pub cold_starts: u64,
    pub node_boots: u64,
    pub peak_queue: f64,
    pub arrived: f64,
    /// Admitted to a batch slot.
    pub served: f64,
    pub dropped: f64,
    /// Still waiting at the end.
    pub queued: f64,
    pub mean_replicas: f64,
    pub max_replicas: u32,
}

/// One minute of the run, for plots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Minute {
    pub minute: usize,
    pub unix: i64,
    /// Expected requests per second.
    pub demand_rps: f64,
    /// Arrived requests per second.
    pub arrived_rps: f64,
    /// Replicas the Deployment asks for at the minute's end.
    pub replicas: u32,
    pub ready_replicas: u32,
    pub nodes: u32,
    pub queue: f64,
    /// Share of this minute's arrivals that met the TTFT target (NaN: none finished).
    pub attainment: f64,
    pub arrived: f64,
    pub served: f64,
    pub dropped: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub report: Report,
    pub timeline: Vec<Minute>,
}

/// Index of dispersion (variance / mean) of arrival counts; 1 (Poisson)
/// until there are enough counts to tell.
pub fn dispersion(counts: &[f64]) -> f64 {
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

/// Simulate `policy` on `demand`. `history` is what the fleet observed
/// before the window (arrivals per second, one per minute, ending where
/// `demand` starts); `progress` is called with each finished minute.
pub fn simulate(
    demand: &Demand,
    history: &[f64],
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
    let steps_per_min = (60.0 / dt).round() as usize;
    let poll_steps = (cfg.poll_secs / dt).round().max(1.0) as usize;
    let window_steps = (cfg.rate_window_secs / dt).round().max(1.0) as usize;
    let minutes = demand.minutes();
    let mut arrivals = Arrivals::new(cfg);
    let mut hpa = cfg.hpa.clone().filter(|_| policy.via_hpa()).map(Hpa::new);
    let mut node_stab = Stabiliser::default();

    let mut history = history.to_vec();
    let history_start = demand.start - 60 * history.len() as i64;
    // Start in a steady state: the oracle's fleet for the first minute, on ready nodes.
    let mut ready = cap.replicas_for_rate(demand.rate_at(0.0)).max(cap.min_replicas);
    let mut nodes_ready = cap.nodes_for(ready).max(pool.reserved_nodes);
    let mut starting: Vec<f64> = Vec::new();
    let mut booting: Vec<f64> = Vec::new();
    let mut pending = 0u32;
    let mut warm = 0u32;
    let mut queue = Queue::default();
    let mut recent: VecDeque<f64> = VecDeque::with_capacity(window_steps + 1);
    let mut recent_sum = 0.0f64;
    // Arrivals per poll over the last ten minutes: the burstiness the policies may measure.
    let polls_kept = ((600.0 / cfg.poll_secs).round() as usize).max(2);
    let mut per_poll: VecDeque<f64> = VecDeque::with_capacity(polls_kept + 1);
    let mut since_poll = 0.0f64;
    // Admissions within the wait budget per poll, the last minute's worth:
    // what vLLM's queue-time histogram shows.
    let mut admitted_polls: VecDeque<(f64, f64)> = VecDeque::new();
    let (mut adm, mut adm_met) = (0.0f64, 0.0f64);
    let (mut met, mut done) = (vec![0.0f64; minutes], vec![0.0f64; minutes]);
    let mut timeline = Vec::with_capacity(minutes);
    let (mut arrived, mut served, mut dropped) = (0.0f64, 0.0f64, 0.0f64);
    let (mut minute_arrived, mut minute_served, mut minute_dropped) = (0.0f64, 0.0f64, 0.0f64);
    let (mut gpu_secs, mut idle_secs, mut reserved_cost, mut on_demand_cost) = (0.0, 0.0, 0.0, 0.0);
    let (mut cold_starts, mut node_boots, mut peak_queue) = (0u64, 0u64, 0.0f64);
    let (mut replica_secs, mut max_replicas) = (0.0f64, ready);
    // A busy slot frees at 1/S per second, so full replicas complete slots/S
    // requests per second: the rate the sizing rules assume.
    if cap.service_secs.is_nan() || cap.service_secs < dt {
        return Err(SimError::Input(format!(
            "step {dt} s is longer than the mean service time {:.2} s: use a shorter --step",
            cap.service_secs
        )));
    }
    let completion = dt / cap.service_secs;

    for i in 0..minutes * steps_per_min {
        let t = i as f64 * dt;
        let minute = i / steps_per_min;

        // Arrivals.
        let a = arrivals.next(demand, minute, t, dt);
        queue.arrive(t, a);
        arrived += a;
        minute_arrived += a;
        since_poll += a;
        recent.push_back(a);
        recent_sum += a;
        if recent.len() > window_steps {
            recent_sum -= recent.pop_front().unwrap_or(0.0);
        }

        // Decide.
        let spec = ready + starting.len() as u32 + pending;
        if i % poll_steps == 0 {
            if i > 0 {
                per_poll.push_back(since_poll);
                if per_poll.len() > polls_kept {
                    per_poll.pop_front();
                }
                since_poll = 0.0;
                admitted_polls.push_back((adm, adm_met));
                if admitted_polls.len() as f64 * cfg.poll_secs > cfg.rate_window_secs {
                    admitted_polls.pop_front();
                }
                (adm, adm_met) = (0.0, 0.0);
            }
            let (a_all, a_met) = admitted_polls.iter().fold((0.0, 0.0), |s, p| (s.0 + p.0, s.1 + p.1));
            let obs = Observation {
                dispersion: dispersion(per_poll.make_contiguous()),
                wait_attainment: if a_all > 0.0 { a_met / a_all } else { f64::NAN },
                t,
                unix: demand.start as f64 + t,
                running: queue.busy,
                waiting: queue.queued,
                arrival_rate: recent_sum.max(0.0) / (recent.len() as f64 * dt),
                replicas: spec,
                history: &history,
                history_start,
            };
            let d = policy.decide(&obs);
            let target = match hpa.as_mut() {
                Some(h) => h.step(t, spec, d.replicas),
                None => d.replicas,
            };
            warm = d.warm_nodes;
            if target > spec {
                pending += target - spec;
            } else {
                let mut remove = spec - target;
                let p = remove.min(pending);
                pending -= p;
                remove -= p;
                // The latest-started go first, then ready replicas (draining).
                starting.sort_by(|a, b| a.total_cmp(b));
                while remove > 0 && starting.pop().is_some() {
                    remove -= 1;
                }
                ready -= remove.min(ready);
            }
        }

        // Cluster autoscaler.
        let occupied = cap.nodes_for(ready + starting.len() as u32);
        let wanted = (cap.nodes_for(ready + starting.len() as u32 + pending) + warm).max(pool.reserved_nodes);
        let have = nodes_ready + booting.len() as u32;
        if wanted > have {
            for _ in have..wanted {
                booting.push(t + pool.provisioning_secs);
            }
            node_boots += u64::from(wanted - have);
        }
        let keep = node_stab.apply(t, cfg.node_scale_down_secs, wanted).max(occupied).max(pool.reserved_nodes);
        let have = nodes_ready + booting.len() as u32;
        if have > keep {
            let mut remove = have - keep;
            booting.sort_by(|a, b| a.total_cmp(b));
            while remove > 0 && booting.pop().is_some() {
                remove -= 1;
            }
            nodes_ready -= remove.min(nodes_ready);
        }
        booting.retain(|at| {
            let up = *at <= t;
            nodes_ready += u32::from(up);
            !up
        });

        // Scheduling and readiness.
        let free = cap.replicas_on(nodes_ready).saturating_sub(ready + starting.len() as u32);
        let placed = free.min(pending);
        pending -= placed;
        cold_starts += u64::from(placed);
        starting.extend(std::iter::repeat_n(t + cap.pod_start_secs, placed as usize));
        starting.retain(|at| {
            let up = *at <= t;
            ready += u32::from(up);
            !up
        });

        // Service: slots drain, then the queue is admitted in arrival order.
        queue.step(t, f64::from(ready) * cap.slots, completion, cap.wait_budget_secs, cfg.max_wait_secs, |e| match e {
            Event::Admitted { at, n, in_budget } => {
                let m = (at / 60.0) as usize;
                done[m] += n;
                adm += n;
                if in_budget {
                    met[m] += n;
                    adm_met += n;
                }
                served += n;
                minute_served += n;
            }
            Event::Dropped { at, n } => {
                done[(at / 60.0) as usize] += n;
                dropped += n;
                minute_dropped += n;
            }
        });
        peak_queue = peak_queue.max(queue.queued);

        // Accounting.
        let nodes = nodes_ready + booting.len() as u32;
        let gpus = f64::from(nodes * cap.gpus_per_node);
        let util = if ready > 0 { (queue.busy / (f64::from(ready) * cap.slots)).min(1.0) } else { 0.0 };
        gpu_secs += gpus * dt;
        idle_secs += (gpus - f64::from(ready * cap.gpus_per_replica) * util).max(0.0) * dt;
        reserved_cost += f64::from(pool.reserved_nodes) * pool.reserved_price_per_node_hour * dt / 3600.0;
        on_demand_cost += f64::from(nodes.saturating_sub(pool.reserved_nodes)) * pool.price_per_node_hour * dt / 3600.0;
        let spec = ready + starting.len() as u32 + pending;
        replica_secs += f64::from(spec) * dt;
        max_replicas = max_replicas.max(spec);

        if (i + 1) % steps_per_min == 0 {
            history.push(minute_arrived / 60.0);
            timeline.push(Minute {
                minute,
                unix: demand.start + 60 * minute as i64,
                demand_rps: demand.rate[minute],
                arrived_rps: minute_arrived / 60.0,
                replicas: spec,
                ready_replicas: ready,
                nodes,
                queue: queue.queued,
                attainment: f64::NAN,
                arrived: minute_arrived,
                served: minute_served,
                dropped: minute_dropped,
            });
            (minute_arrived, minute_served, minute_dropped) = (0.0, 0.0, 0.0);
            progress(minute);
        }
    }

    let mut violation_minutes = 0;
    for (row, (m, d)) in timeline.iter_mut().zip(met.iter().zip(&done)) {
        if *d > 0.0 {
            row.attainment = m / d;
            violation_minutes += usize::from(m / d < cfg.minute_slo_target);
        }
    }
    let finished: f64 = done.iter().sum();
    let secs = (minutes * 60) as f64;
    let report = Report {
        policy: policy.name(),
        minutes,
        gpu_hours: gpu_secs / 3600.0,
        idle_gpu_hours: idle_secs / 3600.0,
        cost: reserved_cost + on_demand_cost,
        reserved_cost,
        on_demand_cost,
        slo_attainment: if finished > 0.0 { met.iter().sum::<f64>() / finished } else { 1.0 },
        violation_minutes,
        cold_starts,
        node_boots,
        peak_queue,
        arrived,
        served,
        dropped,
        queued: queue.left(),
        mean_replicas: if secs > 0.0 { replica_secs / secs } else { 0.0 },
        max_replicas,
    };
    Ok(Run { report, timeline })
}
