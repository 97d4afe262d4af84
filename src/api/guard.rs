//! What stands in front of the handlers: with `http.bearer_token_file`, a
//! bearer token on `/api/*` and `/ui` (probes stay open for the kubelet, and
//! `/metrics` for Prometheus unless `http.token_on_metrics`); a request body limit (every endpoint is a
//! GET, so anything sizeable is refused); and a cap on requests in flight,
//! past which the server answers 503 at once instead of queueing, so a flood
//! costs the flooder, not the control loop.

use std::sync::Arc;

use axum::{
    error_handling::HandleErrorLayer,
    extract::{DefaultBodyLimit, Request},
    http::{header, HeaderValue, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    BoxError, Router,
};
use tower::ServiceBuilder;

use super::problem::Problem;
use crate::config::{HttpSettings, Secret};

/// Largest request body accepted.
pub(crate) const MAX_BODY_BYTES: usize = 16 * 1024;

/// Wrap `router` in the guards `settings` ask for.
pub fn guard(router: Router, settings: &HttpSettings) -> Router {
    let router = match settings.bearer_token.clone() {
        None => router,
        Some(token) => {
            let token = Arc::new(token);
            let metrics = settings.token_on_metrics;
            router.layer(middleware::from_fn(move |req: Request, next: Next| {
                let token = token.clone();
                async move { require_token(&token, metrics, req, next).await }
            }))
        }
    };
    router.layer(DefaultBodyLimit::max(MAX_BODY_BYTES)).layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(|e: BoxError| async move {
                let mut r = Problem::new(StatusCode::SERVICE_UNAVAILABLE, format!("server busy ({e}); retry shortly"))
                    .into_response();
                r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                r
            }))
            .load_shed()
            .concurrency_limit(settings.max_in_flight),
    )
}

fn protected(path: &str, metrics: bool) -> bool {
    path.starts_with("/api/") || path == "/ui" || path.starts_with("/ui/") || (metrics && path == "/metrics")
}

/// The credentials of an `Authorization: Bearer <token>` header. RFC 9110
/// (11.1) makes the scheme name case-insensitive and separates it from the
/// credentials by one or more spaces, so `bearer` and `BEARER` are the same.
fn bearer_credentials(header: &[u8]) -> Option<&[u8]> {
    let space = header.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = header.split_at(space);
    scheme.eq_ignore_ascii_case(b"bearer").then(|| rest.trim_ascii_start())
}

async fn require_token(token: &Secret, metrics: bool, req: Request, next: Next) -> Response {
    if !protected(req.uri().path(), metrics) {
        return next.run(req).await;
    }
    let given = req.headers().get(header::AUTHORIZATION).and_then(|v| bearer_credentials(v.as_bytes()));
    match given {
        Some(t) if token.matches(t) => next.run(req).await,
        // The same answer for a missing and a wrong token; neither is logged.
        _ => {
            let mut r = Problem::new(
                StatusCode::UNAUTHORIZED,
                "this endpoint needs `Authorization: Bearer <token>` (http.bearer_token_file)",
            )
            .into_response();
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::{body::Body, routing::get};
    use tower::ServiceExt;

    use super::*;

    async fn status(router: &Router, path: &str, token: Option<&str>) -> u16 {
        let mut req = axum::http::Request::get(path);
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        router.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap().status().as_u16()
    }

    #[tokio::test]
    async fn metrics_need_the_token_only_when_configured() {
        let routes = Router::new().route("/metrics", get(|| async { "m" })).route("/healthz", get(|| async { "ok" }));
        let token = "0123456789abcdef";
        for on_metrics in [false, true] {
            let settings = HttpSettings {
                listen: ([127, 0, 0, 1], 0).into(),
                tls: None,
                bearer_token: Some(Secret::new(token)),
                token_on_metrics: on_metrics,
                max_in_flight: 8,
            };
            let router = guard(routes.clone(), &settings);
            assert_eq!(status(&router, "/metrics", None).await, if on_metrics { 401 } else { 200 });
            assert_eq!(status(&router, "/metrics", Some(token)).await, 200);
            assert_eq!(status(&router, "/healthz", None).await, 200, "probes stay open");
        }
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_as_rfc_9110_says() {
        for h in ["Bearer abc", "bearer abc", "BEARER abc", "bEaReR   abc"] {
            assert_eq!(bearer_credentials(h.as_bytes()), Some(&b"abc"[..]), "{h}");
        }
        for h in ["Basic abc", "Bearerabc", "Bearer", "abc"] {
            assert_eq!(bearer_credentials(h.as_bytes()), None, "{h}");
        }
    }
}
