//! Packing at one moment: every replica onto nodes of some pool.
//!
//! Greedy, largest shapes first (first-fit decreasing, which keeps big
//! replicas from finding only fragments). Each replica goes where its next
//! copy costs least: a free slot on a node already counted costs nothing, and
//! so does a node a paid reservation already covers; otherwise a new node's
//! price per replica slot. Ties go to reserved capacity, then on-demand, then
//! spot, then by name, so the same input always gives the same plan.
//!
//! Topology is exact, not approximated by GPU counts: a node is a list of
//! NVLink domains with free GPUs, a replica's part takes GPUs from one domain,
//! and the parts of a multi-node replica go to distinct nodes of one rack.

use super::{CapacityType, Pool, Shape};

/// Capacity of one pool at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Most nodes the pool can have (quota, or the reservation for a reserved pool).
    pub max_nodes: u32,
    /// Nodes a paid reservation covers: using them costs nothing more.
    pub paid_nodes: u32,
}

/// Replicas of one shape to place.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub shape: &'a Shape,
    pub replicas: u32,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    pub rack: u32,
    /// Free GPUs per NVLink domain.
    pub free: Vec<u32>,
    /// Every replica part on the node.
    pub parts: Vec<Part>,
    /// Holds part of an exclusive-rack replica: its rack takes no other.
    pub exclusive: bool,
}

/// One node's share of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Index into the requests.
    pub request: usize,
    /// Which of the request's replicas (parts of one replica share it).
    pub replica: u32,
    /// NVLink domain on the node.
    pub domain: usize,
}

/// Where everything went.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Packing {
    /// Per pool, its nodes.
    pub nodes: Vec<Vec<Node>>,
    /// Per request, replicas placed in each pool.
    pub placed: Vec<Vec<u32>>,
    /// Per request, replicas no pool could take.
    pub unplaced: Vec<u32>,
    /// Per request, true when it could not use a pool for lack of nodes (quota or reservation).
    pub(crate) capped: Vec<Vec<bool>>,
}

impl Packing {
    pub(crate) fn node_count(&self, pool: usize) -> u32 {
        self.nodes[pool].len() as u32
    }
}

/// A way to place one replica in one pool.
struct Fit {
    /// (node index, domain) per part on existing nodes.
    existing: Vec<(usize, usize)>,
    /// New nodes to open, and the rack they go in.
    new_nodes: u32,
    rack: u32,
}

/// How a multi-node replica uses partly filled nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parts {
    /// As many parts as fit on nodes already open: fewest new nodes now.
    Fill,
    /// In the first rack that takes the replica, as many parts on new nodes
    /// as the rack and quota allow: leaves the open nodes' free domains to
    /// pair with later replicas, which is what fits a rack or a quota exactly.
    Spread,
}

/// Place `requests` on `pools` under `limits` (one per pool).
///
/// Packs with [`Parts::Fill`]; with multi-node replicas to place, with
/// [`Parts::Spread`] too, keeping whichever places more (then costs less):
/// neither wins everywhere, and packing twice is cheap next to a bad plan.
pub fn pack(pools: &[Pool], limits: &[Limits], requests: &[Request<'_>]) -> Packing {
    let fill = pack_with(pools, limits, requests, Parts::Fill);
    if !requests.iter().any(|r| r.shape.nodes_per_replica > 1 && r.replicas > 0) {
        return fill;
    }
    let spread = pack_with(pools, limits, requests, Parts::Spread);
    let score = |p: &Packing| {
        let unplaced: u32 = p.unplaced.iter().sum();
        (unplaced, hourly_cost(pools, limits, p))
    };
    if score(&spread) < score(&fill) {
        spread
    } else {
        fill
    }
}

/// What the packing's nodes cost per hour beyond paid reservations.
pub(crate) fn hourly_cost(pools: &[Pool], limits: &[Limits], p: &Packing) -> f64 {
    (0..pools.len()).map(|i| new_node_cost(&pools[i], &limits[i], 0, p.node_count(i))).sum()
}

fn pack_with(pools: &[Pool], limits: &[Limits], requests: &[Request<'_>], parts: Parts) -> Packing {
    let mut out = Packing {
        nodes: vec![Vec::new(); pools.len()],
        placed: vec![vec![0; pools.len()]; requests.len()],
        unplaced: vec![0; requests.len()],
        capped: vec![vec![false; pools.len()]; requests.len()],
    };
    // Largest parts first, then the widest replicas; index keeps it deterministic.
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| {
        let s = requests[i].shape;
        (std::cmp::Reverse(s.gpus_per_node()), std::cmp::Reverse(s.nodes_per_replica), i)
    });
    for i in order {
        let shape = requests[i].shape;
        let eligible: Vec<(usize, u32)> =
            pools.iter().enumerate().filter_map(|(p, pool)| pool.parts_per_node(shape).ok().map(|n| (p, n))).collect();
        for replica in 0..requests[i].replicas {
            // (cost per replica, tie-break, pool, where it fits)
            let mut best: Option<(f64, TieBreak, usize, Fit)> = None;
            for &(p, per_node) in &eligible {
                let Some(opt) = option(&pools[p], &limits[p], &out.nodes[p], shape, parts) else {
                    out.capped[i][p] = true;
                    continue;
                };
                // A new node's price is shared by the replicas of this request
                // still to place that it can hold, not by slots that may stay empty.
                let sharing = per_node.min(requests[i].replicas - replica).max(1);
                let cost =
                    new_node_cost(&pools[p], &limits[p], out.nodes[p].len() as u32, opt.new_nodes) / f64::from(sharing);
                let tie = (type_rank(pools[p].capacity_type), pools[p].price_per_node_hour.to_bits(), p);
                if best.as_ref().is_none_or(|(c, t, _, _)| (cost, tie) < (*c, *t)) {
                    best = Some((cost, tie, p, opt));
                }
            }
            match best {
                Some((_, _, p, opt)) => {
                    apply(&pools[p], &mut out.nodes[p], shape, Part { request: i, replica, domain: 0 }, opt);
                    out.placed[i][p] += 1;
                }
                None => out.unplaced[i] += 1,
            }
        }
    }
    out
}

/// Between equal costs: reserved before on-demand before spot, then the
/// cheaper node, then the pool listed first.
type TieBreak = (u8, u64, usize);

fn type_rank(t: CapacityType) -> u8 {
    match t {
        CapacityType::Reserved => 0,
        CapacityType::OnDemand => 1,
        CapacityType::Spot => 2,
    }
}

/// Hourly price of opening `new` nodes after `open` exist: nodes a paid
/// reservation covers are free.
fn new_node_cost(pool: &Pool, limits: &Limits, open: u32, new: u32) -> f64 {
    let unpaid = (open + new).saturating_sub(limits.paid_nodes.max(open));
    f64::from(unpaid) * pool.price_per_node_hour
}

/// Cheapest way to fit one replica in this pool: existing free domains
/// first, new nodes only for what is left; `None` if the pool is full.
fn option(pool: &Pool, limits: &Limits, nodes: &[Node], shape: &Shape, parts: Parts) -> Option<Fit> {
    let need = shape.gpus_per_node();
    let m = shape.nodes_per_replica.max(1);
    let room = limits.max_nodes.saturating_sub(nodes.len() as u32);
    // An exclusive replica avoids racks another one holds (only where the pool has racks).
    let exclusive = shape.exclusive_rack && pool.nodes_per_rack.is_some();
    let taken = |rack: u32| exclusive && nodes.iter().any(|n| n.rack == rack && n.exclusive);
    // The domain on a node that fits `need` most tightly (least left over).
    let tightest = |n: &Node| {
        if taken(n.rack) {
            return None;
        }
        n.free.iter().enumerate().filter(|(_, f)| **f >= need).min_by_key(|(d, f)| (**f, *d)).map(|(d, _)| d)
    };
    if m == 1 {
        let fit = nodes.iter().enumerate().filter_map(|(k, n)| tightest(n).map(|d| (n.free[d], k, d))).min();
        return match fit {
            Some((_, k, d)) => Some(Fit { existing: vec![(k, d)], new_nodes: 0, rack: 0 }),
            None if room >= 1 => {
                Some(Fit { existing: Vec::new(), new_nodes: 1, rack: rack_with_room(pool, nodes, 1, &taken)? })
            }
            None => None,
        };
    }
    // Multi-node: all parts in one rack, on distinct nodes.
    let racks = rack_count(pool, nodes);
    let mut best: Option<Fit> = None;
    for rack in (0..=racks).filter(|r| !taken(*r)) {
        let in_rack = nodes.iter().filter(|n| n.rack == rack).count() as u32;
        let free_slots = pool.nodes_per_rack.map_or(u32::MAX, |r| r.saturating_sub(in_rack));
        let openable = free_slots.min(room).min(m);
        let want_existing = match parts {
            Parts::Fill => m,
            Parts::Spread => m - openable,
        };
        let existing: Vec<(usize, usize)> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.rack == rack)
            .filter_map(|(k, n)| tightest(n).map(|d| (k, d)))
            .take(want_existing as usize)
            .collect();
        let new_nodes = m - existing.len() as u32;
        if new_nodes > openable {
            continue;
        }
        if best.as_ref().is_none_or(|b| new_nodes < b.new_nodes) {
            best = Some(Fit { existing, new_nodes, rack });
        }
        // Spread: the first rack that takes the replica, as many new nodes in it as it allows.
        if parts == Parts::Spread || new_nodes == 0 {
            break;
        }
    }
    best
}

/// Racks in use (the next index is an empty rack).
fn rack_count(pool: &Pool, nodes: &[Node]) -> u32 {
    match pool.nodes_per_rack {
        None => 0,
        Some(_) => nodes.iter().map(|n| n.rack + 1).max().unwrap_or(0),
    }
}

/// The first rack with room for `k` more nodes, not `taken`.
fn rack_with_room(pool: &Pool, nodes: &[Node], k: u32, taken: &dyn Fn(u32) -> bool) -> Option<u32> {
    let Some(size) = pool.nodes_per_rack else { return Some(0) };
    (0..=rack_count(pool, nodes))
        .find(|r| !taken(*r) && nodes.iter().filter(|n| n.rack == *r).count() as u32 + k <= size)
}

fn apply(pool: &Pool, nodes: &mut Vec<Node>, shape: &Shape, part: Part, opt: Fit) {
    let need = shape.gpus_per_node();
    for (k, d) in opt.existing {
        nodes[k].free[d] -= need;
        nodes[k].parts.push(Part { domain: d, ..part });
        nodes[k].exclusive |= shape.exclusive_rack;
    }
    let domains = (pool.gpus_per_node / pool.nvlink_domain_gpus.max(1)).max(1) as usize;
    for _ in 0..opt.new_nodes {
        let mut free = vec![pool.nvlink_domain_gpus; domains];
        free[0] -= need;
        nodes.push(Node {
            rack: opt.rack,
            free,
            parts: vec![Part { domain: 0, ..part }],
            exclusive: shape.exclusive_rack,
        });
    }
}

/// Why no replica of `shape` could go in each pool: topology, or no nodes left.
pub(crate) fn why_not(pool: &Pool, shape: &Shape, capped: bool) -> Option<String> {
    match pool.parts_per_node(shape) {
        Err(u) => Some(u.to_string()),
        Ok(_) if capped => Some(match pool.capacity_type {
            CapacityType::Reserved => "reservation exhausted".to_string(),
            _ => format!("max_nodes {} reached", pool.max_nodes.unwrap_or(u32::MAX)),
        }),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str, gpus: u32, domain: u32, rack: Option<u32>, t: CapacityType, price: f64) -> Pool {
        Pool {
            name: name.into(),
            gpu_type: "h100".into(),
            gpus_per_node: gpus,
            nvlink_domain_gpus: domain,
            nodes_per_rack: rack,
            capacity_type: t,
            price_per_node_hour: price,
            provisioning_secs: 600.0,
            max_nodes: None,
            labels: Default::default(),
            taints: Vec::new(),
        }
    }

    fn shape(gpus: u32, nodes: u32) -> Shape {
        Shape {
            gpu_type: "h100".into(),
            gpus_per_replica: gpus,
            nodes_per_replica: nodes,
            constraints: Default::default(),
            exclusive_rack: false,
        }
    }

    fn open(n: u32) -> Limits {
        Limits { max_nodes: n, paid_nodes: 0 }
    }

    /// Every part sits inside one domain, multi-node parts on distinct nodes of one rack.
    fn check_topology(pools: &[Pool], reqs: &[Request<'_>], p: &Packing) {
        for (pi, nodes) in p.nodes.iter().enumerate() {
            for n in nodes {
                assert!(n.free.iter().all(|f| *f <= pools[pi].nvlink_domain_gpus));
                let used: u32 = n.parts.iter().map(|x| reqs[x.request].shape.gpus_per_node()).sum();
                let free: u32 = n.free.iter().sum();
                assert_eq!(used + free, pools[pi].gpus_per_node);
            }
        }
    }

    #[test]
    fn tp4_on_two_domain_nodes_is_never_split() {
        // 2x4 NVLink: two domains of four GPUs per 8-GPU node.
        let pools = [pool("p", 8, 4, None, CapacityType::OnDemand, 10.0)];
        let tp4 = shape(4, 1);
        let tp2 = shape(2, 1);
        // 3 TP-2 first in the list, then 3 TP-4: FFD places the TP-4s whole.
        let reqs = [Request { shape: &tp2, replicas: 3 }, Request { shape: &tp4, replicas: 3 }];
        let p = pack(&pools, &[open(100)], &reqs);
        check_topology(&pools, &reqs, &p);
        for n in &p.nodes[0] {
            for x in &n.parts {
                if x.request == 1 {
                    // The whole domain went to the TP-4 part.
                    let tp2_same_domain = n.parts.iter().filter(|y| y.request == 0 && y.domain == x.domain).count();
                    assert_eq!(tp2_same_domain, 0);
                }
            }
        }
        // 3 TP-4 domains + 6 GPUs of TP-2 = 18 GPUs: 3 nodes.
        assert_eq!(p.node_count(0), 3);
    }

    #[test]
    fn a_part_larger_than_a_domain_cannot_use_the_pool() {
        let pools = [pool("two-by-four", 8, 4, None, CapacityType::OnDemand, 10.0)];
        let tp8 = shape(8, 1);
        let p = pack(&pools, &[open(100)], &[Request { shape: &tp8, replicas: 2 }]);
        assert_eq!(p.unplaced, vec![2]);
        assert_eq!(
            why_not(&pools[0], &tp8, false).unwrap(),
            "needs 8 GPUs in one NVLink domain, the pool's domains have 4"
        );
    }

    #[test]
    fn two_node_replicas_stay_in_one_rack() {
        // Racks of 3 nodes hold one pair each (the third slot cannot take half a
        // replica), so 3 two-node replicas take 6 nodes in 3 racks.
        let pools = [pool("p", 8, 8, Some(3), CapacityType::OnDemand, 10.0)];
        let big = shape(16, 2);
        let reqs = [Request { shape: &big, replicas: 3 }];
        let p = pack(&pools, &[open(100)], &reqs);
        assert_eq!(p.unplaced, vec![0]);
        for replica in 0..3 {
            let racks: Vec<u32> =
                p.nodes[0].iter().filter(|n| n.parts.iter().any(|x| x.replica == replica)).map(|n| n.rack).collect();
            assert_eq!(racks.len(), 2, "replica {replica} on two distinct nodes");
            assert_eq!(racks[0], racks[1], "replica {replica} across racks");
        }
        assert_eq!(p.node_count(0), 6);
    }

    #[test]
    fn exclusive_replicas_take_a_rack_each_and_leave_its_room_to_others() {
        // Racks of 4: without exclusivity two 2-node replicas share one rack;
        // with it (a LeaderWorkerSet's exclusive topology) each has its own,
        // and a single-node replica may still use the room beside either.
        let pools = [pool("p", 8, 8, Some(4), CapacityType::OnDemand, 10.0)];
        let plain = shape(16, 2);
        let exclusive = Shape { exclusive_rack: true, ..plain.clone() };
        let racks_of = |p: &Packing, request: usize| -> Vec<u32> {
            let mut r: Vec<u32> =
                p.nodes[0].iter().filter(|n| n.parts.iter().any(|x| x.request == request)).map(|n| n.rack).collect();
            r.dedup();
            r
        };
        let p = pack(&pools, &[open(100)], &[Request { shape: &plain, replicas: 2 }]);
        assert_eq!(racks_of(&p, 0), vec![0]);
        let single = shape(8, 1);
        let reqs = [Request { shape: &exclusive, replicas: 2 }, Request { shape: &single, replicas: 1 }];
        let p = pack(&pools, &[open(100)], &reqs);
        assert_eq!(p.unplaced, vec![0, 0]);
        assert_eq!(racks_of(&p, 0), vec![0, 1], "one exclusive replica per rack");
        assert_eq!(p.node_count(0), 5, "the single-node replica joins a rack an exclusive one holds");
    }

    #[test]
    fn paid_reservation_before_cheaper_on_demand() {
        let pools = [
            pool("on-demand", 8, 8, None, CapacityType::OnDemand, 20.0),
            pool("reserved", 8, 8, None, CapacityType::Reserved, 90.0),
        ];
        let limits = [open(100), Limits { max_nodes: 2, paid_nodes: 2 }];
        let s = shape(8, 1);
        let p = pack(&pools, &limits, &[Request { shape: &s, replicas: 5 }]);
        assert_eq!(p.placed[0], vec![3, 2]);
        assert!(p.capped[0][1], "the reservation ran out");
    }

    #[test]
    fn cheaper_per_replica_wins_among_paid_for_nothing() {
        let pools = [
            pool("a", 8, 8, None, CapacityType::OnDemand, 40.0), // 5.0 per GPU-hour
            pool("b", 4, 4, None, CapacityType::OnDemand, 16.0), // 4.0 per GPU-hour
        ];
        let s = shape(1, 1);
        let p = pack(&pools, &[open(100), open(100)], &[Request { shape: &s, replicas: 8 }]);
        assert_eq!(p.placed[0], vec![0, 8]);
        assert_eq!(p.node_count(1), 2);
    }
}
