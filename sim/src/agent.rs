//! The run's advertisers: the seeded generator every draw comes from, fresh did:key agents and
//! their signed advertisements (a ~1 KiB card), and the skill-tag vocabulary they draw from.

use agentnet_did::{card, Did, DidUrl, SecretKey};
use agentnet_discovery::advert::{self, Draft};
use agentnet_discovery::net;
use rand::rngs::StdRng;
use rand::Rng as _;
use serde_json::{json, Value};

use crate::node::SimNode;

/// Draws for topology, publishers and tags: `StdRng` seeded from `--seed`, so a run repeats.
pub(crate) type Rng = StdRng;

/// 32 bytes drawn from `rng`: a key seed.
pub(crate) fn seed32(rng: &mut Rng) -> [u8; 32] {
    rng.gen()
}

/// A fresh did:key agent.
pub(crate) struct Agent {
    key: SecretKey,
    pub(crate) did: Did,
    kid: DidUrl,
}

impl Agent {
    /// An agent whose key is drawn from `rng`.
    pub(crate) fn new(rng: &mut Rng) -> Self {
        let key = SecretKey::from_seed(&seed32(rng));
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        Agent { key, did, kid }
    }

    /// A signed advertisement whose unsigned card is about `card_bytes` long.
    pub(crate) fn advert(
        &self,
        publisher: &SimNode,
        seq: u64,
        desc: &str,
        tags: &[String],
        card_bytes: usize,
    ) -> Result<Vec<u8>, String> {
        let peer_id = publisher.client.peer_id().to_string();
        self.advert_as(
            &peer_id,
            &publisher.addr.to_string(),
            seq,
            desc,
            tags,
            card_bytes,
        )
    }

    /// [`Agent::advert`] naming `peer_id` as the publishing node, at `addr`.
    pub(crate) fn advert_as(
        &self,
        peer_id: &str,
        addr: &str,
        seq: u64,
        desc: &str,
        tags: &[String],
        card_bytes: usize,
    ) -> Result<Vec<u8>, String> {
        let mut c = sample_card(desc, tags, "");
        let len = serde_json::to_vec(&c).map(|v| v.len()).unwrap_or(0);
        if len < card_bytes {
            c = sample_card(desc, tags, &filler(card_bytes - len));
        }
        let signed = card::sign(&c, &self.key, &self.kid).map_err(|e| format!("card: {e}"))?;
        let now = net::unix_now();
        let ad = advert::sign(
            Draft {
                did: self.did.clone(),
                kid: self.kid.clone(),
                card: signed,
                peer_id: peer_id.to_owned(),
                addrs: vec![addr.to_owned()],
                seq,
                issued_at: now,
                expires_at: now + 3600,
            },
            &self.key,
        );
        serde_json::to_vec(&ad).map_err(|e| format!("encoding advertisement: {e}"))
    }
}

/// `n` characters of words, to pad a card to its size.
fn filler(n: usize) -> String {
    const WORDS: &str = "translates summarizes classifies extracts answers plans routes ";
    WORDS.chars().cycle().take(n).collect()
}

/// The unsigned card of a sim agent: `desc` and `extra` as its description, `tags` on its skill.
fn sample_card(desc: &str, tags: &[String], extra: &str) -> Value {
    json!({
        "name": "Sim agent", "description": format!("{desc} {extra}"), "version": "1.0.0",
        "supportedInterfaces": [{"url": "https://agents.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "provider": {"organization": "Example Org", "url": "https://example.org"},
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "main", "name": "Main skill", "description": "Does the thing.", "tags": tags}]
    })
}

/// Tags from a vocabulary of 200 with a Zipf(1) skew, 3 distinct per card.
pub(crate) struct Vocabulary {
    cumulative: Vec<f64>,
}

impl Vocabulary {
    /// A vocabulary of `size` tags.
    pub(crate) fn new(size: usize) -> Self {
        let mut acc = 0.0;
        let cumulative = (1..=size)
            .map(|k| {
                acc += 1.0 / k as f64;
                acc
            })
            .collect();
        Vocabulary { cumulative }
    }

    /// `n` distinct tags.
    pub(crate) fn draw(&self, rng: &mut Rng, n: usize) -> Vec<String> {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let mut out: Vec<String> = Vec::with_capacity(n);
        while out.len() < n {
            let x = rng.gen::<f64>() * total;
            let i = self.cumulative.partition_point(|c| *c < x);
            let tag = format!("skill-{i}");
            if !out.contains(&tag) {
                out.push(tag);
            }
        }
        out
    }
}
