//! `foresight check-config FILE`: validate a config and print what it
//! configures.

use std::process::ExitCode;

use crate::config::Settings;

/// Validate `file`, print what it configures; exit 1 if invalid.
pub(super) fn run(file: &std::path::Path) -> ExitCode {
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
