//! Scoring spare-capacity offers against what the run shows: each offer of
//! reserved nodes for a lease of `horizon` seconds, set against the reserved
//! nodes the fleet really left idle minute by minute over that lease. An
//! offer larger than the fewest really idle at any minute would have had its
//! lease revoked (inference took the nodes back).

use serde::Serialize;

use super::{Capacity, Minute, Pool};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SpareScore {
    pub(crate) horizon_secs: f64,
    pub(crate) offers: usize,
    /// Offers larger than what stayed idle throughout their lease.
    pub(crate) revoked: usize,
    /// GPU-hours offered (node x lease), and of those in leases never revoked.
    pub(crate) offered_gpu_hours: f64,
    pub(crate) kept_gpu_hours: f64,
    /// GPU-hours a perfect offer (the fewest really idle nodes, each lease) would have lent.
    pub(crate) hindsight_gpu_hours: f64,
    /// Reserved GPU-hours really idle over the offers' leases, minute by minute.
    pub(crate) idle_gpu_hours: f64,
}

/// Score `offers` (seconds into the run, nodes) over the run's minutes.
pub(crate) fn score(
    offers: &[(f64, u32)],
    horizon_secs: f64,
    timeline: &[Minute],
    cap: &Capacity,
    pool: &Pool,
) -> SpareScore {
    let gpn = f64::from(pool.gpus_per_node);
    let idle = |m: &Minute| pool.reserved_nodes.saturating_sub(cap.nodes_for(m.replicas));
    let mut s = SpareScore {
        horizon_secs,
        offers: 0,
        revoked: 0,
        offered_gpu_hours: 0.0,
        kept_gpu_hours: 0.0,
        hindsight_gpu_hours: 0.0,
        idle_gpu_hours: 0.0,
    };
    let lease_minutes = (horizon_secs / 60.0).ceil() as usize;
    for &(t, nodes) in offers {
        let first = (t / 60.0).floor() as usize;
        // Only leases the run covers whole are scored.
        let Some(window) = timeline.get(first..first + lease_minutes) else { continue };
        let lowest = window.iter().map(idle).min().unwrap_or(0);
        let hours = horizon_secs / 3600.0;
        s.offers += 1;
        s.offered_gpu_hours += f64::from(nodes) * gpn * hours;
        if nodes > lowest {
            s.revoked += 1;
        } else {
            s.kept_gpu_hours += f64::from(nodes) * gpn * hours;
        }
        s.hindsight_gpu_hours += f64::from(lowest) * gpn * hours;
        s.idle_gpu_hours += window.iter().map(|m| f64::from(idle(m))).sum::<f64>() * gpn / 60.0;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::TokenMix;

    fn minute(m: usize, replicas: u32) -> Minute {
        Minute {
            minute: m,
            unix: 60 * m as i64,
            demand_rps: 0.0,
            arrived_rps: 0.0,
            replicas,
            ready_replicas: replicas,
            nodes: 0,
            queue: 0.0,
            attainment: 1.0,
            arrived: 0.0,
            served: 0.0,
            dropped: 0.0,
            reason: None,
        }
    }

    #[test]
    fn an_offer_larger_than_what_stayed_idle_throughout_is_revoked() {
        let profile = crate::config::load_profile("llama-3.1-8b-h100").unwrap();
        let pool = Pool {
            gpus_per_node: 8,
            provisioning_secs: 300.0,
            price_per_node_hour: 32.0,
            reserved_nodes: 4,
            reserved_price_per_node_hour: 20.0,
        };
        let cap = Capacity::new(&profile, TokenMix::azure_conversation(), &pool).unwrap();
        // Two hours: 8 replicas (1 node) for the first, 24 (3 nodes) for ten minutes in the second.
        let timeline: Vec<Minute> = (0..120).map(|m| minute(m, if (80..90).contains(&m) { 24 } else { 8 })).collect();
        // Offers for one-hour leases at 0 and at 60 min: 3 nodes each.
        let s = score(&[(0.0, 3), (3600.0, 3), (7200.0, 3)], 3600.0, &timeline, &cap, &pool);
        assert_eq!((s.offers, s.revoked), (2, 1), "{s:?}"); // the lease past the run is not scored
        assert!((s.offered_gpu_hours - 48.0).abs() < 1e-9 && (s.kept_gpu_hours - 24.0).abs() < 1e-9, "{s:?}");
        // Hindsight: 3 idle nodes all of the first hour, 1 all of the second.
        assert!((s.hindsight_gpu_hours - 32.0).abs() < 1e-9, "{s:?}");
        // Idle minute by minute: 3 nodes x 110 minutes + 1 node x 10 minutes, 8 GPUs each.
        assert!((s.idle_gpu_hours - (3.0 * 110.0 + 10.0) * 8.0 / 60.0).abs() < 1e-9, "{s:?}");
    }
}
