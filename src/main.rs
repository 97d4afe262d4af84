//! The `foresight` binary: a thin edge over the library.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use foresight::{
    app::{self, ConfigSource},
    cli_forecast::{run_backtest, run_forecast, BacktestArgs, CsvInput, ForecastArgs},
    cli_sim::{run_simulate, PolicyName, SimulateArgs, TraceInput},
    cli_tools::{history, sim_export, sim_serve},
    config::Settings,
    telemetry::{self, LogFormat},
};

/// Predictive autoscaler for LLM inference: a KEDA external scaler that sizes
/// replicas ahead of demand.
#[derive(Parser)]
#[command(name = "foresight", version, about)]
struct Cli {
    /// Log format on stderr (filter with RUST_LOG).
    #[arg(long, global = true, value_enum, default_value = "text", env = "FORESIGHT_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the KEDA external scaler (gRPC) and the HTTP server.
    Serve {
        /// Config file (YAML).
        #[arg(long, short, env = "FORESIGHT_CONFIG", conflicts_with = "demo", required_unless_present = "demo")]
        config: Option<PathBuf>,
        /// Run the built-in demo: simulated vLLM fleets on 127.0.0.1, nothing else needed.
        #[arg(long)]
        demo: bool,
    },
    /// Validate a config file and print what it configures; exit 1 if invalid.
    CheckConfig {
        /// Config file (YAML).
        file: PathBuf,
    },
    /// Explain a workload's replica shape: where each part came from (config,
    /// profile, or the cluster's objects), which pools can host it and why the
    /// others cannot, its pending pods, and what N replicas would pre-warm.
    Explain {
        /// `namespace/name`, or a name that is unique.
        workload: String,
        #[arg(long, short, env = "FORESIGHT_CONFIG")]
        config: PathBuf,
        /// Read the cluster through this kubeconfig (default: config's `kubernetes:`, if any).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context (default: its current context).
        #[arg(long)]
        context: Option<String>,
        /// Replicas to plan nodes for (default: the target's desired replicas).
        #[arg(long)]
        replicas: Option<u32>,
        #[arg(long)]
        json: bool,
    },
    /// Print a workload's stored history as CSV (while `serve` is stopped: the store is locked while it runs).
    History {
        #[arg(long, short, env = "FORESIGHT_CONFIG")]
        config: PathBuf,
        /// `namespace/name`, or a name that is unique.
        #[arg(long)]
        workload: String,
        #[arg(long, default_value = "concurrency")]
        signal: String,
        /// How far back, in minutes.
        #[arg(long, default_value_t = 60.0)]
        minutes: f64,
    },
    /// Rolling-origin backtest of every forecasting model, and of the automatic choice, on a CSV.
    Backtest {
        #[command(flatten)]
        csv: CsvArgs,
        #[command(flatten)]
        shape: ShapeArgs,
        /// Number of rolling origins (the last leaves one horizon to score).
        #[arg(long, default_value_t = 24)]
        origins: usize,
        /// Distance between origins, steps or a duration; default one horizon.
        #[arg(long)]
        step: Option<String>,
        /// Train on at most this much history before each origin; default all of it.
        #[arg(long)]
        train_window: Option<String>,
        /// Only these models (comma separated); `auto` is always included.
        #[arg(long = "model", value_delimiter = ',')]
        models: Vec<String>,
        /// Write summary.json, series.csv, splits.csv and forecasts.csv here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Forecast past the end of a CSV (e.g. `foresight history` output).
    Forecast {
        #[command(flatten)]
        csv: CsvArgs,
        #[command(flatten)]
        shape: ShapeArgs,
        /// `auto`, or a model name (see `foresight backtest`).
        #[arg(long, default_value = "auto")]
        model: String,
        #[arg(long, value_delimiter = ',', default_value = "0.5,0.9")]
        quantiles: Vec<f64>,
        /// Print the forecast as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Simulated vLLM pods, for trying Foresight or feeding a Prometheus.
    #[command(subcommand)]
    VllmSim(SimCommand),
    /// Replay a demand trace against scaling policies; report GPU-hours and SLO attainment.
    Simulate(Box<SimulateCli>),
}

#[derive(clap::Args)]
struct SimulateCli {
    /// Demand shape: a CSV series (`timestamp,value`, e.g. a NAB trace); omit for --synthetic or --servegen.
    #[arg(long, required_unless_present_any = ["synthetic", "servegen"])]
    trace: Option<PathBuf>,
    /// A ServeGen trace: a model's folder of `chunk-<client>-trace.csv`
    /// files (the fleet serves all its clients) or one such file. Arrivals
    /// follow each window's fitted inter-arrival distribution, and the
    /// token mix comes from `token_means_6h.csv` beside the folder.
    #[arg(long, conflicts_with_all = ["trace", "synthetic", "requests"])]
    servegen: Option<PathBuf>,
    /// ServeGen: only these clients (comma separated), e.g. `--clients 19,73`.
    #[arg(long, value_delimiter = ',', requires = "servegen")]
    clients: Vec<String>,
    #[arg(long, default_value = "timestamp")]
    time_col: String,
    #[arg(long, default_value = "value")]
    value_col: String,
    /// Use the built-in generator (daily + weekly cycles, bursts, level shift) instead of a trace.
    #[arg(long, conflicts_with = "trace")]
    synthetic: bool,
    /// Synthetic: days to generate.
    #[arg(long, default_value_t = 21.0)]
    days: f64,
    /// Synthetic: day on which the level shifts (x1.5).
    #[arg(long)]
    level_shift_day: Option<f64>,
    /// Seed for the arrivals (and the synthetic generator).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Request log in the Azure LLM trace format: token mix and minute-level bursts.
    #[arg(long)]
    requests: Option<PathBuf>,
    /// Scale the trace so its 99th percentile minute has this many requests per second.
    #[arg(long, default_value_t = 150.0)]
    peak_rps: f64,
    /// A built-in profile name or a profile YAML file.
    #[arg(long, default_value = "llama-3.1-8b-h100")]
    model_profile: String,
    /// Policies to compare (comma separated).
    #[arg(long = "policy", value_enum, value_delimiter = ',', default_value = "static,reactive,predictive,oracle")]
    policies: Vec<PolicyName>,
    /// What the reactive trigger watches: `concurrency` (running + waiting) or `request_rate`.
    #[arg(long, default_value = "concurrency")]
    reactive_signal: String,
    /// Reactive thresholds per replica (concurrency), comma separated: one
    /// reactive policy each. Default the profile's concurrency.
    #[arg(long = "reactive-target", value_delimiter = ',')]
    reactive_targets: Vec<f64>,
    /// Forecast quantiles the predictive policy sizes for, comma separated: one predictive policy each.
    #[arg(long = "quantile", value_delimiter = ',', default_value = "0.9")]
    quantiles: Vec<f64>,
    /// Forecast step of the predictive policy (`serve` forecasts at the store's resolution, 1m by default).
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    forecast_step: std::time::Duration,
    /// History observed before the scored window (the forecaster's warm-up).
    #[arg(long, default_value = "14d", value_parser = humantime::parse_duration)]
    warmup: std::time::Duration,
    /// Score at most this long after the warm-up (default: the rest of the trace).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<std::time::Duration>,
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// On-demand price per node-hour (default: 8 GPUs at 4.00 per GPU-hour).
    #[arg(long, default_value_t = 32.0)]
    node_price: f64,
    /// Reserved nodes, always up and always paid.
    #[arg(long, default_value_t = 0)]
    reserved_nodes: u32,
    #[arg(long, default_value_t = 20.0)]
    reserved_price: f64,
    /// Node provisioning time (default the profile's node_boot).
    #[arg(long, value_parser = humantime::parse_duration)]
    node_boot: Option<std::time::Duration>,
    /// Simulation step in seconds (must divide a minute).
    #[arg(long, default_value_t = 1.0)]
    step: f64,
    /// Write summary.json and timeline.csv here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// A time series in a CSV file with a header row.
#[derive(clap::Args)]
struct CsvArgs {
    /// The CSV file.
    #[arg(long)]
    csv: PathBuf,
    #[arg(long, default_value = "timestamp")]
    time_col: String,
    #[arg(long, default_value = "value")]
    value_col: String,
    /// Grid step (`5m`, `30m`); default the median spacing of the timestamps.
    #[arg(long, value_parser = humantime::parse_duration)]
    freq: Option<std::time::Duration>,
}

/// How far ahead to forecast, and which seasons to model.
#[derive(clap::Args)]
struct ShapeArgs {
    /// How far ahead each forecast reaches: steps, or a duration (`1h`, `4h`).
    #[arg(long)]
    horizon: String,
    /// Seasonal periods, steps or durations (`--season 1d,7d`); default a day and a week.
    #[arg(long = "season", value_delimiter = ',')]
    seasons: Vec<String>,
}

impl From<CsvArgs> for CsvInput {
    fn from(a: CsvArgs) -> CsvInput {
        CsvInput { path: a.csv, time_col: a.time_col, value_col: a.value_col, freq: a.freq }
    }
}

#[derive(Subcommand)]
enum SimCommand {
    /// Serve each pod's /metrics on its own port; print the URLs as JSON.
    Serve {
        /// Fleet config (YAML, as `source.simulated.fleet`).
        #[arg(long)]
        fleet: PathBuf,
        #[arg(long, default_value = "127.0.0.1")]
        ip: std::net::IpAddr,
        /// Unix time demand starts from (default now); the same origin gives the same requests.
        #[arg(long)]
        origin: Option<f64>,
    },
    /// Write the fleet's metrics over a past time range as timestamped
    /// OpenMetrics, for `promtool tsdb create-blocks-from openmetrics`.
    Export {
        #[arg(long)]
        fleet: PathBuf,
        #[arg(long)]
        origin: f64,
        #[arg(long)]
        from: f64,
        #[arg(long)]
        to: f64,
        #[arg(long, default_value_t = 15.0)]
        step: f64,
        /// Extra labels for each pod, e.g. `job="vllm",instance="127.0.0.1:9001"`; one per pod.
        #[arg(long = "pod-labels")]
        pod_labels: Vec<String>,
    },
}

/// glibc gives each new thread that allocates its own malloc arena, up to 8
/// per core, and each keeps what it freed. The server's short-lived blocking
/// threads (history flushes, forecast fits) then grew its memory by ~9 MiB a
/// minute in the 10-minute soak (`cargo bench --bench soak`, README); with
/// two arenas it levels off within a few minutes.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: called first thing in main, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file } => check_config(&file),
        Command::Explain { workload, config, kubeconfig, context, replicas, json } => {
            let args = foresight::cli_explain::ExplainArgs { config, workload, kubeconfig, context, replicas, json };
            report(foresight::cli_explain::run(&args, &mut std::io::stdout().lock()))
        }
        Command::History { config, workload, signal, minutes } => {
            report(history(&config, &workload, &signal, minutes, &mut std::io::stdout().lock()))
        }
        Command::Backtest { csv, shape: ShapeArgs { horizon, seasons }, origins, step, train_window, models, out } => {
            // `--model auto` alone scores only auto; other names are scored beside it.
            let args = BacktestArgs {
                input: csv.into(),
                horizon,
                seasons,
                origins,
                origin_step: step,
                train_window,
                models,
                out,
            };
            report(run_backtest(&args, &mut std::io::stdout().lock()))
        }
        Command::Forecast { csv, shape: ShapeArgs { horizon, seasons }, model, quantiles, json } => {
            let args = ForecastArgs { input: csv.into(), horizon, seasons, model, quantiles, json };
            report(run_forecast(&args, &mut std::io::stdout().lock()))
        }
        Command::Simulate(a) => {
            let a = *a;
            let trace = match (a.trace, a.servegen) {
                (_, Some(path)) => TraceInput::ServeGen { path, clients: a.clients },
                (Some(csv), None) => {
                    TraceInput::Series(CsvInput { path: csv, time_col: a.time_col, value_col: a.value_col, freq: None })
                }
                (None, None) => TraceInput::Synthetic(foresight::sim::Synthetic {
                    days: a.days,
                    level_shift_day: a.level_shift_day,
                    seed: a.seed,
                    ..Default::default()
                }),
            };
            let args = SimulateArgs {
                trace,
                requests: a.requests,
                peak_rps: a.peak_rps,
                profile: a.model_profile,
                policies: a.policies,
                reactive_signal: a.reactive_signal,
                reactive_targets: a.reactive_targets,
                quantiles: a.quantiles,
                forecast_step: a.forecast_step,
                warmup: a.warmup,
                duration: a.duration,
                gpus_per_node: a.gpus_per_node,
                node_price: a.node_price,
                reserved_nodes: a.reserved_nodes,
                reserved_price: a.reserved_price,
                node_boot: a.node_boot,
                seed: a.seed,
                step_secs: a.step,
                out: a.out,
                json: a.json,
            };
            report(run_simulate(&args, &mut std::io::stdout().lock()))
        }
        Command::VllmSim(SimCommand::Export { fleet, origin, from, to, step, pod_labels }) => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            report(sim_export(&fleet, origin, from, to, step, &pod_labels, &mut out))
        }
        Command::VllmSim(SimCommand::Serve { fleet, ip, origin }) => {
            telemetry::init(cli.log_format);
            match tokio::runtime::Runtime::new() {
                Ok(rt) => report(rt.block_on(sim_serve(&fleet, ip, origin))),
                Err(e) => report(Err(e.into())),
            }
        }
        Command::Serve { config, demo } => {
            telemetry::init(cli.log_format);
            let source = match (config, demo) {
                (Some(path), _) => ConfigSource::File(path),
                (None, _) => ConfigSource::Demo,
            };
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(app::serve(source)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn check_config(file: &std::path::Path) -> ExitCode {
    match Settings::load(file) {
        Ok(s) => {
            println!("{}: ok", s.origin);
            let tls = match &s.grpc.tls {
                None => "plaintext h2c",
                Some(t) if t.client_ca_file.is_some() => "TLS, client certificates required (mTLS)",
                Some(_) => "TLS",
            };
            println!("  grpc  {} ({tls})", s.grpc.listen);
            println!("  http  {}", s.http.listen);
            println!("  tick  {}s", s.tick_interval.as_secs_f64());
            for w in &s.workloads {
                println!(
                    "  workload {}/{}: model {}, replicas {}..={}, sized on {} at {} per replica",
                    w.namespace,
                    w.name,
                    w.profile.name,
                    w.min_replicas,
                    w.max_replicas,
                    w.target.signal,
                    w.target.per_replica
                );
            }
            match &s.kubernetes {
                None => println!("  kubernetes  off (shapes from config and profiles)"),
                Some(k) => println!(
                    "  kubernetes  on ({}), every {}s; actuation {:?} on {} object(s)",
                    k.kubeconfig.as_ref().map_or("in-cluster or $KUBECONFIG".to_string(), |p| p.display().to_string()),
                    k.refresh.as_secs_f64(),
                    k.actuation.mode,
                    k.actuation.targets.len()
                ),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
