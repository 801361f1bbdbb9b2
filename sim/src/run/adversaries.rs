//! The run's attackers: the eclipse attackers started with the nodes, the full-node adversaries
//! started after the warm-up, and what each of them achieved once stopped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libp2p::PeerId;
use rand::{Rng as _, SeedableRng};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::publish::Adverts;
use super::Sim;
use crate::agent::Rng;
use crate::attack::{self, EclipseTally, Tally};
use crate::measure::{ms, percentile};
use crate::node::{stat_sum, SimNode};

/// The full-node adversaries, running.
pub(super) struct Adversaries {
    /// The honest advertisements' DIDs so far (the hijacks' targets).
    pub(super) honest_dids: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
    tasks: Vec<(attack::Kind, JoinHandle<Tally>)>,
    /// The initial honest nodes' validation time when they started, µs.
    validation_start: u64,
}

/// What the full-node adversaries sent, by kind, and the honest nodes' validation time.
pub(super) struct Attacks {
    pub(super) junk: Tally,
    pub(super) replay: Tally,
    pub(super) sybil: Tally,
    /// The initial honest nodes' validation time over the attacks, µs.
    pub(super) validation_micros: u64,
}

impl Sim<'_> {
    /// Eclipse attackers dial their victim now, to be there while the mesh forms.
    pub(super) fn start_eclipse(
        &mut self,
        stop_eclipse: &CancellationToken,
    ) -> Result<Option<(usize, Arc<EclipseTally>, Vec<PeerId>)>, String> {
        let Some(e) = self.args.eclipse else {
            return Ok(None);
        };
        let n = self.n;
        let victim = e
            .target
            .unwrap_or_else(|| self.scenario_rng.gen_range(0..n));
        let first = n + self.kinds.len();
        let (tally, ids) = attack::eclipse(
            e.nodes,
            self.net.nodes[victim].addr.clone(),
            self.args.heartbeat(),
            self.args.mesh,
            &|k| self.links_of(1_000_000 + first + k),
            stop_eclipse.clone(),
        )?;
        eprintln!(
            "simulate: {} eclipse attackers dialing node {victim}",
            e.nodes
        );
        Ok(Some((victim, tally, ids)))
    }

    /// Starts the full-node adversaries (after the honest nodes in start order), each with a
    /// generator seeded from the run's.
    pub(super) fn start_adversaries(&mut self) -> Adversaries {
        let honest_dids: Arc<Mutex<Vec<String>>> = Default::default();
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        for (node, &(kind, rate)) in self.net.nodes.iter().skip(self.n).zip(&self.kinds) {
            let task = tokio::spawn(attack::run(
                kind,
                node.clone(),
                Rng::seed_from_u64(self.rng.gen::<u64>()),
                rate,
                honest_dids.clone(),
                stop.clone(),
            ));
            tasks.push((kind, task));
        }
        let validation_start = stat_sum(&self.net.nodes[..self.n], |s| &s.validation_micros);
        Adversaries {
            honest_dids,
            stop,
            tasks,
            validation_start,
        }
    }

    /// The victim's connections now (to attackers, and to the rest) and the delays of the
    /// advertisements it got, beside the network's.
    pub(super) async fn eclipse_report(
        &self,
        eclipse: Option<&(usize, Arc<EclipseTally>, Vec<PeerId>)>,
        adverts: &Adverts,
    ) -> Option<Value> {
        let (victim, tally, ids) = eclipse?;
        let (published, spreads) = (&adverts.published, &adverts.spreads);
        let peers = self.net.nodes[*victim]
            .client
            .peers()
            .await
            .unwrap_or_default();
        let ids: Vec<String> = ids.iter().map(|p| p.to_string()).collect();
        let to_attackers = peers.iter().filter(|p| ids.contains(&p.peer_id)).count();
        let delays = |of: &dyn Fn(&str) -> Option<f64>| -> Vec<f64> {
            let mut v: Vec<f64> = published.iter().filter_map(|(did, _)| of(did)).collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let t0s: HashMap<&str, Instant> = spreads
            .iter()
            .zip(published)
            .map(|(sp, (did, _))| (did.as_str(), sp.t0))
            .collect();
        let victim_delay = delays(&|did| {
            let at = self.arrivals.at(did, *victim)?;
            Some(ms(at.saturating_duration_since(*t0s.get(did)?)))
        });
        let others_median = {
            let mut v: Vec<f64> = spreads.iter().flat_map(|s| s.delays_ms.clone()).collect();
            v.sort_by(f64::total_cmp);
            percentile(&v, 0.5)
        };
        use std::sync::atomic::Ordering::Relaxed;
        Some(json!({
            "victim": victim, "attackers": ids.len(),
            "adverts_reached": victim_delay.len(), "adverts": published.len(),
            "victim_median_ms": percentile(&victim_delay, 0.5),
            "victim_max_ms": victim_delay.last(),
            "network_median_ms": others_median,
            "victim_peers_at_end": peers.len(), "victim_peers_attackers": to_attackers,
            "attacker_connections": tally.connections.load(Relaxed),
            "attacker_connections_closed": tally.closed.load(Relaxed),
            "attackers_connected_at_end": tally.connected.load(Relaxed),
            "copies_sent_to_attackers": tally.messages.load(Relaxed),
        }))
    }
}

impl Adversaries {
    /// Stops the adversaries, sums their tallies by kind, and lets in-flight validations finish
    /// (a second) before reading `initial`'s validation time.
    pub(super) async fn stop(self, initial: &[Arc<SimNode>]) -> Attacks {
        self.stop.cancel();
        let mut tallies: HashMap<&'static str, Tally> = HashMap::new();
        for (kind, t) in self.tasks {
            if let Ok(t) = t.await {
                let sum = tallies.entry(kind.name()).or_default();
                sum.sent += t.sent;
                sum.send_errors += t.send_errors;
                sum.dids.extend(t.dids);
            }
        }
        let junk = tallies.remove("junk").unwrap_or_default();
        let replay = tallies.remove("replay").unwrap_or_default();
        let sybil = tallies.remove("sybil").unwrap_or_default();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let validation_micros =
            stat_sum(initial, |s| &s.validation_micros).saturating_sub(self.validation_start);
        Attacks {
            junk,
            replay,
            sybil,
            validation_micros,
        }
    }
}
