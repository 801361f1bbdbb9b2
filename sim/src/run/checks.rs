//! After the advertisements: discover queries for what gossip missed, the counters read, every
//! honest store checked against what was published, the nodes shut down, and the floor.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentnet_discovery::net;
use agentnet_discovery::store::Store;
use libp2p::PeerId;
use rand::Rng as _;
use serde_json::{json, Value};

use super::publish::Adverts;
use super::Sim;
use crate::floor;
use crate::measure::ms;
use crate::node::{stat_sum, ConnCounts, SimNode};
use crate::process::process_cpu;
use crate::scenario;

/// The discover queries for (advertisement, node) pairs gossip missed.
pub(super) struct Queries {
    /// The delays of the queries that found their advertisement, sorted.
    pub(super) ms: Vec<f64>,
    pub(super) found: usize,
    pub(super) failed: usize,
    /// Pairs gossip missed, asked or not.
    pub(super) missed_pairs: usize,
}

/// The honest nodes' counters at the end of the advertisement phase.
pub(super) struct Totals {
    /// Connection counters over the phase.
    pub(super) phase_conns: ConnCounts,
    /// The process's CPU over the phase.
    pub(super) cpu: Option<Duration>,
    pub(super) trimmed: u64,
    pub(super) opened: u64,
    pub(super) dials: u64,
    pub(super) bootstraps: u64,
    pub(super) bootstraps_cut: u64,
    pub(super) joins: u64,
    /// Kademlia requests by what sent them.
    pub(super) kad_requests: Value,
}

/// What the honest nodes did with what they got, and what their stores hold.
#[derive(Default)]
pub(super) struct StoreChecks {
    pub(super) refused: HashMap<&'static str, u64>,
    pub(super) accepted: u64,
    pub(super) ignored: u64,
    pub(super) throttled: u64,
    pub(super) throttled_busy: u64,
    pub(super) muted: u64,
    /// Refused messages that came from honest nodes: junk they forwarded.
    pub(super) forwarded_by_honest: u64,
    /// Junk in the stores: advertisements not byte for byte the honest ones, junk DIDs, and
    /// (without Sybil publishers) whatever else they hold.
    pub(super) junk_stored: usize,
    /// With Sybil publishers, what each store holds beyond the honest advertisements.
    pub(super) sybil_stored: Vec<usize>,
    pub(super) stored_total: u64,
}

impl Totals {
    /// Reads the counters of `honest`, every honest node run or left.
    pub(super) fn read(honest: &[Arc<SimNode>], adverts: &Adverts) -> Totals {
        let phase_conns = ConnCounts::of(honest).since(&adverts.conns_start);
        let cpu = match (adverts.cpu_start, process_cpu()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        Totals {
            phase_conns,
            cpu,
            trimmed: stat_sum(honest, |s| &s.trimmed),
            opened: stat_sum(honest, |s| &s.connections_opened),
            dials: stat_sum(honest, |s| &s.dials),
            bootstraps: stat_sum(honest, |s| &s.bootstraps),
            bootstraps_cut: stat_sum(honest, |s| &s.bootstraps_cut),
            joins: stat_sum(honest, |s| &s.joins),
            kad_requests: json!({
                "join": stat_sum(honest, |s| &s.kad_requests_join),
                "cut_bootstraps": stat_sum(honest, |s| &s.kad_requests_cut),
                "other": stat_sum(honest, |s| &s.kad_requests_other),
            }),
        }
    }
}

impl Sim<'_> {
    /// Discover queries for what gossip did not deliver, `--queries` of them, each from a
    /// random running node that missed an advertisement, for that advertisement's own tag.
    pub(super) async fn discover_missed(&mut self, adverts: &Adverts) -> Result<Queries, String> {
        let args = self.args;
        let mut missed = self.missed_pairs(&adverts.published).await?;
        let mut q = Queries {
            ms: Vec::new(),
            found: 0,
            failed: 0,
            missed_pairs: 0,
        };
        if args.queries > 0 && !missed.is_empty() {
            eprintln!(
                "simulate: {} (advertisement, node) pairs gossip missed; {} discover queries",
                missed.len(),
                args.queries.min(missed.len())
            );
        }
        for k in 0..args.queries.min(missed.len()) {
            let (a, i) = missed.swap_remove(self.scenario_rng.gen_range(0..missed.len()));
            let (did, tag) = (
                &adverts.published[a].0,
                adverts.published_tags[a][3].clone(),
            );
            let t0 = Instant::now();
            let found = tokio::time::timeout(
                Duration::from_secs(30),
                self.net.nodes[i].client.discover(&[tag], 100),
            )
            .await;
            let took = ms(t0.elapsed());
            let ok =
                matches!(&found, Ok(Ok(v)) if v.iter().any(|ad| ad.did.as_str() == did.as_str()));
            if ok {
                q.found += 1;
                q.ms.push(took);
            } else {
                q.failed += 1;
            }
            eprintln!(
                "simulate: query {}/{}: node {i} for advert {a}: {} in {took:.0} ms",
                k + 1,
                args.queries.min(missed.len() + k + 1),
                if ok { "found" } else { "not found" }
            );
        }
        q.ms.sort_by(f64::total_cmp);
        q.missed_pairs = missed.len() + q.found + q.failed;
        Ok(q)
    }

    /// (advertisement, running node) pairs gossip did not deliver: those the node's own
    /// `Accepted` events do not cover, checked against its store (it may have fetched one) on a
    /// blocking thread: RocksDB reads, one per pair.
    async fn missed_pairs(
        &self,
        published: &[(String, Vec<u8>)],
    ) -> Result<Vec<(usize, usize)>, String> {
        let candidates: Vec<(usize, usize, String, Store)> = published
            .iter()
            .enumerate()
            .flat_map(|(k, (did, _))| {
                self.net
                    .live_honest()
                    .into_iter()
                    .filter(|&i| !self.arrivals.has(did, i))
                    .map(|i| (k, i, did.clone(), self.net.nodes[i].client.store().clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        tokio::task::spawn_blocking(move || {
            let now = net::unix_now();
            candidates
                .into_iter()
                .filter(|(_, _, did, store)| !store.get(did, now).is_ok_and(|a| a.is_some()))
                .map(|(k, i, _, _)| (k, i))
                .collect()
        })
        .await
        .map_err(|e| format!("checking the stores: {e}"))
    }

    /// Sums the honest nodes' validation outcomes and checks each store: every stored
    /// advertisement is one of the honest ones, byte for byte; no junk DID.
    pub(super) async fn check_stores(
        &self,
        honest: &[Arc<SimNode>],
        published: Vec<(String, Vec<u8>)>,
        junk_dids: &[String],
    ) -> Result<StoreChecks, String> {
        let adversary_ids: Vec<PeerId> = (0..self.net.nodes.len())
            .filter(|&i| !self.net.honest[i])
            .map(|i| self.net.nodes[i].client.peer_id())
            .collect();
        let mut c = StoreChecks::default();
        let published = Arc::new(published);
        let junk_dids = Arc::new(junk_dids.to_vec());
        let with_sybil = self.args.sybil.is_some();
        for node in honest {
            let stats = node.client.stats();
            c.accepted += stats.accepted.get();
            c.ignored += stats.ignored.get();
            c.throttled += stats.throttled.get();
            c.throttled_busy += stats.throttled_busy.get();
            c.muted += stats.muted.get();
            for (reason, count) in stats.rejected.lock().expect("stats lock poisoned").iter() {
                *c.refused.entry(reason).or_default() += count;
            }
            c.forwarded_by_honest += stats
                .rejected_from
                .lock()
                .expect("stats lock poisoned")
                .iter()
                .filter(|(p, _)| !adversary_ids.contains(p))
                .map(|(_, n)| n)
                .sum::<u64>();
            let (bad, honest_here, len) = check_store(
                node.client.store().clone(),
                published.clone(),
                junk_dids.clone(),
            )
            .await?;
            c.stored_total += len as u64;
            // Without Sybil publishers, whatever a store holds beyond the honest advertisements
            // is junk; with them, it is theirs (they are valid: accepted and forwarded).
            let extra = len.saturating_sub(honest_here);
            if with_sybil {
                c.sybil_stored.push(extra);
                c.junk_stored += bad;
            } else {
                c.junk_stored += bad + extra;
            }
        }
        Ok(c)
    }

    /// Shuts down the recorders, then the nodes (each closes its swarm; the stores close when
    /// the last clone is dropped, by the caller after the runtime stops); returns how many node
    /// tasks had to be aborted.
    pub(super) async fn shut_down(&mut self, honest: Vec<Arc<SimNode>>) -> usize {
        self.stop_recorders.cancel();
        self.shutdown.cancel();
        let mut stuck = 0;
        for node in &self.net.nodes {
            let task = &node.task;
            let deadline = Instant::now() + Duration::from_secs(5);
            while !task.is_finished() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if !task.is_finished() {
                task.abort();
                stuck += 1;
            }
        }
        self.net.nodes.clear();
        drop(honest);
        stuck
    }

    /// The floor, with the agentnet nodes gone: the initial nodes' dial plan over the same
    /// links, with `--floor`.
    pub(super) async fn floor(&self) -> Result<Option<Value>, String> {
        let (args, n) = (self.args, self.n);
        if !args.floor {
            return Ok(None);
        }
        eprintln!("simulate: the floor: {n} bare gossipsub nodes");
        let dials: Vec<(usize, usize)> = self
            .plan
            .iter()
            .copied()
            .filter(|&(i, j)| i < n && j < n)
            .collect();
        let floor_cut = Arc::new(scenario::Cut::default());
        let floor_links = |i: usize| -> Option<net::Links> {
            args.delays.map(|d| {
                Arc::new(scenario::NodeLinks {
                    me: i,
                    base: floor::BASE_PORT,
                    delays: Some(d),
                    cut: floor_cut.clone(),
                }) as net::Links
            })
        };
        let f = floor::run(
            &floor::Plan {
                nodes: n,
                dials: &dials,
                mesh: args.mesh,
                heartbeat: args.heartbeat(),
                warmup: args.warmup(),
                messages: args.adverts,
                bytes: args.floor_bytes,
                gap: args.gap.min(Duration::from_millis(500)),
                deadline: args.deadline,
                seed: args.seed,
                idontwant: args.idontwant,
            },
            &floor_links,
        )
        .await?;
        Ok(Some(f))
    }
}

/// Checks one honest store on a blocking thread: (advertisements not byte for byte the honest
/// ones plus junk DIDs present, honest advertisements held, advertisements held). A replay in
/// another framing is the same signed JSON: compared as values.
async fn check_store(
    store: Store,
    published: Arc<Vec<(String, Vec<u8>)>>,
    junk_dids: Arc<Vec<String>>,
) -> Result<(usize, usize, usize), String> {
    tokio::task::spawn_blocking(move || {
        let now = net::unix_now();
        let value = |b: &[u8]| serde_json::from_slice::<Value>(b).ok();
        let mut bad_honest = 0;
        let mut honest_here = 0;
        for (did, bytes) in published.iter() {
            if let Ok(Some(a)) = store.get(did, now) {
                honest_here += 1;
                if a.bytes != *bytes && value(&a.bytes) != value(bytes) {
                    bad_honest += 1;
                }
            }
        }
        let bad_junk = junk_dids
            .iter()
            .filter(|did| !matches!(store.get(did, now), Ok(None)))
            .count();
        let len = store.len().unwrap_or(0);
        (bad_honest + bad_junk, honest_here, len)
    })
    .await
    .map_err(|e| format!("checking a store: {e}"))
}
