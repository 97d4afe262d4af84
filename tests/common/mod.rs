//! Helpers shared by the black-box tests: run the real `foresight` binary
//! with a config, learn its bound addresses from its JSON log, stop it.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_foresight"))
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
        let config = dir.join("foresight.yaml");
        std::fs::write(&config, yaml).unwrap();
        let mut child = Command::new(bin())
            .args(["--log-format", "json", "serve", "--config"])
            .arg(&config)
            .env("RUST_LOG", std::env::var("FORESIGHT_TEST_RUST_LOG").unwrap_or_else(|_| "info".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn foresight");
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

/// Three demo workloads of constant demand with known answers (see the file).
pub const KNOWN_ANSWERS: &str = include_str!("../fixtures/known-answers.yaml");

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
