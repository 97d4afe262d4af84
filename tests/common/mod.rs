//! Helpers shared by the black-box tests: run the real `foresight` binary
//! with a config, learn its bound addresses from its JSON log, stop it.
#![allow(dead_code)]

pub mod tools;
pub mod vllm_pod;

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// The status code of `GET path` on `addr` (plain HTTP/1.0), if it answered.
pub fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    http(addr, path)?.0.parse().ok()
}

/// The body of `GET path` on `addr` (plain HTTP/1.0) when it answered 200.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let (status, body) = http(addr, path)?;
    (status == "200").then_some(body)
}

/// `GET path` on `addr` over plain HTTP/1.0: the status code as written, and the body.
fn http(addr: SocketAddr, path: &str) -> Option<(String, String)> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    c.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((buf.as_str(), ""));
    Some((head.split_whitespace().nth(1)?.to_string(), body.to_string()))
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_foresight"))
}

/// Runs `foresight ARGS` to the end: (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A running `foresight serve`.
pub struct Server {
    pub child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub config: PathBuf,
    /// Every log line so far.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Start `foresight serve --config <dir>/foresight.yaml` with `yaml`.
    pub fn start(dir: &Path, yaml: &str) -> Server {
        Server::start_with_env(dir, yaml, &[])
    }

    /// Wait until `/readyz` answers 200: every workload has a decision.
    pub fn wait_ready(&self, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if http_status(self.http, "/readyz") == Some(200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("foresight never became ready; log:\n{}", self.log.lock().unwrap().join("\n"));
    }

    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status().unwrap();
        assert!(ok.success());
    }

    /// Wait for a log line containing `needle`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self.log.lock().unwrap().iter().find(|l| l.contains(needle)) {
                return l.clone();
            }
            if start.elapsed() > timeout {
                panic!("no log line with {needle:?}; log:\n{}", self.log.lock().unwrap().join("\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for exit; None if it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three workloads with known answers (see the file), `{{METRICS}}` unfilled.
pub const KNOWN_ANSWERS: &str = include_str!("../fixtures/known-answers.yaml");

/// The known-answers config pointing at [`fake_vllm`].
pub fn known_answers() -> String {
    KNOWN_ANSWERS.replace("{{METRICS}}", &fake_vllm())
}

/// Base URL of a server (started once per test binary) that serves the
/// fixed vLLM bodies in `tests/fixtures/fake-vllm/`.
pub fn fake_vllm() -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-vllm");
                let app = axum::Router::new().route(
                    "/{file}",
                    axum::routing::get(move |axum::extract::Path(file): axum::extract::Path<String>| {
                        let path = dir.join(file.replace('/', ""));
                        async move { std::fs::read_to_string(path).unwrap_or_default() }
                    }),
                );
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(format!("http://{}", l.local_addr().unwrap())).unwrap();
                axum::serve(l, app).await.unwrap();
            });
        });
        rx.recv().unwrap()
    })
    .clone()
}

/// Test PKI written to `dir`: `ca.pem`, `server.{pem,key}` (for 127.0.0.1 and
/// localhost), `client.{pem,key}` signed by the CA, and `rogue.{pem,key}`, a
/// client certificate from a CA the server does not trust.
pub fn write_pki(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let ca_for = |cn: &str| {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
    };
    let ca = ca_for("foresight test CA");
    let rogue_ca = ca_for("rogue CA");
    let leaf = |names: Vec<String>, issuer: &CertifiedIssuer<'_, KeyPair>, name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names).unwrap().signed_by(&key, issuer).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    };
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    leaf(vec!["localhost".into(), "127.0.0.1".into()], &ca, "server");
    leaf(vec!["keda-operator".into()], &ca, "client");
    leaf(vec!["keda-operator".into()], &rogue_ca, "rogue");
}

/// An in-memory store holding the readings the known-answers sources serve.
pub fn store_with_known_readings() -> std::sync::Arc<foresight::store::Store> {
    let store = foresight::store::Store::open(foresight::store::StoreConfig::default()).unwrap();
    let now = std::time::SystemTime::now();
    for (series, v) in [
        ("inference/llama-8b/concurrency", 100.0),
        ("inference/llama-8b/queue_depth", 40.0),
        ("inference/idle/concurrency", 0.0),
        ("inference/fractional/kv_cache_usage", 0.3),
    ] {
        store.set_latest(series, now, v);
    }
    std::sync::Arc::new(store)
}

impl Server {
    /// [`Server::start`] with extra environment for the child (set after
    /// `RUST_LOG`, so `("RUST_LOG", "...")` overrides the default filter).
    pub fn start_with_env(dir: &Path, yaml: &str, env: &[(&str, &str)]) -> Server {
        let server = Server::spawn(dir, yaml, env);
        // Generous: a workload waits for its first forecast (up to forecast.first_fit_wait_secs) before it answers.
        server.wait_ready(Duration::from_secs(120));
        server
    }

    /// Start `foresight serve` and wait until it listens, not until it is ready
    /// (for servers whose HTTP port plain HTTP cannot reach: HTTPS, tokens).
    pub fn spawn(dir: &Path, yaml: &str, env: &[(&str, &str)]) -> Server {
        let config = dir.join("foresight.yaml");
        std::fs::write(&config, yaml).unwrap();
        let mut cmd = Command::new(bin());
        cmd.args(["--log-format", "json", "serve", "--config"])
            .arg(&config)
            .env("RUST_LOG", std::env::var("FORESIGHT_TEST_RUST_LOG").unwrap_or_else(|_| "info".into()));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn foresight");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    if v["message"] == "listening" {
                        let addr = |k: &str| v[k].as_str().unwrap().parse::<SocketAddr>().unwrap();
                        let _ = tx.send((addr("grpc"), addr("http")));
                    }
                }
                sink.lock().unwrap().push(line);
            }
        });
        let (grpc, http) = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!("foresight did not start listening; log:\n{}", log.lock().unwrap().join("\n"));
            }
        };
        Server { child, grpc, http, config, log }
    }

    /// Log lines so far that contain every one of `needles`.
    pub fn log_lines_with(&self, needles: &[&str]) -> Vec<String> {
        self.log.lock().unwrap().iter().filter(|l| needles.iter().all(|n| l.contains(n))).cloned().collect()
    }
}

/// A loopback URL on which nothing listens, for as long as the value lives:
/// the port is bound (so no other test can take it) but never listened on,
/// so connections are refused at once.
pub struct ClosedPort {
    _socket: tokio::net::TcpSocket,
    pub url: String,
}

impl ClosedPort {
    pub fn new(path: &str) -> ClosedPort {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let url = format!("http://{}{path}", socket.local_addr().unwrap());
        ClosedPort { _socket: socket, url }
    }
}

pub const KEY: &str = "inference/llama-8b";
pub const DAY: f64 = 86_400.0;

/// llama-8b with three days of a daily cycle in history and a forecast
/// fitted; an on-demand pool and a reserved one (one node) configured; `extra` edits the config.
pub fn forecast_ready(
    edit: impl Fn(String) -> String,
) -> (
    Arc<foresight::serve::state::Registry>,
    Arc<foresight::store::Store>,
    foresight::serve::engine::Engine,
    std::time::SystemTime,
) {
    let pools = "pools:
  - {name: h100-reserved, gpu_type: nvidia-h100-80gb, gpus_per_node: 8, capacity_type: reserved, provisioning_secs: 0}
  - {name: h100, gpu_type: nvidia-h100-80gb, gpus_per_node: 8, capacity_type: on-demand, price_per_node_hour: 98, provisioning_secs: 600}
reservations:
  - {name: block, pool: h100-reserved, nodes: 1, start: 2026-01-01T00:00:00Z, end: 2030-01-01T00:00:00Z}
workloads:";
    let yaml = edit(known_answers().replacen("workloads:", pools, 1));
    let settings = foresight::config::Settings::from_yaml(&yaml, "test", Path::new(".")).unwrap();
    let store = Arc::new(foresight::store::Store::open(Default::default()).unwrap());
    let registry = foresight::serve::state::Registry::new();
    let mut engine = foresight::serve::engine::Engine::new(&settings, registry.clone(), store.clone());
    // History up to a whole minute a little before the wall clock, so the history endpoint sees it.
    let now_secs = ((std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() / 60.0)
        .floor())
        * 60.0;
    let demand = |t: f64| 100.0 + 60.0 * (2.0 * std::f64::consts::PI * t / DAY).sin();
    let start = now_secs - 3.0 * DAY;
    let values: Vec<f64> = (0..3 * 1440).map(|i| demand(start + 60.0 * i as f64)).collect();
    let series = format!("{KEY}/concurrency");
    store.backfill(&series, std::time::UNIX_EPOCH + Duration::from_secs_f64(start), &values).unwrap();
    let now = std::time::UNIX_EPOCH + Duration::from_secs_f64(now_secs);
    store.set_latest(&series, now, demand(now_secs));
    // As the scrape collector records it: three pods answered.
    store.set_latest(&foresight::workload::pods_series(KEY), now, 3.0);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        engine.tick(now);
        // Done once a tick after the forecast sized the workload (reported in `shadow` in shadow mode).
        let done = registry.load().get(KEY).is_some_and(|s| {
            s.forecast.is_some() && (s.shadow.is_some() || s.decision.as_ref().is_some_and(|d| d.sizing.is_some()))
        });
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "no forecast in time");
        std::thread::sleep(Duration::from_millis(50));
    }
    (registry, store, engine, now)
}

/// `days` of per-minute history of `demand(t)` (t in unix seconds) ending at
/// `now_secs`, and the latest reading at `now_secs`: what a server that has
/// been recording for that long holds. Returns `now` as a `SystemTime`.
pub fn record_history(
    store: &foresight::store::Store,
    series: &str,
    now_secs: f64,
    days: f64,
    demand: impl Fn(f64) -> f64,
) -> std::time::SystemTime {
    let start = now_secs - days * 86_400.0;
    let values: Vec<f64> = (0..(days * 1440.0) as usize).map(|i| demand(start + 60.0 * i as f64)).collect();
    store.backfill(series, std::time::UNIX_EPOCH + Duration::from_secs_f64(start), &values).unwrap();
    let now = std::time::UNIX_EPOCH + Duration::from_secs_f64(now_secs);
    store.set_latest(series, now, demand(now_secs));
    now
}

/// A child process (a Prometheus, a VictoriaMetrics) killed when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port free a moment ago, for servers that take a port number.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Write a simulated fleet's past (its config in `fleet`, started at `origin`)
/// into the Prometheus TSDB at `tsdb` as blocks, sampled every 15 s up to
/// `to`, each pod labelled with its entry of `labels`: what Prometheus would
/// have scraped.
pub fn import_history(fleet: &Path, origin: f64, to: f64, labels: &[String], tsdb: &Path) {
    let om = fleet.with_extension("om");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&om).unwrap());
        foresight::cli::tools::sim_export(fleet, origin, origin, to, 15.0, labels, &mut out).unwrap();
    }
    let made = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(tsdb)
        .output()
        .unwrap();
    assert!(made.status.success(), "promtool: {}", String::from_utf8_lossy(&made.stderr));
}

/// A real Prometheus on loopback scraping `targets` (host:port) every second
/// into the TSDB at `tsdb` (which may already hold imported blocks), logging
/// to `dir`/prometheus.log; returns it once ready, and its port.
pub async fn start_prometheus(dir: &Path, tsdb: &Path, targets: &[String]) -> (Kill, u16) {
    let port = free_port();
    let cfg = dir.join("prometheus.yml");
    let quoted: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    std::fs::write(
        &cfg,
        format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 900ms}}\nscrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [{}]\n",
            quoted.join(", ")
        ),
    )
    .unwrap();
    let prom = Kill(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", tsdb.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=30d")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(dir.join("prometheus.log")).unwrap()))
            .spawn()
            .unwrap(),
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let started = Instant::now();
    while http_status(addr, "/-/ready") != Some(200) {
        assert!(started.elapsed() < Duration::from_secs(60), "Prometheus did not get ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (prom, port)
}
