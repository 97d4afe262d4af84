//! The HTTP server's guards, end to end against the real binary: HTTPS with
//! and without client certificates, the bearer token on the API (and never in
//! the logs), and the gRPC request size limit. (TLS and mTLS on the gRPC port
//! are in tests/serve.rs.)

use crate::common;

use std::{collections::HashMap, path::Path};

use crate::common::Server;
use foresight::proto::{external_scaler_client::ExternalScalerClient, GetMetricsRequest, ScaledObjectRef};

const TOKEN: &str = "t0ken-that-must-never-be-logged-5f2c";

fn config(dir: &Path, tls: Option<bool>, token: bool) -> String {
    let mut http = String::from("http:\n  listen: 127.0.0.1:0");
    if let Some(client_ca) = tls {
        http += "\n  tls: {cert_file: server.pem, key_file: server.key";
        if client_ca {
            http += ", client_ca_file: ca.pem";
        }
        http += "}";
    }
    if token {
        std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
        http += "\n  bearer_token_file: token";
    }
    common::known_answers().replacen("http:\n  listen: 127.0.0.1:0", &http, 1)
}

fn client(dir: &Path, identity: Option<&str>) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("ca.pem")).unwrap()).unwrap();
    let mut b = reqwest::Client::builder().tls_backend_rustls().tls_certs_only([ca]);
    if let Some(name) = identity {
        let mut pem = std::fs::read(dir.join(format!("{name}.pem"))).unwrap();
        pem.extend(std::fs::read(dir.join(format!("{name}.key"))).unwrap());
        b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    b.build().unwrap()
}

async fn status(c: &reqwest::Client, url: String, token: Option<&str>) -> Result<u16, String> {
    let mut req = c.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.map(|r| r.status().as_u16()).map_err(|e| format!("{e:?}"))
}

async fn wait_https_ready(c: &reqwest::Client, base: &str) {
    for _ in 0..300 {
        if status(c, format!("{base}/readyz"), None).await == Ok(200) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("never ready over HTTPS");
}

/// A server on HTTPS (requiring client certificates with `client_ca`), ready,
/// and already shown to answer the API to a client that trusts its CA and
/// presents `cert`: the directory with its PKI, the server, its base URL.
async fn https_server(client_ca: bool, cert: Option<&str>) -> (tempfile::TempDir, Server, String) {
    let dir = tempfile::tempdir().unwrap();
    common::write_pki(dir.path());
    let s = Server::spawn(dir.path(), &config(dir.path(), Some(client_ca), false), &[]);
    let base = format!("https://localhost:{}", s.http.port());
    let good = client(dir.path(), cert);
    wait_https_ready(&good, &base).await;
    assert_eq!(status(&good, format!("{base}/api/v1/workloads"), None).await, Ok(200));
    (dir, s, base)
}

#[tokio::test]
async fn https_serves_clients_that_trust_the_ca_and_refuses_plaintext() {
    let (_dir, s, base) = https_server(false, None).await;
    assert_eq!(common::http_status(s.http, "/readyz"), None, "plain HTTP gets no HTTP answer from the HTTPS port");
    // A client that trusts another CA does not trust this server.
    let other = tempfile::tempdir().unwrap();
    common::write_pki(other.path());
    assert!(status(&client(other.path(), None), format!("{base}/healthz"), None).await.is_err());
}

#[tokio::test]
async fn https_with_a_client_ca_refuses_clients_without_a_certificate_it_signed() {
    let (dir, _s, base) = https_server(true, Some("client")).await;
    for who in [None, Some("rogue")] {
        let r = status(&client(dir.path(), who), format!("{base}/healthz"), None).await;
        assert!(r.is_err(), "client {who:?} must be refused, got {r:?}");
    }
}

#[tokio::test]
async fn the_api_needs_the_token_probes_and_metrics_do_not_and_no_token_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with_env(dir.path(), &config(dir.path(), None, true), &[("RUST_LOG", "debug")]);
    let base = format!("http://{}", s.http);
    let c = reqwest::Client::new();
    let wrong = "not-the-token-but-also-secret-9a1b";
    for path in ["/api/v1/workloads", "/api/v1/pools", "/api/v1/openapi.json", "/ui"] {
        assert_eq!(status(&c, format!("{base}{path}"), None).await, Ok(401), "{path} without a token");
        assert_eq!(status(&c, format!("{base}{path}"), Some(wrong)).await, Ok(401), "{path} with a wrong token");
        assert_eq!(status(&c, format!("{base}{path}"), Some(TOKEN)).await, Ok(200), "{path} with the token");
    }
    // RFC 9110: the scheme name is case-insensitive, and one or more spaces follow it.
    for scheme in ["bearer", "BEARER", "Bearer  "] {
        let r = c.get(format!("{base}/api/v1/workloads")).header("authorization", format!("{scheme} {TOKEN}"));
        assert_eq!(r.send().await.unwrap().status().as_u16(), 200, "scheme written `{scheme}`");
    }
    let r = c.get(format!("{base}/api/v1/workloads")).header("authorization", format!("Basic {TOKEN}"));
    assert_eq!(r.send().await.unwrap().status().as_u16(), 401, "another scheme with the token's text");
    let r = c.get(format!("{base}/api/v1/workloads")).send().await.unwrap();
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            status(&c, format!("{base}{path}"), None).await,
            Ok(200),
            "{path} stays open for probes and Prometheus"
        );
    }
    // Every endpoint is read-only: a write is refused whoever asks.
    let post = c.post(format!("{base}/api/v1/workloads")).bearer_auth(TOKEN).body("x").send().await.unwrap();
    assert_eq!(post.status().as_u16(), 405);
    let log = s.log.lock().unwrap().join("\n");
    assert!(log.contains("\"http_token\":true"), "the log says a token is required");
    for secret in [TOKEN, wrong] {
        assert!(!log.contains(secret), "a token reached the log");
    }
}

#[tokio::test]
async fn an_oversized_grpc_request_is_refused_and_the_server_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &common::known_answers());
    let mut c = ExternalScalerClient::connect(s.grpc_url()).await.unwrap();
    let req = |extra: usize| {
        let mut md: HashMap<String, String> =
            [("workload", "llama-8b")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        md.insert("padding".into(), "x".repeat(extra));
        GetMetricsRequest {
            scaled_object_ref: Some(ScaledObjectRef {
                name: "so".into(),
                namespace: "inference".into(),
                scaler_metadata: md,
            }),
            metric_name: "foresight-llama-8b-replicas".into(),
        }
    };
    let err = c.get_metrics(req(foresight::scaler::MAX_REQUEST_BYTES + 1)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err:?}");
    let ok = c.get_metrics(req(1024)).await.unwrap().into_inner();
    assert_eq!(ok.metric_values[0].metric_value_float, 4.0);
}
