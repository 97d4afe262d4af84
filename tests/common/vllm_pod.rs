//! Pods running vLLM 0.34.0's own metrics code (`scripts/vllm-fixture pod`,
//! see `tests/vllm_fixture/README.md`), and the truth each writes: one JSON
//! line per step with the time and every gauge and cumulative counter it
//! recorded through vLLM's `PrometheusStatLogger`.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

/// One pod; killed when dropped (and it exits by itself when the test
/// process dies, since its stdin closes).
pub struct VllmPod {
    child: Child,
    _stdin: Option<ChildStdin>,
    pub port: u16,
    truth: PathBuf,
}

impl VllmPod {
    /// Start `scripts/vllm-fixture pod ARGS`, its files under `dir/name.*`.
    pub fn start(dir: &Path, name: &str, args: &[&str]) -> VllmPod {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/vllm-fixture");
        let ready = dir.join(format!("{name}.ready.json"));
        let truth = dir.join(format!("{name}.truth.jsonl"));
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let mut child = Command::new(&script)
            .arg("pod")
            .args(["--port", "0", "--exit-on-stdin-close"])
            .arg("--ready-file")
            .arg(&ready)
            .arg("--truth")
            .arg(&truth)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        let stdin = child.stdin.take();
        // The first pod of a fresh clone fetches vLLM's wheel (a few seconds).
        let deadline = Instant::now() + Duration::from_secs(180);
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                let v: Value = serde_json::from_str(&text).unwrap();
                break v["port"].as_u64().unwrap() as u16;
            }
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
                panic!(
                    "vLLM fixture pod `{name}` exited ({status}) before serving; it needs the test venv \
                     (./scripts/test makes it) and PyPI once. Its log:\n{log}"
                );
            }
            assert!(Instant::now() < deadline, "vLLM fixture pod `{name}` not ready in time");
            std::thread::sleep(Duration::from_millis(50));
        };
        VllmPod { child, _stdin: stdin, port, truth }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every truth line so far.
    pub fn truth(&self) -> Truth {
        let f = std::fs::File::open(&self.truth).unwrap();
        let lines = BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            // The last line may be half written.
            .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
            .collect();
        Truth { lines }
    }
}

impl Drop for VllmPod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One pod's truth lines, in time order.
pub struct Truth {
    pub lines: Vec<Value>,
}

impl Truth {
    /// The last line stamped at or before `t` (unix seconds).
    pub fn at(&self, t: f64) -> &Value {
        let i = self.lines.partition_point(|l| l["t"].as_f64().unwrap() <= t);
        assert!(i > 0, "no truth line at or before {t}");
        &self.lines[i - 1]
    }

    /// A number at `path` (`/total/request_success`) in the line at `t`.
    pub fn value(&self, t: f64, path: &str) -> f64 {
        self.at(t).pointer(path).and_then(Value::as_f64).unwrap_or_else(|| panic!("no number at {path}"))
    }

    /// Increase of the counter at `path` over (a, b].
    pub fn increase(&self, a: f64, b: f64, path: &str) -> f64 {
        self.value(b, path) - self.value(a, path)
    }

    pub fn first_t(&self) -> f64 {
        self.lines[0]["t"].as_f64().unwrap()
    }

    /// Queue-time observations recorded in steps stamped in (a, b].
    pub fn queue_times(&self, a: f64, b: f64) -> Vec<f64> {
        let from = self.lines.partition_point(|l| l["t"].as_f64().unwrap() <= a);
        let to = self.lines.partition_point(|l| l["t"].as_f64().unwrap() <= b);
        self.lines[from..to]
            .iter()
            .flat_map(|l| l["total"]["step_queue_times"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v.as_f64())
            .collect()
    }
}

/// The q-quantile of `obs` as a histogram with `bounds` (and +Inf) gives
/// it, interpolating inside a bucket as Prometheus's `histogram_quantile`:
/// what a scraper of that histogram should report for those observations.
pub fn bucket_quantile(q: f64, obs: &[f64], bounds: &[f64]) -> Option<f64> {
    if obs.is_empty() {
        return None;
    }
    let rank = q * obs.len() as f64;
    let mut lower = (0.0, 0.0);
    for &le in bounds {
        let c = obs.iter().filter(|v| **v <= le).count() as f64;
        if c >= rank {
            let width = c - lower.1;
            let frac = if width > 0.0 { (rank - lower.1) / width } else { 1.0 };
            return Some(lower.0 + (le - lower.0) * frac);
        }
        lower = (le, c);
    }
    Some(lower.0)
}

/// The vLLM 0.34 bucket bounds of `request_queue_time_seconds`.
pub const QUEUE_TIME_BOUNDS: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
