//! The `externalscaler.ExternalScaler` service: answers from the registry's
//! current snapshot, never by computing on the request path.

use std::{pin::Pin, sync::Arc};

use tokio::sync::mpsc;
use tokio_stream::{wrappers::ReceiverStream, Stream};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::metadata::{self, Encoding, Query};
use crate::{
    proto::{
        external_scaler_server::ExternalScaler, GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse,
        IsActiveResponse, MetricSpec, MetricValue, ScaledObjectRef,
    },
    sizing::reactive::Decision,
    state::{Registry, Snapshot, WorkloadState},
};

/// The scaler service.
#[derive(Debug, Clone)]
pub struct Scaler {
    registry: Arc<Registry>,
    shutdown: CancellationToken,
}

impl Scaler {
    /// `shutdown` ends open streams so the server can drain.
    pub fn new(registry: Arc<Registry>, shutdown: CancellationToken) -> Self {
        Scaler { registry, shutdown }
    }
}

fn lookup<'a>(snap: &'a Snapshot, q: &Query) -> Result<&'a Arc<WorkloadState>, Status> {
    if let Some(s) = snap.get(&q.key()) {
        return Ok(s);
    }
    let elsewhere = snap.namespaces_of(&q.workload);
    let hint = if elsewhere.is_empty() {
        String::new()
    } else {
        format!(" (it exists in namespace {}; set trigger metadata `namespace`)", elsewhere.join(", "))
    };
    Err(Status::not_found(format!(
        "no workload `{}` in namespace `{}` is configured in Foresight{hint}",
        metadata::shown(&q.workload),
        metadata::shown(&q.namespace)
    )))
}

fn decision(s: &WorkloadState) -> Result<&Decision, Status> {
    s.decision.as_ref().ok_or_else(|| {
        let why = s.error.as_deref().unwrap_or("no signal has been read yet");
        Status::unavailable(format!("no decision for workload `{}/{}`: {why}", s.namespace, s.name))
    })
}

/// The spec is a function of config only, so it exists from the first
/// moment a workload is known, whatever the health of its signals: KEDA's
/// fallback cannot fire if GetMetricSpec fails (KEDA issue #8056).
fn spec(s: &WorkloadState, encoding: Encoding) -> GetMetricSpecResponse {
    let (name, target) = match encoding {
        Encoding::Replicas => (&s.metrics.replicas, 1.0),
        Encoding::Load => (&s.metrics.load, s.per_replica),
    };
    GetMetricSpecResponse {
        metric_specs: vec![MetricSpec {
            metric_name: name.clone(),
            // KEDA reads the float when > 0, else the int: set both.
            target_size: (target.round() as i64).max(1),
            target_size_float: target,
        }],
    }
}

fn value(d: &Decision, encoding: Encoding) -> f64 {
    match encoding {
        Encoding::Replicas => f64::from(d.desired_replicas),
        Encoding::Load => d.load,
    }
}

type Streamed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

impl Scaler {
    /// A stream that sends `view(snapshot)` at open and then whenever it
    /// changes. `Ok(None)` = nothing to say yet; `Err` ends the stream.
    fn watch<T, F>(&self, view: F) -> Streamed<T>
    where
        T: PartialEq + Clone + Send + 'static,
        F: Fn(&Snapshot) -> Result<Option<T>, Status> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(4);
        let mut changes = self.registry.subscribe();
        let registry = self.registry.clone();
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let mut last: Option<T> = None;
            loop {
                match view(&registry.load()) {
                    Ok(Some(v)) if last.as_ref() != Some(&v) => {
                        if tx.send(Ok(v.clone())).await.is_err() {
                            return;
                        }
                        last = Some(v);
                    }
                    Ok(_) => {}
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                }
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => return,
                }
            }
        });
        Box::pin(ReceiverStream::new(rx))
    }
}

#[tonic::async_trait]
impl ExternalScaler for Scaler {
    async fn is_active(&self, request: Request<ScaledObjectRef>) -> Result<Response<IsActiveResponse>, Status> {
        let q = metadata::parse(request.get_ref())?;
        let snap = self.registry.load();
        let d = decision(lookup(&snap, &q)?)?;
        Ok(Response::new(IsActiveResponse { result: d.active }))
    }

    type StreamIsActiveStream = Streamed<IsActiveResponse>;

    /// Sends the current activity at open, then only transitions: a repeated
    /// `true` would hold off KEDA's cooldown.
    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let q = metadata::parse(request.get_ref())?;
        lookup(&self.registry.load(), &q)?;
        Ok(Response::new(self.watch(move |snap| {
            let s = lookup(snap, &q)?;
            Ok(s.decision.as_ref().map(|d| IsActiveResponse { result: d.active }))
        })))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        let q = metadata::parse(request.get_ref())?;
        let snap = self.registry.load();
        Ok(Response::new(spec(lookup(&snap, &q)?, q.encoding)))
    }

    async fn get_metrics(&self, request: Request<GetMetricsRequest>) -> Result<Response<GetMetricsResponse>, Status> {
        let req = request.get_ref();
        let r = req
            .scaled_object_ref
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("GetMetricsRequest has no scaledObjectRef"))?;
        let q = metadata::parse(r)?;
        let snap = self.registry.load();
        let s = lookup(&snap, &q)?;
        let served = match q.encoding {
            Encoding::Replicas => &s.metrics.replicas,
            Encoding::Load => &s.metrics.load,
        };
        if !metadata::metric_matches(&req.metric_name, served) {
            return Err(Status::invalid_argument(format!(
                "metricName `{}` is not served for workload `{}`; GetMetricSpec names `{served}`",
                metadata::shown(&req.metric_name),
                q.key()
            )));
        }
        let v = value(decision(s)?, q.encoding);
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name: served.clone(),
                // KEDA reads the float when > 0, else the int: set both.
                metric_value: v.round() as i64,
                metric_value_float: v,
            }],
        }))
    }

    type StreamMetricSpecStream = Streamed<GetMetricSpecResponse>;

    async fn stream_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        let q = metadata::parse(request.get_ref())?;
        lookup(&self.registry.load(), &q)?;
        Ok(Response::new(self.watch(move |snap| Ok(Some(spec(lookup(snap, &q)?, q.encoding))))))
    }
}
