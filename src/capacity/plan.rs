//! The pre-warm plan: nodes per pool over the look-ahead, and what to warm now.
//!
//! Time runs in two clocks. Replicas are needed when they must be serving;
//! their nodes are needed earlier, by the pod's start time (image pull and
//! weights load), so node step k hosts the replicas needed at step
//! k + pod start. A node ordered now is Ready after the pool's provisioning
//! time, so "warm now" is the most nodes the pool needs before then, and
//! nodes needed later are ordered later (`next_order_at`), which is how a
//! reservation that ends inside the horizon hands over to on-demand in time
//! and no earlier.

use serde::Serialize;

use super::{
    pack::{self, Limits, Request},
    CapacityType, Pool, Reservation, Shape,
};

/// One workload's replica needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    pub workload: String,
    pub shape: Shape,
    /// Replicas that must be serving at now + k x step; the last value holds beyond.
    pub replicas: Vec<u32>,
    /// Image pull plus weights load: the node must be Ready this long before the replica serves.
    pub pod_start_secs: f64,
    /// Replicas running now: the nodes they occupy are not spare.
    pub running: u32,
}

/// Everything a plan is made from.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// Unix seconds.
    pub now: i64,
    pub step_secs: i64,
    /// Node-time steps to plan, from now.
    pub steps: usize,
    pub pools: &'a [Pool],
    pub reservations: &'a [Reservation],
    pub demands: &'a [Demand],
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Plan {
    #[serde(serialize_with = "crate::time::ser_unix")]
    #[schema(value_type = String, format = DateTime)]
    pub(crate) now: i64,
    pub(crate) step_secs: i64,
    pub pools: Vec<PoolPlan>,
    pub workloads: Vec<WorkloadPlan>,
}

/// One pool's side of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PoolPlan {
    pub name: String,
    pub(crate) capacity_type: CapacityType,
    /// Nodes to have Ready or provisioning now: the most needed before a
    /// node ordered now would be Ready.
    pub warm_nodes: u32,
    /// Nodes the running replicas occupy now.
    pub(crate) in_use_nodes: u32,
    /// warm - in use: what placeholder pods (balloons, a CapacityBuffer) hold.
    pub(crate) buffer_nodes: u32,
    /// Nodes needed at now + k x step.
    pub(crate) nodes: Vec<u32>,
    /// Nodes reservations cover at now + k x step.
    pub(crate) reserved: Vec<u32>,
    /// When nodes beyond `warm_nodes` must be ordered, and how many, if within the horizon.
    pub(crate) next_order: Option<Order>,
    /// Hourly price of the nodes needed now that no paid reservation covers.
    pub(crate) cost_per_hour_now: f64,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct Order {
    /// Unix seconds.
    #[serde(serialize_with = "crate::time::ser_unix")]
    #[schema(value_type = String, format = DateTime)]
    pub(crate) at: i64,
    pub(crate) nodes: u32,
    /// When they are needed (`at` + provisioning).
    #[serde(serialize_with = "crate::time::ser_unix")]
    #[schema(value_type = String, format = DateTime)]
    pub(crate) needed_at: i64,
}

/// One workload's side of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct WorkloadPlan {
    pub(crate) workload: String,
    /// Replicas per pool at node step 0 (serving at now + pod start).
    pub(crate) placement: Vec<(String, u32)>,
    /// The most replicas no pool could take, at any step.
    pub unplaced: u32,
    /// Pools that could not take (all of) its replicas, and why.
    pub(crate) excluded: Vec<(String, String)>,
}

/// Make the plan. Pools with no demand still appear, with zero nodes.
pub fn plan(input: PlanInput<'_>) -> Plan {
    let PlanInput { now, step_secs, steps, pools, reservations, demands } = input;
    let step = step_secs.max(1);
    let steps = steps.max(1);
    let at = |k: usize| now + k as i64 * step;
    let shift = |d: &Demand| (d.pod_start_secs.max(0.0) / step as f64).ceil() as usize;
    let need = |d: &Demand, k: usize| -> u32 {
        let i = (k + shift(d)).min(d.replicas.len().saturating_sub(1));
        d.replicas.get(i).copied().unwrap_or(0)
    };
    let limits_at = |t: i64| limits_at(pools, reservations, t);
    let reserved_at = |t: i64, pool: &str| -> u32 {
        reservations.iter().filter(|r| r.pool == pool && r.active_at(t)).map(|r| r.nodes).sum()
    };

    let mut nodes = vec![Vec::with_capacity(steps); pools.len()];
    let mut unplaced = vec![0u32; demands.len()];
    let mut excluded: Vec<Vec<Option<String>>> = vec![vec![None; pools.len()]; demands.len()];
    let mut first: Option<pack::Packing> = None;
    let mut last: Option<(Vec<u32>, Vec<Limits>, pack::Packing)> = None;
    for k in 0..steps {
        let requests: Vec<Request<'_>> =
            demands.iter().map(|d| Request { shape: &d.shape, replicas: need(d, k) }).collect();
        let limits = limits_at(at(k));
        // Demand and reservations change at few steps: repack only then.
        let key: Vec<u32> = requests.iter().map(|r| r.replicas).collect();
        let packing = match &last {
            Some((kk, kl, p)) if *kk == key && *kl == limits => p.clone(),
            _ => pack::pack(pools, &limits, &requests),
        };
        for (p, series) in nodes.iter_mut().enumerate() {
            series.push(packing.node_count(p));
        }
        for (w, d) in demands.iter().enumerate() {
            unplaced[w] = unplaced[w].max(packing.unplaced[w]);
            for (p, pool) in pools.iter().enumerate() {
                if excluded[w][p].is_none() && requests[w].replicas > 0 {
                    let capped = packing.capped[w][p];
                    excluded[w][p] = pack::why_not(pool, &d.shape, capped).map(|why| {
                        if capped {
                            format!("{why} at +{}", mins(k as i64 * step))
                        } else {
                            why
                        }
                    });
                }
            }
        }
        if k == 0 {
            first = Some(packing.clone());
        }
        last = Some((key, limits, packing));
    }
    let first = first.unwrap_or_default();
    let running: Vec<Request<'_>> = demands.iter().map(|d| Request { shape: &d.shape, replicas: d.running }).collect();
    let in_use = pack::pack(pools, &limits_at(now), &running);

    let pool_plans = pools
        .iter()
        .enumerate()
        .map(|(p, pool)| {
            let series = &nodes[p];
            let ready_in = (pool.provisioning_secs.max(0.0) / step as f64).floor() as usize;
            let warm = series.iter().take(ready_in + 1).copied().max().unwrap_or(0);
            let next_order = series.iter().enumerate().skip(ready_in + 1).find(|(_, n)| **n > warm).map(|(k, n)| {
                Order { at: at(k) - pool.provisioning_secs.ceil() as i64, nodes: n - warm, needed_at: at(k) }
            });
            let reserved: Vec<u32> = (0..steps).map(|k| reserved_at(at(k), &pool.name)).collect();
            let paid_now = limits_at(now)[p].paid_nodes;
            let cost = f64::from(series[0].saturating_sub(paid_now)) * pool.price_per_node_hour;
            let in_use_nodes = in_use.node_count(p);
            let buffer = warm.saturating_sub(in_use_nodes);
            let mut reason =
                format!("{warm} warm: the most nodes needed within its {} provisioning", secs(pool.provisioning_secs));
            if reserved[0] > 0 {
                reason.push_str(&format!("; {} reserved now", reserved[0]));
            }
            reason
                .push_str(&format!("; {in_use_nodes} in use by running replicas, {buffer} to hold with placeholders"));
            if let Some(o) = next_order {
                reason.push_str(&format!(
                    "; +{} more needed at +{}: order at +{}",
                    o.nodes,
                    mins(o.needed_at - now),
                    mins(o.at - now)
                ));
            }
            if let Some(k) = (1..steps).find(|&k| reserved[k] < reserved[k - 1]) {
                reason.push_str(&format!(
                    "; reservations drop from {} to {} nodes at +{}",
                    reserved[k - 1],
                    reserved[k],
                    mins(at(k) - now)
                ));
            }
            PoolPlan {
                name: pool.name.clone(),
                capacity_type: pool.capacity_type,
                warm_nodes: warm,
                in_use_nodes,
                buffer_nodes: buffer,
                nodes: series.clone(),
                reserved,
                next_order,
                cost_per_hour_now: cost,
                reason,
            }
        })
        .collect();
    let workloads = demands
        .iter()
        .enumerate()
        .map(|(w, d)| WorkloadPlan {
            workload: d.workload.clone(),
            placement: pools
                .iter()
                .enumerate()
                .filter(|(p, _)| first.placed.get(w).is_some_and(|v| v[*p] > 0))
                .map(|(p, pool)| (pool.name.clone(), first.placed[w][p]))
                .collect(),
            unplaced: unplaced[w],
            excluded: pools
                .iter()
                .zip(&excluded[w])
                .filter_map(|(pool, why)| why.clone().map(|why| (pool.name.clone(), why)))
                .collect(),
        })
        .collect();
    Plan { now, step_secs: step, pools: pool_plans, workloads }
}

/// Each pool's capacity at time `t`: a reserved pool has only the nodes its
/// active reservations cover; a paid reservation's nodes cost nothing more.
pub fn limits_at(pools: &[Pool], reservations: &[Reservation], t: i64) -> Vec<Limits> {
    pools
        .iter()
        .map(|p| {
            let active = reservations.iter().filter(|r| r.pool == p.name && r.active_at(t));
            let (reserved, paid) =
                active.fold((0u32, 0u32), |(n, paid), r| (n + r.nodes, paid + if r.paid { r.nodes } else { 0 }));
            let quota = p.max_nodes.unwrap_or(u32::MAX);
            let max_nodes = if p.capacity_type == CapacityType::Reserved { reserved.min(quota) } else { quota };
            Limits { max_nodes, paid_nodes: paid }
        })
        .collect()
}

fn mins(secs: i64) -> String {
    if secs % 60 == 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

fn secs(s: f64) -> String {
    mins(s.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str, t: CapacityType, price: f64, provisioning: f64) -> Pool {
        Pool {
            name: name.into(),
            gpu_type: "h100".into(),
            gpus_per_node: 8,
            nvlink_domain_gpus: 8,
            nodes_per_rack: None,
            capacity_type: t,
            price_per_node_hour: price,
            provisioning_secs: provisioning,
            max_nodes: None,
            labels: Default::default(),
            taints: Vec::new(),
        }
    }

    fn demand(replicas: Vec<u32>, running: u32) -> Demand {
        Demand {
            workload: "w".into(),
            shape: Shape {
                gpu_type: "h100".into(),
                gpus_per_replica: 8,
                nodes_per_replica: 1,
                constraints: Default::default(),
                exclusive_rack: false,
            },
            replicas,
            pod_start_secs: 0.0,
            running,
        }
    }

    #[test]
    fn reservation_ending_inside_the_horizon_hands_over_to_on_demand_in_time() {
        // Reserved for 20 more minutes; on-demand takes 15 to provision.
        let pools =
            [pool("reserved", CapacityType::Reserved, 0.0, 0.0), pool("od", CapacityType::OnDemand, 98.0, 900.0)];
        let res =
            [Reservation { name: "r".into(), pool: "reserved".into(), nodes: 4, start: -3600, end: 1200, paid: true }];
        let demands = [demand(vec![4], 4)];
        let input =
            PlanInput { now: 0, step_secs: 60, steps: 40, pools: &pools, reservations: &res, demands: &demands };
        let p = plan(input);
        let (r, od) = (&p.pools[0], &p.pools[1]);
        assert_eq!(r.nodes[..20], [4; 20]);
        assert_eq!(r.nodes[20], 0);
        assert_eq!(od.nodes[19], 0);
        assert_eq!(od.nodes[20], 4);
        // Not yet: a node ordered now would sit idle for five minutes.
        assert_eq!(od.warm_nodes, 0);
        assert_eq!(od.next_order, Some(Order { at: 300, nodes: 4, needed_at: 1200 }));
        // Five minutes on, the order is due.
        let later = plan(PlanInput { now: 300, ..input });
        assert_eq!(later.pools[1].warm_nodes, 4);
        assert_eq!(later.pools[1].buffer_nodes, 4, "the running replicas sit on reserved nodes");
    }

    #[test]
    fn nodes_are_warmed_a_pod_start_ahead_of_the_replicas() {
        let pools = [pool("od", CapacityType::OnDemand, 98.0, 600.0)];
        // 2 replicas now, 5 from +15m; the pod takes 5 minutes to start.
        let mut d = demand([vec![2; 15], vec![5; 20]].concat(), 2);
        d.pod_start_secs = 300.0;
        let demands = [d];
        let p =
            plan(PlanInput { now: 0, step_secs: 60, steps: 30, pools: &pools, reservations: &[], demands: &demands });
        let od = &p.pools[0];
        assert_eq!(od.nodes[9], 2);
        assert_eq!(od.nodes[10], 5, "nodes by +10m for replicas serving at +15m");
        assert_eq!(od.warm_nodes, 5, "+10m is within the 10-minute provisioning");
        assert_eq!(od.in_use_nodes, 2);
        assert_eq!(od.buffer_nodes, 3);
        assert_eq!(od.cost_per_hour_now, 2.0 * 98.0);
    }

    #[test]
    fn a_reserved_pool_without_a_reservation_has_no_nodes() {
        let pools = [pool("reserved", CapacityType::Reserved, 0.0, 0.0)];
        let demands = [demand(vec![1], 0)];
        let p =
            plan(PlanInput { now: 0, step_secs: 60, steps: 1, pools: &pools, reservations: &[], demands: &demands });
        assert_eq!(p.workloads[0].unplaced, 1);
        assert_eq!(p.workloads[0].excluded, vec![("reserved".into(), "reservation exhausted at +0m".into())]);
    }
}
