//! Foresight at scale against a real Prometheus: N workloads (default 10,000),
//! each a Prometheus source polled every 30 s, with weeks of history in the store.
//!
//! In-process simulated vLLM pods (two per model, `model_name="m<i>"`, up to
//! `--models-per-target` models per scrape target) serve the families the
//! default queries read, their demand a smooth per-model curve (counters its
//! exact integral); the Debian `prometheus` scrapes them every 15 s. The
//! history store is pre-filled with `--history-weeks` of each workload's
//! `concurrency`, then `foresight serve` (this crate's release binary, built by
//! `cargo bench`) starts and, over `--minutes` after start-up, the bench
//! measures: time to every decision and every forecast, Prometheus queries per
//! poll, poll duration, Prometheus CPU before and with Foresight, Foresight's
//! CPU and memory, refits and forecast age, and GetMetrics latency at the rate
//! KEDA would call (every workload once per 30 s, spread evenly).
//!
//! `cargo bench --bench scale -- [--workloads N] [--minutes M] [--history-weeks W]`
//! and `--backfill-days` (W*7), `--baseline-secs` (60), `--forecast-wait-mins` (5:
//! how long after every decision to wait for every forecast before measuring),
//! `--startup-timeout-mins` (15), `--models-per-target` (1000).
//! Quick try: `-- --workloads 200 --minutes 3 --history-weeks 1` (about 10 minutes).
//! At 10,000 x 5 weeks the store file is ~2 GB and Prometheus holds ~1 M series.
//! FORESIGHT_SCALE_KEEP=1 keeps the temporary directory (configs, logs, data).

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    io::{BufRead, BufReader, Write as _},
    net::SocketAddr,
    os::unix::process::CommandExt,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant, UNIX_EPOCH},
};

use foresight::{
    proto::{external_scaler_client::ExternalScalerClient, GetMetricsRequest, ScaledObjectRef},
    store::{Store, StoreConfig},
};
use hdrhistogram::Histogram;

#[path = "scale/exporter.rs"]
mod exporter;
use exporter::{model, now_unix, start_exporter};
use serde::Deserialize;

const POLL_SECS: f64 = 30.0;
const NS: &str = "bench";
const OPTIONS: [(&str, f64); 8] = [
    ("workloads", 10_000.0),
    ("minutes", 10.0),
    ("history-weeks", 5.0),
    ("backfill-days", -1.0), // -1: history-weeks * 7
    ("baseline-secs", 60.0),
    ("forecast-wait-mins", 5.0),
    ("startup-timeout-mins", 15.0),
    ("models-per-target", 1000.0),
];

/// `--name value` pairs (cargo's own `--bench` skipped), defaults from [`OPTIONS`].
fn options() -> HashMap<&'static str, f64> {
    let mut o: HashMap<&'static str, f64> = OPTIONS.into_iter().collect();
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(k) = it.next() {
        let Some(&(key, _)) = OPTIONS.iter().find(|(n, _)| k.strip_prefix("--") == Some(n)) else {
            panic!("unknown argument `{k}`; options: {:?}", OPTIONS.map(|o| o.0))
        };
        let v = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        o.insert(key, v.parse().unwrap_or_else(|_| panic!("{k}: `{v}` is not a number")));
    }
    assert!(o["workloads"] >= 1.0 && o["minutes"] > 0.0 && o["models-per-target"] >= 1.0, "must be positive");
    o
}

// ---- Child processes: stopped on drop (also on panic), killed by the kernel if this process dies.

struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in self.0.iter_mut().rev() {
            // SAFETY: signals a child this process started and has not reaped. SIGTERM: Foresight flushes.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let t = Instant::now();
            while c.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(15) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill().and_then(|_| c.wait());
        }
    }
}

fn spawn(cmd: &mut Command) -> Child {
    // SAFETY: prctl is async-signal-safe; the child gets SIGKILL if the thread that started it ends.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    };
    cmd.spawn()
        .unwrap_or_else(|e| panic!("starting {:?}: {e} (prometheus: Debian package `prometheus`)", cmd.get_program()))
}

/// User + system CPU seconds of a process (`/proc/<pid>/stat`) or thread (`/proc/<pid>/task/<tid>/stat`).
fn stat_cpu(path: &str) -> f64 {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let f: Vec<&str> = s.rsplit_once(") ").map(|(_, r)| r.split(' ').collect()).unwrap_or_default();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    (field(11) + field(12)) / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// CPU seconds of the whole process, and of its forecast worker threads (`foresight-refit*`).
fn cpu_secs(pid: u32) -> (f64, f64) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let refit = tasks
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("foresight-refit")))
        .map(|t| stat_cpu(&t.path().join("stat").to_string_lossy()))
        .sum();
    (stat_cpu(&format!("/proc/{pid}/stat")), refit)
}

/// VmRSS and VmHWM in MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |k: &str| s.lines().find_map(|l| l.strip_prefix(k)?.trim().strip_suffix("kB")?.trim().parse::<f64>().ok());
    (kb("VmRSS:").unwrap_or(0.0) / 1024.0, kb("VmHWM:").unwrap_or(0.0) / 1024.0)
}

// ---- Reading exposition bodies (Prometheus's and Foresight's own /metrics).

/// (name, labels, value) of every sample line.
fn samples(body: &str) -> impl Iterator<Item = (&str, &str, f64)> {
    body.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).filter_map(|l| {
        let (name, labels, rest) = match (l.find('{'), l.rfind('}')) {
            (Some(a), Some(b)) if a < b => (&l[..a], &l[a + 1..b], &l[b + 1..]),
            _ => l.split_once(' ').map(|(n, r)| (n, "", r))?,
        };
        Some((name, labels, rest.split_whitespace().next()?.parse().ok()?))
    })
}

/// Sum of `name`'s samples whose labels contain every one of `want`; None if there is none.
fn metric(body: &str, name: &str, want: &[&str]) -> Option<f64> {
    samples(body).filter(|(n, l, _)| *n == name && want.iter().all(|w| l.contains(w))).map(|s| s.2).reduce(|a, b| a + b)
}

/// How much `name` (filtered as in [`metric`]) grew from body `b0` to `b1`.
fn delta(name: &str, want: &[&str], b0: &str, b1: &str) -> Option<f64> {
    Some(metric(b1, name, want)? - metric(b0, name, want).unwrap_or(0.0))
}

/// Quantile `q` of a histogram's observations between two bodies, interpolated as `histogram_quantile` does.
fn bucket_quantile(name: &str, b0: &str, b1: &str, q: f64) -> Option<f64> {
    let bucket = format!("{name}_bucket"); // exposed in increasing `le`, +Inf last
    let d: Vec<(f64, f64)> = (samples(b1).filter(|(n, ..)| *n == bucket))
        .filter_map(|(_, l, c)| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let before = metric(b0, &bucket, &[&format!("le=\"{le}\"")]).unwrap_or(0.0);
            Some((le.parse().unwrap_or(f64::INFINITY), c - before))
        })
        .collect();
    let rank = q * d.last()?.1;
    let i = d.iter().position(|b| b.1 >= rank && b.1 > 0.0)?;
    let (lo, below) = if i == 0 { (0.0, 0.0) } else { d[i - 1] };
    Some(if d[i].0.is_infinite() { lo } else { lo + (d[i].0 - lo) * (rank - below) / (d[i].1 - below).max(1e-9) })
}

// ---- Foresight's API: only the fields read here.

#[derive(Deserialize)]
struct List {
    workloads: Vec<Wl>,
}
#[derive(Deserialize)]
struct Wl {
    name: String,
    metrics: HashMap<String, String>, // the metric names, `replicas` and `load`
    decision: Option<serde::de::IgnoredAny>,
    forecast: Option<Fc>,
    forecast_error: Option<String>,
}
#[derive(Deserialize)]
struct Fc {
    fitted_at: String,
}

async fn get(web: &reqwest::Client, url: &str) -> Option<(u16, String)> {
    let r = web.get(url).send().await.ok()?;
    Some((r.status().as_u16(), r.text().await.ok()?))
}

async fn text(web: &reqwest::Client, url: &str) -> String {
    get(web, url).await.map(|r| r.1).unwrap_or_default()
}

/// The workload list, its size in bytes and how long the GET took.
async fn workloads(web: &reqwest::Client, http: SocketAddr) -> (Vec<Wl>, usize, f64) {
    let t = Instant::now();
    let r = web.get(format!("http://{http}/api/v1/workloads")).send().await.expect("GET /api/v1/workloads");
    let body = r.bytes().await.expect("workloads body");
    let (len, secs) = (body.len(), t.elapsed().as_secs_f64());
    let list = tokio::task::spawn_blocking(move || serde_json::from_slice::<List>(&body).expect("workload list"));
    (list.await.unwrap().workloads, len, secs)
}

async fn prom_query(web: &reqwest::Client, prom: &str, q: &str) -> Option<f64> {
    let r = web.get(format!("{prom}/api/v1/query")).query(&[("query", q)]).send().await.ok()?;
    let v: serde_json::Value = r.json().await.ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

fn main() {
    let o = options();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run(o));
}

async fn run(o: HashMap<&'static str, f64>) {
    let (n, weeks, per_target) = (o["workloads"] as usize, o["history-weeks"] as u64, o["models-per-target"] as usize);
    let dir = tempfile::Builder::new().prefix("foresight-scale-").tempdir().unwrap();
    let path = |f: &str| dir.path().join(f);
    let mut kids = Children(Vec::new());
    let web = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    let t_start = Instant::now();
    let log = move |s: String| eprintln!("[scale {:>5.0} s] {s}", t_start.elapsed().as_secs_f64());

    // 1-2. The pods, and Prometheus scraping them and itself.
    let targets = start_exporter(n, per_target);
    let prom_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let prom = format!("http://127.0.0.1:{prom_port}");
    let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    let yml = format!(
        "global: {{scrape_interval: 15s, scrape_timeout: 10s}}\nscrape_configs:\n  - job_name: vllm\n    static_configs: [{{targets: [{}]}}]\n  - job_name: prometheus\n    static_configs: [{{targets: ['127.0.0.1:{prom_port}']}}]\n",
        list.join(", ")
    );
    std::fs::write(path("prometheus.yml"), yml).unwrap();
    kids.0.push(spawn(
        Command::new("prometheus")
            .arg(format!("--config.file={}", path("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", path("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(path("prometheus.log")).unwrap()),
    ));
    let prom_pid = kids.0[0].id();
    let t = Instant::now();
    while get(&web, &format!("{prom}/-/ready")).await.map(|r| r.0) != Some(200) {
        assert!(t.elapsed() < Duration::from_secs(120), "Prometheus not ready in 2 minutes");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    log(format!("Prometheus ready; {} scrape targets of up to {per_target} models", targets.len()));

    // 3. History of every workload's target signal, written while Prometheus takes its first scrapes.
    let retention_days = (weeks * 7 + 1).max(35);
    let mut prefill = None;
    if weeks > 0 {
        let retention = Duration::from_secs(retention_days * 86_400);
        let store = Store::open(StoreConfig { path: Some(path("history.redb")), retention, ..StoreConfig::default() });
        let (store, buckets, t) = (store.unwrap(), weeks as usize * 7 * 1440, Instant::now());
        let start = (now_unix() / 60.0).floor() * 60.0 - buckets as f64 * 60.0;
        let mut values = vec![0.0; buckets];
        for i in 0..n {
            let m = model(i);
            for (b, v) in values.iter_mut().enumerate() {
                *v = m.concurrency(start + b as f64 * 60.0 + 30.0).round();
            }
            let at = UNIX_EPOCH + Duration::from_secs_f64(start);
            store.backfill(&format!("{NS}/m{i}/concurrency"), at, &values).unwrap();
        }
        drop(store);
        let bytes = std::fs::metadata(path("history.redb")).map_or(0, |m| m.len());
        prefill = Some((buckets, t.elapsed().as_secs_f64(), bytes as f64));
    }

    // Every pod series scraped twice (rates need two samples), then Prometheus's CPU while it only scrapes.
    let t = Instant::now();
    let scraped_twice = "count(count_over_time(vllm:num_requests_running[10m]) >= 2)";
    while prom_query(&web, &prom, scraped_twice).await < Some((2 * n) as f64) {
        assert!(t.elapsed() < Duration::from_secs(300), "Prometheus did not scrape every pod twice in 5 minutes");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let pm = text(&web, &format!("{prom}/metrics")).await;
    let head_series = metric(&pm, "prometheus_tsdb_head_series", &[]).unwrap_or(0.0);
    log(format!("every pod scraped twice; {head_series} head series; baseline for {} s", o["baseline-secs"]));
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(o["baseline-secs"])).await;
    let pm1 = text(&web, &format!("{prom}/metrics")).await;
    let prom_base = delta("process_cpu_seconds_total", &[], &pm, &pm1).unwrap_or(f64::NAN) / t.elapsed().as_secs_f64();

    // 4. Foresight.
    let backfill_days = if o["backfill-days"] < 0.0 { weeks as f64 * 7.0 } else { o["backfill-days"] };
    let mut y = format!(
        "grpc: {{listen: 127.0.0.1:0}}\nhttp: {{listen: 127.0.0.1:0}}\nstore: {{path: history.redb, resolution_secs: 60, retention_days: {retention_days}}}\nworkloads:\n"
    );
    for i in 0..n {
        let _ = writeln!(
            y,
            "  - {{name: m{i}, namespace: {NS}, model: llama-3.1-8b-h100, max_replicas: 64, target: {{signal: concurrency}}, source: {{prometheus: {{url: '{prom}', selector: 'model_name=\"m{i}\"', interval_secs: {POLL_SECS}, backfill_days: {backfill_days}}}}}}}"
        );
    }
    std::fs::write(path("foresight.yaml"), y).unwrap();
    let started = Instant::now();
    let mut child = spawn(
        Command::new(env!("CARGO_BIN_EXE_foresight"))
            .args(["--log-format", "json", "serve", "--config"])
            .arg(path("foresight.yaml"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let (pid, stderr) = (child.id(), child.stderr.take().unwrap());
    kids.0.push(child);
    // Its log goes to a file; warnings and errors are counted by message.
    let warnings: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let (w, mut file) = (warnings.clone(), std::fs::File::create(path("foresight.log")).unwrap());
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(file, "{line}");
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            let f = if v["fields"].is_object() { &v["fields"] } else { &v };
            if f["message"] == "listening" {
                let addr = |k: &str| f[k].as_str().unwrap().parse::<SocketAddr>().unwrap();
                let _ = tx.send((addr("grpc"), addr("http")));
            }
            if v["level"] == "WARN" || v["level"] == "ERROR" {
                let msg = format!("{} {}", v["level"].as_str().unwrap_or(""), f["message"].as_str().unwrap_or(""));
                *w.lock().unwrap().entry(msg).or_default() += 1;
            }
        }
    });
    let (grpc, http) = rx.recv_timeout(Duration::from_secs(300)).expect("foresight serve did not start listening");
    log(format!("foresight serve listening (gRPC {grpc}, HTTP {http})"));

    // Start-up: every workload warmed up and decided (/readyz 200), then every one forecast (its count of those waiting 0).
    let ready_url = format!("http://{http}/readyz");
    let (mut decided, mut forecast, mut pending, mut last_log) = (None, None, usize::MAX, Instant::now());
    loop {
        let el = started.elapsed().as_secs_f64();
        if let Some((200, body)) = get(&web, &ready_url).await {
            decided.get_or_insert(el);
            pending = body.strip_prefix("ready; ").and_then(|r| r.split(' ').next()?.parse().ok()).unwrap_or(pending);
            if pending == 0 {
                forecast = Some(el);
                break;
            }
        }
        if decided.is_none() && el > o["startup-timeout-mins"] * 60.0 {
            log("not every workload decided within the start-up timeout; measuring anyway".into());
            break;
        }
        if decided.is_some_and(|d| el > d + o["forecast-wait-mins"] * 60.0) {
            break;
        }
        if last_log.elapsed() > Duration::from_secs(30) {
            last_log = Instant::now();
            let state = if decided.is_some() { format!("{pending} waiting for a forecast") } else { "deciding".into() };
            log(format!("start-up {el:.0} s: {state}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let startup_cpu = cpu_secs(pid);
    log("measuring".into());

    // 5. The window.
    let (list, ..) = workloads(&web, http).await;
    let mut seen: HashMap<String, String> =
        list.iter().filter_map(|w| Some((w.name.clone(), w.forecast.as_ref()?.fitted_at.clone()))).collect();
    let reqs: Vec<GetMetricsRequest> = (list.iter())
        .map(|w| {
            let md = [("scalerAddress", "foresight:6000"), ("workload", &w.name)];
            GetMetricsRequest {
                scaled_object_ref: Some(ScaledObjectRef {
                    name: w.name.clone(),
                    namespace: NS.into(),
                    scaler_metadata: md.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                }),
                metric_name: format!("s0-{}", w.metrics["replicas"]), // as KEDA names it
            }
        })
        .collect();
    let (fm0, pm0) =
        (text(&web, &format!("http://{http}/metrics")).await, text(&web, &format!("{prom}/metrics")).await);
    let cpu0 = cpu_secs(pid);
    let (w0, window) = (Instant::now(), Duration::from_secs_f64(o["minutes"] * 60.0));

    // GetMetrics for every workload once per 30 s, evenly spread, over one connection as KEDA keeps.
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}")).unwrap().connect().await.unwrap();
    let hist = Arc::new(Mutex::new(Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap()));
    let errors: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let (h, e) = (hist.clone(), errors.clone());
    let load = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(POLL_SECS / reqs.len() as f64));
        let mut calls = Vec::new();
        for req in reqs.iter().cycle() {
            tick.tick().await;
            if w0.elapsed() >= window {
                break;
            }
            let (mut c, req, h, e) = (ExternalScalerClient::new(channel.clone()), req.clone(), h.clone(), e.clone());
            calls.push(tokio::spawn(async move {
                let t = Instant::now();
                match c.get_metrics(req).await {
                    Ok(_) => drop(h.lock().unwrap().record(t.elapsed().as_micros().clamp(1, 60_000_000) as u64)),
                    Err(s) => *e.lock().unwrap().entry(format!("{:?}", s.code())).or_default() += 1,
                }
            }));
        }
        for c in calls {
            let _ = c.await;
        }
    });

    // Refits: a changed fitted_at in the list (read every minute) is a finished fit.
    let (mut fits, mut next_list, mut last, mut list_cost): (_, _, Vec<Wl>, (usize, f64));
    (fits, next_list) = (0, w0 + Duration::from_secs(60));
    loop {
        let done = w0.elapsed() >= window;
        if !done {
            tokio::time::sleep(Duration::from_secs(5).min(window.saturating_sub(w0.elapsed()))).await;
        }
        if forecast.is_none() && decided.is_some() {
            if let Some((200, body)) = get(&web, &ready_url).await {
                forecast = body.starts_with("ready; 0 ").then(|| started.elapsed().as_secs_f64());
            }
        }
        if !done && Instant::now() < next_list {
            continue;
        }
        next_list += Duration::from_secs(60);
        let (l, bytes, secs) = workloads(&web, http).await;
        (last, list_cost) = (l, (bytes, secs));
        for (w, f) in last.iter().filter_map(|w| Some((w, w.forecast.as_ref()?))) {
            fits += usize::from(seen.insert(w.name.clone(), f.fitted_at.clone()).as_ref() != Some(&f.fitted_at));
        }
        log(format!("window {:.0} s: {fits} fits so far", w0.elapsed().as_secs_f64()));
        if done {
            break;
        }
    }
    let took = w0.elapsed().as_secs_f64();
    let cpu1 = cpu_secs(pid);
    let (fm1, pm1) =
        (text(&web, &format!("http://{http}/metrics")).await, text(&web, &format!("{prom}/metrics")).await);
    let ((rss, hwm), (prss, _)) = (rss_mib(pid), rss_mib(prom_pid));
    let _ = load.await;

    // 6. Figures.
    macro_rules! row {
        ($k:expr, $($f:tt)*) => { println!("| {} | {} |", $k, format!($($f)*)) };
    }
    let (polls, per) = (took / POLL_SECS, |q: f64| format!("{:.1} ({:.3} per workload)", q, q / n as f64));
    println!("\nForesight at scale: {n} workloads, {:.1}-minute window, {weeks} weeks of history\n", took / 60.0);
    println!("| measure | value |\n|---|---|");
    row!("workloads", "{n}, Prometheus source every {POLL_SECS} s, default signals, backfill_days {backfill_days}");
    row!("Prometheus", "{} scrape targets every 15 s, {head_series} head series", targets.len());
    if let Some((buckets, secs, bytes)) = prefill {
        let pts = (n * buckets) as f64;
        let rate = pts / secs / 1e6;
        row!("history pre-fill", "{n} series x {buckets} buckets in {secs:.1} s ({rate:.1} M points/s)");
        row!("history file", "{:.0} MiB ({:.2} bytes/point)", bytes / 1048576.0, bytes / pts);
    }
    let dec = decided.map_or("not reached".into(), |d| format!("{d:.1} s"));
    // /readyz 200: every workload's history loaded, its first forecast in (or first_fit_wait_secs passed), decided.
    row!("start-up: every workload ready (warmed up and decided)", "{dec}");
    let missing = last.iter().filter(|w| w.forecast.is_none()).count();
    let fc =
        forecast.map_or(format!("not reached ({missing} of {n} still without at the end)"), |f| format!("{f:.1} s"));
    row!("start-up: every workload forecast", "{fc}");
    row!("Foresight CPU from start to the window", "{:.1} s ({:.1} s forecast worker)", startup_cpu.0, startup_cpu.1);
    for k in ["instant", "range"] {
        let q = delta("foresight_prometheus_queries_total", &[&format!("kind=\"{k}\"")], &fm0, &fm1);
        let q = q.map_or("n/a: no foresight_prometheus_queries_total".into(), |q| per(q / polls));
        row!(format!("queries per poll, {k} (Foresight's count)"), "{q}");
    }
    for h in ["/api/v1/query", "/api/v1/query_range"] {
        let q = delta("prometheus_http_requests_total", &[&format!("handler=\"{h}\"")], &pm0, &pm1).unwrap_or(0.0);
        row!(format!("queries per poll, {h} (Prometheus's count)"), "{}", per(q / polls));
    }
    // A histogram of Foresight's over the window: mean, p99 and count.
    let histogram =
        |h: &str| match (delta(&format!("{h}_sum"), &[], &fm0, &fm1), delta(&format!("{h}_count"), &[], &fm0, &fm1)) {
            (Some(s), Some(c)) if c > 0.0 => {
                let p99 = bucket_quantile(h, &fm0, &fm1, 0.99).unwrap_or(f64::NAN);
                format!("mean {:.3} s, p99 {p99:.3} s ({c:.0} observations)", s / c)
            }
            _ => format!("n/a: no {h} observations"),
        };
    row!("poll duration (one poll of every workload)", "{}", histogram("foresight_prometheus_poll_duration_seconds"));
    let prom_cpu = delta("process_cpu_seconds_total", &[], &pm0, &pm1).unwrap_or(f64::NAN) / took;
    row!("Prometheus CPU, scraping only (before Foresight)", "{prom_base:.3} cores");
    row!("Prometheus CPU, with Foresight", "{prom_cpu:.3} cores (+{:.3} for the queries)", prom_cpu - prom_base);
    row!("Prometheus RSS at the end", "{prss:.0} MiB");
    let (fcpu, rcpu) = ((cpu1.0 - cpu0.0) / took, (cpu1.1 - cpu0.1) / took);
    row!("Foresight CPU", "{fcpu:.3} cores ({rcpu:.3} of them the forecast worker threads)");
    row!("Foresight RSS at the end", "{rss:.1} MiB (peak {hwm:.1} MiB)");
    row!("forecasts with a new fitted_at in the window", "{fits} ({:.1} per minute)", fits as f64 / (took / 60.0));
    for outcome in ["ok", "error"] {
        let done = delta("foresight_refits_total", &[&format!("outcome=\"{outcome}\"")], &fm0, &fm1).or(metric(
            &fm1,
            "foresight_refits_total",
            &[],
        )
        .map(|_| 0.0));
        let per_min = done
            .map_or("n/a: no foresight_refits_total".into(), |d| format!("{d:.0} ({:.1} per minute)", d / took * 60.0));
        row!(format!("fits finished in the window, {outcome} (Foresight's count)"), "{per_min}");
    }
    row!("refit lag (due grid point to result)", "{}", histogram("foresight_refit_lag_seconds"));
    let waiting = metric(&fm1, "foresight_refit_waiting", &[]).map_or("n/a".into(), |w| format!("{w:.0}"));
    row!("fits waiting for a worker at the end", "{waiting}");
    let now = now_unix();
    let age = |f: &Fc| chrono::DateTime::parse_from_rfc3339(&f.fitted_at).map(|t| now - t.timestamp() as f64).ok();
    let mut ages: Vec<f64> = last.iter().filter_map(|w| age(w.forecast.as_ref()?)).collect();
    ages.sort_by(f64::total_cmp);
    let pct = |q: f64| ages.get(((ages.len() as f64 * q).ceil() as usize).max(1) - 1).copied().unwrap_or(f64::NAN);
    let (a50, a99, amax) = (pct(0.5), pct(0.99), pct(1.0));
    row!("forecast age at the end (now - fitted_at)", "p50 {a50:.0} s, p99 {a99:.0} s, max {amax:.0} s");
    let errs = last.iter().filter(|w| w.forecast.is_none() && w.forecast_error.is_some()).count();
    row!("workloads without a forecast at the end", "{missing} ({errs} with a forecast_error)");
    row!("workloads without a decision at the end", "{}", last.iter().filter(|w| w.decision.is_none()).count());
    row!("GET /api/v1/workloads", "{:.2} MB in {:.0} ms", list_cost.0 as f64 / 1e6, list_cost.1 * 1e3);
    let (h, e) = (hist.lock().unwrap(), errors.lock().unwrap());
    let (p50, p99, max) = (h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max());
    let (rate, ok) = (n as f64 / POLL_SECS, h.len());
    row!(format!("GetMetrics at {rate:.1}/s"), "p50 {p50} us, p99 {p99} us, max {max} us; {ok} ok, errors {e:?}");
    println!("\nForesight's warnings and errors (message: count): {:?}", warnings.lock().unwrap());
    let examples: Vec<&String> = last.iter().filter_map(|w| w.forecast_error.as_ref()).take(3).collect();
    if !examples.is_empty() {
        println!("forecast_error examples: {examples:?}");
    }
    drop(kids);
    if std::env::var_os("FORESIGHT_SCALE_KEEP").is_some() {
        println!("kept {} (configs, logs, history, Prometheus data)", dir.keep().display());
    }
}
