//! agentnet discovery: signed Agent Card advertisements gossiped over libp2p, validated before
//! forwarding, indexed by skill tag in RocksDB, and found through the Kademlia DHT.
//!
//! # Layout
//! - [`advert`]: the advertisement envelope, its signing and the validation every node applies.
//! - [`net`]: the libp2p node: one task owns the swarm (gossipsub, Kademlia, the fetch
//!   protocol), a [`net::Client`] talks to it. Every cost a peer can cause is bounded (validation
//!   permits and a resolution pool, inbound provider-record quotas, inbound fetch limits, a
//!   bounded `discover`); every helper task is tracked and ends before the node's task does.
//!   Inside: `net/config`, `net/swarm` (transports, behaviours), `net/links` (simulated links),
//!   `net/accept` (the path of every advertisement into the store), `net/pool` (blocking work),
//!   `net/limits` and `net/dht` (admission policies), `net/bootstrap`, `net/stats` (counters).
//! - [`store`]: RocksDB: advertisements by DID, the tag index, sequence numbers, peers; the
//!   front door is [`Store`]. Inside: `store/codec` (key and value encodings),
//!   `store/families` (the column families, opening, [`store::Memory`], caller-owned
//!   [`store::Family`]), `store/index` (tag queries), `store/limits` (what others may make us
//!   store), `store/migration` (earlier layouts), `store/peers` (known peers), `store/sweep`
//!   (expiry and seq pruning), `store/usage` (bytes charged).
//! - [`tags`]: tag normalization and the DHT keys of tags.
//!
//! The items most callers need are re-exported here: [`Client`], [`Config`], [`spawn`],
//! [`Store`], [`Validator`]. Feature `test-utils` adds an adversary's raw gossip
//! (`Client::gossip_unchecked`) for tests and the simulation.

#![warn(missing_docs, unreachable_pub)]

pub mod advert;
pub mod net;
pub mod store;
pub mod tags;

pub use advert::{Reject, Validated, Validator};
pub use net::{spawn, BootstrapState, BootstrapStatus, Client, Config, Error};
pub use store::{Store, StoredAdvert};
