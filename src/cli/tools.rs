//! Offline commands: read stored history, and run simulated vLLM pods for
//! a Prometheus (live, or as OpenMetrics history for `promtool tsdb
//! create-blocks-from openmetrics`).

use std::{
    io::Write,
    net::IpAddr,
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context as _};
use tokio_util::sync::CancellationToken;

use crate::{
    config::Settings,
    fake_vllm::{render, server::SimServer, Fleet, SimConfig},
    store::{Store, StoreConfig},
    workload::series,
};

/// Print a workload's stored history as CSV (`timestamp,value`, RFC 3339,
/// empty value for a gap) for the last `minutes`, or all of `since`.
pub(crate) fn history(
    config: &Path,
    workload: &str,
    signal: &str,
    minutes: f64,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let settings = Settings::load(config)?;
    let w = settings
        .workloads
        .iter()
        .find(|w| w.key() == workload || w.name == workload)
        .with_context(|| format!("no workload `{workload}` in {}", config.display()))?;
    let sig = w
        .signals
        .iter()
        .find(|s| s.as_str() == signal)
        .with_context(|| format!("workload {} does not record signal `{signal}`", w.key()))?;
    let path = settings.store.path.clone().context("the config keeps history in memory only (store.path: null)")?;
    let store = Store::open(StoreConfig {
        path: Some(path),
        resolution: settings.store.resolution,
        retention: settings.store.retention,
        cache_bytes: settings.store.cache_bytes,
    })?;
    let now = SystemTime::now();
    let from = now - Duration::from_secs_f64(minutes.clamp(0.0, 1e7) * 60.0);
    let s = store.range(&series(&w.key(), *sig), from, now + settings.store.resolution)?;
    writeln!(out, "timestamp,value")?;
    for (i, v) in s.values.iter().enumerate() {
        let t = s.start + s.step * i as u32;
        if v.is_finite() {
            writeln!(out, "{},{v}", crate::time::rfc3339(t))?;
        } else {
            writeln!(out, "{},", crate::time::rfc3339(t))?;
        }
    }
    Ok(())
}

fn load_sim(path: &Path) -> anyhow::Result<SimConfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let c: SimConfig = crate::config::yaml::parse(&text, &path.display().to_string())?;
    let problems = c.problems();
    if !problems.is_empty() {
        let list: Vec<String> = problems.into_iter().map(|(f, m)| format!("{}: {f}: {m}", path.display())).collect();
        bail!("{}", list.join("\n"));
    }
    Ok(c)
}

/// Serve simulated pods on `ip` until SIGTERM/SIGINT; print their URLs as JSON.
pub(crate) async fn sim_serve(config: &Path, ip: IpAddr, origin: Option<f64>) -> anyhow::Result<()> {
    let c = load_sim(config)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let fleet = Fleet::from_config(c, origin.unwrap_or(now)).map_err(anyhow::Error::msg)?;
    let shutdown = CancellationToken::new();
    let server = SimServer::start(fleet, ip, shutdown.clone()).await?;
    println!("{}", serde_json::json!({ "pods": server.urls }));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    shutdown.cancel();
    Ok(())
}

/// Write the fleet's metrics from `from` to `to` every `step` seconds as
/// OpenMetrics with timestamps; `labels` (e.g. `job="vllm",instance="h:p"`)
/// are added per pod so the series continue the ones a live scrape makes.
pub fn sim_export(
    config: &Path,
    origin: f64,
    from: f64,
    to: f64,
    step: f64,
    pod_labels: &[String],
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let c = load_sim(config)?;
    if pod_labels.len() != c.pods as usize {
        bail!("give one --pod-labels per pod ({} pods, {} given)", c.pods, pod_labels.len());
    }
    if !(step > 0.0 && from >= origin && to >= from) {
        bail!("need origin <= from <= to and step > 0");
    }
    let model = c.model_name.clone();
    let mut fleet = Fleet::from_config(c, origin).map_err(anyhow::Error::msg)?;
    // Group samples by family: OpenMetrics wants each family's samples together.
    let mut families: Vec<(String, String, Vec<String>)> = Vec::new();
    let mut t = from;
    while t <= to {
        fleet.advance_to(t);
        for (pod, extra) in fleet.pods().iter().zip(pod_labels) {
            let text = render(&pod.metrics(), &model);
            add_samples(&text, extra, t, &mut families);
        }
        t += step;
    }
    for (name, kind, samples) in &families {
        writeln!(out, "# TYPE {name} {kind}")?;
        for s in samples {
            writeln!(out, "{s}")?;
        }
    }
    writeln!(out, "# EOF")?;
    Ok(())
}

/// Move one text-format body's samples into OpenMetrics families, adding
/// `extra` labels and timestamp `t`. Counters `x_total` become family `x`;
/// `_created` gauges are dropped (promtool would import them as series).
fn add_samples(text: &str, extra: &str, t: f64, families: &mut Vec<(String, String, Vec<String>)>) {
    let mut kind = String::new();
    let mut family = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, k) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            kind = k.to_string();
            family = if k == "counter" { name.trim_end_matches("_total").to_string() } else { name.to_string() };
            continue;
        }
        if line.starts_with('#') || line.is_empty() || family.ends_with("_created") {
            continue;
        }
        let Some(open) = line.find('{') else { continue };
        let sample = format!("{}{{{extra},{} {t:.3}", &line[..open], &line[open + 1..]);
        match families.iter_mut().find(|f| f.0 == family) {
            Some(f) => f.2.push(sample),
            None => families.push((family.clone(), kind.clone(), vec![sample])),
        }
    }
}
