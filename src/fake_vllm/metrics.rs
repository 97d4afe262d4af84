//! Rendering a pod's state as vLLM V1 exposes it on `/metrics`: Prometheus
//! text format 0.0.4, `vllm:` names, `engine` and `model_name` labels,
//! counters with `_total` and a separate `_created` gauge family, floats as
//! Python prints them (`3.0`, `+Inf`).

use std::fmt::Write;

use super::{Hist, PodMetrics, ITL_BOUNDS, LATENCY_BOUNDS, TOKEN_BOUNDS, TTFT_BOUNDS};

fn num(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v.is_nan() {
        return "NaN".into();
    }
    if v.fract() == 0.0 && v.abs() < 1e16 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

struct Out<'a> {
    buf: String,
    labels: &'a str,
    created: f64,
}

impl Out<'_> {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.buf, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn gauge(&mut self, name: &str, help: &str, v: f64) {
        self.head(name, "gauge", help);
        let _ = writeln!(self.buf, "{name}{{{}}} {}", self.labels, num(v));
    }

    /// A counter family `<base>_total` and its `<base>_created` gauge.
    fn counter(&mut self, base: &str, help: &str, series: &[(&str, u64)]) {
        let total = format!("{base}_total");
        self.head(&total, "counter", help);
        for (extra, v) in series {
            let _ = writeln!(self.buf, "{total}{{{}}} {}", self.with(extra), num(*v as f64));
        }
        let created = format!("{base}_created");
        self.head(&created, "gauge", help);
        for (extra, _) in series {
            let _ = writeln!(self.buf, "{created}{{{}}} {}", self.with(extra), num(self.created));
        }
    }

    fn with(&self, extra: &str) -> String {
        // Label names sorted as vLLM prints them: engine, finished_reason, model_name.
        match extra.split_once(',') {
            _ if extra.is_empty() => self.labels.to_string(),
            _ => {
                let (engine, model) = self.labels.split_once(',').unwrap_or((self.labels, ""));
                format!("{engine},{extra},{model}")
            }
        }
    }

    fn histogram(&mut self, name: &str, help: &str, bounds: &[f64], h: &Hist) {
        self.head(name, "histogram", help);
        let (engine, model) = self.labels.split_once(',').unwrap_or((self.labels, ""));
        for (b, c) in bounds.iter().zip(&h.counts) {
            let _ = writeln!(self.buf, "{name}_bucket{{{engine},le=\"{}\",{model}}} {}", num(*b), num(*c as f64));
        }
        let _ = writeln!(self.buf, "{name}_bucket{{{engine},le=\"+Inf\",{model}}} {}", num(h.count as f64));
        let _ = writeln!(self.buf, "{name}_count{{{}}} {}", self.labels, num(h.count as f64));
        let _ = writeln!(self.buf, "{name}_sum{{{}}} {}", self.labels, num(h.sum));
        let created = format!("{name}_created");
        self.head(&created, "gauge", help);
        let _ = writeln!(self.buf, "{created}{{{}}} {}", self.labels, num(self.created));
    }
}

/// The `/metrics` body of one pod.
pub(crate) fn render(m: &PodMetrics, model_name: &str) -> String {
    let labels = format!("engine=\"0\",model_name=\"{}\"", escape(model_name));
    let mut o = Out { buf: String::with_capacity(16 * 1024), labels: &labels, created: m.created };
    o.gauge("vllm:num_requests_running", "Requests in the running batch.", f64::from(m.running));
    o.gauge("vllm:num_requests_waiting", "Requests queued for a batch slot.", f64::from(m.waiting));
    o.gauge("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full).", m.kv_cache_usage);
    o.counter("vllm:num_preemptions", "Preempted requests.", &[("", 0)]);
    o.counter("vllm:prompt_tokens", "Prefill tokens processed.", &[("", m.prompt_tokens)]);
    o.counter("vllm:generation_tokens", "Tokens generated.", &[("", m.generation_tokens)]);
    o.counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", &[("", m.cache_queries)]);
    o.counter("vllm:prefix_cache_hits", "Prompt tokens served from the prefix cache.", &[("", m.cache_hits)]);
    o.counter(
        "vllm:request_success",
        "Finished requests by reason.",
        &[
            ("finished_reason=\"abort\"", 0),
            ("finished_reason=\"length\"", m.success_length),
            ("finished_reason=\"stop\"", m.success_stop),
        ],
    );
    o.histogram("vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BOUNDS, &m.ttft);
    o.histogram("vllm:inter_token_latency_seconds", "Time between output tokens.", ITL_BOUNDS, &m.itl);
    o.histogram("vllm:e2e_request_latency_seconds", "Request latency, arrival to last token.", LATENCY_BOUNDS, &m.e2e);
    o.histogram("vllm:request_queue_time_seconds", "Time spent waiting for a batch slot.", LATENCY_BOUNDS, &m.queue);
    o.histogram("vllm:request_prompt_tokens", "Prompt tokens per finished request.", TOKEN_BOUNDS, &m.prompt_len);
    o.histogram(
        "vllm:request_generation_tokens",
        "Generated tokens per finished request.",
        TOKEN_BOUNDS,
        &m.output_len,
    );
    o.buf
}
