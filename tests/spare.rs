//! The spare-capacity forecast end to end: a workload with three days of a
//! daily cycle in history, eight reserved nodes; the engine fits the
//! hours-ahead forecast, packs it over four hours and offers the reserved
//! nodes it leaves idle throughout each lease length.

use std::time::{Duration, Instant};

use crate::common::{self, KEY};

fn offers(edit: impl Fn(String) -> String) -> (foresight::serve::state::PoolSpare, u32) {
    let (registry, _store, mut engine, now) = common::forecast_ready(edit);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        engine.tick(now);
        let snap = registry.load();
        let pool = snap.pools().into_iter().find(|p| p.name == "h100-reserved").unwrap().clone();
        let spare = pool.spare.clone().expect("pools are configured: a spare forecast each tick");
        // Until its hours-ahead forecast is fitted, a workload is held at its current replicas.
        if !spare.held_at_current.contains(&KEY.to_string()) {
            let desired = snap.get(KEY).and_then(|s| s.decision.as_ref()).map(|d| d.desired_replicas).unwrap();
            return (spare, desired);
        }
        assert!(Instant::now() < deadline, "no hours-ahead forecast in time: {spare:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Eight reserved nodes, and llama-8b at 4 in flight per replica: 25 replicas
/// at the cycle's mean, 40 at its peak, 8 to a node.
fn eight_reserved(yaml: String) -> String {
    yaml.replace("{name: block, pool: h100-reserved, nodes: 1,", "{name: block, pool: h100-reserved, nodes: 8,")
        .replacen("target: {signal: concurrency}", "target: {signal: concurrency, per_replica: 4}", 1)
        .replacen("max_replicas: 10", "max_replicas: 64", 1)
}

#[test]
fn reserved_nodes_idle_throughout_each_lease_are_offered() {
    let (spare, desired) = offers(eight_reserved);
    let by = |h: u64| spare.offers.iter().find(|o| o.horizon_secs == h).unwrap_or_else(|| panic!("{spare:?}"));
    let (hour, four) = (by(3600), by(14_400));
    for o in [hour, four] {
        assert_eq!(o.gpus, o.nodes * 8, "{o:?}");
        assert_eq!(o.reserved_nodes, 8, "{o:?}");
    }
    // Inference keeps what it runs now, and the peak of four hours needs at least as much as one hour's.
    let in_use_now = desired.div_ceil(8);
    assert!(hour.nodes <= 8 - in_use_now.min(8), "{hour:?}, {desired} replicas now");
    assert!(four.nodes <= hour.nodes, "{four:?} > {hour:?}");
    assert!(four.idle_gpu_hours > hour.idle_gpu_hours, "{four:?} {hour:?}");
    // The cycle's peak is 160 in flight: 40 replicas on 5 nodes, so with a
    // forecast this smooth at least 2 of the 8 stay idle throughout any hour.
    assert!((2..=7).contains(&hour.nodes), "{hour:?}");
}

#[test]
fn a_reservation_smaller_than_the_forecast_offers_nothing() {
    // One reserved node for 25-40 replicas: the plan uses all of it.
    let (spare, _) = offers(|y| {
        y.replacen("target: {signal: concurrency}", "target: {signal: concurrency, per_replica: 4}", 1).replacen(
            "max_replicas: 10",
            "max_replicas: 64",
            1,
        )
    });
    assert!(spare.offers.iter().all(|o| o.nodes == 0 && o.gpus == 0), "{spare:?}");
}
