//! `foresight compare-roles`: monolithic against prefill/decode sizing on
//! ServeGen's real token mixes ([`crate::replay::roles`]).

use std::{io::Write, path::PathBuf};

use anyhow::{bail, Context};

use super::simulate::load_clients;
use crate::{
    config::load_profile,
    replay::roles::{compare, fleet_demand, Comparison},
    replay::servegen::{ClientTrace, TokenMeans},
};

#[derive(clap::Args)]
pub(crate) struct CompareRolesArgs {
    /// A ServeGen model folder (`.../servegen/m-mid`), with `token_means_6h.csv` beside it.
    #[arg(long)]
    pub(crate) servegen: PathBuf,
    /// The capacity profile both fleets are sized with.
    #[arg(long, default_value = "llama-3.1-8b-h100")]
    pub(crate) model_profile: String,
    /// Also size this many of the busiest clients, each as its own deployment.
    #[arg(long, default_value_t = 10)]
    pub(crate) clients: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(serde::Serialize)]
struct Row {
    deployment: String,
    #[serde(flatten)]
    comparison: Comparison,
    imputed_share: f64,
}

pub(crate) fn run_compare_roles(args: &CompareRolesArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let profile = load_profile(&args.model_profile).context("loading the model profile")?;
    let cap =
        profile.role_capacity().context("the profile states neither generation_tokens_per_sec nor slo.itl_secs")?;
    let (dir, model, clients) = load_clients(&args.servegen, &[])?;
    let means_path = dir.parent().map(|p| p.join("token_means_6h.csv")).unwrap_or_default();
    let body = std::fs::read_to_string(&means_path).with_context(|| format!("reading {}", means_path.display()))?;
    let means = TokenMeans::parse(&body, &model)?;
    if means.clients() == 0 {
        bail!("{} has no rows for model {model}", means_path.display());
    }
    let gpus = profile.gpus_per_replica;
    let row = |name: String, cs: &[ClientTrace]| -> anyhow::Result<Row> {
        let d = fleet_demand(cs, &means);
        Ok(Row { deployment: name, comparison: compare(&d.windows, &cap, gpus)?, imputed_share: d.imputed_share })
    };
    let mut rows = vec![row(format!("{model} fleet ({} clients)", clients.len()), &clients)?];
    // The busiest clients with token means, each a deployment of its own.
    let mut busiest: Vec<&ClientTrace> = clients.iter().filter(|c| means.has(&c.client)).collect();
    let total = |c: &ClientTrace| c.windows.iter().map(|w| w.rate).sum::<f64>();
    busiest.sort_by(|a, b| total(b).total_cmp(&total(a)));
    for c in busiest.iter().take(args.clients) {
        rows.push(row(format!("{model} client {}", c.client), std::slice::from_ref(*c))?);
    }
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "ServeGen {model}: each 10-minute window sized for its mean demand with {} ({} GPU per replica); GPU-hours over {} days",
        profile.name,
        gpus,
        rows[0].comparison.windows as f64 / 144.0
    )?;
    writeln!(
        out,
        "{:<28} {:>7} {:>6} {:>10} {:>10} {:>10} {:>8} {:>8} {:>9} {:>7}",
        "deployment", "prompt", "output", "in-flight", "time-share", "P/D", "P/D/ts", "prefill", "short", "kv-bound"
    )?;
    for r in &rows {
        let c = &r.comparison;
        writeln!(
            out,
            "{:<28} {:>7.0} {:>6.0} {:>10.1} {:>10.1} {:>10.1} {:>8.3} {:>7.0}% {:>9} {:>7}",
            r.deployment,
            c.prompt_tokens,
            c.output_tokens,
            c.in_flight_gpu_hours,
            c.time_share_gpu_hours,
            c.disaggregated_gpu_hours(),
            c.disaggregated_gpu_hours() / c.time_share_gpu_hours.max(1e-9),
            100.0 * c.prefill_gpu_hours / c.disaggregated_gpu_hours().max(1e-9),
            c.in_flight_short_windows,
            c.kv_bound_windows
        )?;
    }
    let imputed = rows[0].imputed_share;
    if imputed > 0.0 {
        writeln!(out, "{:.1}% of the fleet's requests come from clients with no token means: they are given the window's mean of the others", imputed * 100.0)?;
    }
    Ok(())
}
