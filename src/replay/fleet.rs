//! The fleet a policy drives, one step at a time: replicas asked for but
//! unscheduled, cold-starting and ready, and the one GPU pool's nodes,
//! booting and ready, under a cluster autoscaler that boots nodes for
//! pending replicas and warm-node requests and holds scale-down for a window.

use super::{Capacity, Pool};
use crate::sizing::predictive::Stabiliser;

pub(super) struct Fleet {
    /// Replicas serving.
    pub(super) ready: u32,
    /// Replicas placed on a node, each with the time it becomes ready.
    starting: Vec<f64>,
    /// Replicas asked for that no ready node has room for yet.
    pending: u32,
    nodes_ready: u32,
    /// Ready nodes that have run the image (a pod starts faster there).
    cached_nodes: u32,
    /// Nodes provisioning, each with the time it becomes ready.
    booting: Vec<f64>,
    node_stab: Stabiliser,
    /// Spare nodes the policy asked to keep (placeholder pods).
    warm: u32,
    pub(super) cold_starts: u64,
    pub(super) node_boots: u64,
}

impl Fleet {
    /// A steady fleet: `ready` replicas on ready nodes.
    pub(super) fn new(ready: u32, nodes_ready: u32) -> Fleet {
        Fleet {
            ready,
            starting: Vec::new(),
            pending: 0,
            nodes_ready,
            cached_nodes: nodes_ready,
            booting: Vec::new(),
            node_stab: Stabiliser::default(),
            warm: 0,
            cold_starts: 0,
            node_boots: 0,
        }
    }

    /// Replicas on a node: starting or ready (what holds GPUs).
    pub(super) fn placed(&self) -> u32 {
        self.ready + self.starting.len() as u32
    }

    /// The Deployment's replicas as the HPA sees them: ready, starting and unscheduled.
    pub(super) fn spec(&self) -> u32 {
        self.ready + self.starting.len() as u32 + self.pending
    }

    /// Nodes up or booting: what is billed.
    pub(super) fn nodes(&self) -> u32 {
        self.nodes_ready + self.booting.len() as u32
    }

    /// Apply a decision: `target` replicas, `warm` spare nodes. Replicas
    /// removed go unscheduled first, then the latest-started, then ready
    /// ones (draining).
    pub(super) fn scale_to(&mut self, target: u32, warm: u32) {
        self.warm = warm;
        let spec = self.spec();
        if target > spec {
            self.pending += target - spec;
            return;
        }
        let mut remove = spec - target;
        let p = remove.min(self.pending);
        self.pending -= p;
        remove -= p;
        self.starting.sort_by(|a, b| a.total_cmp(b));
        while remove > 0 && self.starting.pop().is_some() {
            remove -= 1;
        }
        self.ready -= remove.min(self.ready);
    }

    /// One step at `t`: the cluster autoscaler, then scheduling and readiness.
    pub(super) fn step(&mut self, t: f64, cap: &Capacity, pool: &Pool, node_scale_down_secs: f64) {
        self.autoscale_nodes(t, cap, pool, node_scale_down_secs);
        let on_nodes = self.placed();
        let free = cap.replicas_on(self.nodes_ready).saturating_sub(on_nodes);
        let placed = free.min(self.pending);
        // Nodes that have run the image first; the rest pull it.
        let fast = cap.replicas_on(self.cached_nodes).saturating_sub(on_nodes).min(placed);
        self.pending -= placed;
        self.cold_starts += u64::from(placed);
        self.starting.extend(std::iter::repeat_n(t + cap.pod_start_secs, fast as usize));
        self.starting.extend(std::iter::repeat_n(t + cap.pod_start_new_node_secs, (placed - fast) as usize));
        self.cached_nodes = self.cached_nodes.max(cap.nodes_for(on_nodes + placed)).min(self.nodes_ready);
        let ready = &mut self.ready;
        self.starting.retain(|at| {
            let up = *at <= t;
            *ready += u32::from(up);
            !up
        });
    }

    /// Boot nodes for every pending replica and warm node at once; remove
    /// one only after it has been unneeded for the window, never below the
    /// nodes replicas occupy or the reserved ones.
    fn autoscale_nodes(&mut self, t: f64, cap: &Capacity, pool: &Pool, node_scale_down_secs: f64) {
        let placed = self.ready + self.starting.len() as u32;
        let occupied = cap.nodes_for(placed);
        let wanted = (cap.nodes_for(placed + self.pending) + self.warm).max(pool.reserved_nodes);
        let have = self.nodes();
        if wanted > have {
            for _ in have..wanted {
                self.booting.push(t + pool.provisioning_secs);
            }
            self.node_boots += u64::from(wanted - have);
        }
        let keep = self.node_stab.apply(t, node_scale_down_secs, wanted).max(occupied).max(pool.reserved_nodes);
        let have = self.nodes();
        if have > keep {
            let mut remove = have - keep;
            self.booting.sort_by(|a, b| a.total_cmp(b));
            while remove > 0 && self.booting.pop().is_some() {
                remove -= 1;
            }
            self.nodes_ready -= remove.min(self.nodes_ready);
            // Nodes removed are the ones no replica needs: the cached ones go last.
            self.cached_nodes = self.cached_nodes.min(self.nodes_ready);
        }
        let nodes_ready = &mut self.nodes_ready;
        self.booting.retain(|at| {
            let up = *at <= t;
            *nodes_ready += u32::from(up);
            !up
        });
    }
}
