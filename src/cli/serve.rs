//! `foresight serve`: load config (no ports bound) -> first decisions ->
//! bind and serve gRPC and HTTP -> run the control loop -> on SIGTERM/SIGINT,
//! stop accepting, drain within a grace period, exit. SIGHUP reloads config.

use std::{path::PathBuf, sync::Arc, time::Duration, time::SystemTime};

use anyhow::Context as _;
use tokio::{net::TcpListener, sync::mpsc, task::JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::{
    config::Settings,
    scaler,
    serve::{
        collector::{Collectors, Sinks},
        engine::Engine,
        state::Registry,
    },
    sources::health::SourceHealth,
    store::{Store, StoreConfig},
    telemetry::Throttle,
};

/// How long in-flight requests get to finish after a shutdown signal.
const GRACE: Duration = Duration::from_secs(10);

/// Where the config comes from, so SIGHUP can read it again.
#[derive(Debug, Clone)]
pub(crate) enum ConfigSource {
    File(PathBuf),
    Demo,
}

impl ConfigSource {
    pub(crate) fn load(&self) -> anyhow::Result<Settings> {
        match self {
            ConfigSource::File(path) => Ok(Settings::load(path)?),
            ConfigSource::Demo => Ok(Settings::demo()?),
        }
    }
}

pub(crate) async fn serve(source: ConfigSource) -> anyhow::Result<()> {
    let settings = source.load()?;
    // A file-size limit (SIGXFSZ, signal 25 on Linux) must fail the write
    // with an error the store handles, not kill the process: catch and drop it.
    let _file_size_limit = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(25))
        .context("installing the SIGXFSZ handler")?;
    let tls = settings.grpc.tls.as_ref().map(scaler::tls_config).transpose()?;
    let http_tls = settings.http.tls.as_ref().map(https_config).transpose()?;
    info!(
        config = %settings.origin, workloads = settings.workloads.len(),
        tick_secs = settings.tick_interval.as_secs_f64(), "starting foresight"
    );

    let store = Arc::new(open_store(&settings)?);
    let registry = Registry::new();
    let (view_tx, view_rx) = tokio::sync::watch::channel(None);
    let (settings_tx, settings_rx) = tokio::sync::watch::channel(settings.clone());
    let health = Arc::new(SourceHealth::default());
    let mut engine = Engine::new(&settings, registry.clone(), store.clone())
        .with_cluster(view_rx)
        .with_source_health(health.clone());
    // Publish the workloads before serving, so GetMetricSpec answers from the first request.
    engine.tick(SystemTime::now());

    let grpc_listener = TcpListener::bind(settings.grpc.listen)
        .await
        .with_context(|| format!("binding gRPC listener on {}", settings.grpc.listen))?;
    let http_listener = TcpListener::bind(settings.http.listen)
        .await
        .with_context(|| format!("binding HTTP listener on {}", settings.http.listen))?;
    info!(
        grpc = %grpc_listener.local_addr()?, tls = tls.is_some(),
        mtls = settings.grpc.tls.as_ref().is_some_and(|t| t.client_ca_file.is_some()),
        http = %http_listener.local_addr()?, https = settings.http.tls.is_some(),
        http_token = settings.http.bearer_token.is_some(), "listening"
    );

    let shutdown = CancellationToken::new();
    let mut collectors = Collectors::default();
    let sinks = Sinks { store: store.clone(), health };
    collectors.apply(&settings.workloads, &sinks, &shutdown);
    let (reload_tx, mut reload_rx) = mpsc::channel::<Settings>(1);
    let (engine_tx, engine_rx) = mpsc::channel(1);
    tokio::spawn(watch_signals(source, settings.clone(), reload_tx, shutdown.clone()));

    let mut tasks = JoinSet::new();
    let (r, sd) = (registry.clone(), shutdown.clone());
    tasks.spawn(async move { ("gRPC server", scaler::serve(grpc_listener, tls, r, sd).await) });
    let (sd, st, r) = (shutdown.clone(), store.clone(), registry.clone());
    let app = crate::api::guard::guard(crate::api::router(r, st), &settings.http);
    tasks.spawn(async move {
        let served = match http_tls {
            None => axum::serve(http_listener, app)
                .with_graceful_shutdown(sd.cancelled_owned())
                .await
                .context("HTTP server"),
            Some(tls) => serve_https(http_listener, tls, app, sd).await,
        };
        ("HTTP server", served)
    });
    let sd = shutdown.clone();
    let flush_every = settings.store.flush_interval;
    tasks.spawn(async move {
        engine.run(settings, engine_rx, sd).await;
        ("control loop", Ok(()))
    });
    let (st, sd) = (store.clone(), shutdown.clone());
    tasks.spawn(async move {
        flush_loop(st, flush_every, sd).await;
        ("store flusher", Ok(()))
    });
    let (r, sd) = (registry.clone(), shutdown.clone());
    tasks.spawn(async move {
        cluster_loop(settings_rx, r, view_tx, sd).await;
        ("Kubernetes reader", Ok(()))
    });
    let sd = shutdown.clone();
    tasks.spawn(async move {
        // Reloads restart the collectors whose workload changed, then reach the control loop.
        loop {
            tokio::select! {
                _ = sd.cancelled() => break,
                Some(new) = reload_rx.recv() => {
                    collectors.apply(&new.workloads, &sinks, &sd);
                    settings_tx.send_replace(new.clone());
                    let _ = engine_tx.send(new).await;
                }
            }
        }
        collectors.join().await;
        ("collectors", Ok(()))
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
    match tokio::task::spawn_blocking(move || store.flush()).await {
        Ok(Ok(stats)) => info!(chunks = stats.chunks, "history flushed"),
        Ok(Err(e)) => error!(error = %e, "final history flush failed; history since the last flush is lost"),
        Err(e) => error!(error = %e, "final history flush panicked"),
    }
    info!("stopped");
    Ok(())
}

/// rustls server config for HTTPS, requiring client certificates when a client CA is given.
fn https_config(files: &crate::config::TlsFiles) -> anyhow::Result<axum_server::tls_rustls::RustlsConfig> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
    let certs = |p: &std::path::Path| -> anyhow::Result<Vec<CertificateDer<'static>>> {
        let certs = CertificateDer::pem_file_iter(p)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .with_context(|| format!("reading certificates from {}", p.display()))?;
        anyhow::ensure!(!certs.is_empty(), "{}: no PEM certificate in it", p.display());
        Ok(certs)
    };
    let key = PrivateKeyDer::from_pem_file(&files.key_file)
        .with_context(|| format!("reading the private key in {}", files.key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        rustls::ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
    let builder = match &files.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs(ca)? {
                roots.add(c).with_context(|| format!("{}: not a usable CA certificate", ca.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .context("client certificate verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder.with_single_cert(certs(&files.cert_file)?, key).with_context(|| {
        format!("{} and {} do not make a server identity", files.cert_file.display(), files.key_file.display())
    })?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(cfg)))
}

/// Serve `app` over TLS until `shutdown`, then drain for the grace period.
async fn serve_https(
    listener: TcpListener,
    tls: axum_server::tls_rustls::RustlsConfig,
    app: axum::Router,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let handle = axum_server::Handle::new();
    let h = handle.clone();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        h.graceful_shutdown(Some(GRACE));
    });
    axum_server::from_tcp_rustls(listener.into_std()?, tls)?
        .handle(handle)
        .serve(app.into_make_service())
        .await
        .context("HTTPS server")
}

/// With `kubernetes:` in config: read the cluster every `refresh`, hand the
/// view to the control loop, and actuate the latest plan. A cluster that
/// cannot be reached leaves the last view in place (or none: config only)
/// and is tried again; it never stops the scaler.
async fn cluster_loop(
    mut settings: tokio::sync::watch::Receiver<Settings>,
    registry: Arc<crate::serve::state::Registry>,
    views: tokio::sync::watch::Sender<Option<Arc<crate::cluster::ClusterView>>>,
    shutdown: CancellationToken,
) {
    use crate::cluster::{self, actuate, client};
    let mut conn: Option<(Option<PathBuf>, Option<String>, kube::Client)> = None;
    let mut last_errors: Vec<String> = Vec::new();
    loop {
        let s = settings.borrow_and_update().clone();
        let wait = match &s.kubernetes {
            None => {
                conn = None;
                views.send_replace(None);
                None
            }
            Some(k) => {
                let same = conn.as_ref().is_some_and(|(p, c, _)| *p == k.kubeconfig && *c == k.context);
                if !same {
                    conn = match client::connect(k).await {
                        Ok(c) => {
                            info!(kubeconfig = ?k.kubeconfig, "Kubernetes inputs on");
                            Some((k.kubeconfig.clone(), k.context.clone(), c))
                        }
                        Err(e) => {
                            warn!(error = %e, "cannot build a Kubernetes client; planning from config, retrying");
                            None
                        }
                    };
                }
                if let Some((_, _, c)) = &conn {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs() as i64);
                    let snap = client::read(c, &s.workloads, k, now).await;
                    let mut v = cluster::view(&s.pools, &s.workloads, k, &snap);
                    if k.actuation.mode != actuate::ActuationMode::Off {
                        // Actuate the plan made with this read, not one from config alone or an older read.
                        let first = Arc::new(v.clone());
                        views.send_replace(Some(first.clone()));
                        let plan = plan_with(&registry, &first, k.refresh, &shutdown).await;
                        v.actuation = actuate::run(c, &k.actuation, plan.as_deref(), k.timeout).await;
                    }
                    for ch in &v.actuation {
                        match ch.action {
                            actuate::Action::Patched | actuate::Action::WouldPatch => {
                                info!(object = %ch.object, pool = %ch.pool, current = ?ch.current, desired = ?ch.desired, action = ch.action.as_str(), "actuation")
                            }
                            actuate::Action::Failed => {
                                warn!(object = %ch.object, pool = %ch.pool, error = ?ch.error, "actuation failed")
                            }
                            actuate::Action::Unchanged => {}
                        }
                    }
                    let errors: Vec<String> =
                        v.errors.iter().cloned().chain(v.workloads.values().filter_map(|w| w.error.clone())).collect();
                    if errors != last_errors {
                        for e in &errors {
                            warn!(error = %e, "Kubernetes input");
                        }
                        last_errors = errors;
                    }
                    for d in &v.disagreements {
                        debug!(subject = %d.subject, field = %d.field, config = %d.config, cluster = %d.cluster, used = %d.used, "config and cluster disagree");
                    }
                    views.send_replace(Some(Arc::new(v)));
                }
                Some(k.refresh)
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = settings.changed() => if changed.is_err() { return },
            _ = async { match wait { Some(d) => tokio::time::sleep(d).await, None => std::future::pending().await } } => {}
        }
    }
}

/// The first plan the control loop publishes with `view`, waiting at most `limit`.
async fn plan_with(
    registry: &crate::serve::state::Registry,
    view: &Arc<crate::cluster::ClusterView>,
    limit: Duration,
    shutdown: &CancellationToken,
) -> Option<Arc<crate::capacity::Plan>> {
    let mut changed = registry.subscribe();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let snap = registry.load();
        if snap.cluster.as_ref().is_some_and(|c| Arc::ptr_eq(c, view)) {
            return snap.plan.clone();
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep_until(deadline) => return None,
            r = changed.changed() => if r.is_err() { return None },
        }
    }
}

fn open_store(settings: &Settings) -> anyhow::Result<Store> {
    let s = &settings.store;
    if let Some(dir) = s.path.as_ref().and_then(|p| p.parent()).filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating the store directory {}", dir.display()))?;
    }
    let store = Store::open(StoreConfig {
        path: s.path.clone(),
        resolution: s.resolution,
        retention: s.retention,
        cache_bytes: s.cache_bytes,
    })?;
    match &s.path {
        Some(p) => info!(path = %p.display(), resolution_secs = s.resolution.as_secs(), "history store open"),
        None => warn!("history store in memory only: history is lost on restart"),
    }
    Ok(store)
}

/// Make recorded history durable every `every`; a crash loses at most that much.
async fn flush_loop(store: Arc<Store>, every: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    // While flushes fail (a full disk), one error line a minute, not one a tick;
    // the first failure of a run is logged at once.
    let (mut failed, mut throttle) = (0u64, Throttle::new(Duration::from_secs(60)));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let st = store.clone();
        match tokio::task::spawn_blocking(move || st.flush()).await {
            Ok(Ok(stats)) => {
                if failed > 0 {
                    info!(
                        failed_flushes = failed,
                        "history flushes succeed again; nothing recorded meanwhile was lost"
                    );
                    (failed, throttle) = (0, Throttle::new(Duration::from_secs(60)));
                }
                debug!(
                    chunks = stats.chunks,
                    through = stats.through.map(crate::time::rfc3339).as_deref().unwrap_or("none"),
                    "history flushed"
                )
            }
            Ok(Err(e)) => {
                crate::telemetry::flush_error();
                failed += 1;
                if throttle.allow(std::time::Instant::now()).is_some() {
                    error!(error = %e, failed_flushes = failed, "history flush failed; history since the last good flush is held in memory and retried");
                }
            }
            Err(e) => error!(error = %e, "history flush panicked"),
        }
    }
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
