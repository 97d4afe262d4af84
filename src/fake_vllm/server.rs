//! Serving a simulated fleet over HTTP: one listener per pod, `GET /metrics`
//! advances the fleet to the current wall time and renders that pod.
//! Tests can make a pod answer garbage or restart it.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{extract::State, http::header, response::IntoResponse, routing::get, Router};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{render, Fleet};

/// How a pod answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// 200 OK with a body that is not an exposition.
    Garbage,
}

struct Shared {
    fleet: Mutex<Fleet>,
    modes: Mutex<Vec<Mode>>,
}

/// A running simulated fleet.
#[derive(Clone)]
pub struct SimServer {
    shared: Arc<Shared>,
    /// `http://127.0.0.1:PORT/metrics` per pod.
    pub urls: Vec<String>,
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

impl SimServer {
    /// Serve every pod of `fleet` on its own port of `ip` until `shutdown`.
    pub async fn start(fleet: Fleet, ip: std::net::IpAddr, shutdown: CancellationToken) -> std::io::Result<SimServer> {
        let pods = fleet.pods().len();
        let shared = Arc::new(Shared { fleet: Mutex::new(fleet), modes: Mutex::new(vec![Mode::Normal; pods]) });
        let mut urls = Vec::new();
        for i in 0..pods {
            let listener = TcpListener::bind(SocketAddr::new(ip, 0)).await?;
            urls.push(format!("http://{}/metrics", listener.local_addr()?));
            let app = Router::new().route("/metrics", get(metrics)).with_state((shared.clone(), i));
            let sd = shutdown.clone();
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).with_graceful_shutdown(sd.cancelled_owned()).await;
            });
        }
        Ok(SimServer { shared, urls })
    }

    pub fn set_mode(&self, pod: usize, mode: Mode) {
        if let Some(m) = self.shared.modes.lock().unwrap_or_else(|e| e.into_inner()).get_mut(pod) {
            *m = mode;
        }
    }

    /// Restart a pod now: its counters start again from zero.
    pub fn restart(&self, pod: usize) {
        let mut fleet = self.shared.fleet.lock().unwrap_or_else(|e| e.into_inner());
        fleet.advance_to(now());
        fleet.restart_pod(pod);
    }

    /// Run `f` on the fleet advanced to now (for ground truth in tests).
    pub fn with_fleet<T>(&self, f: impl FnOnce(&Fleet) -> T) -> T {
        let mut fleet = self.shared.fleet.lock().unwrap_or_else(|e| e.into_inner());
        fleet.advance_to(now());
        f(&fleet)
    }
}

async fn metrics(State((shared, pod)): State<(Arc<Shared>, usize)>) -> impl IntoResponse {
    let mode = shared.modes.lock().unwrap_or_else(|e| e.into_inner())[pod];
    let body = match mode {
        Mode::Garbage => "<html><body>502 Bad Gateway</body></html>\n{\"not\": \"metrics\"}\n".to_string(),
        Mode::Normal => {
            let mut fleet = shared.fleet.lock().unwrap_or_else(|e| e.into_inner());
            fleet.advance_to(now());
            let model = fleet.config().model_name.clone();
            render(&fleet.pods()[pod].metrics(), &model)
        }
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
}
