//! Planning time for a large fleet: 200 served models on 20 GPU node pools,
//! over the look-ahead the engine plans each tick.
//!
//! `cargo bench --bench plan` (FORESIGHT_BENCH_SECS sets the run length,
//! default 5). Pools mix GPU types, NVLink domain sizes, rack sizes and
//! capacity types, with reservations that open and close inside the
//! horizon; models mix shapes from one GPU to two-node replicas, with demand
//! ramping across the horizon. Prints the median and p99 time of one whole
//! plan (every step packed, warm nodes and orders derived), and of one
//! step's packing for scale.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use foresight::capacity::{
    limits_at,
    pack::{pack, Request},
    plan, CapacityType, Demand, PlanInput, Pool, Reservation, Shape,
};

const MODELS: usize = 200;
const POOLS: usize = 20;
const STEP_SECS: i64 = 60;

/// A deterministic generator, so every run plans the same fleet.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const GPUS: [&str; 3] = ["nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-l40s"];

fn fleet() -> (Vec<Pool>, Vec<Reservation>, Vec<Demand>) {
    let mut rng = Lcg(42);
    let pools: Vec<Pool> = (0..POOLS)
        .map(|i| {
            let capacity_type = [CapacityType::Reserved, CapacityType::OnDemand, CapacityType::Spot][i % 3];
            let gpus_per_node = if GPUS[i % 3] == "nvidia-l40s" { 4 } else { 8 };
            Pool {
                name: format!("pool-{i}"),
                gpu_type: GPUS[(i / 3) % 3].into(),
                gpus_per_node,
                nvlink_domain_gpus: if i % 4 == 1 { gpus_per_node / 2 } else { gpus_per_node },
                nodes_per_rack: if i % 2 == 0 { Some(4 + rng.below(5) as u32) } else { None },
                capacity_type,
                price_per_node_hour: match capacity_type {
                    CapacityType::Reserved => 0.0,
                    CapacityType::OnDemand => 60.0 + rng.below(40) as f64,
                    CapacityType::Spot => 20.0 + rng.below(20) as f64,
                },
                provisioning_secs: 300.0 + 60.0 * rng.below(16) as f64,
                max_nodes: Some(150 + rng.below(100) as u32),
                labels: Default::default(),
                taints: Vec::new(),
            }
        })
        .collect();
    let reservations = pools
        .iter()
        .filter(|p| p.capacity_type == CapacityType::Reserved)
        .flat_map(|p| {
            // One block open all horizon, one closing and one opening inside it.
            let n = |r: &mut Lcg| 4 + r.below(12) as u32;
            [(-86_400, 86_400), (-3_600, 900), (600, 7_200)].map(|(start, end)| Reservation {
                name: format!("{}-{start}", p.name),
                pool: p.name.clone(),
                nodes: n(&mut rng),
                start,
                end,
                paid: true,
            })
        })
        .collect();
    let steps = steps(&pools);
    let demands = (0..MODELS)
        .map(|i| {
            let (gpus, nodes) = [(1, 1), (1, 1), (2, 1), (4, 1), (4, 1), (8, 1), (16, 2)][rng.below(7) as usize];
            let base = 1 + rng.below(8) as u32;
            let growth = rng.below(6) as u32;
            Demand {
                workload: format!("model-{i}"),
                shape: Shape {
                    gpu_type: GPUS[rng.below(3) as usize].into(),
                    gpus_per_replica: gpus,
                    nodes_per_replica: nodes,
                    constraints: Default::default(),
                    exclusive_rack: false,
                },
                // Ramping up across the horizon, as ahead of a daily peak.
                replicas: (0..steps + 10).map(|k| base + growth * k as u32 / steps as u32).collect(),
                pod_start_secs: 180.0 + 60.0 * rng.below(8) as f64,
                running: base,
            }
        })
        .collect();
    (pools, reservations, demands)
}

/// What the engine plans: the longest provisioning plus the longest pod start.
fn steps(pools: &[Pool]) -> usize {
    let longest = pools.iter().map(|p| p.provisioning_secs).fold(0.0, f64::max) + 600.0;
    (longest / STEP_SECS as f64).ceil() as usize + 1
}

fn time<F: FnMut()>(budget: Duration, mut f: F) -> Vec<Duration> {
    let mut samples = Vec::new();
    let start = Instant::now();
    while start.elapsed() < budget || samples.len() < 10 {
        let t = Instant::now();
        f();
        samples.push(t.elapsed());
    }
    samples.sort();
    samples
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let secs: f64 = std::env::var("FORESIGHT_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let budget = Duration::from_secs_f64(secs);
    let (pools, reservations, demands) = fleet();
    let steps = steps(&pools);
    let input = PlanInput {
        now: 0,
        step_secs: STEP_SECS,
        steps,
        pools: &pools,
        reservations: &reservations,
        demands: &demands,
    };

    let p = plan(input);
    let replicas: u32 = demands.iter().map(|d| d.replicas[0]).sum();
    let unplaced: u32 = p.workloads.iter().map(|w| w.unplaced).sum();
    let warm: u32 = p.pools.iter().map(|p| p.warm_nodes).sum();
    println!(
        "fleet: {MODELS} models, {POOLS} pools, {} reservations; {steps} steps of {STEP_SECS} s; \
         {replicas} replicas now, {warm} warm nodes planned, {unplaced} replicas unplaceable at some step",
        reservations.len()
    );
    assert!(warm > 0 && p.pools.len() == POOLS && p.workloads.len() == MODELS);

    let whole = time(budget, || {
        black_box(plan(black_box(input)));
    });
    let limits = limits_at(&pools, &reservations, 0);
    let requests: Vec<Request<'_>> =
        demands.iter().map(|d| Request { shape: &d.shape, replicas: *d.replicas.last().unwrap() }).collect();
    let one = time(budget / 2, || {
        black_box(pack(&pools, &limits, black_box(&requests)));
    });
    let pct = |s: &[Duration], q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    println!(
        "plan (all {steps} steps):  median {:.2} ms  p99 {:.2} ms  ({} runs)",
        ms(pct(&whole, 0.5)),
        ms(pct(&whole, 0.99)),
        whole.len()
    );
    println!(
        "pack (one step, peak):     median {:.3} ms  p99 {:.3} ms  ({} runs)",
        ms(pct(&one, 0.5)),
        ms(pct(&one, 0.99)),
        one.len()
    );
}
