//! The scale bench's simulated pods: N models' vLLM families as Prometheus
//! text exposition, served on loopback in shards of models per scrape target.

use std::{
    fmt::Write as _,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{SystemTime, UNIX_EPOCH},
};

// ---- Simulated demand: concurrency = level * (1 + three sinusoids: day, week, 10 min).

const OMEGA: [f64; 3] =
    [std::f64::consts::TAU / 86_400.0, std::f64::consts::TAU / 604_800.0, std::f64::consts::TAU / 600.0];
const AMP: [f64; 3] = [0.5, 0.15, 0.1];
/// Mean seconds a request is in flight: request rate = concurrency / this.
const LATENCY: f64 = 4.0;
/// vLLM's buckets for `request_queue_time_seconds` and `inter_token_latency_seconds`.
const QUEUE_LE: [f64; 20] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
    7680.0,
];
const ITL_LE: [f64; 19] =
    [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const FAMILIES: [(&str, &str); 7] = [
    ("vllm:num_requests_running", "gauge"),
    ("vllm:num_requests_waiting", "gauge"),
    ("vllm:request_success_total", "counter"),
    ("vllm:prompt_tokens_total", "counter"),
    ("vllm:generation_tokens_total", "counter"),
    ("vllm:request_queue_time_seconds", "histogram"),
    ("vllm:inter_token_latency_seconds", "histogram"),
];

#[derive(Clone, Copy)]
pub(crate) struct Model {
    level: f64,
    phase: [f64; 3],
}

/// Model `i`'s demand: a level of 2..80 in-flight requests (most small) and random phases.
pub(crate) fn model(i: usize) -> Model {
    let mut x = (i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D);
    let mut next = || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15); // splitmix64
        let z = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as f64 / u64::MAX as f64
    };
    Model { level: 2.0 + 78.0 * next() * next(), phase: [next() * 6.3, next() * 6.3, next() * 6.3] }
}

impl Model {
    pub(crate) fn concurrency(&self, t: f64) -> f64 {
        self.level * (1.0 + (0..3).map(|k| AMP[k] * (OMEGA[k] * t + self.phase[k]).sin()).sum::<f64>())
    }
    /// An antiderivative of `concurrency`: finished requests are its increase / [`LATENCY`].
    fn integral(&self, t: f64) -> f64 {
        self.level * (t - (0..3).map(|k| AMP[k] / OMEGA[k] * (OMEGA[k] * t + self.phase[k]).cos()).sum::<f64>())
    }
}

pub(crate) fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// One scrape target's `/metrics`: its models, two pods each, text format 0.0.4.
struct Shard {
    models: Vec<Model>,
    labels: Vec<[String; 2]>,
    t0: f64,
    last_len: Mutex<usize>,
}

/// `n` observations of queue wait (exponential, mean 0.25 s) or inter-token latency (Rayleigh, mean 27 ms).
fn hist(o: &mut String, name: &str, l: &str, n: u64, queue: bool) -> std::fmt::Result {
    let (les, mean): (&[f64], _) = if queue { (&QUEUE_LE, 0.25) } else { (&ITL_LE, 0.027) };
    for le in les {
        let cdf = if queue { 1.0 - (-le / 0.25).exp() } else { 1.0 - (-(le / 0.03).powi(2)).exp() };
        writeln!(o, "{name}_bucket{{{l},le=\"{le:?}\"}} {}.0", (n as f64 * cdf).floor())?;
        // grows with n only
    }
    let (inf, sum) = (format!("{name}_bucket{{{l},le=\"+Inf\"}} {n}.0"), n as f64 * mean);
    writeln!(o, "{inf}\n{name}_sum{{{l}}} {sum:.3}\n{name}_count{{{l}}} {n}.0")
}

impl Shard {
    fn render(&self) -> String {
        let t = now_unix();
        let mut out = String::with_capacity(*self.last_len.lock().unwrap() + 4096);
        // Per model, per pod: (running, waiting, finished requests), the model's total split over its pods.
        let split = |x: u64| [x.div_ceil(2), x / 2];
        let vals: Vec<[(u64, u64, u64); 2]> = (self.models.iter())
            .map(|m| {
                let c = m.concurrency(t).round().max(0.0) as u64;
                let reqs = ((m.integral(t) - m.integral(self.t0)) / LATENCY).max(0.0) as u64;
                let (r, w, q) = (split(c - c / 10), split(c / 10), split(reqs));
                [(r[0], w[0], q[0]), (r[1], w[1], q[1])]
            })
            .collect();
        for (f, (name, kind)) in FAMILIES.iter().enumerate() {
            let _ = write!(out, "# HELP {name} vLLM metric (simulated)\n# TYPE {name} {kind}\n");
            for (v, labels) in vals.iter().zip(&self.labels) {
                for ((run, wait, req), l) in v.iter().zip(labels) {
                    let o = &mut out;
                    let _ = match f {
                        0 => writeln!(o, "{name}{{{l}}} {run}"),
                        1 => writeln!(o, "{name}{{{l}}} {wait}"),
                        2 => {
                            let (stop, length) = (req * 4 / 5, req - req * 4 / 5);
                            let _ = writeln!(o, "{name}{{{l},finished_reason=\"stop\"}} {stop}.0");
                            writeln!(o, "{name}{{{l},finished_reason=\"length\"}} {length}.0")
                        }
                        3 => writeln!(o, "{name}{{{l}}} {}.0", req * 900),
                        4 => writeln!(o, "{name}{{{l}}} {}.0", req * 250),
                        5 => hist(o, name, l, *req, true),
                        _ => hist(o, name, l, req * 250, false),
                    };
                }
            }
        }
        *self.last_len.lock().unwrap() = out.len();
        out
    }
}

/// Serves each shard on its own port (its own `instance`), on a runtime of its own thread.
pub(crate) fn start_exporter(n: usize, per_target: usize) -> Vec<SocketAddr> {
    let t0 = now_unix();
    let shards: Vec<Arc<Shard>> = (0..n)
        .step_by(per_target)
        .map(|lo| {
            let ids = lo..(lo + per_target).min(n);
            let labels =
                ids.clone().map(|i| [0, 1].map(|p| format!("engine=\"0\",model_name=\"m{i}\",pod=\"m{i}-{p}\"")));
            Arc::new(Shard { models: ids.map(model).collect(), labels: labels.collect(), t0, last_len: Mutex::new(0) })
        })
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let mut addrs = Vec::new();
            for s in shards {
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addrs.push(l.local_addr().unwrap());
                let ct = [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")];
                let get = axum::routing::get(move || std::future::ready((ct, s.render())));
                tokio::spawn(async move { axum::serve(l, axum::Router::new().route("/metrics", get)).await.unwrap() });
            }
            tx.send(addrs).unwrap();
            std::future::pending::<()>().await
        })
    });
    rx.recv().unwrap()
}
