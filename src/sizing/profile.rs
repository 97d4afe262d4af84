//! Capacity profiles: what one replica of a served model needs and sustains.
//!
//! One YAML file per model in `models/`. The files shipped there are compiled
//! into the binary; a `models_dir` in config adds to them and overrides a
//! built-in profile of the same name.

use serde::{Deserialize, Serialize};

/// One served model's capacity profile.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Name workloads refer to (`model:` in a workload).
    pub(crate) name: String,
    /// GPU product the figures were measured on (e.g. `nvidia-h100-80gb`).
    pub(crate) gpu_type: String,
    /// GPUs one replica uses (tensor parallel x pipeline parallel).
    pub(crate) gpus_per_replica: u32,
    /// Nodes one replica spans.
    #[serde(default = "one")]
    pub(crate) nodes_per_replica: u32,
    /// In-flight requests one replica sustains within its latency SLO.
    pub(crate) concurrency_per_replica: f64,
    /// Time from "scale up" to "serving", by stage.
    pub(crate) cold_start_secs: ColdStart,
    /// Latency targets the figures were measured at.
    #[serde(default)]
    pub(crate) slo: Option<Slo>,
    /// Generated tokens per second one replica sustains within the SLO;
    /// when given, sizing keeps enough replicas for the live token rate too.
    #[serde(default)]
    pub(crate) generation_tokens_per_sec: Option<f64>,
    /// Prompt tokens per second one replica prefills (tokens not served from
    /// the prefix cache) while its TTFT stays within the SLO; a `prefill`
    /// role is sized on it.
    #[serde(default)]
    pub(crate) prefill_tokens_per_sec: Option<f64>,
    /// Tokens of KV cache one replica holds (vLLM logs it at start-up as
    /// "GPU KV cache size: N tokens"); a `decode` role keeps the sequences'
    /// prompts and outputs within it.
    #[serde(default)]
    pub(crate) kv_cache_tokens: Option<f64>,
}

/// Latency targets (p95, the figures in the profile hold within them).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Slo {
    /// Time to first token.
    pub(crate) ttft_secs: f64,
    /// Inter-token latency.
    pub(crate) itl_secs: f64,
    /// Longest a request may wait for a batch slot; default half of `ttft_secs`
    /// (the rest is prefill).
    #[serde(default)]
    pub(crate) queue_wait_secs: Option<f64>,
}

/// Queue-wait budget when a profile states no SLO.
pub(crate) const DEFAULT_WAIT_BUDGET_SECS: f64 = 1.0;

fn one() -> u32 {
    1
}

/// Cold-start stages of a new replica, in seconds.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ColdStart {
    /// A new GPU node joining the cluster (0 when a warm node is free).
    #[serde(default)]
    pub(crate) node_boot: f64,
    /// Pulling the serving image.
    #[serde(default)]
    pub(crate) image_pull: f64,
    /// Loading weights onto the GPUs and warming up the engine.
    #[serde(default)]
    pub(crate) weights_load: f64,
}

impl ColdStart {
    /// Total time from decision to serving on a node that has to boot.
    pub(crate) fn total_secs(&self) -> f64 {
        self.node_boot + self.image_pull + self.weights_load
    }
}

impl Profile {
    /// Longest a request may queue for a slot (the M/M/c sizing target).
    pub(crate) fn wait_budget_secs(&self) -> f64 {
        match &self.slo {
            Some(slo) => slo.queue_wait_secs.unwrap_or(slo.ttft_secs / 2.0),
            None => DEFAULT_WAIT_BUDGET_SECS,
        }
    }

    /// What one replica sustains, for role sizing. The time per output token
    /// is the profile's measured one (sequences / generated tokens per
    /// second) when it states both, else its ITL SLO, the most a token may
    /// take; `None` with neither.
    pub(crate) fn role_capacity(&self) -> Option<super::roles::RoleCapacity> {
        let itl_secs = match (self.generation_tokens_per_sec, &self.slo) {
            (Some(g), _) => self.concurrency_per_replica / g,
            (None, Some(slo)) => slo.itl_secs,
            (None, None) => return None,
        };
        Some(super::roles::RoleCapacity {
            prefill_tokens_per_sec: self.prefill_tokens_per_sec,
            sequences: self.concurrency_per_replica,
            generation_tokens_per_sec: self.generation_tokens_per_sec,
            kv_cache_tokens: self.kv_cache_tokens,
            itl_secs,
        })
    }

    /// Image pull plus weights load: how long before serving a pod needs its node.
    pub(crate) fn pod_start_secs(&self) -> f64 {
        self.cold_start_secs.image_pull + self.cold_start_secs.weights_load
    }

    /// What one replica occupies, for the node packer.
    pub(crate) fn shape(&self) -> crate::capacity::Shape {
        crate::capacity::Shape {
            gpu_type: self.gpu_type.clone(),
            gpus_per_replica: self.gpus_per_replica,
            nodes_per_replica: self.nodes_per_replica,
            constraints: Default::default(),
            exclusive_rack: false,
        }
    }

    /// Problems with the profile's values, as (field, message) pairs.
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.name.trim().is_empty() {
            out.push(("name", "must not be empty".into()));
        }
        if self.gpus_per_replica == 0 {
            out.push(("gpus_per_replica", "must be at least 1".into()));
        }
        if self.nodes_per_replica == 0 {
            out.push(("nodes_per_replica", "must be at least 1".into()));
        } else if self.gpus_per_replica % self.nodes_per_replica != 0 {
            out.push((
                "gpus_per_replica",
                format!("{} GPUs cannot be split evenly over {} nodes", self.gpus_per_replica, self.nodes_per_replica),
            ));
        }
        if !(self.concurrency_per_replica.is_finite() && self.concurrency_per_replica > 0.0) {
            out.push((
                "concurrency_per_replica",
                format!("must be a finite number > 0, got {}", self.concurrency_per_replica),
            ));
        }
        if let Some(slo) = &self.slo {
            for (field, v) in [
                ("slo.ttft_secs", Some(slo.ttft_secs)),
                ("slo.itl_secs", Some(slo.itl_secs)),
                ("slo.queue_wait_secs", slo.queue_wait_secs),
            ] {
                if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                    out.push((field, format!("must be a finite number > 0, got {v}")));
                }
            }
        }
        for (field, v) in [
            ("generation_tokens_per_sec", self.generation_tokens_per_sec),
            ("prefill_tokens_per_sec", self.prefill_tokens_per_sec),
            ("kv_cache_tokens", self.kv_cache_tokens),
        ] {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                out.push((field, format!("must be a finite number > 0, got {v}")));
            }
        }
        let c = &self.cold_start_secs;
        for (field, v) in [
            ("cold_start_secs.node_boot", c.node_boot),
            ("cold_start_secs.image_pull", c.image_pull),
            ("cold_start_secs.weights_load", c.weights_load),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                out.push((field, format!("must be a finite number >= 0, got {v}")));
            }
        }
        out
    }
}

include!(concat!(env!("OUT_DIR"), "/builtin_profiles.rs"));
