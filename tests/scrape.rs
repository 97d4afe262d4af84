//! The direct scraper against simulated vLLM pods with faults: one pod down,
//! one answering garbage, one restarting (counter reset). Rates stay right,
//! errors are counted per target and kind (and logged by the real binary),
//! nothing panics.
//!
//! Ground truth comes from the simulated fleet itself
//! ([`SimServer::with_fleet`]), read right before and right after every
//! poll. The scraper rendered each pod's body, and timed it, somewhere in
//! between, and the sim's counters only grow (between restarts), so each
//! derived value has an exact bracket:
//!
//! - counter increase in `[C(before_i) - C(after_{i-1}), C(after_i) - C(before_{i-1})]`
//!   (from 0 instead of the previous reading for a pod restarted in between);
//! - time between readings in `[before_i - after_{i-1}, after_i - before_{i-1}]`;
//! - rate in `[min increase / max dt, max increase / min dt]`.
//!
//! A poll takes a few ms against 0.5 s between polls, so the bracket is a few
//! percent wide, and it widens by itself when the machine stalls instead of
//! making the test flaky. A single pair of readings would not do: a request
//! is counted whole and prompt sizes are heavy-tailed (one 10k-token prompt
//! landing on the other side of a few-ms offset moves a 0.5 s prompt rate
//! by 20k tokens/s).

use crate::common;

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use foresight::{
    fake_vllm::{
        server::{Mode, SimServer},
        DemandConfig, Fleet, SimConfig,
    },
    sources::{
        scrape::{DnsTargets, ScrapeConfig, Scraper, TargetError},
        Signal, Signals, SourceError,
    },
};
use tokio_util::sync::CancellationToken;

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

fn sim_config(pods: u32, requests_per_sec: f64) -> SimConfig {
    SimConfig {
        pods,
        model_name: "meta-llama/Llama-3.1-8B-Instruct".into(),
        demand: DemandConfig {
            requests_per_sec,
            daily_amplitude: 0.0,
            weekend_factor: 1.0,
            day_length_secs: 86_400.0,
            trace_file: None,
            seed: 11,
        },
        // Far above the ~50 in flight per pod: nothing queues.
        max_num_seqs: 100_000,
        prefill_tokens_per_sec: 8_000.0,
        itl_secs: 0.02,
        kv_cache_tokens: 400_000.0,
        prefix_cache_hit_fraction: 0.0,
    }
}

/// A simulated fleet whose demand started `warmup_secs` ago (so pods are
/// busy from the first scrape), served on loopback.
async fn start_fleet(pods: u32, rps: f64, warmup_secs: f64, shutdown: &CancellationToken) -> SimServer {
    let fleet = Fleet::new(sim_config(pods, rps), None, unix_now() - warmup_secs);
    SimServer::start(fleet, IpAddr::V4(Ipv4Addr::LOCALHOST), shutdown.clone()).await.unwrap()
}

fn scrape_config(targets: Vec<String>, timeout_secs: f64) -> ScrapeConfig {
    ScrapeConfig {
        targets,
        dns: None,
        interval_secs: 0.5,
        timeout_secs,
        concurrency: 16,
        model_name: None,
        max_body_bytes: 10 << 20,
    }
}

/// One pod's counters and gauges at one moment.
#[derive(Debug, Clone, Copy)]
struct PodTruth {
    success: f64,
    prompt: f64,
    generation: f64,
    running: f64,
    waiting: f64,
}

impl PodTruth {
    /// Requests that ever reached the pod (finished + in flight): only grows.
    fn arrived(&self) -> f64 {
        self.success + self.running + self.waiting
    }
}

/// Picks one counter out of a pod's truth.
type Counter = fn(&PodTruth) -> f64;

/// The fleet at one moment: its time and every pod.
#[derive(Debug, Clone)]
struct Truth {
    t: f64,
    pods: Vec<PodTruth>,
}

fn truth(server: &SimServer) -> Truth {
    server.with_fleet(|f| Truth {
        t: f.now(),
        pods: f
            .pods()
            .iter()
            .map(|p| {
                let m = p.metrics();
                PodTruth {
                    success: (m.success_stop + m.success_length) as f64,
                    prompt: m.prompt_tokens as f64,
                    generation: m.generation_tokens as f64,
                    running: f64::from(m.running),
                    waiting: f64::from(m.waiting),
                }
            })
            .collect(),
    })
}

/// Ground truth around one poll.
struct Around {
    before: Truth,
    after: Truth,
}

/// The exact bracket of a rate derived between polls `prev` and `cur` from
/// the counter `c` of `pods`; `reset` pods restarted between the two polls.
fn rate_bracket(prev: &Around, cur: &Around, pods: &[usize], reset: &[usize], c: Counter) -> (f64, f64) {
    let (mut inc_lo, mut inc_hi) = (0.0, 0.0);
    for &p in pods {
        let (prev_lo, prev_hi) =
            if reset.contains(&p) { (0.0, 0.0) } else { (c(&prev.before.pods[p]), c(&prev.after.pods[p])) };
        inc_lo += c(&cur.before.pods[p]) - prev_hi;
        inc_hi += c(&cur.after.pods[p]) - prev_lo;
    }
    let dt_lo = cur.before.t - prev.after.t;
    let dt_hi = cur.after.t - prev.before.t;
    assert!(dt_lo > 0.0, "polls overlap: {dt_lo}");
    (inc_lo.max(0.0) / dt_hi, inc_hi / dt_lo)
}

/// The bracket of a gauge read during one poll: what it was before, minus
/// every request that finished during the poll, plus every one that arrived.
fn gauge_bracket(cur: &Around, pods: &[usize]) -> (f64, f64) {
    let (mut lo, mut hi) = (0.0, 0.0);
    for &p in pods {
        let (b, a) = (&cur.before.pods[p], &cur.after.pods[p]);
        let now = b.running + b.waiting;
        lo += now - (a.success - b.success);
        hi += now + (a.arrived() - b.arrived());
    }
    (lo.max(0.0), hi)
}

/// `v` within `[lo, hi]`, with float slack (times are f64 Unix seconds, ~0.5 us apart).
fn assert_within(what: &str, poll: usize, v: Option<f64>, (lo, hi): (f64, f64), signals: &Signals) {
    let v = v.unwrap_or_else(|| panic!("poll {poll}: no {what}; got {signals:?}"));
    let slack = 1e-6 * hi.abs().max(1.0);
    assert!(v >= lo - slack && v <= hi + slack, "poll {poll}: {what} = {v}, expected within [{lo}, {hi}]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rates_survive_a_down_pod_a_garbage_pod_and_a_restart() {
    const POLLS: usize = 10;
    const RESTART_BEFORE: usize = 5;
    let shutdown = CancellationToken::new();
    // 3 pods at 10 req/s each, ~4.5 s of decode per request: ~45 in flight per pod.
    let server = start_fleet(3, 30.0, 30.0, &shutdown).await;
    server.set_mode(1, Mode::Garbage);
    let down = common::ClosedPort::new("/metrics");
    let (garbage, restarting) = (server.urls[1].clone(), 2);
    let mut targets = server.urls.clone();
    targets.push(down.url.clone());
    let mut scraper = Scraper::new(scrape_config(targets, 2.0));

    let answering = [0, 2];
    let mut history: Vec<Around> = Vec::new();
    let mut every = tokio::time::interval(Duration::from_millis(500));
    let mut poll_secs: Vec<f64> = Vec::new();
    for i in 0..POLLS {
        every.tick().await;
        let reset: Vec<usize> = if i == RESTART_BEFORE {
            server.restart(restarting);
            vec![restarting]
        } else {
            vec![]
        };
        let before = truth(&server);
        let started = Instant::now();
        let signals = scraper.poll(SystemTime::now()).await.expect("two pods answer");
        poll_secs.push(started.elapsed().as_secs_f64());
        let after = truth(&server);
        let cur = Around { before, after };
        assert_eq!(
            (scraper.last_round.targets, scraper.last_round.answered),
            (4, 2),
            "poll {i}: 4 targets, pods 0 and 2 answer"
        );

        let (lo, hi) = gauge_bracket(&cur, &answering);
        assert_within("concurrency", i, signals.get(Signal::Concurrency), (lo, hi), &signals);
        assert_within("running", i, signals.get(Signal::Running), (lo, hi), &signals);
        assert_eq!(signals.get(Signal::QueueDepth), Some(0.0), "poll {i}: nothing queues");
        let kv = signals.get(Signal::KvCacheUsage).unwrap_or_else(|| panic!("poll {i}: no kv_cache_usage"));
        assert!(kv > 0.0 && kv <= 1.0, "poll {i}: kv_cache_usage {kv}");

        match history.last() {
            None => {
                for s in [Signal::RequestRate, Signal::PromptTokensRate, Signal::GenerationTokensRate] {
                    assert_eq!(signals.get(s), None, "first poll: no {s} from a single reading");
                }
            }
            Some(prev) => {
                let counters: [(Signal, Counter); 3] = [
                    (Signal::RequestRate, |p| p.success),
                    (Signal::PromptTokensRate, |p| p.prompt),
                    (Signal::GenerationTokensRate, |p| p.generation),
                ];
                for (s, c) in counters {
                    let b = rate_bracket(prev, &cur, &answering, &reset, c);
                    assert_within(s.as_str(), i, signals.get(s), b, &signals);
                }
                // Sanity: the whole fleet's arrivals, two pods of three answering.
                let rr = signals.get(Signal::RequestRate).unwrap();
                assert!(rr < 30.0 * 2.0, "poll {i}: request_rate {rr} is a spike");
            }
        }
        for s in [Signal::TtftP50, Signal::TtftP99, Signal::E2eP50, Signal::E2eP99] {
            if let Some(v) = signals.get(s) {
                assert!(v.is_finite() && v > 0.0, "poll {i}: {s} = {v}");
            }
        }
        history.push(cur);
    }

    let mut expected = BTreeMap::new();
    expected.insert((garbage.clone(), TargetError::Parse), POLLS as u64);
    expected.insert((down.url.clone(), TargetError::Unreachable), POLLS as u64);
    assert_eq!(scraper.errors, expected, "errors by (target, kind); the restarted pod is not an error");
    eprintln!("poll durations (s): {poll_secs:.3?}");

    // Nothing answers: the poll fails, naming how many targets it tried.
    let mut hopeless = Scraper::new(scrape_config(vec![garbage.clone(), down.url.clone()], 2.0));
    match hopeless.poll(SystemTime::now()).await {
        Err(SourceError::NoTargetAnswered(2)) => {}
        other => panic!("expected NoTargetAnswered(2), got {other:?}"),
    }
    assert_eq!((hopeless.last_round.targets, hopeless.last_round.answered), (2, 0));
    assert_eq!(hopeless.errors.len(), 2);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_targets_are_resolved_and_scraped() {
    let shutdown = CancellationToken::new();
    let server = start_fleet(1, 10.0, 30.0, &shutdown).await;
    let port: u16 =
        server.urls[0].trim_start_matches("http://127.0.0.1:").trim_end_matches("/metrics").parse().unwrap();
    let mut config = scrape_config(vec![], 2.0);
    config.dns = Some(DnsTargets { name: "localhost".into(), port, path: "/metrics".into(), scheme: "http".into() });
    let mut scraper = Scraper::new(config);

    let first = scraper.poll(SystemTime::now()).await.expect("127.0.0.1 answers");
    let (n, ok) = (scraper.last_round.targets, scraper.last_round.answered);
    assert!(n >= 1 && ok >= 1, "localhost resolved to {n} targets, {ok} answered");
    assert!(first.get(Signal::Concurrency).is_some_and(|c| c > 0.0), "{first:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = scraper.poll(SystemTime::now()).await.expect("127.0.0.1 answers");
    assert!(second.get(Signal::RequestRate).is_some(), "a rate from the second reading: {second:?}");
    // The pods listen on 127.0.0.1 only: any other address of localhost (::1) is unreachable.
    for (target, kind) in scraper.errors.keys() {
        assert!(!target.starts_with("http://127.0.0.1:"), "{target} failed: {kind:?}");
        assert_eq!(*kind, TargetError::Unreachable, "{target}");
    }
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_metrics_slow_pods_and_http_errors_are_told_apart() {
    use axum::{http::StatusCode, routing::get, Router};
    let shutdown = CancellationToken::new();
    let server = start_fleet(1, 10.0, 30.0, &shutdown).await;
    let app = Router::new()
        .route("/go", get(|| async { "# TYPE go_goroutines gauge\ngo_goroutines 12\n" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
            }),
        )
        .route("/broken", get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let sd = shutdown.clone();
    tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(sd.cancelled_owned()).await });

    let (go, slow, broken) = (format!("{base}/go"), format!("{base}/slow"), format!("{base}/broken"));
    let targets = vec![go.clone(), slow.clone(), broken.clone(), server.urls[0].clone()];
    let mut scraper = Scraper::new(scrape_config(targets, 0.4));
    let started = Instant::now();
    let signals = scraper.poll(SystemTime::now()).await.expect("the sim pod answers");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "the slow pod held the round for {took:?} (timeout 0.4 s)");
    assert_eq!((scraper.last_round.targets, scraper.last_round.answered), (4, 1));
    assert!(signals.get(Signal::Concurrency).is_some_and(|c| c > 0.0), "{signals:?}");
    let expected: BTreeMap<_, _> =
        [((go, TargetError::NoKnownMetrics), 1), ((slow, TargetError::Timeout), 1), ((broken, TargetError::Status), 1)]
            .into_iter()
            .collect();
    assert_eq!(scraper.errors, expected);
    shutdown.cancel();
}

/// The real binary logs a failed target (which one, and why) and goes on
/// deciding from the pods that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_logs_a_down_target_and_keeps_deciding() {
    let shutdown = CancellationToken::new();
    let server = start_fleet(1, 10.0, 30.0, &shutdown).await;
    let down = common::ClosedPort::new("/metrics");
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "grpc: {{listen: 127.0.0.1:0}}\n\
         http: {{listen: 127.0.0.1:0}}\n\
         tick_interval_secs: 0.2\n\
         log_every_decision: true\n\
         store: {{path: null}}\n\
         workloads:\n\
         \x20 - name: llama\n\
         \x20   namespace: inference\n\
         \x20   model: llama-3.1-8b-h100\n\
         \x20   target: {{signal: concurrency}}\n\
         \x20   source: {{scrape: {{targets: [\"{}\", \"{}\"], interval_secs: 0.2, timeout_secs: 1}}}}\n",
        server.urls[0], down.url
    );
    // Server::start blocks (waits for readiness) while this runtime serves the pod.
    let s = tokio::task::block_in_place(|| common::Server::start(dir.path(), &yaml));
    let quoted = format!("\"{}\"", down.url);
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        if let Some(l) = s.log_lines_with(&["\"message\":\"scrape failed\"", &quoted]).pop() {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "no `scrape failed` line for {}; log:\n{}",
            down.url,
            s.log_lines_with(&[]).join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["level"], "WARN", "{line}");
    assert_eq!(v["error"], "unreachable", "{line}");

    // It keeps deciding with one target down: three more decisions (0.2 s ticks), waited for, not slept for.
    let decisions = || s.log_lines_with(&["\"message\":\"decision\"", "inference/llama"]).len();
    let before = decisions();
    let deadline = Instant::now() + Duration::from_secs(10);
    while decisions() < before + 3 {
        assert!(Instant::now() < deadline, "no three decisions in 10 s after {before}: {}", decisions());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(common::http_status(s.http, "/readyz"), Some(200));
    // One pod answering is a good poll: the round never failed as a whole.
    assert!(s.log_lines_with(&["poll failed"]).is_empty(), "{:?}", s.log_lines_with(&["poll failed"]));
    assert!(s.log_lines_with(&["panicked"]).is_empty());
    let failed = s.log_lines_with(&["\"message\":\"scrape failed\""]);
    assert!(failed.iter().all(|l| l.contains(&quoted)), "only the down target fails: {failed:?}");
    drop(s);
    shutdown.cancel();
}
