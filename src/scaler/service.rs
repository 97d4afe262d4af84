//! The `externalscaler.ExternalScaler` service: answers from the registry's
//! current snapshot, never by computing on the request path.

use std::{pin::Pin, sync::Arc};

use tokio::sync::mpsc;
use tokio_stream::{wrappers::ReceiverStream, Stream};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::metadata::{self, Encoding, Query, Target};
use crate::{
    proto::{
        external_scaler_server::ExternalScaler, GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse,
        IsActiveResponse, MetricSpec, MetricValue, ScaledObjectRef,
    },
    serve::state::{PoolState, Registry, RoleState, Snapshot, WorkloadState},
    sizing::{reactive::Decision, roles::RoleDecision, Policy},
};

/// The scaler service.
#[derive(Debug, Clone)]
pub(crate) struct Scaler {
    registry: Arc<Registry>,
    shutdown: CancellationToken,
}

impl Scaler {
    /// `shutdown` ends open streams so the server can drain.
    pub(crate) fn new(registry: Arc<Registry>, shutdown: CancellationToken) -> Self {
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

/// The role the query names, if it names one the workload declares.
fn lookup_role<'a>(s: &'a WorkloadState, q: &Query) -> Result<Option<&'a RoleState>, Status> {
    let Some(kind) = q.role else { return Ok(None) };
    match s.roles.iter().find(|r| r.role == kind) {
        Some(r) => Ok(Some(r)),
        None => {
            let declared: Vec<&str> = s.roles.iter().map(|r| r.role.as_str()).collect();
            Err(Status::not_found(format!(
                "workload `{}/{}` declares no `{kind}` role (roles: {})",
                s.namespace,
                s.name,
                if declared.is_empty() { "none".to_string() } else { declared.join(", ") }
            )))
        }
    }
}

fn role_decision<'a>(s: &WorkloadState, r: &'a RoleState) -> Result<&'a RoleDecision, Status> {
    r.decision.as_ref().ok_or_else(|| {
        let why = r.error.as_ref().map_or_else(|| "no signal has been read yet".to_string(), ToString::to_string);
        Status::unavailable(format!(
            "no decision for the {} role of workload `{}/{}`: {why}",
            r.role, s.namespace, s.name
        ))
    })
}

/// Is the workload (or the role the query names) active? `None`: nothing to say yet.
fn workload_active(s: &WorkloadState, q: &Query) -> Result<Option<bool>, Status> {
    Ok(match lookup_role(s, q)? {
        Some(r) => r.decision.as_ref().map(|d| d.active),
        None => s.decision.as_ref().map(|d| d.active),
    })
}

fn decision(s: &WorkloadState) -> Result<&Decision, Status> {
    s.decision.as_ref().ok_or_else(|| {
        let why = s.error.as_ref().map_or_else(|| "no signal has been read yet".to_string(), ToString::to_string);
        Status::unavailable(format!("no decision for workload `{}/{}`: {why}", s.namespace, s.name))
    })
}

/// The spec is a function of config only, so it exists from the first
/// moment a workload is known, whatever the health of its signals: KEDA's
/// fallback cannot fire if GetMetricSpec fails (KEDA issue #8056).
fn spec(s: &WorkloadState, q: &Query) -> Result<GetMetricSpecResponse, Status> {
    let (name, target) = match (lookup_role(s, q)?, q.encoding) {
        (Some(r), _) => (&r.metric, 1.0),
        (None, Encoding::Replicas) => (&s.metrics.replicas, 1.0),
        (None, Encoding::Load) => (&s.metrics.load, s.per_replica),
    };
    Ok(GetMetricSpecResponse {
        metric_specs: vec![MetricSpec {
            metric_name: name.clone(),
            // KEDA reads the float when > 0, else the int: set both.
            target_size: (target.round() as i64).max(1),
            target_size_float: target,
        }],
    })
}

/// The `load` encoding must land the HPA on the decided count too. A
/// predictive decision is not load / per-replica (it looks ahead, queues,
/// stabilises), so it is sent as the load that count handles, a hair under
/// so that ceil(value / target) cannot round up past it. A reactive one is
/// the load itself, rescaled when the decision used a learned per-replica
/// capacity rather than the configured target KEDA divides by.
fn value(d: &Decision, encoding: Encoding, per_replica: f64) -> f64 {
    match (encoding, d.policy) {
        (Encoding::Replicas, _) => f64::from(d.desired_replicas),
        (Encoding::Load, Policy::Reactive) if d.per_replica > 0.0 && d.per_replica != per_replica => {
            d.load * per_replica / d.per_replica
        }
        (Encoding::Load, Policy::Reactive) => d.load,
        (Encoding::Load, Policy::Predictive) => f64::from(d.desired_replicas) * per_replica * (1.0 - 1e-9),
    }
}

fn lookup_pool<'a>(snap: &'a Snapshot, name: &str) -> Result<&'a Arc<PoolState>, Status> {
    snap.pool(name).ok_or_else(|| {
        let known: Vec<&str> = snap.pools().iter().map(|p| p.name.as_str()).collect();
        Status::not_found(format!(
            "no node pool `{}` is configured in Foresight (pools: {})",
            metadata::shown(name),
            if known.is_empty() { "none".to_string() } else { known.join(", ") }
        ))
    })
}

/// A pool's placeholder count: target 1, so the HPA's replicas are the count.
fn pool_spec(p: &PoolState) -> GetMetricSpecResponse {
    GetMetricSpecResponse {
        metric_specs: vec![MetricSpec { metric_name: p.metric.clone(), target_size: 1, target_size_float: 1.0 }],
    }
}

fn pool_buffer(p: &PoolState) -> Result<u32, Status> {
    p.plan
        .as_ref()
        .map(|pp| pp.buffer_nodes)
        .ok_or_else(|| Status::unavailable(format!("no node plan for pool `{}` yet", p.name)))
}

/// Spec of whichever target the trigger names.
fn target_spec(snap: &Snapshot, t: &Target) -> Result<GetMetricSpecResponse, Status> {
    match t {
        Target::Workload(q) => spec(lookup(snap, q)?, q),
        Target::Pool(name) => Ok(pool_spec(lookup_pool(snap, name)?)),
    }
}

/// Activity of the target: `None` while there is nothing to say yet.
fn target_active(snap: &Snapshot, t: &Target) -> Result<Option<bool>, Status> {
    match t {
        Target::Workload(q) => workload_active(lookup(snap, q)?, q),
        Target::Pool(name) => Ok(lookup_pool(snap, name)?.plan.as_ref().map(|pp| pp.buffer_nodes > 0)),
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
        let snap = self.registry.load();
        let active = match metadata::parse_target(request.get_ref())? {
            Target::Workload(q) => {
                let s = lookup(&snap, &q)?;
                match lookup_role(s, &q)? {
                    Some(r) => role_decision(s, r)?.active,
                    None => decision(s)?.active,
                }
            }
            Target::Pool(name) => pool_buffer(lookup_pool(&snap, &name)?)? > 0,
        };
        Ok(Response::new(IsActiveResponse { result: active }))
    }

    type StreamIsActiveStream = Streamed<IsActiveResponse>;

    /// Sends the current activity at open, then only transitions: a repeated
    /// `true` would hold off KEDA's cooldown.
    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let t = metadata::parse_target(request.get_ref())?;
        target_active(&self.registry.load(), &t)?;
        Ok(Response::new(
            self.watch(move |snap| Ok(target_active(snap, &t)?.map(|result| IsActiveResponse { result }))),
        ))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        let t = metadata::parse_target(request.get_ref())?;
        Ok(Response::new(target_spec(&self.registry.load(), &t)?))
    }

    async fn get_metrics(&self, request: Request<GetMetricsRequest>) -> Result<Response<GetMetricsResponse>, Status> {
        let req = request.get_ref();
        let r = req
            .scaled_object_ref
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("GetMetricsRequest has no scaledObjectRef"))?;
        let snap = self.registry.load();
        let q = match metadata::parse_target(r)? {
            Target::Workload(q) => q,
            Target::Pool(name) => {
                let p = lookup_pool(&snap, &name)?;
                if !metadata::metric_matches(&req.metric_name, &p.metric) {
                    return Err(Status::invalid_argument(format!(
                        "metricName `{}` is not served for pool `{name}`; GetMetricSpec names `{}`",
                        metadata::shown(&req.metric_name),
                        p.metric
                    )));
                }
                let v = pool_buffer(p)?;
                return Ok(Response::new(GetMetricsResponse {
                    metric_values: vec![MetricValue {
                        metric_name: p.metric.clone(),
                        metric_value: i64::from(v),
                        metric_value_float: f64::from(v),
                    }],
                }));
            }
        };
        let s = lookup(&snap, &q)?;
        let role = lookup_role(s, &q)?;
        let served = match (role, q.encoding) {
            (Some(r), _) => &r.metric,
            (None, Encoding::Replicas) => &s.metrics.replicas,
            (None, Encoding::Load) => &s.metrics.load,
        };
        if !metadata::metric_matches(&req.metric_name, served) {
            return Err(Status::invalid_argument(format!(
                "metricName `{}` is not served for workload `{}`; GetMetricSpec names `{served}`",
                metadata::shown(&req.metric_name),
                q.key()
            )));
        }
        let v = match role {
            Some(r) => f64::from(role_decision(s, r)?.desired_replicas),
            None => value(decision(s)?, q.encoding, s.per_replica),
        };
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
        let t = metadata::parse_target(request.get_ref())?;
        target_spec(&self.registry.load(), &t)?;
        Ok(Response::new(self.watch(move |snap| target_spec(snap, &t).map(Some))))
    }
}
