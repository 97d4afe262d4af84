//! `foresight simulate`'s inputs: the demand trace (a series, a ServeGen
//! model, the generator) and the settings Foresight runs with in the replay
//! (a config file's, or the shipped defaults for one workload).

use std::path::PathBuf;

use anyhow::{bail, Context};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Poisson};

use crate::replay::{self, Demand, TokenMix};

/// ServeGen's day 0 has no known date: start it on a Monday (2026-01-05 00:00 UTC).
const SERVEGEN_START: i64 = 1_767_571_200;

/// A ServeGen model folder's client traces (every `chunk-*-trace.csv`, or
/// the listed clients) or one client file: (the folder, the model's name,
/// the traces).
pub(super) fn load_clients(
    path: &std::path::Path,
    only: &[String],
) -> anyhow::Result<(PathBuf, String, Vec<replay::servegen::ClientTrace>)> {
    let client_of = |p: &std::path::Path| {
        let n = p.file_name()?.to_str()?;
        Some(n.strip_prefix("chunk-")?.strip_suffix("-trace.csv")?.to_string())
    };
    let (dir, files) = if path.is_dir() {
        let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(path)
            .with_context(|| format!("reading {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| client_of(&p).map(|c| (c, p)))
            .filter(|(c, _)| only.is_empty() || only.contains(c))
            .collect();
        files.sort();
        (path.to_path_buf(), files)
    } else {
        let c =
            client_of(path).with_context(|| format!("{} is not a chunk-<client>-trace.csv file", path.display()))?;
        (path.parent().map(PathBuf::from).unwrap_or_default(), vec![(c, path.to_path_buf())])
    };
    if let Some(missing) = only.iter().find(|c| !files.iter().any(|(f, _)| f == *c)) {
        bail!("--clients {missing}: no chunk-{missing}-trace.csv in {}", dir.display());
    }
    if files.is_empty() {
        bail!("no chunk-<client>-trace.csv files in {}", path.display());
    }
    let clients = files
        .iter()
        .map(|(c, p)| {
            let body = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Ok(replay::servegen::parse_client(c, &body)?)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let model = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    Ok((dir, model, clients))
}

/// Read ServeGen clients as with [`load_clients`], and their token mix when
/// `token_means_6h.csv` sits beside the folder.
pub(super) fn load_servegen(
    path: &std::path::Path,
    only: &[String],
    peak_rps: f64,
    seed: u64,
) -> anyhow::Result<(Demand, String, Option<String>)> {
    let (dir, model, mut clients) = load_clients(path, only)?;
    let means = dir.parent().map(|p| p.join("token_means_6h.csv"));
    let mix = match means.as_ref().filter(|p| p.exists()) {
        Some(p) => {
            let body = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            replay::servegen::token_mix(&body, &model, &clients)?
        }
        None => None,
    };
    let missing = mix
        .is_none()
        .then(|| format!("no ServeGen token means for {model}'s clients: the Azure conversation token mix stands in"));
    let mix = mix.unwrap_or_else(TokenMix::azure_conversation);
    let gaps = replay::servegen::fill_gaps(&mut clients);
    if gaps > 0 {
        tracing::warn!(
            model,
            windows = gaps,
            "windows with no traffic from any client: collection gaps, filled from a day before"
        );
        eprintln!("note: {gaps} ten-minute windows with no traffic from any of the {} clients were taken as collection gaps and filled from the same window a day earlier", clients.len());
    }
    let demand = replay::servegen::demand(&clients, SERVEGEN_START, peak_rps, mix, seed)?;
    let name = if clients.len() == 1 {
        format!("servegen {model} client {}", clients[0].client)
    } else {
        format!("servegen {model} ({} clients)", clients.len())
    };
    Ok((demand, name, missing))
}

/// What the fleet saw during the warm-up: Poisson arrivals per minute, as a rate.
pub(super) fn observed(rate: &[f64], seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x005e_ed0f_ba5e);
    rate.iter()
        .map(|r| if *r > 0.0 { Poisson::new(r * 60.0).map_or(*r, |p| p.sample(&mut rng) / 60.0) } else { 0.0 })
        .collect()
}
