//! The node's counters: [`Stats`], ours, registered in the node's Prometheus registry, and
//! [`Traffic`], libp2p's gossip and byte counters read back from its metrics text.

use std::collections::HashMap;
use std::sync::Mutex;

use libp2p::metrics::Registry;
use libp2p::PeerId;
use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Serialize};

use super::TOPIC;
use crate::advert::Reject;

/// Counters, for logs, `peers --json`, the simulation, and operators: each `Counter` is
/// registered in the node's Prometheus registry (`agentnet_*` in `/admin/v1/metrics`, beside
/// libp2p's own) and read here through its handle.
#[derive(Debug, Default)]
pub struct Stats {
    /// Advertisements accepted from gossip or fetches.
    pub accepted: Counter,
    /// Duplicate or stale (not new, not penalized).
    pub ignored: Counter,
    /// Refused, by reason.
    pub rejected: Mutex<HashMap<&'static str, u64>>,
    /// Gossip dropped by the per-peer rate limit or the validation bound.
    pub throttled: Counter,
    /// ... of which by the validation bound (every validation permit in use).
    pub throttled_busy: Counter,
    /// Times a peer used its whole gossip budget and was muted for the rest of its window
    /// (what it sent meanwhile gossipsub dropped, uncounted here).
    pub muted: Counter,
    /// Refused gossip by the peer that sent it to us (at most 1024 peers tracked).
    pub rejected_from: Mutex<HashMap<PeerId, u64>>,
    /// Connections closed by the connection manager.
    pub trimmed: Counter,
    /// Connections established (both directions).
    pub connections_opened: Counter,
    /// Dials started (by us, Kademlia, mDNS).
    pub dials: Counter,
    /// Kademlia bootstraps completed in full (not cut short).
    pub bootstraps: Counter,
    /// Kademlia's automatic bootstraps cut short (see `Node::cut_automatic_bootstraps`).
    pub bootstraps_cut: Counter,
    /// Lookups of our own id on joining the DHT (the routing table got its first peer).
    pub joins: Counter,
    /// Kademlia requests sent by those join lookups (each to a peer, dialed if not connected).
    pub kad_requests_join: Counter,
    /// Kademlia requests sent by the automatic bootstraps before they were cut short.
    pub kad_requests_cut: Counter,
    /// Kademlia requests sent by every other query (our bootstraps, announcements, lookups).
    pub kad_requests_other: Counter,
    /// Gossip ignored because the resolution pool or the sender's share of it was full.
    pub resolutions_refused: Counter,
    /// Inbound fetch requests answered.
    pub fetches_served: Counter,
    /// Inbound fetch requests refused by
    /// [`Config::fetch_in_flight_total`](super::Config::fetch_in_flight_total),
    /// [`Config::fetch_in_flight_per_peer`](super::Config::fetch_in_flight_per_peer) or
    /// [`Config::fetch_per_peer`](super::Config::fetch_per_peer).
    pub fetches_refused: Counter,
    /// Inbound provider records stored (new or refreshed).
    pub provider_records_admitted: Counter,
    /// Inbound provider records refused by the quotas.
    pub provider_records_refused: Counter,
    /// [`ENDORSE_TOPIC`](super::ENDORSE_TOPIC) messages the node's check accepted (forwarded).
    pub endorsements_accepted: Counter,
    /// ... ignored (stale, a bound reached, no check registered).
    pub endorsements_ignored: Counter,
    /// ... rejected (forged, malformed: the sender scored down).
    pub endorsements_rejected: Counter,
    /// Microseconds spent validating advertisements: the cheap checks, the signatures and the
    /// store write (not the waits for a validation permit, a resolution slot or a DID document).
    pub validation_micros: Counter,
}

impl Stats {
    /// Register the counters in `registry` under the `agentnet_` prefix.
    pub(super) fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("agentnet");
        let counters = [
            (
                "adverts_accepted",
                "Advertisements accepted from gossip or fetches",
                &self.accepted,
            ),
            (
                "adverts_ignored",
                "Advertisements duplicate or stale (not penalized)",
                &self.ignored,
            ),
            (
                "gossip_throttled",
                "Gossip dropped by the per-peer rate limit or the validation bound",
                &self.throttled,
            ),
            (
                "gossip_throttled_busy",
                "Gossip dropped because every validation permit was in use",
                &self.throttled_busy,
            ),
            (
                "gossip_peers_muted",
                "Peers muted for the rest of their rate window, having used their gossip budget",
                &self.muted,
            ),
            (
                "connections_trimmed",
                "Connections closed by the connection manager",
                &self.trimmed,
            ),
            (
                "connections_opened",
                "Connections established, both directions",
                &self.connections_opened,
            ),
            (
                "dials",
                "Dials started (by us, Kademlia, mDNS)",
                &self.dials,
            ),
            (
                "kad_bootstraps",
                "Kademlia bootstraps completed in full (not cut short)",
                &self.bootstraps,
            ),
            (
                "kad_bootstraps_cut",
                "Kademlia's automatic bootstraps cut short",
                &self.bootstraps_cut,
            ),
            (
                "kad_joins",
                "Lookups of our own id on joining the DHT",
                &self.joins,
            ),
            (
                "kad_requests_join",
                "Kademlia requests sent by the lookups of our own id on joining",
                &self.kad_requests_join,
            ),
            (
                "kad_requests_cut",
                "Kademlia requests sent by automatic bootstraps before they were cut short",
                &self.kad_requests_cut,
            ),
            (
                "kad_requests_other",
                "Kademlia requests sent by every other query",
                &self.kad_requests_other,
            ),
            (
                "validation_micros",
                "Microseconds spent validating advertisements (checks, signatures, store write)",
                &self.validation_micros,
            ),
            (
                "resolutions_refused",
                "Gossip ignored: the DID resolution pool or the sender's share of it was full",
                &self.resolutions_refused,
            ),
            (
                "fetches_served",
                "Inbound fetch requests answered",
                &self.fetches_served,
            ),
            (
                "fetches_refused",
                "Inbound fetch requests refused by the fetch limits",
                &self.fetches_refused,
            ),
            (
                "provider_records_admitted",
                "Inbound DHT provider records stored (new or refreshed)",
                &self.provider_records_admitted,
            ),
            (
                "provider_records_refused",
                "Inbound DHT provider records refused by the quotas",
                &self.provider_records_refused,
            ),
            (
                "endorsements_accepted",
                "Endorsements accepted and forwarded",
                &self.endorsements_accepted,
            ),
            (
                "endorsements_ignored",
                "Endorsements ignored (stale, a bound reached)",
                &self.endorsements_ignored,
            ),
            (
                "endorsements_rejected",
                "Endorsements rejected (forged, malformed)",
                &self.endorsements_rejected,
            ),
        ];
        for (name, help, counter) in counters {
            r.register(name, help, counter.clone());
        }
    }

    pub(super) fn reject(&self, r: &Reject) {
        *self
            .rejected
            .lock()
            .expect("stats lock poisoned")
            .entry(r.reason())
            .or_default() += 1;
    }

    pub(super) fn reject_from(&self, peer: PeerId) {
        let mut m = self.rejected_from.lock().expect("stats lock poisoned");
        if m.len() < 1024 || m.contains_key(&peer) {
            *m.entry(peer).or_default() += 1;
        }
    }

    /// Total refused.
    pub fn rejected_total(&self) -> u64 {
        self.rejected
            .lock()
            .expect("stats lock poisoned")
            .values()
            .sum()
    }
}

/// Traffic counters read from the node's libp2p metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Traffic {
    /// gossipsub messages received on the advertisement topic, duplicates included.
    pub gossip_received: u64,
    /// The same, duplicates removed.
    pub gossip_unique: u64,
    /// gossipsub IDONTWANT control messages received (`Config::gossip_idontwant` on a peer).
    pub idontwant_received: u64,
    /// Messages gossipsub abandoned on their way out: a peer's send queue full, or a forward
    /// (or an answer to IWANT) that waited in it longer than its time limit.
    pub send_dropped: u64,
    /// Messages accepted by validation after they had left gossipsub's message cache, so never
    /// forwarded (validation slower than the cache's history).
    pub validated_too_late: u64,
    /// Bytes received on all connections (all protocols, after encryption).
    pub bytes_in: u64,
    /// Bytes sent on all connections.
    pub bytes_out: u64,
}

/// Sum the counters [`Traffic`] reports from Prometheus text.
pub(super) fn traffic_from_metrics(text: &str) -> Traffic {
    let mut t = Traffic::default();
    let topic_label = format!("hash=\"{TOPIC}\"");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let value = value as u64;
        let (name, labels) = name_labels.split_once('{').unwrap_or((name_labels, ""));
        let on_topic = labels.contains(&topic_label);
        match name {
            "gossipsub_topic_msg_recv_counts_unfiltered_total" if on_topic => {
                t.gossip_received += value
            }
            "gossipsub_topic_msg_recv_counts_total" if on_topic => t.gossip_unique += value,
            "gossipsub_idontwant_msgs_total" => t.idontwant_received += value,
            "gossipsub_failed_messages_sum" => t.send_dropped += value,
            "gossipsub_memcache_misses_total" => t.validated_too_late += value,
            "libp2p_bandwidth_bytes_total" if labels.contains("direction=\"Inbound\"") => {
                t.bytes_in += value
            }
            "libp2p_bandwidth_bytes_total" if labels.contains("direction=\"Outbound\"") => {
                t.bytes_out += value
            }
            _ => {}
        }
    }
    t
}
