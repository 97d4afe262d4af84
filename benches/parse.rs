//! Exposition parser throughput on a ~1 MB vLLM-shaped body: a big node
//! serving many models over several data-parallel engines, histograms
//! dominating as they do on a real vLLM `/metrics`.
//!
//! `cargo bench --bench parse` (FORESIGHT_BENCH_SECS sets each format's
//! length, default 3). The same content is rendered twice, as Prometheus
//! text 0.0.4 (as vLLM serves it) and as OpenMetrics 1.0 (UNIT, `_created`
//! inside the family, exemplars on some buckets, `# EOF`); each is parsed
//! repeatedly and the sample count checked against what was built.

use std::{
    fmt::Write,
    hint::black_box,
    time::{Duration, Instant},
};

use foresight::sources::exposition::{parse, Format};

const MODELS: usize = 9;
const ENGINES: usize = 4;
const CREATED: f64 = 1_745_228_734.548_708_2;

const TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
const ITL: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const REQUEST: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
const ITERATION: &[f64] = &[1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];
const TOKENS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0];

enum Kind {
    Gauge,
    Counter,
    Histogram(&'static [f64]),
}

/// The vLLM V1 families: (name without `_total`, kind, help, unit).
const FAMILIES: &[(&str, Kind, &str, Option<&str>)] = &[
    ("vllm:num_requests_running", Kind::Gauge, "Number of requests in model execution batches.", None),
    ("vllm:num_requests_waiting", Kind::Gauge, "Number of requests waiting to be processed.", None),
    ("vllm:kv_cache_usage_perc", Kind::Gauge, "KV-cache usage. 1 means 100 percent usage.", None),
    ("vllm:prefix_cache_queries", Kind::Counter, "Prefix cache queries, in terms of number of queried tokens.", None),
    ("vllm:prefix_cache_hits", Kind::Counter, "Prefix cache hits, in terms of number of cached tokens.", None),
    ("vllm:num_preemptions", Kind::Counter, "Cumulative number of preemption from the engine.", None),
    ("vllm:prompt_tokens", Kind::Counter, "Number of prefill tokens processed.", None),
    ("vllm:generation_tokens", Kind::Counter, "Number of generation tokens processed.", None),
    ("vllm:request_success", Kind::Counter, "Count of successfully processed requests.", None),
    ("vllm:request_prompt_tokens", Kind::Histogram(TOKENS), "Number of prefill tokens processed.", None),
    ("vllm:request_generation_tokens", Kind::Histogram(TOKENS), "Number of generation tokens processed.", None),
    ("vllm:iteration_tokens_total", Kind::Histogram(ITERATION), "Histogram of number of tokens per engine_step.", None),
    (
        "vllm:time_to_first_token_seconds",
        Kind::Histogram(TTFT),
        "Histogram of time to first token in seconds.",
        Some("seconds"),
    ),
    (
        "vllm:inter_token_latency_seconds",
        Kind::Histogram(ITL),
        "Histogram of inter-token latency in seconds.",
        Some("seconds"),
    ),
    (
        "vllm:e2e_request_latency_seconds",
        Kind::Histogram(REQUEST),
        "Histogram of e2e request latency in seconds.",
        Some("seconds"),
    ),
    (
        "vllm:request_queue_time_seconds",
        Kind::Histogram(REQUEST),
        "Histogram of time spent in WAITING phase for request.",
        Some("seconds"),
    ),
    (
        "vllm:request_inference_time_seconds",
        Kind::Histogram(REQUEST),
        "Histogram of time spent in RUNNING phase for request.",
        Some("seconds"),
    ),
    (
        "vllm:request_prefill_time_seconds",
        Kind::Histogram(REQUEST),
        "Histogram of time spent in PREFILL phase for request.",
        Some("seconds"),
    ),
    (
        "vllm:request_decode_time_seconds",
        Kind::Histogram(REQUEST),
        "Histogram of time spent in DECODE phase for request.",
        Some("seconds"),
    ),
];

/// A float the way Python's prometheus_client prints it (`3.0`, `1.048804e+06`, `+Inf`).
fn py_float(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v.fract() == 0.0 && v.abs() < 1e6 {
        return format!("{v:.1}");
    }
    if v.abs() >= 1e6 {
        let exp = v.abs().log10().floor() as i32;
        let mantissa = format!("{:?}", v / 10f64.powi(exp));
        return format!("{mantissa}e+{exp:02}");
    }
    format!("{v:?}")
}

/// A deterministic pseudo-random number in [0, 1): splitmix64.
fn unit(n: u64) -> f64 {
    let mut z = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Renders the node's body; returns it and the number of samples in it.
fn build(om: bool) -> (String, usize) {
    let label_sets: Vec<(String, String)> = (0..MODELS)
        .flat_map(|m| (0..ENGINES).map(move |e| (e.to_string(), format!("org-{m}/Llama-3.1-{}B-Instruct", 8 + m))))
        .collect();
    let mut out = String::with_capacity(1 << 21);
    let mut samples = 0usize;
    let mut seed = 0u64;
    let mut next = || {
        seed += 1;
        unit(seed)
    };
    let mut sample = |out: &mut String, name: &str, suffix: &str, labels: &str, value: f64, exemplar: Option<&str>| {
        let _ = write!(out, "{name}{suffix}{{{labels}}} {}", py_float(value));
        if let (true, Some(e)) = (om, exemplar) {
            out.push_str(e);
        }
        out.push('\n');
        samples += 1;
    };
    for (name, kind, help, unit_name) in FAMILIES {
        let is_counter = matches!(kind, Kind::Counter);
        let declared = if is_counter && !om { format!("{name}_total") } else { name.to_string() };
        let type_name = match kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram(_) => "histogram",
        };
        let _ = writeln!(out, "# HELP {declared} {help}\n# TYPE {declared} {type_name}");
        if let (true, Some(u)) = (om, unit_name) {
            let _ = writeln!(out, "# UNIT {declared} {u}");
        }
        let mut created = Vec::new();
        for (k, (engine, model)) in label_sets.iter().enumerate() {
            let reasons: &[&str] = if *name == "vllm:request_success" { &["stop", "length", "abort"] } else { &[""] };
            for reason in reasons {
                let labels = if reason.is_empty() {
                    format!("engine=\"{engine}\",model_name=\"{model}\"")
                } else {
                    format!("engine=\"{engine}\",finished_reason=\"{reason}\",model_name=\"{model}\"")
                };
                match kind {
                    Kind::Gauge => sample(&mut out, name, "", &labels, (next() * 64.0).floor(), None),
                    Kind::Counter => {
                        let v = (next() * 5e6).floor();
                        sample(&mut out, name, "_total", &labels, v, None);
                        created.push(labels.clone());
                    }
                    Kind::Histogram(bounds) => {
                        let count = (next() * 20_000.0).floor();
                        let mut cumulative = 0.0;
                        for (i, bound) in bounds.iter().enumerate() {
                            cumulative += ((count - cumulative) * next() * 0.5).floor();
                            let labels =
                                format!("engine=\"{engine}\",le=\"{}\",model_name=\"{model}\"", py_float(*bound));
                            let exemplar = (i % 7 == 3)
                                .then(|| format!(" # {{trace_id=\"{k:08x}{i:024x}\"}} {} {CREATED}", bound * 0.9));
                            sample(&mut out, name, "_bucket", &labels, cumulative, exemplar.as_deref());
                        }
                        let inf = format!("engine=\"{engine}\",le=\"+Inf\",model_name=\"{model}\"");
                        sample(&mut out, name, "_bucket", &inf, count, None);
                        sample(&mut out, name, "_count", &labels, count, None);
                        sample(&mut out, name, "_sum", &labels, count * next() * 2.0, None);
                        created.push(labels.clone());
                    }
                }
                if om && !created.is_empty() {
                    // OpenMetrics keeps `_created` inside the family, after each label set.
                    for labels in created.drain(..) {
                        sample(&mut out, name, "_created", &labels, CREATED, None);
                    }
                }
            }
        }
        if !om && !created.is_empty() {
            // prometheus_client's text output: a separate `_created` gauge family.
            let _ = writeln!(out, "# HELP {name}_created {help}\n# TYPE {name}_created gauge");
            for labels in &created {
                sample(&mut out, name, "_created", labels, CREATED, None);
            }
        }
    }
    if om {
        out.push_str("# EOF\n");
    }
    (out, samples)
}

fn run(label: &str, body: &str, format: Format, expected_samples: usize, budget: Duration) {
    let count = |body| -> usize {
        let families = parse(body, format).unwrap_or_else(|e| panic!("{label}: {e}"));
        families.iter().map(|f| f.samples.len()).sum()
    };
    assert_eq!(count(body), expected_samples, "{label}: samples parsed != samples built");
    let start = Instant::now();
    let mut iterations = 0u64;
    while start.elapsed() < budget || iterations < 3 {
        let families = parse(black_box(body), format).expect("parsed once already");
        black_box(&families);
        iterations += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let mb = body.len() as f64 / 1e6;
    println!(
        "{label:<12} {:>8.3} MB  {iterations:>6} iterations  {:>7.2} ms/parse  {:>8.1} MB/s  {:>6.2} M samples/s",
        mb,
        secs * 1e3 / iterations as f64,
        mb * iterations as f64 / secs,
        (expected_samples as f64 * iterations as f64 / secs) / 1e6,
    );
}

fn main() {
    let secs: f64 = std::env::var("FORESIGHT_BENCH_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(3.0);
    let budget = Duration::from_secs_f64(secs);
    let (text, text_samples) = build(false);
    let (om, om_samples) = build(true);
    assert_eq!(text_samples, om_samples, "both renderings hold the same samples");
    println!(
        "vLLM-shaped node: {MODELS} models x {ENGINES} engines, {} families, {text_samples} samples ({} lines text)",
        FAMILIES.len(),
        text.lines().count()
    );
    run("text 0.0.4", &text, Format::Text, text_samples, budget);
    run("openmetrics", &om, Format::OpenMetrics, om_samples, budget);
}
