//! The run's nodes: one agentnet node of the simulation, the network of them in start order,
//! the dials between them and their counters summed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentnet_discovery::net::{self, Client, Counter};
use futures::StreamExt;
use libp2p::Multiaddr;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One agentnet node of the run: its client, its listen address (with its peer id) and its
/// swarm's task.
pub(crate) struct SimNode {
    pub(crate) client: Client,
    pub(crate) addr: Multiaddr,
    pub(crate) task: JoinHandle<()>,
    /// Cancelled when the node leaves (churn), or with the whole run.
    pub(crate) stop: CancellationToken,
}

/// Connection counters summed over nodes, to take differences over a window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnCounts {
    opened: u64,
    trimmed: u64,
    dials: u64,
}

impl ConnCounts {
    /// The counters of `nodes` now.
    pub(crate) fn of(nodes: &[Arc<SimNode>]) -> Self {
        ConnCounts {
            opened: stat_sum(nodes, |s| &s.connections_opened),
            trimmed: stat_sum(nodes, |s| &s.trimmed),
            dials: stat_sum(nodes, |s| &s.dials),
        }
    }

    /// What was counted since `start`.
    pub(crate) fn since(&self, start: &ConnCounts) -> ConnCounts {
        ConnCounts {
            opened: self.opened.saturating_sub(start.opened),
            trimmed: self.trimmed.saturating_sub(start.trimmed),
            dials: self.dials.saturating_sub(start.dials),
        }
    }

    /// Totals, and connections opened per node per minute (each connection counts at both
    /// ends: one dial between two nodes adds 2 to `opened`).
    pub(crate) fn json(&self, nodes: usize, window: Duration) -> Value {
        let minutes = window.as_secs_f64() / 60.0;
        let per_node_min = |x: u64| (minutes > 0.0).then(|| x as f64 / nodes as f64 / minutes);
        json!({
            "opened": self.opened, "trimmed": self.trimmed, "dials": self.dials,
            "opened_per_node_per_min": per_node_min(self.opened),
            "dials_per_node_per_min": per_node_min(self.dials),
        })
    }
}

/// One counter of the nodes' [`net::Stats`], summed.
pub(crate) fn stat_sum(nodes: &[Arc<SimNode>], counter: fn(&net::Stats) -> &Counter) -> u64 {
    nodes.iter().map(|s| counter(s.client.stats()).get()).sum()
}

/// The run's nodes in start order: node i listens on `/memory/<i + 1>`. Honest nodes that join
/// later (churn) come after the adversaries.
pub(crate) struct Net {
    pub(crate) nodes: Vec<Arc<SimNode>>,
    pub(crate) honest: Vec<bool>,
    pub(crate) alive: Vec<bool>,
}

impl Net {
    /// Adds a running node.
    pub(crate) fn push(&mut self, node: Arc<SimNode>, honest: bool) {
        self.nodes.push(node);
        self.honest.push(honest);
        self.alive.push(true);
    }

    /// Honest nodes running now.
    pub(crate) fn live_honest(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.honest[i] && self.alive[i])
            .collect()
    }

    /// Every honest node, run or left.
    pub(crate) fn honest_nodes(&self) -> Vec<Arc<SimNode>> {
        (0..self.nodes.len())
            .filter(|&i| self.honest[i])
            .map(|i| self.nodes[i].clone())
            .collect()
    }
}

/// Makes the dials of `plan` (from, to), 32 at a time; returns how many failed.
pub(crate) async fn dial_plan(
    nodes: &[Arc<SimNode>],
    plan: &[(usize, usize)],
    started: Instant,
) -> usize {
    futures::stream::iter(plan.iter().map(|&(i, j)| {
        let (from, to) = (nodes[i].client.clone(), nodes[j].addr.clone());
        async move {
            tokio::time::timeout(Duration::from_secs(10), from.dial(to))
                .await
                .map_err(|_| ())
                .and_then(|r| r.map_err(|_| ()))
        }
    }))
    .buffer_unordered(32)
    .enumerate()
    .fold(0usize, |failed, (k, r)| {
        if plan.len() >= 500 && (k + 1) % 500 == 0 {
            eprintln!(
                "simulate: {} of {} dials done at {:.1} s",
                k + 1,
                plan.len(),
                started.elapsed().as_secs_f64()
            );
        }
        futures::future::ready(failed + usize::from(r.is_err()))
    })
    .await
}

/// Gossip and byte counters summed over `idx`.
pub(crate) fn traffic_of(nodes: &[Arc<SimNode>], idx: &[usize]) -> net::Traffic {
    let mut t = net::Traffic::default();
    for &i in idx {
        let x = nodes[i].client.traffic();
        t.gossip_received += x.gossip_received;
        t.gossip_unique += x.gossip_unique;
        t.idontwant_received += x.idontwant_received;
        t.send_dropped += x.send_dropped;
        t.validated_too_late += x.validated_too_late;
        t.bytes_in += x.bytes_in;
        t.bytes_out += x.bytes_out;
    }
    t
}
