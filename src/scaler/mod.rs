//! The KEDA external scaler: a gRPC server speaking `externalscaler.proto`
//! (triggers of type `external` and `external-push`), plus the standard
//! `grpc.health.v1` health service.
//!
//! Trigger metadata (see [`metadata`]): `workload` (required), `namespace`
//! (default: the ScaledObject's), `encoding` = `replicas` (default; value =
//! desired replicas, target 1) or `load` (value = load, target = per-replica
//! capacity). Plaintext h2c unless TLS is configured; mTLS when a client CA
//! is given.

mod layer;
pub mod metadata;
mod service;

use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::{server::TcpIncoming, Certificate, Identity, Server, ServerTlsConfig};

pub(crate) use service::Scaler;

use crate::{config::TlsFiles, proto::external_scaler_server::ExternalScalerServer, serve::state::Registry};

/// Read TLS material named in config.
pub(crate) fn tls_config(files: &TlsFiles) -> anyhow::Result<ServerTlsConfig> {
    let read = |p: &std::path::Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(read(&files.cert_file)?, read(&files.key_file)?));
    if let Some(ca) = &files.client_ca_file {
        tls = tls.client_ca_root(Certificate::from_pem(read(ca)?));
    }
    Ok(tls)
}

/// Largest request accepted: a ScaledObjectRef is a name, a namespace and
/// trigger metadata, a few KiB at most; anything larger is refused with
/// OUT_OF_RANGE before it is decoded. No per-connection concurrency
/// limit: KEDA multiplexes one stream per ScaledObject on one connection.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;

/// Serve the scaler and health services on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<ServerTlsConfig>,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<ExternalScalerServer<Scaler>>().await;
    // Cross-cutting concerns as layers, composed here: every call timed and counted.
    let mut builder = Server::builder().tcp_nodelay(true).layer(layer::GrpcMetricsLayer);
    if let Some(tls) = tls {
        builder = builder.tls_config(tls).context("configuring gRPC TLS")?;
    }
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    builder
        .add_service(health_service)
        .add_service(
            ExternalScalerServer::new(Scaler::new(registry, shutdown.clone()))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
        .await
        .context("gRPC server")
}
