//! The policies the simulator compares. Each sees an [`Observation`] of the
//! fleet's past and present only. The oracle, which is built with the
//! demand itself, is in [`super::oracle`].
//!
//! - [`Static`]: a fixed fleet sized for the warm-up's busiest minute.
//! - [`Reactive`]: KEDA threshold triggers through the HPA: desired =
//!   ceil(running + waiting / target per replica), optionally with a queue
//!   trigger, or the capacity rule on the observed arrival rate.
//! - The predictive policy is Foresight's own engine ([`super::shipped`]).
//! - [`Fixed`]: a given replica schedule, for testing the physics.

use super::Capacity;
use crate::sizing::learned::Learned;

/// What a policy can see at a decision: the past and the present.
#[derive(Debug, Clone, Copy)]
pub struct Observation {
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
    /// Replicas the Deployment asks for now (what the HPA keeps without an answer).
    pub(crate) spec: u32,
    /// The 99th percentile queue wait of the requests admitted since the last poll, seconds (NaN: none).
    pub(crate) wait_p99: f64,
    /// Requests admitted per second since the last poll (NaN at the first):
    /// what vLLM's request counter shows between scrapes.
    pub(crate) admitted_rate: f64,
    /// Arrivals per second over the rate window (like `rate(...[1m])`).
    pub(crate) arrival_rate: f64,
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
    fn decide(&mut self, obs: &Observation) -> Decision;
    /// Goes through the HPA (KEDA-driven policies); `false` sets replicas directly.
    fn via_hpa(&self) -> bool {
        true
    }
    /// Why the last decision is what it is, for a policy that says.
    fn reason(&self) -> Option<String> {
        None
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
    pub name: String,
}

impl Static {
    pub fn new(replicas: u32) -> Static {
        Static { replicas, name: format!("static({replicas})") }
    }

    /// Sized for the busiest minute of the warm-up history (arrivals per
    /// second, one per minute) at `scale` x its rate: what an operator who
    /// had watched those weeks would provision. It never sees the scored window.
    pub fn from_history(history: &[f64], cap: &Capacity, scale: f64) -> Static {
        let peak = history.iter().copied().filter(|r| r.is_finite()).fold(0.0, f64::max);
        let replicas = cap.replicas_for_rate(peak * scale).clamp(cap.min_replicas, cap.max_replicas);
        Static { replicas, name: format!("static({replicas})") }
    }
}

impl Policy for Static {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn decide(&mut self, _: &Observation) -> Decision {
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
    /// threshold on vLLM's in-flight requests, with a second trigger on the
    /// waiting requests alone (`queue` per replica) when set: KEDA takes the
    /// larger of its triggers.
    Concurrency { target: f64, queue: Option<f64> },
    /// The observed arrival rate through the same capacity rule the oracle uses.
    RequestRate,
}

/// KEDA threshold triggers through the HPA (whose behaviour, the scale-down
/// window, is the run's [`super::HpaConfig`]; `down_secs` names it).
pub struct Reactive {
    pub signal: ReactiveSignal,
    pub cap: Capacity,
    pub down_secs: f64,
}

impl Policy for Reactive {
    fn name(&self) -> String {
        let down = self.down_secs;
        match self.signal {
            ReactiveSignal::Concurrency { target, queue: None } => {
                format!("reactive(concurrency>{target}, down {down}s)")
            }
            ReactiveSignal::Concurrency { target, queue: Some(q) } => {
                format!("reactive(concurrency>{target}, queue>{q}, down {down}s)")
            }
            ReactiveSignal::RequestRate => format!("reactive(request_rate, down {down}s)"),
        }
    }
    fn decide(&mut self, o: &Observation) -> Decision {
        let want = match self.signal {
            ReactiveSignal::Concurrency { target, queue } => {
                let load = ((o.running + o.waiting) / target).ceil() as u32;
                load.max(queue.map_or(0, |q| (o.waiting / q).ceil() as u32))
            }
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
    fn decide(&mut self, o: &Observation) -> Decision {
        let m = ((o.t / 60.0) as usize).min(self.0.len().saturating_sub(1));
        Decision { replicas: self.0.get(m).copied().unwrap_or(0), warm_nodes: 0 }
    }
    fn via_hpa(&self) -> bool {
        false
    }
}
