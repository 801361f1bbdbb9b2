//! agentnet discovery: signed Agent Card advertisements gossiped over libp2p, validated before
//! forwarding, indexed by skill tag in RocksDB, and found through the Kademlia DHT.
//!
//! # Layout
//! - [`advert`]: the advertisement envelope, its signing and the validation every node applies.
//! - [`store`]: RocksDB: advertisements by DID, the tag index, sequence numbers, peers.
//! - [`tags`]: tag normalization and the DHT keys of tags.

pub mod advert;
pub mod net;
pub mod store;
pub mod tags;
