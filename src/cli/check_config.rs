//! `foresight check-config FILE`: validate a config and print what it
//! configures.

use std::process::ExitCode;

use crate::{config::Settings, serve::state::role_metric, sizing::roles::RoleKind};

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
                for a in &w.assumed {
                    println!("    assumed {a}");
                }
                for r in &w.roles {
                    let p = &r.profile;
                    let on = match r.kind {
                        RoleKind::Prefill => {
                            format!(
                                "uncached prompt tokens/s at {} per replica",
                                p.prefill_tokens_per_sec.unwrap_or(0.0)
                            )
                        }
                        RoleKind::Decode => format!(
                            "sequences at {} per replica{}{}",
                            p.concurrency_per_replica,
                            p.kv_cache_tokens.map(|k| format!(", KV cache {k} tokens")).unwrap_or_default(),
                            p.generation_tokens_per_sec
                                .map(|g| format!(", {g} generated tokens/s"))
                                .unwrap_or_default()
                        ),
                    };
                    println!(
                        "    role {}: metric {}, model {}, replicas {}..={}, sized on {on}",
                        r.kind,
                        role_metric(&w.name, r.kind),
                        p.name,
                        r.min_replicas,
                        r.max_replicas
                    );
                }
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
