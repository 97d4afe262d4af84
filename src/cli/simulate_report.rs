//! `foresight simulate`'s output: the table of runs, each predictive run
//! read against the reactive, static and yardstick frontiers, and the files
//! `--out` writes (`summary.json`, `timeline.csv`).

use std::io::Write;

use anyhow::Context;
use serde::Serialize;

use crate::replay::{
    self,
    frontier::{self, Reading},
    Capacity, Pool, Run, SimConfig, TokenMix,
};

#[derive(Serialize)]
pub(super) struct Summary<'a> {
    pub(super) trace: String,
    pub(super) profile: &'a str,
    pub(super) peak_rps: f64,
    pub(super) warmup_minutes: usize,
    pub(super) token_mix: TokenMix,
    /// Why the token mix is not the trace's own, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) token_mix_note: Option<String>,
    pub(super) capacity: &'a Capacity,
    pub(super) pool: &'a Pool,
    pub(super) sim: &'a SimConfig,
    /// The replica cap every policy runs under.
    pub(super) max_replicas: u32,
    pub(super) reports: Vec<&'a replay::Report>,
    /// Each predictive run against the other families, on node GPU-hours and on GPU-hours held.
    pub(super) reading: frontier::Reading,
    pub(super) reading_held: frontier::Reading,
}

pub(super) fn print_table(out: &mut dyn Write, s: &Summary<'_>) -> anyhow::Result<()> {
    let days = s.reports.first().map_or(0.0, |r| r.minutes as f64 / 1440.0);
    writeln!(
        out,
        "{}: {:.1} days simulated after a {:.1}-day warm-up; {} ({} GPU/replica, {:.1} req/s per replica at {} slots); pod start {:.0} s on a Ready node, {:.0} s on a new one; every policy capped at {} replicas; peak {} req/s",
        s.trace,
        days,
        s.warmup_minutes as f64 / 1440.0,
        s.profile,
        s.capacity.gpus_per_replica,
        s.capacity.requests_per_sec,
        s.capacity.slots,
        s.capacity.pod_start_secs,
        s.capacity.cold_start_secs(),
        s.max_replicas,
        s.peak_rps
    )?;
    if let Some(note) = &s.token_mix_note {
        writeln!(out, "note: {note}")?;
    }
    let oracle = s.reports.iter().find(|r| r.policy == "oracle");
    let ratio = |v: f64, of: Option<f64>| of.filter(|o| *o > 0.0).map_or("-".to_string(), |o| format!("{:.2}", v / o));
    writeln!(
        out,
        "{:<40} {:>9} {:>8} {:>8} {:>9} {:>10} {:>10} {:>12} {:>8} {:>9}",
        "policy",
        "GPU-hours",
        "x oracle",
        "held x",
        "min. met",
        "req. met",
        "dropped",
        "p99 wait 5m",
        "cold st",
        "max repl."
    )?;
    for r in &s.reports {
        writeln!(
            out,
            "{:<40} {:>9.1} {:>8} {:>8} {:>8.2}% {:>9.3}% {:>10.0} {:>5.2}/{:<6.2} {:>8} {:>9}",
            r.policy,
            r.gpu_hours,
            ratio(r.gpu_hours, oracle.map(|o| o.gpu_hours)),
            ratio(r.held_gpu_hours, oracle.map(|o| o.held_gpu_hours)),
            r.minutes_met * 100.0,
            r.slo_attainment * 100.0,
            r.dropped,
            r.wait_p99_5min[0],
            r.wait_p99_5min[1],
            r.cold_starts,
            r.max_replicas
        )?;
    }
    writeln!(out, "(held x: GPU-hours held by replicas, over the oracle's; p99 wait 5m: the five-minute windows' p99 queue wait in seconds, median/95th percentile)")?;
    reading(out, "node GPU-hours", &s.reading, oracle.map(|o| o.gpu_hours))?;
    reading(out, "GPU-hours held", &s.reading_held, oracle.map(|o| o.held_gpu_hours))?;
    for r in &s.reports {
        if let Some(sp) = &r.spare {
            writeln!(
                out,
                "{}: {} offers of reserved nodes for {:.1} h leases: {:.0} GPU-hours offered, {:.0} in leases never revoked, {} revoked; hindsight's offers {:.0}, reserved GPU-hours really idle over those leases {:.0}",
                r.policy,
                sp.offers,
                sp.horizon_secs / 3600.0,
                sp.offered_gpu_hours,
                sp.kept_gpu_hours,
                sp.revoked,
                sp.hindsight_gpu_hours,
                sp.idle_gpu_hours
            )?;
        }
        if let Some(l) = &r.learned {
            writeln!(
                out,
                "{}: learned {:.1} running per replica within the SLO, sizing on {:.1} (the profile said {:.1}; the replicas have {} slots), from {:.0} observations, {:.0} near it",
                r.policy, l.learned, l.per_replica, l.prior, s.capacity.slots, l.observations, l.near
            )?;
        }
    }
    Ok(())
}

/// Each predictive run against the frontiers, and each family's cost at the SLO levels.
fn reading(out: &mut dyn Write, on: &str, r: &Reading, oracle: Option<f64>) -> anyhow::Result<()> {
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:+.1}%", v * 100.0));
    let x = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let rel = |v: Option<f64>| x(v.zip(oracle.filter(|o| *o > 0.0)).map(|(v, o)| v / o));
    writeln!(out, "\non {on}:")?;
    for j in &r.predictive {
        let dominated = if j.dominated_by.is_empty() {
            "not dominated".to_string()
        } else {
            format!("dominated by {}", j.dominated_by.join(", "))
        };
        let saving = match j.saving_vs_reactive {
            Some(v) => format!("saves {} against the reactive frontier there", pct(Some(v))),
            None => "outside the reactive frontier's range (none to compare at its SLO)".to_string(),
        };
        writeln!(
            out,
            "  {} at {:.2}% of minutes: {saving}, costs {}x the arrival-blind yardstick; {dominated}",
            j.policy,
            j.minutes_met * 100.0,
            x(j.vs_yardstick)
        )?;
    }
    writeln!(out, "  x oracle at     reactive   static  predictive  yardstick")?;
    for l in &r.levels {
        writeln!(
            out,
            "  {:>6.1}% met    {:>8} {:>8} {:>11} {:>10}",
            l.minutes_met * 100.0,
            rel(l.reactive),
            rel(l.static_fleet),
            rel(l.predictive),
            rel(l.yardstick)
        )?;
    }
    Ok(())
}

pub(super) fn write_outputs(dir: &std::path::Path, s: &Summary<'_>, runs: &[Run]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("summary.json");
    std::fs::write(&path, serde_json::to_vec_pretty(s)?).with_context(|| format!("writing {}", path.display()))?;
    let path = dir.join("timeline.csv");
    let mut w = csv::Writer::from_path(&path).with_context(|| format!("writing {}", path.display()))?;
    w.write_record([
        "policy",
        "minute",
        "unix",
        "demand_rps",
        "arrived_rps",
        "replicas",
        "ready_replicas",
        "nodes",
        "queue",
        "attainment",
        "reason",
    ])?;
    for run in runs {
        for m in &run.timeline {
            w.write_record([
                run.report.policy.clone(),
                m.minute.to_string(),
                m.unix.to_string(),
                format!("{:.4}", m.demand_rps),
                format!("{:.4}", m.arrived_rps),
                m.replicas.to_string(),
                m.ready_replicas.to_string(),
                m.nodes.to_string(),
                format!("{:.2}", m.queue),
                if m.attainment.is_finite() { format!("{:.5}", m.attainment) } else { String::new() },
                m.reason.clone().unwrap_or_default(),
            ])?;
        }
    }
    w.flush()?;
    Ok(())
}
