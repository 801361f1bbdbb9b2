//! The node's view of the network and its voice in it: the read model of what gossip brought
//! ([`directory`]: discover, peers, the MCP summaries) and the [`publisher`] that signs this
//! node's cards and announces them again before they expire.

pub mod directory;
pub mod publisher;
