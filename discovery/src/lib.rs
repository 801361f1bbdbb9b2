//! agentnet discovery: signed Agent Card advertisements gossiped over libp2p, validated before
//! forwarding, and indexed by skill tag.
//!
//! Not built yet: this crate is a placeholder in the workspace until the discovery issue lands.
//! It depends only on [`agentnet_did`], the identity layer everything here verifies against.

pub use agentnet_did as did;
