//! Spare GPUs a batch queue can lease: per pool, the reserved nodes the plan
//! leaves idle over a whole horizon.
//!
//! Reserved capacity is paid for whether used or not, so what inference
//! will not need of it is free to lend: training, batch inference, evals.
//! A lease for a horizon is only safe if the node stays idle for all of it,
//! so the offer is the fewest idle reserved nodes at any step of the
//! horizon, not their mean. The plan is made from the forecasts' upper
//! quantile, so the offer already leaves inference its margin. Capacity
//! bought by the hour is not offered: lending it keeps it billed. Pure.

use serde::Serialize;

use super::{Pool, PoolPlan};

/// What one pool can lend for one horizon.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Spare {
    /// How long the lease would run, from now.
    pub horizon_secs: u64,
    /// Reserved nodes idle at every step of the horizon, and their GPUs.
    pub nodes: u32,
    pub gpus: u32,
    /// Reserved GPU-hours the plan leaves idle over the horizon (all steps,
    /// not only the nodes idle throughout): what is wasted if nothing borrows it.
    pub idle_gpu_hours: f64,
    /// Fewest reserved nodes at any step of the horizon.
    pub reserved_nodes: u32,
    /// Seconds from now to the step with the fewest idle nodes: what limits the lease.
    pub tightest_in_secs: u64,
}

/// The pool's offer for each of `horizons_secs`, from a plan made over at
/// least the longest of them with steps of `step_secs`. A horizon the plan
/// does not reach is cut to what it covers.
pub(crate) fn spare(pool: &Pool, plan: &PoolPlan, step_secs: i64, horizons_secs: &[u64]) -> Vec<Spare> {
    let step = step_secs.max(1) as u64;
    let idle: Vec<u32> = plan.reserved.iter().zip(&plan.nodes).map(|(r, n)| r.saturating_sub(*n)).collect();
    horizons_secs
        .iter()
        .map(|&h| {
            let steps = (h.div_ceil(step) as usize).clamp(1, idle.len().max(1));
            let window = &idle[..steps.min(idle.len())];
            let (tightest, nodes) = window.iter().copied().enumerate().min_by_key(|(_, n)| *n).unwrap_or((0, 0));
            let reserved = plan.reserved[..window.len()].iter().copied().min().unwrap_or(0);
            let idle_gpu_hours =
                window.iter().map(|n| f64::from(*n)).sum::<f64>() * f64::from(pool.gpus_per_node) * step as f64
                    / 3600.0;
            Spare {
                horizon_secs: h,
                nodes,
                gpus: nodes * pool.gpus_per_node,
                idle_gpu_hours,
                reserved_nodes: reserved,
                tightest_in_secs: tightest as u64 * step,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::CapacityType;

    fn pool() -> Pool {
        Pool {
            name: "h100-reserved".into(),
            gpu_type: "nvidia-h100-80gb".into(),
            gpus_per_node: 8,
            nvlink_domain_gpus: 8,
            nodes_per_rack: None,
            capacity_type: CapacityType::Reserved,
            price_per_node_hour: 0.0,
            provisioning_secs: 600.0,
            max_nodes: None,
            labels: Default::default(),
            taints: Vec::new(),
        }
    }

    fn plan(nodes: Vec<u32>, reserved: Vec<u32>) -> PoolPlan {
        PoolPlan {
            name: "h100-reserved".into(),
            capacity_type: CapacityType::Reserved,
            warm_nodes: 0,
            in_use_nodes: 0,
            buffer_nodes: 0,
            nodes,
            reserved,
            next_order: None,
            cost_per_hour_now: 0.0,
            reason: String::new(),
        }
    }

    #[test]
    fn the_offer_is_the_fewest_idle_reserved_nodes_over_the_horizon() {
        // Ten-minute steps: 4 reserved nodes; inference needs 1, then 3 at +30 min, then 1.
        let p = plan(vec![1, 1, 1, 3, 1, 1, 1, 1], vec![4; 8]);
        let s = spare(&pool(), &p, 600, &[1800, 3600, 36_000]);
        // The first half hour: 3 idle nodes throughout.
        assert_eq!((s[0].nodes, s[0].gpus, s[0].tightest_in_secs), (3, 24, 0));
        assert!((s[0].idle_gpu_hours - 3.0 * 3.0 * 8.0 / 6.0).abs() < 1e-9, "{:?}", s[0]);
        // The hour includes the peak at +30 min: only 1 node is idle all along.
        assert_eq!((s[1].nodes, s[1].gpus, s[1].tightest_in_secs), (1, 8, 1800));
        // Past what the plan covers: cut to its 8 steps.
        assert_eq!(s[2].nodes, 1);
    }

    #[test]
    fn a_reservation_ending_inside_the_horizon_offers_only_what_outlasts_the_lease() {
        // 4 reserved nodes until +20 min, then none; inference needs 1 throughout.
        let p = plan(vec![1; 6], vec![4, 4, 0, 0, 0, 0]);
        let s = spare(&pool(), &p, 600, &[1200, 3600]);
        assert_eq!(s[0].nodes, 3);
        assert_eq!((s[1].nodes, s[1].reserved_nodes), (0, 0));
        // Needing more than is reserved is not negative spare.
        let over = plan(vec![6; 3], vec![4; 3]);
        assert_eq!(spare(&pool(), &over, 600, &[1800])[0].nodes, 0);
    }
}
