//! The `foresight` binary: a thin edge over the library.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use foresight::{
    app::{self, ConfigSource},
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file } => check_config(&file),
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
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
