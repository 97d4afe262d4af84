//! What stands in front of the handlers: with `http.bearer_token_file`, a
//! bearer token on `/api/*` and `/ui` (probes and `/metrics` stay open, for
//! the kubelet and Prometheus); a request body limit (every endpoint is a
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
            router.layer(middleware::from_fn(move |req: Request, next: Next| {
                let token = token.clone();
                async move { require_token(&token, req, next).await }
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

fn protected(path: &str) -> bool {
    path.starts_with("/api/") || path == "/ui" || path.starts_with("/ui/")
}

async fn require_token(token: &Secret, req: Request, next: Next) -> Response {
    if !protected(req.uri().path()) {
        return next.run(req).await;
    }
    let given = req.headers().get(header::AUTHORIZATION).and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
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
