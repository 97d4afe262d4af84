//! The command line: each command's arguments (clap derives on the
//! structs the commands take) and the dispatch. One file per command:
//! `serve` (the server's wiring and drain), `check_config`, `explain`,
//! `forecast` (`backtest` and `forecast`), `simulate`, and `tools`
//! (`history`, `vllm-sim`). Each is an edge: files, terminals and sockets
//! around the library's pure code.

mod check_config;
pub(crate) mod explain;
pub mod forecast;
mod roles;
pub(crate) mod serve;
pub(crate) mod simulate;
mod simulate_input;
mod simulate_report;
pub mod tools;

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

use crate::telemetry::{self, LogFormat};
use forecast::{run_backtest, run_forecast, BacktestArgs, CsvInput, ForecastArgs};
use serve::ConfigSource;
use simulate::{run_simulate, SimulateArgs};
use tools::{history, sim_export, sim_serve};

/// Predictive autoscaler for LLM inference: a KEDA external scaler that sizes
/// replicas ahead of demand.
#[derive(Parser)]
#[command(name = "foresight", version, about)]
pub struct Cli {
    /// Log format on stderr (filter with RUST_LOG).
    #[arg(long, global = true, value_enum, default_value = "text", env = "FORESIGHT_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// A command that prints a report and exits, rather than a server: it
    /// should end quietly when its reader goes away (`... | head`), as Unix
    /// tools do, instead of panicking on the broken pipe. Servers keep
    /// SIGPIPE ignored, so a client that hangs up is an error, not an exit.
    pub fn is_report(&self) -> bool {
        !matches!(self.command, Command::Serve { .. } | Command::VllmSim(SimCommand::Serve { .. }))
    }
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
    Simulate(Box<SimulateArgs>),
    /// Size ServeGen's real token mixes as one monolithic fleet and as prefill/decode roles; report GPU-hours.
    CompareRoles(roles::CompareRolesArgs),
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

/// Run the command line's command.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::CheckConfig { file } => check_config::run(&file),
        Command::Explain { workload, config, kubeconfig, context, replicas, json } => {
            let args = explain::ExplainArgs { config, workload, kubeconfig, context, replicas, json };
            report(explain::run(&args, &mut std::io::stdout().lock()))
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
        Command::Simulate(a) => report(run_simulate(&a, &mut std::io::stdout().lock())),
        Command::CompareRoles(a) => report(roles::run_compare_roles(&a, &mut std::io::stdout().lock())),
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
            match runtime.block_on(serve::serve(source)) {
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
