//! The delegation a caller holds and presents: a chain file read ([`read_chain`]) and the
//! [`Delegation`] put into every message sent (handed off to the agent called when the caller
//! holds its last link).

use agentnet_a2a::types::Message;
use agentnet_did::Did;
use serde_json::Value;

/// The largest chain file read: eight links of the largest size, and room around them.
pub const MAX_CHAIN_FILE: u64 =
    (agentnet_did::delegation::MAX_LINKS * agentnet_did::delegation::MAX_LINK_BYTES) as u64 + 4096;

/// Read a chain file: the JSON array `agentnet delegate` writes (or an object with
/// `actorChain`), at most [`MAX_CHAIN_FILE`] bytes, checked for shape and attenuation.
pub fn read_chain(path: &std::path::Path) -> anyhow::Result<Value> {
    use anyhow::Context as _;
    use std::io::Read as _;
    let f = std::fs::File::open(path)
        .with_context(|| format!("reading the delegation {}", path.display()))?;
    let mut bytes = Vec::new();
    f.take(MAX_CHAIN_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CHAIN_FILE {
        anyhow::bail!(
            "{} is over {MAX_CHAIN_FILE} bytes: not a delegation chain",
            path.display()
        );
    }
    let v: Value = agentnet_did::json::from_slice(
        &bytes,
        agentnet_did::json::Limits {
            max_depth: 16,
            max_values: 16_384,
        },
    )
    .with_context(|| format!("{} is not JSON", path.display()))?;
    let v = match v {
        Value::Object(mut o) => o
            .remove(agentnet_did::delegation::METADATA_MEMBER)
            .with_context(|| {
                format!(
                    "{} has no {}",
                    path.display(),
                    agentnet_did::delegation::METADATA_MEMBER
                )
            })?,
        v => v,
    };
    agentnet_did::delegation::Chain::parse(&v)
        .with_context(|| format!("{} does not hold", path.display()))?;
    Ok(v)
}

/// A delegation chain a caller presents ([`agentnet_did::delegation`], docs/PROTOCOL.md
/// "Delegation"), with the holder's identity for hand-offs.
#[derive(Clone)]
pub struct Delegation {
    chain: Value,
    holder: Option<crate::identity::Identity>,
}

impl std::fmt::Debug for Delegation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delegation")
            .field("digest", &agentnet_did::delegation::digest(&self.chain))
            .finish_non_exhaustive()
    }
}

impl Delegation {
    /// `chain` (checked for shape and attenuation), presented as is, or with a hand-off to
    /// each agent called when `holder` (the caller's identity) holds its last link and that link
    /// allows one more: then the agent called may act on it onward.
    pub fn new(
        chain: Value,
        holder: Option<crate::identity::Identity>,
    ) -> Result<Self, agentnet_did::delegation::ChainError> {
        agentnet_did::delegation::Chain::parse(&chain)?;
        Ok(Delegation { chain, holder })
    }

    /// `chain` held by `holder`, whose DID must be its last audience (`what` names the chain
    /// in the error); handed off to each agent called when `hand_off`.
    pub fn held(
        chain: Value,
        holder: crate::identity::Identity,
        hand_off: bool,
        what: &str,
    ) -> anyhow::Result<Self> {
        let parsed = agentnet_did::delegation::Chain::parse(&chain)?;
        let last = parsed
            .links()
            .last()
            .map(|l| l.audience.to_string())
            .unwrap_or_default();
        if last != holder.did().as_str() {
            anyhow::bail!(
                "the delegation {what} is to {last}, but the calls sign as {}: use a chain issued to {}",
                holder.did(),
                holder.did()
            );
        }
        Ok(Delegation::new(chain, hand_off.then_some(holder))?)
    }

    /// The chain as loaded.
    pub fn chain(&self) -> &Value {
        &self.chain
    }

    /// What to present to `agent`.
    pub fn for_agent(&self, agent: &Did) -> Value {
        if let Some(id) = &self.holder {
            match agentnet_did::delegation::hand_off(id.key(), id.kid(), &self.chain, agent) {
                Ok(Some(c)) => return c,
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "no hand-off to {agent}"),
            }
        }
        self.chain.clone()
    }

    /// Put the chain for `agent` into `message`'s metadata.
    pub fn present(&self, agent: &Did, message: &mut Message) {
        message
            .metadata
            .get_or_insert_with(Default::default)
            .insert(
                agentnet_did::delegation::METADATA_MEMBER.to_string(),
                self.for_agent(agent),
            );
    }
}
