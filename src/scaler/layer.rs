//! Timing and counting every KEDA scaler call, as a tower layer around the
//! gRPC server rather than boilerplate in each handler: one place sees the
//! method (from the path) and the outcome (from `grpc-status`).

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Instant,
};

use tonic::codegen::http;
use tower::{Layer, Service};

/// The scaler's service path; calls to other services (health) are not counted.
const SERVICE: &str = "/externalscaler.ExternalScaler/";

/// The five methods KEDA calls. Anything else under the service path is
/// counted as `other`, so a client cannot mint label values.
const METHODS: [&str; 5] = ["IsActive", "StreamIsActive", "GetMetricSpec", "GetMetrics", "StreamMetricSpec"];

/// Records `foresight_grpc_requests_total` and
/// `foresight_grpc_request_duration_seconds` for each scaler call (to the
/// response headers: for streams, until the stream is open).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GrpcMetricsLayer;

impl<S> Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;
    fn layer(&self, inner: S) -> GrpcMetrics<S> {
        GrpcMetrics { inner }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct GrpcMetrics<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, R> Service<http::Request<B>> for GrpcMetrics<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = method_of(req.uri().path());
        let start = Instant::now();
        let call = self.inner.call(req);
        Box::pin(async move {
            let res = call.await;
            if let Some(method) = method {
                // A handler's error is a trailers-only response: its status is in
                // the headers. No status there: the call succeeded.
                let code = match &res {
                    Ok(r) => r
                        .headers()
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<i32>().ok())
                        .map_or(tonic::Code::Ok, tonic::Code::from_i32),
                    Err(_) => tonic::Code::Unavailable,
                };
                crate::telemetry::grpc_call(method, code, start.elapsed());
            }
            res
        })
    }
}

/// The scaler method a request path names, `other` for an unknown one under
/// the scaler's service, `None` for other services.
fn method_of(path: &str) -> Option<&'static str> {
    let name = path.strip_prefix(SERVICE)?;
    Some(METHODS.iter().copied().find(|m| *m == name).unwrap_or("other"))
}

#[cfg(test)]
mod tests {
    use super::method_of;

    #[test]
    fn only_the_scalers_five_methods_become_labels() {
        assert_eq!(method_of("/externalscaler.ExternalScaler/GetMetrics"), Some("GetMetrics"));
        assert_eq!(method_of("/externalscaler.ExternalScaler/StreamIsActive"), Some("StreamIsActive"));
        assert_eq!(method_of("/externalscaler.ExternalScaler/Made-Up-Name"), Some("other"));
        assert_eq!(method_of("/grpc.health.v1.Health/Check"), None);
        assert_eq!(method_of("/"), None);
    }
}
