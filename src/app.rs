//! `foresight serve`: load config (no ports bound) -> first decisions ->
//! bind and serve gRPC and HTTP -> run the control loop -> on SIGTERM/SIGINT,
//! stop accepting, drain within a grace period, exit. SIGHUP reloads config.

use std::{path::PathBuf, time::Duration, time::SystemTime};

use anyhow::Context as _;
use tokio::{net::TcpListener, sync::mpsc, task::JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::{config::Settings, engine::Engine, scaler, state::Registry};

/// How long in-flight requests get to finish after a shutdown signal.
const GRACE: Duration = Duration::from_secs(10);

/// Where the config comes from, so SIGHUP can read it again.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    File(PathBuf),
    Demo,
}

impl ConfigSource {
    pub fn load(&self) -> anyhow::Result<Settings> {
        match self {
            ConfigSource::File(path) => Ok(Settings::load(path)?),
            ConfigSource::Demo => Ok(Settings::demo()?),
        }
    }
}

pub async fn serve(source: ConfigSource) -> anyhow::Result<()> {
    let settings = source.load()?;
    let tls = settings.grpc.tls.as_ref().map(scaler::tls_config).transpose()?;
    info!(
        config = %settings.origin, workloads = settings.workloads.len(),
        tick_secs = settings.tick_interval.as_secs_f64(), "starting foresight"
    );

    let registry = Registry::new();
    let mut engine = Engine::new(&settings, registry.clone());
    // Decide once before serving, so the first GetMetrics already has an answer.
    engine.tick(SystemTime::now()).await;

    let grpc_listener = TcpListener::bind(settings.grpc.listen)
        .await
        .with_context(|| format!("binding gRPC listener on {}", settings.grpc.listen))?;
    let http_listener = TcpListener::bind(settings.http.listen)
        .await
        .with_context(|| format!("binding HTTP listener on {}", settings.http.listen))?;
    info!(
        grpc = %grpc_listener.local_addr()?, tls = tls.is_some(),
        mtls = settings.grpc.tls.as_ref().is_some_and(|t| t.client_ca_file.is_some()),
        http = %http_listener.local_addr()?, "listening"
    );

    let shutdown = CancellationToken::new();
    let (reload_tx, reload_rx) = mpsc::channel(1);
    tokio::spawn(watch_signals(source, settings.clone(), reload_tx, shutdown.clone()));

    let mut tasks = JoinSet::new();
    let (r, sd) = (registry.clone(), shutdown.clone());
    tasks.spawn(async move { ("gRPC server", scaler::serve(grpc_listener, tls, r, sd).await) });
    let sd = shutdown.clone();
    tasks.spawn(async move {
        let served = axum::serve(http_listener, crate::api::router(registry))
            .with_graceful_shutdown(sd.cancelled_owned())
            .await
            .context("HTTP server");
        ("HTTP server", served)
    });
    let sd = shutdown.clone();
    tasks.spawn(async move {
        engine.run(settings, reload_rx, sd).await;
        ("control loop", Ok(()))
    });

    // A task that ends before shutdown takes the process down: half a scaler is worse than none.
    tokio::select! {
        Some(ended) = tasks.join_next() => if !shutdown.is_cancelled() {
            shutdown.cancel();
            let (name, result) = ended.context("a task panicked")?;
            result.with_context(|| format!("{name} failed"))?;
            anyhow::bail!("{name} stopped unexpectedly");
        },
        _ = shutdown.cancelled() => {}
    }
    info!(grace_secs = GRACE.as_secs(), "shutting down");
    let drain = async {
        while let Some(ended) = tasks.join_next().await {
            if let Ok((name, Err(e))) = ended {
                warn!(task = name, error = %format!("{e:#}"), "error while stopping");
            }
        }
    };
    if tokio::time::timeout(GRACE, drain).await.is_err() {
        warn!("in-flight work did not finish within the grace period");
    }
    info!("stopped");
    Ok(())
}

/// SIGTERM/SIGINT: cancel `shutdown`. SIGHUP: reload and validate the config;
/// a bad one is logged and the running config kept.
async fn watch_signals(
    source: ConfigSource,
    mut running: Settings,
    reloads: mpsc::Sender<Settings>,
    shutdown: CancellationToken,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup()))
    else {
        error!("cannot install signal handlers; stop with SIGKILL");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => { info!(signal = "SIGTERM", "shutdown requested"); break }
            _ = int.recv() => { info!(signal = "SIGINT", "shutdown requested"); break }
            _ = hup.recv() => match source.load() {
                Ok(new) => {
                    if new.grpc != running.grpc || new.http != running.http {
                        warn!("listen addresses and TLS settings change only on restart; the rest of the new config applies now");
                    }
                    info!(workloads = new.workloads.len(), "config reloaded");
                    // What runs now: the new workloads, the old listeners.
                    running = Settings { grpc: running.grpc.clone(), http: running.http.clone(), ..new.clone() };
                    let _ = reloads.send(new).await;
                }
                Err(e) => error!(
                    error = %format!("{e:#}").replace('\n', "; "),
                    "config reload failed; keeping the running config"
                ),
            },
        }
    }
    shutdown.cancel();
}
