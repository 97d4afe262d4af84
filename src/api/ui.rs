//! `/ui`: a page for someone without Grafana: per workload, history,
//! forecast band and planned replicas, drawn from the JSON API. The page
//! and its chart library (uPlot, vendored from npm) are compiled in.

use axum::{http::header, routing::get, Router};

use super::ApiState;

const INDEX: &str = include_str!("ui/index.html");
const APP: &str = include_str!("ui/app.js");
const UPLOT_JS: &str = include_str!("ui/uplot.min.js");
const UPLOT_CSS: &str = include_str!("ui/uplot.min.css");

fn file(body: &'static str, kind: &'static str) -> ([(header::HeaderName, &'static str); 1], &'static str) {
    ([(header::CONTENT_TYPE, kind)], body)
}

pub(crate) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/ui", get(|| async { file(INDEX, "text/html; charset=utf-8") }))
        .route("/ui/", get(|| async { file(INDEX, "text/html; charset=utf-8") }))
        .route("/ui/app.js", get(|| async { file(APP, "text/javascript; charset=utf-8") }))
        .route("/ui/uplot.min.js", get(|| async { file(UPLOT_JS, "text/javascript; charset=utf-8") }))
        .route("/ui/uplot.min.css", get(|| async { file(UPLOT_CSS, "text/css; charset=utf-8") }))
}
