//! `foresight simulate`: load a trace, build the policies, run them side by
//! side and print the comparison. The I/O edge around [`crate::replay`].

use std::{io::Write, path::PathBuf, time::Duration};

use anyhow::{bail, Context};
use serde::Serialize;

pub(super) use super::simulate_input::load_clients;
use super::{
    simulate_input::{load_servegen, observed},
    simulate_report::{print_table, write_outputs, Summary},
};
use crate::{
    cli::forecast::{read_csv, CsvInput},
    config::{load_profile, Settings},
    fake_vllm::demand::load_trace,
    replay::{
        self, frontier,
        policy::{Policy, Reactive, ReactiveSignal, Static},
        shipped::{settings, SettingsInput, Shipped},
        Capacity, Demand, HpaConfig, Oracle, Pool, Run, SimConfig, Synthetic, TokenMix,
    },
    sizing::profile::Profile,
    sources::Signal,
};

/// Which policy to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PolicyName {
    Static,
    Reactive,
    Predictive,
    Yardstick,
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
    /// Foresight's config: the predictive policy runs `serve`'s engine with
    /// its forecast, sizing, store resolution and pools, on one of its
    /// workloads (`--workload`). Without it, the shipped defaults.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// The config's workload to replay (default: its first).
    #[arg(long, requires = "config")]
    pub(crate) workload: Option<String>,
    /// A built-in profile name or a profile YAML file (default: the config
    /// workload's, else llama-3.1-8b-h100).
    #[arg(long)]
    pub(crate) model_profile: Option<String>,
    /// Without --config: the workload's target signal (the shipped default is concurrency).
    #[arg(long, default_value = "concurrency")]
    pub(crate) target_signal: String,
    /// Policies to compare (comma separated).
    #[arg(
        long = "policy",
        value_enum,
        value_delimiter = ',',
        default_value = "static,reactive,predictive,yardstick,oracle"
    )]
    pub(crate) policies: Vec<PolicyName>,
    /// What the reactive trigger watches: `concurrency` (running + waiting) or `request_rate`.
    #[arg(long, default_value = "concurrency")]
    pub(crate) reactive_signal: String,
    /// Reactive thresholds per replica (concurrency), comma separated: one
    /// reactive policy each, under every HPA behaviour. Default the profile's concurrency.
    #[arg(long = "reactive-target", value_delimiter = ',')]
    pub(crate) reactive_targets: Vec<f64>,
    /// A second KEDA trigger on the waiting requests per replica, comma
    /// separated: each threshold is also run with each of these.
    #[arg(long = "queue-target", value_delimiter = ',')]
    pub(crate) queue_targets: Vec<f64>,
    /// The HPA's scale-down stabilisation windows reactive runs under, comma separated.
    #[arg(long = "hpa-scale-down", value_delimiter = ',', default_value = "5m", value_parser = humantime::parse_duration)]
    pub(crate) hpa_scale_down: Vec<Duration>,
    /// Static fleets: the warm-up's busiest minute times these, comma separated.
    #[arg(long = "static-scale", value_delimiter = ',', default_value = "1")]
    pub(crate) static_scales: Vec<f64>,
    /// The arrival-blind yardstick's headrooms, comma separated.
    #[arg(long = "yardstick-headroom", value_delimiter = ',', default_value = "1,1.1,1.2,1.3,1.4,1.5,1.75,2")]
    pub(crate) yardstick_headrooms: Vec<f64>,
    /// Forecast quantiles the predictive policy sizes for, comma separated:
    /// one predictive policy each (default the config's `sizing.quantile`, 0.9).
    #[arg(long = "quantile", value_delimiter = ',')]
    pub(crate) quantiles: Vec<f64>,
    /// The replica cap of every policy (default: the config workload's
    /// max_replicas, else 1.5x the replicas the trace's busiest minute needs).
    #[arg(long)]
    pub(crate) max_replicas: Option<u32>,
    /// Pod start on a Ready node that has run the image before (weights load
    /// and engine warm-up; default the profile's image pull + weights load).
    /// A node that has not still pulls it: the profile's image pull + weights load.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) pod_start: Option<Duration>,
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
    /// Whether the predictive policy learns per-replica capacity from the
    /// fleet (`sizing.learn_capacity`: on unless the config turns it off).
    #[arg(long)]
    pub(crate) learn_capacity: Option<bool>,
    /// The predictive policy offers, every hour, the reserved nodes its
    /// spare-capacity forecast leaves idle for this long
    /// (`sizing.spare_horizons_secs`); the offers are scored against the run.
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

/// The trace as a demand, its name, and why its token mix is borrowed (if it is).
fn load_demand(args: &SimulateArgs) -> anyhow::Result<(Demand, String, Option<String>)> {
    let (mix, bursts, mut note) = match &args.requests {
        Some(p) => {
            let rows = load_trace(p).map_err(anyhow::Error::msg).context("reading --requests")?;
            (TokenMix::of_requests(&rows).context("empty request log")?, Some(rows), None)
        }
        None => (
            TokenMix::azure_conversation(),
            None,
            Some("no --requests log: the Azure conversation token mix stands in".to_string()),
        ),
    };
    let (mut full, name) = match &args.trace_input() {
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
            let (d, name, missing) = load_servegen(path, clients, args.peak_rps, args.seed)?;
            note = missing;
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
    Ok((full, name, note))
}

/// The profile the fleet really has, with the run's pod start and node boot.
fn true_profile(args: &SimulateArgs) -> anyhow::Result<Profile> {
    let from_config = || -> anyhow::Result<Option<Profile>> {
        let Some(path) = &args.config else { return Ok(None) };
        let s = Settings::load(path)?;
        let w = match &args.workload {
            Some(n) => s.workloads.iter().find(|w| &w.name == n),
            None => s.workloads.first(),
        };
        Ok(w.map(|w| w.profile.clone()))
    };
    let mut profile = match &args.model_profile {
        Some(p) => load_profile(p).context("loading the model profile")?,
        None => match from_config()? {
            Some(p) => p,
            None => load_profile("llama-3.1-8b-h100")?,
        },
    };
    if let Some(d) = args.node_boot {
        profile.cold_start_secs.node_boot = d.as_secs_f64();
    }
    Ok(profile)
}

/// Run the comparison and print a table (or JSON) to `out`.
pub(crate) fn run_simulate(args: &SimulateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let profile = true_profile(args)?;
    let (full, trace_name, token_mix_note) = load_demand(args)?;
    let mix = full.mix;
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
    let history_start = window.start - 60 * history.len() as i64;

    let pool = Pool {
        gpus_per_node: args.gpus_per_node,
        provisioning_secs: profile.cold_start_secs.node_boot,
        price_per_node_hour: args.node_price,
        reserved_nodes: args.reserved_nodes,
        reserved_price_per_node_hour: args.reserved_price,
    };
    let pod_start = |c: Capacity| match args.pod_start {
        Some(d) => c.with_pod_start(d.as_secs_f64()),
        None => c,
    };
    let mut cap = pod_start(Capacity::new(&profile, mix, &pool)?);
    // One replica cap for every policy.
    let peak = full.rate.iter().copied().filter(|r| r.is_finite()).fold(0.0, f64::max);
    let config_cap = match &args.config {
        Some(path) => {
            let s = Settings::load(path)?;
            let w = match &args.workload {
                Some(n) => s.workloads.iter().find(|w| &w.name == n),
                None => s.workloads.first(),
            };
            w.map(|w| w.max_replicas)
        }
        None => None,
    };
    let max_replicas = args
        .max_replicas
        .or(config_cap)
        .unwrap_or_else(|| (f64::from(cap.replicas_for_rate(peak)) * 1.5).ceil() as u32)
        .max(1);
    cap.max_replicas = max_replicas;
    // What the policies are told: the profile, off by --profile-error (the oracle knows the truth).
    if !(args.profile_error.is_finite() && (0.1..=10.0).contains(&args.profile_error)) {
        bail!("--profile-error must be within 0.1..=10, got {}", args.profile_error);
    }
    let told_profile = {
        let mut p = profile.clone();
        p.concurrency_per_replica *= args.profile_error;
        p.generation_tokens_per_sec = p.generation_tokens_per_sec.map(|g| g * args.profile_error);
        p
    };
    let mut told = pod_start(Capacity::new(&told_profile, mix, &pool)?);
    told.max_replicas = max_replicas;
    let cfg = SimConfig { seed: args.seed, step_secs: args.step, ..SimConfig::default() };
    let policies = build_policies(
        args,
        &PolicyInputs {
            cap: &cap,
            told: &told,
            told_profile: &told_profile,
            pool: &pool,
            cfg: &cfg,
            window: &window,
            history: &history,
            history_start,
            max_replicas,
        },
    )?;

    let bar = indicatif::ProgressBar::new((window.minutes() * policies.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} simulating [{bar:30}] {percent}% of minutes, {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    // As many runs at once as there are cores: each is one thread's work.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let queue = std::sync::Mutex::new(policies.into_iter().enumerate().collect::<Vec<_>>());
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..cores {
            s.spawn(|| loop {
                let Some((i, (mut p, c))) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop() else { return };
                let run = replay::simulate(&window, &cap, &pool, &c, p.as_mut(), &mut |_| bar.inc(1));
                done.lock().unwrap_or_else(|e| e.into_inner()).push((i, run.map_err(anyhow::Error::from)));
            });
        }
    });
    bar.finish_and_clear();
    let mut runs = done.into_inner().unwrap_or_else(|e| e.into_inner());
    runs.sort_by_key(|(i, _)| *i);
    let runs: Vec<Run> = runs.into_iter().map(|(_, r)| r).collect::<anyhow::Result<_>>()?;

    let reports: Vec<&replay::Report> = runs.iter().map(|r| &r.report).collect();
    let summary = Summary {
        trace: trace_name,
        profile: &profile.name,
        peak_rps: args.peak_rps,
        warmup_minutes: warm,
        token_mix: mix,
        token_mix_note,
        capacity: &cap,
        pool: &pool,
        sim: &cfg,
        max_replicas,
        reading: frontier::read(&reports, |r| r.gpu_hours),
        reading_held: frontier::read(&reports, |r| r.held_gpu_hours),
        reports,
    };
    if let Some(dir) = &args.out {
        write_outputs(dir, &summary, &runs)?;
    }
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &summary)?;
        writeln!(out)?;
    } else {
        print_table(out, &summary)?;
    }
    Ok(())
}

/// What the policies are built from.
struct PolicyInputs<'a> {
    /// The fleet's true capacity (the oracle and yardstick plan on it).
    cap: &'a Capacity,
    /// What the policies are told.
    told: &'a Capacity,
    told_profile: &'a Profile,
    pool: &'a Pool,
    cfg: &'a SimConfig,
    window: &'a Demand,
    history: &'a [f64],
    history_start: i64,
    max_replicas: u32,
}

type Runnable = (Box<dyn Policy + Send>, SimConfig);

/// Every policy of the comparison, each with the loop it runs under.
fn build_policies(args: &SimulateArgs, i: &PolicyInputs<'_>) -> anyhow::Result<Vec<Runnable>> {
    let bad = |xs: &[f64]| xs.iter().copied().find(|t| !(t.is_finite() && *t > 0.0));
    if let Some(t) = bad(&args.reactive_targets).or(bad(&args.queue_targets)) {
        bail!("--reactive-target and --queue-target must be numbers > 0, got {t}");
    }
    if let Some(h) = bad(&args.yardstick_headrooms).or(bad(&args.static_scales)) {
        bail!("--yardstick-headroom and --static-scale must be numbers > 0, got {h}");
    }
    let targets = if args.reactive_targets.is_empty() { vec![i.told.slots] } else { args.reactive_targets.clone() };
    let signals: Vec<ReactiveSignal> = match args.reactive_signal.as_str() {
        "concurrency" => targets
            .iter()
            .flat_map(|t| {
                std::iter::once(None)
                    .chain(args.queue_targets.iter().map(|q| Some(*q)))
                    .map(|queue| ReactiveSignal::Concurrency { target: *t, queue })
            })
            .collect(),
        "request_rate" => vec![ReactiveSignal::RequestRate],
        other => bail!("--reactive-signal {other:?}: expected concurrency or request_rate"),
    };
    let target: Signal = serde_json::from_value(serde_json::Value::String(args.target_signal.clone()))
        .map_err(|_| anyhow::anyhow!("--target-signal {:?}: not a signal Foresight reads", args.target_signal))?;
    // Without a config, the target's units one replica handles, from what it is told.
    let per_replica = match target {
        Signal::Concurrency | Signal::Running | Signal::QueueDepth => i.told_profile.concurrency_per_replica,
        Signal::RequestRate => i.told.requests_per_sec,
        Signal::GenerationTokensRate => i.told.slots / i.told.itl_secs,
        Signal::PromptTokensRate => i.told.requests_per_sec * i.told.prompt_tokens,
        other => bail!(
            "--target-signal {other}: the simulator replays concurrency, running, queue_depth, request_rate and the token rates"
        ),
    };
    let lead = i.cap.cold_start_secs();
    let mut policies: Vec<Runnable> = Vec::new();
    for name in &args.policies {
        match name {
            PolicyName::Static => {
                for s in &args.static_scales {
                    let mut p = Static::from_history(i.history, i.told, *s);
                    if args.static_scales.len() > 1 {
                        p.name = format!("static({}, x{s})", p.replicas);
                    }
                    policies.push((Box::new(p), i.cfg.clone()));
                }
            }
            PolicyName::Reactive => {
                for down in &args.hpa_scale_down {
                    let hpa = HpaConfig { scale_down_window_secs: down.as_secs_f64(), ..HpaConfig::default() };
                    for signal in &signals {
                        let p = Reactive { signal: *signal, cap: i.told.clone(), down_secs: down.as_secs_f64() };
                        policies.push((Box::new(p), SimConfig { hpa: Some(hpa.clone()), ..i.cfg.clone() }));
                    }
                }
            }
            PolicyName::Predictive => {
                let quantiles: Vec<Option<f64>> = if args.quantiles.is_empty() {
                    vec![None]
                } else {
                    args.quantiles.iter().copied().map(Some).collect()
                };
                for q in quantiles {
                    let config = args.config.as_deref().map(Settings::load).transpose()?;
                    let settings = settings(
                        config,
                        &SettingsInput {
                            workload: args.workload.as_deref(),
                            told: i.told_profile,
                            target,
                            per_replica,
                            max_replicas: i.max_replicas,
                            quantile: q,
                            learn_capacity: args.learn_capacity,
                            spare_horizon_secs: args.spare_horizon.map(|d| d.as_secs()),
                            pool: i.pool,
                            from: i.history_start,
                            until: i.window.start + 60 * i.window.minutes() as i64,
                        },
                    )?;
                    let learns = if settings.sizing.learn_capacity { ", learned capacity" } else { "" };
                    let name = format!("predictive(p{}{learns})", (settings.sizing.quantile * 1000.0).round() / 10.0);
                    let spare = args.spare_horizon.map(|d| d.as_secs());
                    let p = Shipped::scoring_spare(name, &settings, i.history, i.history_start, i.cap, spare)?;
                    // Foresight stabilises scale-down itself, so its ScaledObject sets the
                    // HPA's window to 0 (deploy/keda/scaledobject.yaml).
                    let hpa = HpaConfig { scale_down_window_secs: 0.0, ..HpaConfig::default() };
                    policies.push((Box::new(p), SimConfig { hpa: Some(hpa), ..i.cfg.clone() }));
                }
            }
            PolicyName::Yardstick => {
                for h in &args.yardstick_headrooms {
                    let p = replay::yardstick::arrival_blind(i.window, i.cap, i.cfg, lead, *h);
                    policies.push((Box::new(p), i.cfg.clone()));
                }
            }
            PolicyName::Oracle => {
                policies.push((Box::new(Oracle::new(i.window, i.cap, i.cfg, lead)), i.cfg.clone()));
            }
        }
    }
    Ok(policies)
}
