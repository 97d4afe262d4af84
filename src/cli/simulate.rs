//! `foresight simulate`: load a trace, build the policies, run them side by
//! side and print the comparison. The I/O edge around [`crate::replay`].

use std::{io::Write, path::PathBuf, time::Duration};

use anyhow::{bail, Context};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Poisson};
use serde::Serialize;

use crate::{
    cli::forecast::{read_csv, CsvInput},
    config::load_profile,
    fake_vllm::demand::load_trace,
    replay::{
        self,
        policy::{Policy, Predictive, PredictiveConfig, Reactive, ReactiveSignal, Static},
        Capacity, Demand, HpaConfig, Oracle, Pool, Run, SimConfig, Synthetic, TokenMix,
    },
};

/// Which policy to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PolicyName {
    Static,
    Reactive,
    Predictive,
    Oracle,
}

/// The trace's form: a rate series, or a request log.
#[derive(Debug, Clone)]
pub(crate) enum TraceInput {
    /// `timestamp,value` (or the named columns): the shape of the arrival rate.
    Series(CsvInput),
    /// The built-in generator.
    Synthetic(Synthetic),
    /// A ServeGen model folder or client file, optionally some clients only.
    ServeGen { path: PathBuf, clients: Vec<String> },
}

/// What `foresight simulate` runs: its command-line arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SimulateArgs {
    /// Demand shape: a CSV series (`timestamp,value`, e.g. a NAB trace); omit for --synthetic or --servegen.
    #[arg(long, required_unless_present_any = ["synthetic", "servegen"])]
    pub(crate) trace: Option<PathBuf>,
    /// A ServeGen trace: a model's folder of `chunk-<client>-trace.csv`
    /// files (the fleet serves all its clients) or one such file. Arrivals
    /// follow each window's fitted inter-arrival distribution, and the
    /// token mix comes from `token_means_6h.csv` beside the folder.
    #[arg(long, conflicts_with_all = ["trace", "synthetic", "requests"])]
    pub(crate) servegen: Option<PathBuf>,
    /// ServeGen: only these clients (comma separated), e.g. `--clients 19,73`.
    #[arg(long, value_delimiter = ',', requires = "servegen")]
    pub(crate) clients: Vec<String>,
    #[arg(long, default_value = "timestamp")]
    pub(crate) time_col: String,
    #[arg(long, default_value = "value")]
    pub(crate) value_col: String,
    /// Use the built-in generator (daily + weekly cycles, bursts, level shift) instead of a trace.
    #[arg(long, conflicts_with = "trace")]
    pub(crate) synthetic: bool,
    /// Synthetic: days to generate.
    #[arg(long, default_value_t = 21.0)]
    pub(crate) days: f64,
    /// Synthetic: day on which the level shifts (x1.5).
    #[arg(long)]
    pub(crate) level_shift_day: Option<f64>,
    /// Seed for the arrivals (and the synthetic generator).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Request log in the Azure LLM trace format: token mix and minute-level bursts.
    #[arg(long)]
    pub(crate) requests: Option<PathBuf>,
    /// Scale the trace so its 99th percentile minute has this many requests per second.
    #[arg(long, default_value_t = 150.0)]
    pub(crate) peak_rps: f64,
    /// A built-in profile name or a profile YAML file.
    #[arg(long, default_value = "llama-3.1-8b-h100")]
    pub(crate) model_profile: String,
    /// Policies to compare (comma separated).
    #[arg(long = "policy", value_enum, value_delimiter = ',', default_value = "static,reactive,predictive,oracle")]
    pub(crate) policies: Vec<PolicyName>,
    /// What the reactive trigger watches: `concurrency` (running + waiting) or `request_rate`.
    #[arg(long, default_value = "concurrency")]
    pub(crate) reactive_signal: String,
    /// Reactive thresholds per replica (concurrency), comma separated: one
    /// reactive policy each. Default the profile's concurrency.
    #[arg(long = "reactive-target", value_delimiter = ',')]
    pub(crate) reactive_targets: Vec<f64>,
    /// Forecast quantiles the predictive policy sizes for, comma separated: one predictive policy each.
    #[arg(long = "quantile", value_delimiter = ',', default_value = "0.9")]
    pub(crate) quantiles: Vec<f64>,
    /// Forecast step of the predictive policy (`serve` forecasts at the store's resolution, 1m by default).
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    pub(crate) forecast_step: Duration,
    /// History observed before the scored window (the forecaster's warm-up).
    #[arg(long, default_value = "14d", value_parser = humantime::parse_duration)]
    pub(crate) warmup: Duration,
    /// Score at most this long after the warm-up (default: the rest of the trace).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) duration: Option<Duration>,
    #[arg(long, default_value_t = 8)]
    pub(crate) gpus_per_node: u32,
    /// On-demand price per node-hour (default: 8 GPUs at 4.00 per GPU-hour).
    #[arg(long, default_value_t = 32.0)]
    pub(crate) node_price: f64,
    /// Reserved nodes, always up and always paid.
    #[arg(long, default_value_t = 0)]
    pub(crate) reserved_nodes: u32,
    #[arg(long, default_value_t = 20.0)]
    pub(crate) reserved_price: f64,
    /// Node provisioning time (default the profile's node_boot).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) node_boot: Option<Duration>,
    /// Simulation step in seconds (must divide a minute).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) step: f64,
    /// The profile the policies are given is this factor off the fleet's true
    /// capacity (0.7: it claims 30% less); the oracle and the fleet's physics
    /// keep the true one.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) profile_error: f64,
    /// The predictive policy learns per-replica capacity from the fleet, as
    /// `serve` does (`sizing.learn_capacity`).
    #[arg(long)]
    pub(crate) learn_capacity: bool,
    /// The predictive policy offers, every hour, the reserved nodes its
    /// forecast leaves idle for this long; the offers are scored against the run.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) spare_horizon: Option<Duration>,
    /// Write summary.json and timeline.csv here.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

impl SimulateArgs {
    /// Where the demand comes from: a ServeGen trace, a CSV series, or the generator.
    fn trace_input(&self) -> TraceInput {
        match (&self.trace, &self.servegen) {
            (_, Some(path)) => TraceInput::ServeGen { path: path.clone(), clients: self.clients.clone() },
            (Some(csv), None) => TraceInput::Series(CsvInput {
                path: csv.clone(),
                time_col: self.time_col.clone(),
                value_col: self.value_col.clone(),
                freq: None,
            }),
            (None, None) => TraceInput::Synthetic(Synthetic {
                days: self.days,
                level_shift_day: self.level_shift_day,
                seed: self.seed,
                ..Default::default()
            }),
        }
    }
}

#[derive(Serialize)]
struct Summary<'a> {
    trace: String,
    profile: &'a str,
    peak_rps: f64,
    warmup_minutes: usize,
    token_mix: TokenMix,
    capacity: &'a Capacity,
    pool: &'a Pool,
    sim: &'a SimConfig,
    reports: Vec<&'a replay::Report>,
}

/// Run the comparison and print a table (or JSON) to `out`.
pub(crate) fn run_simulate(args: &SimulateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let profile = load_profile(&args.model_profile).context("loading the model profile")?;
    let (mut mix, bursts) = match &args.requests {
        Some(p) => {
            let rows = load_trace(p).map_err(anyhow::Error::msg).context("reading --requests")?;
            (TokenMix::of_requests(&rows).context("empty request log")?, Some(rows))
        }
        None => (TokenMix::azure_conversation(), None),
    };
    let (mut full, trace_name) = match &args.trace_input() {
        TraceInput::Series(input) => {
            let mut header = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(
                    std::fs::File::open(&input.path).with_context(|| format!("opening {}", input.path.display()))?,
                ),
                &mut header,
            )
            .with_context(|| format!("reading {}", input.path.display()))?;
            if header.contains("ContextTokens") {
                bail!(
                    "{} is a request log (Azure LLM trace format), not a rate series: pass it as --requests \
                     (token mix and bursts) beside a --trace series or --synthetic",
                    input.path.display()
                );
            }
            let loaded = read_csv(input)?;
            (Demand::from_series(&loaded.series, args.peak_rps, mix)?, input.path.display().to_string())
        }
        // Scaled like a recorded series, so --peak-rps means the same for both.
        TraceInput::ServeGen { path, clients } => {
            let (d, name) = load_servegen(path, clients, args.peak_rps, args.seed)?;
            mix = d.mix;
            (d, name)
        }
        TraceInput::Synthetic(g) => {
            let d = g.generate(mix)?;
            let series = crate::forecast::Series { start: d.start, step: 60, values: d.rate };
            (Demand::from_series(&series, args.peak_rps, mix)?, format!("synthetic(seed {})", g.seed))
        }
    };
    if let Some(rows) = &bursts {
        full = full.with_bursts(rows, 0)?;
    }
    let warm = (args.warmup.as_secs() / 60) as usize;
    if warm >= full.minutes() {
        bail!(
            "the trace spans {} minutes, all of them inside the {}-minute warm-up: shorten --warmup",
            full.minutes(),
            warm
        );
    }
    let end = args.duration.map_or(full.minutes(), |d| (warm + (d.as_secs() / 60) as usize).min(full.minutes()));
    let window = full.window(warm, end);
    // Recorded arrivals were observed as they are; a rate shape gets Poisson noise.
    let history =
        if full.arrivals.is_some() { full.rate[..warm].to_vec() } else { observed(&full.rate[..warm], args.seed) };

    let pool = Pool {
        gpus_per_node: args.gpus_per_node,
        provisioning_secs: args.node_boot.map_or(profile.cold_start_secs.node_boot, |d| d.as_secs_f64()),
        price_per_node_hour: args.node_price,
        reserved_nodes: args.reserved_nodes,
        reserved_price_per_node_hour: args.reserved_price,
    };
    let cap = Capacity::new(&profile, mix, &pool)?;
    // What the policies are told: the profile, off by --profile-error (the oracle knows the truth).
    if !(args.profile_error.is_finite() && (0.1..=10.0).contains(&args.profile_error)) {
        bail!("--profile-error must be within 0.1..=10, got {}", args.profile_error);
    }
    let told = {
        let mut p = profile.clone();
        p.concurrency_per_replica *= args.profile_error;
        p.generation_tokens_per_sec = p.generation_tokens_per_sec.map(|g| g * args.profile_error);
        Capacity::new(&p, mix, &pool)?
    };
    let cfg = SimConfig { seed: args.seed, step_secs: args.step, ..SimConfig::default() };
    if let Some(t) = args.reactive_targets.iter().find(|t| !(t.is_finite() && **t > 0.0)) {
        bail!("--reactive-target must be a number > 0, got {t}");
    }
    let targets = if args.reactive_targets.is_empty() { vec![told.slots] } else { args.reactive_targets.clone() };
    let signals: Vec<ReactiveSignal> = match args.reactive_signal.as_str() {
        "concurrency" => targets.iter().map(|t| ReactiveSignal::Concurrency { target: *t }).collect(),
        "request_rate" => vec![ReactiveSignal::RequestRate],
        other => bail!("--reactive-signal {other:?}: expected concurrency or request_rate"),
    };

    let mut policies: Vec<(Box<dyn Policy + Send>, SimConfig)> = Vec::new();
    for name in &args.policies {
        if *name == PolicyName::Predictive {
            for q in &args.quantiles {
                let p = Predictive::new(
                    PredictiveConfig {
                        lookahead_secs: cap.cold_start_secs(),
                        quantile: *q,
                        bucket_secs: args.forecast_step.as_secs() as i64,
                        learn_capacity: args.learn_capacity,
                        spare_horizon_secs: args.spare_horizon.map(|d| d.as_secs_f64()),
                        ..PredictiveConfig::default()
                    },
                    &told,
                )?;
                // Foresight stabilises scale-down itself, so its ScaledObject sets the
                // HPA's window to 0 (deploy/keda/scaledobject.yaml).
                let hpa = HpaConfig { scale_down_window_secs: 0.0, ..HpaConfig::default() };
                policies.push((Box::new(p), SimConfig { hpa: Some(hpa), ..cfg.clone() }));
            }
            continue;
        }
        if *name == PolicyName::Reactive {
            for signal in &signals {
                policies.push((Box::new(Reactive { signal: *signal, cap: told.clone() }), cfg.clone()));
            }
            continue;
        }
        let p: (Box<dyn Policy + Send>, SimConfig) = match name {
            PolicyName::Static => (Box::new(Static::at_peak(&window, &told)), cfg.clone()),
            PolicyName::Reactive => continue,
            // Foresight stabilises scale-down itself, so its ScaledObject sets the
            // HPA's window to 0 (deploy/keda/scaledobject.yaml).
            PolicyName::Predictive => continue,
            PolicyName::Oracle => (Box::new(Oracle::new(&window, &cap, &cfg, cap.cold_start_secs())), cfg.clone()),
        };
        policies.push(p);
    }

    let bar = indicatif::ProgressBar::new((window.minutes() * policies.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} simulating [{bar:30}] {percent}% of minutes, {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let runs: Vec<anyhow::Result<Run>> = std::thread::scope(|s| {
        let handles: Vec<_> = policies
            .into_iter()
            .map(|(mut p, c)| {
                let (window, history, cap, pool, bar) = (&window, &history, &cap, &pool, &bar);
                s.spawn(move || {
                    replay::simulate(window, history, cap, pool, &c, p.as_mut(), &mut |_| bar.inc(1))
                        .map_err(anyhow::Error::from)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a policy run panicked"))))
            .collect()
    });
    bar.finish_and_clear();
    let runs: Vec<Run> = runs.into_iter().collect::<anyhow::Result<_>>()?;

    let summary = Summary {
        trace: trace_name,
        profile: &profile.name,
        peak_rps: args.peak_rps,
        warmup_minutes: warm,
        token_mix: mix,
        capacity: &cap,
        pool: &pool,
        sim: &cfg,
        reports: runs.iter().map(|r| &r.report).collect(),
    };
    if let Some(dir) = &args.out {
        write_outputs(dir, &summary, &runs)?;
    }
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &summary)?;
        writeln!(out)?;
    } else {
        print_table(out, &summary, &runs)?;
    }
    Ok(())
}

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
fn load_servegen(
    path: &std::path::Path,
    only: &[String],
    peak_rps: f64,
    seed: u64,
) -> anyhow::Result<(Demand, String)> {
    let (dir, model, mut clients) = load_clients(path, only)?;
    let means = dir.parent().map(|p| p.join("token_means_6h.csv"));
    let mix = match means.as_ref().filter(|p| p.exists()) {
        Some(p) => {
            let body = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            replay::servegen::token_mix(&body, &model, &clients)?
        }
        None => None,
    };
    let mix = mix.unwrap_or_else(|| {
        tracing::warn!(model, "no ServeGen token means for these clients: using the Azure conversation mix");
        TokenMix::azure_conversation()
    });
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
    Ok((demand, name))
}

/// What the fleet saw during the warm-up: Poisson arrivals per minute, as a rate.
fn observed(rate: &[f64], seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x005e_ed0f_ba5e);
    rate.iter()
        .map(|r| if *r > 0.0 { Poisson::new(r * 60.0).map_or(*r, |p| p.sample(&mut rng) / 60.0) } else { 0.0 })
        .collect()
}

fn print_table(out: &mut dyn Write, s: &Summary<'_>, runs: &[Run]) -> anyhow::Result<()> {
    let days = runs.first().map_or(0.0, |r| r.report.minutes as f64 / 1440.0);
    writeln!(
        out,
        "{}: {:.1} days simulated after a {:.1}-day warm-up; {} ({} GPU/replica, {:.1} req/s per replica at {} slots, {:.0} s cold start); peak {} req/s",
        s.trace,
        days,
        s.warmup_minutes as f64 / 1440.0,
        s.profile,
        s.capacity.gpus_per_replica,
        s.capacity.requests_per_sec,
        s.capacity.slots,
        s.capacity.cold_start_secs(),
        s.peak_rps
    )?;
    let oracle = runs.iter().find(|r| r.report.policy == "oracle").map(|r| r.report.gpu_hours);
    writeln!(
        out,
        "{:<28} {:>10} {:>8} {:>10} {:>9} {:>10} {:>8} {:>10} {:>9} {:>9}",
        "policy",
        "GPU-hours",
        "x oracle",
        "cost",
        "SLO met",
        "viol. min",
        "cold st",
        "peak queue",
        "idle GPUh",
        "dropped"
    )?;
    for r in runs.iter().map(|r| &r.report) {
        let ratio = oracle.filter(|o| *o > 0.0).map_or("-".to_string(), |o| format!("{:.2}", r.gpu_hours / o));
        writeln!(
            out,
            "{:<28} {:>10.1} {:>8} {:>10.0} {:>8.3}% {:>10} {:>8} {:>10.0} {:>9.1} {:>9.0}",
            r.policy,
            r.gpu_hours,
            ratio,
            r.cost,
            r.slo_attainment * 100.0,
            r.violation_minutes,
            r.cold_starts,
            r.peak_queue,
            r.idle_gpu_hours,
            r.dropped
        )?;
    }
    for r in runs.iter().map(|r| &r.report) {
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

fn write_outputs(dir: &std::path::Path, s: &Summary<'_>, runs: &[Run]) -> anyhow::Result<()> {
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
            ])?;
        }
    }
    w.flush()?;
    Ok(())
}
