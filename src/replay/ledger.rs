//! What a run records: the sliding windows a policy may read at each poll
//! (as a real fleet's metrics would show them), and the ledger of requests,
//! GPU-seconds and cost that becomes its [`Report`] and per-minute timeline.

use std::collections::VecDeque;

use super::{fleet::Fleet, fluid::Queue, Capacity, Demand, Minute, Pool, Report, Run, SimConfig};

/// The windows behind an [`super::Observation`]: arrivals over the rate
/// window, and what a scrape shows of the poll that just ended (vLLM's
/// counters and histograms since the last scrape): the requests admitted,
/// and their queue waits.
pub(super) struct Windows {
    dt: f64,
    window_steps: usize,
    recent: VecDeque<f64>,
    recent_sum: f64,
    poll_secs: f64,
    /// Queue waits (seconds, requests) of the last closed poll, and of the open one.
    last_waits: Vec<(f64, f64)>,
    waits: Vec<(f64, f64)>,
}

impl Windows {
    pub(super) fn new(cfg: &SimConfig) -> Windows {
        let window_steps = (cfg.rate_window_secs / cfg.step_secs).round().max(1.0) as usize;
        Windows {
            dt: cfg.step_secs,
            window_steps,
            recent: VecDeque::with_capacity(window_steps + 1),
            recent_sum: 0.0,
            poll_secs: cfg.poll_secs,
            last_waits: Vec::new(),
            waits: Vec::new(),
        }
    }

    /// `a` requests arrived this step.
    pub(super) fn arrived(&mut self, a: f64) {
        self.recent.push_back(a);
        self.recent_sum += a;
        if self.recent.len() > self.window_steps {
            self.recent_sum -= self.recent.pop_front().unwrap_or(0.0);
        }
    }

    /// `n` requests got a slot after waiting `wait` seconds.
    pub(super) fn admitted(&mut self, n: f64, wait: f64) {
        self.waits.push((wait, n));
    }

    /// A poll is due: close the poll that just ended.
    pub(super) fn close_poll(&mut self) {
        self.last_waits = std::mem::take(&mut self.waits);
    }

    /// The 99th percentile queue wait of the requests admitted in the last
    /// poll (NaN if none): what vLLM's `request_queue_time_seconds` shows
    /// between two scrapes.
    pub(super) fn wait_p99(&self) -> f64 {
        quantile(&mut self.last_waits.clone(), 0.99)
    }

    /// Requests admitted per second in the last poll: what the request
    /// counter's increase between two scrapes shows (completions, which
    /// follow admissions by a service time).
    pub(super) fn admitted_rate(&self) -> f64 {
        self.last_waits.iter().map(|w| w.1).sum::<f64>() / self.poll_secs
    }

    /// Arrivals per second over the rate window.
    pub(super) fn arrival_rate(&self) -> f64 {
        self.recent_sum.max(0.0) / (self.recent.len() as f64 * self.dt)
    }
}

/// The `q` quantile of waits weighted by their requests (NaN when empty).
pub(super) fn quantile(waits: &mut [(f64, f64)], q: f64) -> f64 {
    let total: f64 = waits.iter().map(|w| w.1).sum();
    if total <= 0.0 {
        return f64::NAN;
    }
    waits.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut seen = 0.0;
    for (w, n) in waits.iter() {
        seen += n;
        if seen >= q * total {
            return *w;
        }
    }
    waits.last().map_or(f64::NAN, |w| w.0)
}

/// Seconds of the windows the queue wait's p99 is reported over.
const WAIT_WINDOW_SECS: f64 = 300.0;

/// Requests met, finished and dropped, GPU-seconds and cost, per minute and in all.
pub(super) struct Ledger {
    met: Vec<f64>,
    done: Vec<f64>,
    timeline: Vec<Minute>,
    arrived: f64,
    served: f64,
    dropped: f64,
    minute_arrived: f64,
    minute_served: f64,
    minute_dropped: f64,
    gpu_secs: f64,
    idle_secs: f64,
    reserved_cost: f64,
    on_demand_cost: f64,
    peak_queue: f64,
    replica_secs: f64,
    /// GPU-seconds held by replicas placed on nodes (starting or ready).
    held_secs: f64,
    max_replicas: u32,
    /// Queue waits of the open five-minute window, and each closed window's p99.
    waits: Vec<(f64, f64)>,
    wait_p99s: Vec<f64>,
}

impl Ledger {
    pub(super) fn new(minutes: usize, replicas: u32) -> Ledger {
        Ledger {
            met: vec![0.0; minutes],
            done: vec![0.0; minutes],
            timeline: Vec::with_capacity(minutes),
            arrived: 0.0,
            served: 0.0,
            dropped: 0.0,
            minute_arrived: 0.0,
            minute_served: 0.0,
            minute_dropped: 0.0,
            gpu_secs: 0.0,
            idle_secs: 0.0,
            reserved_cost: 0.0,
            on_demand_cost: 0.0,
            peak_queue: 0.0,
            replica_secs: 0.0,
            held_secs: 0.0,
            max_replicas: replicas,
            waits: Vec::new(),
            wait_p99s: Vec::new(),
        }
    }

    pub(super) fn arrived(&mut self, a: f64) {
        self.arrived += a;
        self.minute_arrived += a;
    }

    /// `n` requests that arrived at `at` got a slot; they count in the minute they arrived.
    pub(super) fn admitted(&mut self, at: f64, n: f64, wait: f64, in_budget: bool) {
        self.waits.push((wait, n));
        let m = (at / 60.0) as usize;
        self.done[m] += n;
        if in_budget {
            self.met[m] += n;
        }
        self.served += n;
        self.minute_served += n;
    }

    /// `n` requests that arrived at `at` gave up after waiting `wait`: finished, and a miss.
    pub(super) fn dropped(&mut self, at: f64, n: f64, wait: f64) {
        self.waits.push((wait, n));
        self.done[(at / 60.0) as usize] += n;
        self.dropped += n;
        self.minute_dropped += n;
    }

    /// One step's bill: GPUs on the fleet's nodes (booting ones too), idle
    /// GPU time from the batch slots busy on ready replicas, replicas asked for.
    pub(super) fn step(&mut self, dt: f64, cap: &Capacity, pool: &Pool, fleet: &Fleet, queue: &Queue) {
        let (nodes, ready, spec) = (fleet.nodes(), fleet.ready, fleet.spec());
        self.peak_queue = self.peak_queue.max(queue.queued);
        let gpus = f64::from(nodes * cap.gpus_per_node);
        let util = if ready > 0 { (queue.busy / (f64::from(ready) * cap.slots)).min(1.0) } else { 0.0 };
        self.gpu_secs += gpus * dt;
        self.idle_secs += (gpus - f64::from(ready * cap.gpus_per_replica) * util).max(0.0) * dt;
        self.reserved_cost += f64::from(pool.reserved_nodes) * pool.reserved_price_per_node_hour * dt / 3600.0;
        self.on_demand_cost +=
            f64::from(nodes.saturating_sub(pool.reserved_nodes)) * pool.price_per_node_hour * dt / 3600.0;
        self.replica_secs += f64::from(spec) * dt;
        self.held_secs += f64::from(fleet.placed() * cap.gpus_per_replica) * dt;
        self.max_replicas = self.max_replicas.max(spec);
    }

    /// The minute `minute` has ended: its timeline row, with the fleet as it stands.
    /// Returns the rate that arrived, for the history the policies forecast from.
    pub(super) fn close_minute(
        &mut self,
        demand: &Demand,
        minute: usize,
        fleet: &Fleet,
        queue: &Queue,
        reason: Option<String>,
    ) {
        let rate = self.minute_arrived / 60.0;
        self.timeline.push(Minute {
            minute,
            unix: demand.start + 60 * minute as i64,
            demand_rps: demand.rate[minute],
            arrived_rps: rate,
            replicas: fleet.spec(),
            ready_replicas: fleet.ready,
            nodes: fleet.nodes(),
            queue: queue.queued,
            attainment: f64::NAN,
            arrived: self.minute_arrived,
            served: self.minute_served,
            dropped: self.minute_dropped,
            reason,
        });
        (self.minute_arrived, self.minute_served, self.minute_dropped) = (0.0, 0.0, 0.0);
        if (minute + 1) % (WAIT_WINDOW_SECS / 60.0) as usize == 0 {
            // Windows in which no request finished (admitted or gave up) have no wait to report.
            let p99 = quantile(&mut self.waits, 0.99);
            if p99.is_finite() {
                self.wait_p99s.push(p99);
            }
            self.waits.clear();
        }
    }

    /// The run's report: each minute's attainment, the SLO's misses, the totals.
    pub(super) fn finish(
        mut self,
        policy: String,
        cfg: &SimConfig,
        cold_starts: u64,
        node_boots: u64,
        queued: f64,
        gpus_per_node: u32,
    ) -> Run {
        let minutes = self.met.len();
        let (mut violation_minutes, mut with_requests) = (0, 0);
        for (row, (m, d)) in self.timeline.iter_mut().zip(self.met.iter().zip(&self.done)) {
            if *d > 0.0 {
                row.attainment = m / d;
                with_requests += 1;
                violation_minutes += usize::from(m / d < cfg.minute_slo_target);
            }
        }
        let mut p99s: Vec<(f64, f64)> = self.wait_p99s.iter().map(|p| (*p, 1.0)).collect();
        let wait_p99_5min = [quantile(&mut p99s, 0.5), quantile(&mut p99s, 0.95)];
        let finished: f64 = self.done.iter().sum();
        let secs = (minutes * 60) as f64;
        let report = Report {
            policy,
            minutes,
            gpu_hours: self.gpu_secs / 3600.0,
            held_gpu_hours: self.held_secs / 3600.0,
            node_hours: self.gpu_secs / 3600.0 / f64::from(gpus_per_node.max(1)),
            minutes_met: if with_requests > 0 { 1.0 - violation_minutes as f64 / with_requests as f64 } else { 1.0 },
            wait_p99_5min,
            idle_gpu_hours: self.idle_secs / 3600.0,
            cost: self.reserved_cost + self.on_demand_cost,
            reserved_cost: self.reserved_cost,
            on_demand_cost: self.on_demand_cost,
            slo_attainment: if finished > 0.0 { self.met.iter().sum::<f64>() / finished } else { 1.0 },
            violation_minutes,
            cold_starts,
            node_boots,
            peak_queue: self.peak_queue,
            arrived: self.arrived,
            served: self.served,
            dropped: self.dropped,
            queued,
            mean_replicas: if secs > 0.0 { self.replica_secs / secs } else { 0.0 },
            max_replicas: self.max_replicas,
            learned: None,
            spare: None,
        };
        Run { report, timeline: self.timeline }
    }
}
