//! The Prometheus HTTP API source (also Thanos and Mimir, same API): PromQL
//! per signal, `query_range` to backfill history and to catch up each poll,
//! an instant query for the latest value.
//!
//! History is written per bucket of the store's resolution: the value of
//! bucket [b, b + res) is the query evaluated at b + res, so `rate(x[1m])`
//! at 1-minute resolution is exactly that minute's rate. Only buckets older
//! than `query_delay_secs` are written, so late-ingested samples are in, and
//! replicas of Foresight querying one Prometheus store identical history.
//! Ranges longer than `max_points_per_query` (Prometheus refuses more than
//! 11,000 points per series) are split. A result with several series is
//! summed per timestamp; an empty result is a gap, never a zero.

/// A Prometheus-compatible server may still change a bucket this long after
/// it ended: VictoriaMetrics answers for its newest 30 s (`-search.latencyOffset`)
/// from samples not all searchable yet, remote write and Mimir or Thanos
/// ingestion land late. Such buckets are read again each poll until older.
pub(crate) const LATE_DATA_SECS: f64 = 120.0;

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use serde::Deserialize;

use super::{promql::default_query, Signal};

/// `source: {prometheus: {...}}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PrometheusConfig {
    /// Base URL, e.g. `http://prometheus.monitoring:9090` (Mimir: include the `/prometheus` prefix).
    pub(crate) url: String,
    /// Label matchers that select this workload's series, substituted for
    /// `$selector` in the queries, e.g. `namespace="inference",model_name="llama-8b"`.
    #[serde(default)]
    pub(crate) selector: String,
    /// Range for `rate()`, substituted for `$window`.
    #[serde(default = "default_window")]
    pub(crate) rate_window: String,
    #[serde(default = "default_interval_secs")]
    pub(crate) interval_secs: f64,
    #[serde(default = "default_timeout_secs")]
    pub(crate) timeout_secs: f64,
    /// History to load at start-up (only what the store does not have yet).
    #[serde(default = "default_backfill_days")]
    pub(crate) backfill_days: f64,
    /// Wait this long after a bucket ends before writing it.
    #[serde(default = "default_query_delay_secs")]
    pub(crate) query_delay_secs: f64,
    #[serde(default = "default_max_points")]
    pub(crate) max_points_per_query: usize,
    /// Most workloads one batched query reads ([`super::promql`]).
    #[serde(default = "default_max_workloads")]
    pub(crate) max_workloads_per_query: usize,
    /// PromQL per signal, overriding the defaults ([`default_query`]).
    #[serde(default)]
    pub(crate) queries: BTreeMap<Signal, String>,
    /// Extra request headers (e.g. `X-Scope-OrgID` for Mimir).
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    /// Largest answer read (decoded JSON). A range query over it is split
    /// and asked again, as one the server refuses for its size is.
    #[serde(default = "default_max_answer_bytes")]
    pub(crate) max_answer_bytes: usize,
}

fn default_window() -> String {
    "1m".into()
}
fn default_interval_secs() -> f64 {
    30.0
}
fn default_timeout_secs() -> f64 {
    10.0
}
fn default_backfill_days() -> f64 {
    35.0
}
fn default_query_delay_secs() -> f64 {
    10.0
}
fn default_max_points() -> usize {
    11_000
}
fn default_max_workloads() -> usize {
    1_000
}
/// A bulk range answer of a million points is about 30 MB of JSON.
fn default_max_answer_bytes() -> usize {
    64 << 20
}

impl PrometheusConfig {
    /// The PromQL for `signal` of this workload alone, placeholders filled in.
    #[cfg(test)]
    pub(crate) fn query(&self, signal: Signal) -> String {
        super::promql::fill(&self.template(signal), &self.selector, &self.rate_window, None)
    }

    /// The PromQL template for `signal`: the workload's own, else the default.
    pub(crate) fn template(&self, signal: Signal) -> String {
        self.queries.get(&signal).cloned().unwrap_or_else(|| default_query(signal))
    }

    /// The settings workloads must share to be polled together: everything
    /// but the selector and the query templates.
    pub(crate) fn shared(&self) -> PrometheusConfig {
        PrometheusConfig { selector: String::new(), queries: BTreeMap::new(), ..self.clone() }
    }

    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if reqwest::Url::parse(&self.url).map(|u| !matches!(u.scheme(), "http" | "https")).unwrap_or(true) {
            out.push(("url", format!("`{}` is not an http(s) URL", self.url)));
        }
        if !(1.0..=3600.0).contains(&self.interval_secs) {
            out.push(("interval_secs", format!("must be within 1..=3600, got {}", self.interval_secs)));
        }
        if !(0.1..=300.0).contains(&self.timeout_secs) {
            out.push(("timeout_secs", format!("must be within 0.1..=300, got {}", self.timeout_secs)));
        }
        if !(0.0..=400.0).contains(&self.backfill_days) {
            out.push(("backfill_days", format!("must be within 0..=400, got {}", self.backfill_days)));
        }
        if !(0.0..=3600.0).contains(&self.query_delay_secs) {
            out.push(("query_delay_secs", format!("must be within 0..=3600, got {}", self.query_delay_secs)));
        }
        if !(2..=11_000).contains(&self.max_points_per_query) {
            out.push(("max_points_per_query", format!("must be within 2..=11000, got {}", self.max_points_per_query)));
        }
        if !(1..=100_000).contains(&self.max_workloads_per_query) {
            out.push((
                "max_workloads_per_query",
                format!("must be within 1..=100000, got {}", self.max_workloads_per_query),
            ));
        }
        if !(1024..=1 << 30).contains(&self.max_answer_bytes) {
            out.push(("max_answer_bytes", format!("must be within 1024..=1073741824, got {}", self.max_answer_bytes)));
        }
        for (k, v) in &self.headers {
            if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err()
                || reqwest::header::HeaderValue::from_str(v).is_err()
            {
                out.push(("headers", format!("`{k}` is not a valid HTTP header")));
            }
        }
        out
    }
}

/// What went wrong talking to Prometheus.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum PromError {
    #[error("request to {url} failed: {source}")]
    Http { url: String, source: reqwest::Error },
    #[error("{url} answered {status}: {error_type}: {error}")]
    Api { url: String, status: u16, error_type: String, error: String },
    #[error("{url}: unexpected response: {detail}")]
    Decode { url: String, detail: String },
    #[error("{url}: the answer is over the {limit}-byte limit (prometheus.max_answer_bytes)")]
    TooLarge { url: String, limit: usize },
}

impl PromError {
    /// Did the server (or our timeout) refuse the query for its size? Then
    /// a smaller one may pass: Prometheus answers 422 `execution` for "would
    /// load too many samples", 503 `timeout` for a slow query;
    /// VictoriaMetrics 422 for its limits; a proxy 413 for a large body;
    /// our own bound on an answer's size.
    pub(crate) fn is_limit(&self) -> bool {
        match self {
            PromError::Http { source, .. } => source.is_timeout(),
            PromError::Api { status, error_type, .. } => {
                matches!(status, 413 | 422 | 503) || matches!(error_type.as_str(), "execution" | "timeout")
            }
            PromError::Decode { .. } => false,
            PromError::TooLarge { .. } => true,
        }
    }
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum Data {
    Vector(Vec<VectorItem>),
    Matrix(Vec<MatrixItem>),
    Scalar((f64, String)),
    String(serde::de::IgnoredAny),
}

#[derive(Deserialize)]
struct VectorItem {
    #[serde(default)]
    metric: HashMap<String, String>,
    value: (f64, String),
}

#[derive(Deserialize)]
struct MatrixItem {
    #[serde(default)]
    metric: HashMap<String, String>,
    values: Vec<(f64, String)>,
}

/// The value of `label` on a result series (`""` for no label: everything sums into one).
fn group(metric: &HashMap<String, String>, label: Option<&str>) -> String {
    label.and_then(|l| metric.get(l).cloned()).unwrap_or_default()
}

/// Prometheus writes values as strings, `NaN` and `+Inf` included.
fn number(s: &str) -> f64 {
    s.parse().unwrap_or(f64::NAN)
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

/// Answers larger than this are decoded on a blocking thread (about a
/// millisecond of JSON on the runtime below it).
const DECODE_OFF_RUNTIME_BYTES: usize = 256 * 1024;

/// A client for one Prometheus.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    base: String,
    http: reqwest::Client,
    headers: reqwest::header::HeaderMap,
    max_answer_bytes: usize,
}

impl Client {
    pub(crate) fn new(config: &PrometheusConfig) -> Client {
        let http = super::http_client(Duration::from_secs_f64(config.timeout_secs));
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &config.headers {
            if let (Ok(k), Ok(v)) =
                (reqwest::header::HeaderName::from_bytes(k.as_bytes()), reqwest::header::HeaderValue::from_str(v))
            {
                headers.insert(k, v);
            }
        }
        Client {
            base: config.url.trim_end_matches('/').to_string(),
            http,
            headers,
            max_answer_bytes: config.max_answer_bytes,
        }
    }

    async fn get(&self, path: &str, params: &[(&str, String)]) -> Result<Data, PromError> {
        let url = format!("{}{path}", self.base);
        crate::telemetry::prometheus_query(if path.ends_with("query_range") { "range" } else { "instant" });
        let res = self
            .http
            .post(&url)
            .headers(self.headers.clone())
            .form(params)
            .send()
            .await
            .map_err(|source| PromError::Http { url: url.clone(), source })?;
        let status = res.status().as_u16();
        let body = super::read_bounded(res, self.max_answer_bytes, "prometheus.max_answer_bytes").await.map_err(
            |e| match e {
                super::BodyError::TooLarge { limit, .. } => PromError::TooLarge { url: url.clone(), limit },
                super::BodyError::Http(source) => PromError::Http { url: url.clone(), source },
            },
        )?;
        let big = body.len() > DECODE_OFF_RUNTIME_BYTES;
        let decode = move || {
            serde_json::from_slice::<Envelope>(&body)
                .map_err(|e| format!("HTTP {status}: {e}: {}", String::from_utf8_lossy(&body[..body.len().min(200)])))
        };
        // A bulk answer (up to a million points, tens of MB) would hold a
        // runtime thread, and the KEDA calls queued behind it, for hundreds of
        // milliseconds: decoded off the runtime.
        let decoded = if big {
            tokio::task::spawn_blocking(decode).await.unwrap_or_else(|e| Err(format!("the decoding task failed: {e}")))
        } else {
            decode()
        };
        let env = decoded.map_err(|detail| PromError::Decode { url: url.clone(), detail })?;
        if env.status != "success" {
            return Err(PromError::Api {
                url,
                status,
                error_type: env.error_type.unwrap_or_default(),
                error: env.error.unwrap_or_default(),
            });
        }
        env.data.ok_or_else(|| PromError::Decode { url, detail: "no data".into() })
    }

    /// An instant query, its series summed per value of `label` (all into
    /// `""` without one); no entry for a value with no series.
    pub(crate) async fn instant(
        &self,
        query: &str,
        at: SystemTime,
        label: Option<&str>,
    ) -> Result<HashMap<String, f64>, PromError> {
        let data =
            self.get("/api/v1/query", &[("query", query.to_string()), ("time", format!("{:.3}", unix(at)))]).await?;
        let mut out = HashMap::new();
        match data {
            Data::Vector(items) => {
                for i in items {
                    *out.entry(group(&i.metric, label)).or_default() += number(&i.value.1);
                }
            }
            Data::Scalar((_, v)) => {
                out.insert(String::new(), number(&v));
            }
            Data::Matrix(_) | Data::String(_) => {
                return Err(PromError::Decode {
                    url: self.base.clone(),
                    detail: "instant query gave a matrix or string".into(),
                })
            }
        }
        Ok(out)
    }

    /// `query_range` over [start, end] (inclusive) at `step`; values summed
    /// per value of `label` (all into `""` without one) and timestamp, as
    /// (unix secs, value).
    pub(crate) async fn range(
        &self,
        query: &str,
        start: f64,
        end: f64,
        step: f64,
        label: Option<&str>,
    ) -> Result<HashMap<String, Vec<(f64, f64)>>, PromError> {
        let data = self
            .get(
                "/api/v1/query_range",
                &[
                    ("query", query.to_string()),
                    ("start", format!("{start:.3}")),
                    ("end", format!("{end:.3}")),
                    ("step", format!("{step}")),
                ],
            )
            .await?;
        let Data::Matrix(series) = data else {
            return Err(PromError::Decode {
                url: self.base.clone(),
                detail: "query_range did not give a matrix".into(),
            });
        };
        let mut sums: HashMap<String, BTreeMap<i64, f64>> = HashMap::new();
        for s in series {
            let g = sums.entry(group(&s.metric, label)).or_default();
            for (t, v) in s.values {
                *g.entry((t * 1000.0).round() as i64).or_default() += number(&v);
            }
        }
        Ok(sums.into_iter().map(|(k, g)| (k, g.into_iter().map(|(ms, v)| (ms as f64 / 1000.0, v)).collect())).collect())
    }
}

/// Split the buckets [first, last] (bucket indices at `res_secs`) into query
/// windows of at most `max_points` evaluation points each.
pub(crate) fn chunks(first: i64, last: i64, max_points: usize) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut b = first;
    let span = max_points.max(1) as i64;
    while b <= last {
        let e = (b + span - 1).min(last);
        out.push((b, e));
        b = e + 1;
    }
    out
}

/// Per-bucket values for buckets [first, last] from a range query evaluated
/// at bucket ends, per value of `label`; NaN where Prometheus had nothing.
pub(crate) async fn bucket_values(
    client: &Client,
    query: &str,
    label: Option<&str>,
    first: i64,
    last: i64,
    res_secs: f64,
) -> Result<HashMap<String, Vec<f64>>, PromError> {
    let groups =
        client.range(query, (first + 1) as f64 * res_secs, (last + 1) as f64 * res_secs, res_secs, label).await?;
    let len = (last - first + 1).max(0) as usize;
    Ok(groups
        .into_iter()
        .map(|(k, points)| {
            let mut values = vec![f64::NAN; len];
            for (t, v) in points {
                let i = ((t / res_secs).round() as i64) - 1 - first;
                if let Some(slot) = usize::try_from(i).ok().and_then(|i| values.get_mut(i)) {
                    *slot = v;
                }
            }
            (k, values)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_weeks_at_one_minute_split_under_the_limit() {
        let weeks5 = 5 * 7 * 24 * 60;
        let c = chunks(0, weeks5 - 1, 11_000);
        assert_eq!(c.len(), 5);
        assert!(c.iter().all(|(a, b)| b - a < 11_000));
        assert_eq!((c[0].0, c.last().unwrap().1), (0, weeks5 - 1));
        assert!(c.windows(2).all(|w| w[1].0 == w[0].1 + 1), "contiguous, no overlap");
        assert!(chunks(5, 4, 10).is_empty());
    }

    #[test]
    fn templates_fill_selector_and_window() {
        let mut c: PrometheusConfig =
            serde_yaml_ng::from_str("url: http://p:9090\nselector: 'model_name=\"m\"'").unwrap();
        assert_eq!(
            c.query(Signal::RejectionRate),
            "sum(rate({__name__=~\"vllm[:_]admission_rejections_total\",model_name=\"m\"}[1m]))"
        );
        assert_eq!(
            c.query(Signal::QueueDeferred),
            "sum({__name__=~\"vllm[:_]num_requests_waiting_by_reason\",reason=\"deferred\",model_name=\"m\"})"
        );
        c.queries.insert(Signal::QueueDepth, "max(my_queue{$selector})".into());
        assert_eq!(c.query(Signal::QueueDepth), "max(my_queue{model_name=\"m\"})");
        let all: PrometheusConfig = serde_yaml_ng::from_str("url: http://p:9090").unwrap();
        assert_eq!(all.query(Signal::Running), "sum({__name__=~\"vllm[:_]num_requests_running\"})");
        assert!(c.problems().is_empty());
        c.url = "ftp://x".into();
        assert_eq!(c.problems()[0].0, "url");
    }

    /// A server on 127.0.0.1 that answers every request with `body`.
    async fn answering(body: String) -> String {
        let app = axum::Router::new().fallback(move || {
            let body = body.clone();
            async move { ([("content-type", "application/json")], body) }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_bulk_answer_decodes_and_a_broken_one_is_still_named() {
        // Two series of 20,000 points: about 0.9 MB, past the off-runtime threshold.
        let values = |v: u32| (0..20_000).map(|t| format!("[{t},\"{v}\"]")).collect::<Vec<_>>().join(",");
        let series = |m: &str, v: u32| format!(r#"{{"metric":{{"model_name":"{m}"}},"values":[{}]}}"#, values(v));
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"matrix","result":[{},{}]}}}}"#,
            series("a", 1),
            series("b", 2)
        );
        assert!(body.len() > DECODE_OFF_RUNTIME_BYTES);
        let client = |url: String| Client::new(&serde_yaml_ng::from_str(&format!("url: {url}")).unwrap());
        let got =
            client(answering(body.clone()).await).range("q", 0.0, 19_999.0, 1.0, Some("model_name")).await.unwrap();
        assert_eq!((got["a"].len(), got["b"][19_999]), (20_000, (19_999.0, 2.0)));

        let cut = body[..body.len() - 10].to_string();
        let err = client(answering(cut).await).range("q", 0.0, 1.0, 1.0, None).await.unwrap_err();
        assert!(matches!(&err, PromError::Decode { detail, .. } if detail.starts_with("HTTP 200: EOF")), "{err}");
    }

    #[test]
    fn prometheus_numbers_parse() {
        assert!(number("NaN").is_nan());
        assert_eq!(number("+Inf"), f64::INFINITY);
        assert_eq!(number("-Inf"), f64::NEG_INFINITY);
        assert_eq!(number("1.5e3"), 1500.0);
        assert!(number("garbage").is_nan());
    }
}
