//! The node's read model of the network: what the admin API answers, what `agentnet call`
//! looks agents up in, and what the MCP tools show ([`Directory`], [`Found`], [`Peers`],
//! [`AgentSummary`]). It sits below all three: the admin API serves it, the caller and the MCP
//! server read it, over HTTP ([`crate::admin::Client`]) or in process (the daemon's state).
//!
//! The one check of skill tags ([`check_tags`]) is here too: a search for tags the network would
//! not search for as given (too many, or one that is not a usable tag, which the network would
//! drop and search for the others only: a broader search than asked for) is refused.

use std::borrow::Cow;
use std::collections::BTreeMap;

use agentnet_discovery::advert::Advertisement;
use agentnet_discovery::net;
use agentnet_discovery::store::{Match, Store, StoredAdvert};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::data_dir::token::TokenError;

/// Default `limit` of a discovery.
pub const DEFAULT_LIMIT: usize = 20;
/// Largest `limit` of a discovery.
pub const MAX_LIMIT: usize = 100;
/// Most skill tags in one search: as many as one advertisement indexes.
pub const MAX_TAGS: usize = agentnet_discovery::tags::MAX_TAGS;
/// Longest skill tag, bytes.
pub const MAX_TAG_LEN: usize = agentnet_discovery::tags::MAX_TAG_LEN;
/// Longest description of an agent or skill in a summary, characters.
pub(crate) const MAX_SUMMARY: usize = 500;

/// One discovered agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Found {
    /// The agent's DID.
    pub did: String,
    /// Sequence number of the advertisement.
    pub seq: u64,
    /// Its skill tags.
    pub tags: Vec<String>,
    /// The node that published it.
    pub peer_id: String,
    /// The domain the DID names (did:web, did:wba), whether or not it vouched for the key;
    /// `null` for a did:key, which names none.
    #[serde(default)]
    pub domain: Option<String>,
    /// Whether a domain vouched for the key ([`agentnet_discovery::advert::domain_verified`]):
    /// true for did:web and did:wba, whose key came from a document their domain served; false
    /// for a did:wba `e1_` DID (bound to its key by fingerprint, its domain never asked: anyone
    /// can name any domain that way) and for did:key (no domain).
    pub domain_verified: bool,
    /// Unix seconds.
    pub expires_at: u64,
    /// The signed Agent Card.
    pub card: Value,
    /// The card against the one the operator accepted ([`crate::trust::pins`]): absent where the
    /// node keeps no pins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<crate::trust::pins::PinState>,
    /// What its card's text and URLs raise ([`crate::trust::flags`]): shown, never a reason to drop it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<crate::trust::flags::Flag>,
    /// Its level under the node's trust policy ([`crate::trust`]); results are ranked by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<crate::trust::Level>,
    /// Why it has that level.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// A stored advertisement as [`Found`]; a card that does not read is `null`.
pub(crate) fn found(a: StoredAdvert) -> Found {
    let card = serde_json::from_slice::<Advertisement>(&a.bytes)
        .map(|ad| ad.card)
        .unwrap_or(Value::Null);
    Found {
        domain: agentnet_discovery::advert::domain_of(&a.did),
        domain_verified: agentnet_discovery::advert::domain_verified(&a.did),
        did: a.did,
        seq: a.seq,
        tags: a.tags,
        peer_id: a.peer_id,
        expires_at: a.expires_at,
        card,
        pin: None,
        flags: Vec::new(),
        level: None,
        reasons: Vec::new(),
    }
}

/// Counters of the network layer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    /// Advertisements accepted.
    pub accepted: u64,
    /// Duplicates and stale ones.
    pub ignored: u64,
    /// Refused, by reason.
    pub rejected_by_reason: BTreeMap<String, u64>,
    /// Dropped by rate limits.
    pub throttled: u64,
    /// Times a peer used its gossip budget and was muted for the rest of its window (what it
    /// sent meanwhile is dropped by gossipsub, not counted in `throttled`).
    #[serde(default)]
    pub muted: u64,
    /// Gossip copies and bytes since the node started.
    #[serde(default)]
    pub traffic: net::Traffic,
    /// Connections closed by the connection manager.
    #[serde(default)]
    pub connections_trimmed: u64,
    /// Endorsements from gossip: accepted, ignored, rejected.
    #[serde(default)]
    pub endorsements: [u64; 3],
}

/// A connected peer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Peer {
    /// Its PeerId.
    pub peer_id: String,
    /// Addresses it listens on, as it told us.
    pub addrs: Vec<String>,
}

/// The node's peers and counters (`GET /admin/v1/peers`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Peers {
    /// This node.
    pub peer_id: String,
    /// Where it listens.
    pub listen: Vec<String>,
    /// Connected peers.
    pub peers: Vec<Peer>,
    /// Counters.
    pub stats: Stats,
}

/// Why reading the directory failed: over a running node's admin API ([`crate::admin::Client`],
/// the commands report it as is) or in the daemon's own state.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Nothing answers where the node should be.
    #[error("no running node found at {0}: start one with `agentnet up`")]
    NotRunning(String),
    /// The credential could not be read from the data directory.
    #[error("{0} (is a node running with this data directory? `agentnet up` writes it)")]
    Token(#[from] TokenError),
    /// The node URL is not usable.
    #[error("the node URL {url:?} {reason}")]
    BadUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The node answered with an error.
    #[error("{error}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The node's short reason.
        reason: String,
        /// The node's message.
        error: String,
    },
    /// Transport trouble other than "nothing listens".
    #[error("talking to the node at {url}: {source}")]
    Transport {
        /// The node's URL.
        url: String,
        /// What happened.
        source: reqwest::Error,
    },
    /// The answer is larger than the client reads (`admin::MAX_RESPONSE`).
    #[error("the node at {url} answered more than {limit} bytes")]
    TooLarge {
        /// The node's URL.
        url: String,
        /// The most the client reads.
        limit: usize,
    },
    /// The answer is not what the API documents.
    #[error("unreadable answer from the node at {url}: {source}")]
    Unreadable {
        /// The node's URL.
        url: String,
        /// Why.
        source: serde_json::Error,
    },
}

impl Error {
    /// The HTTP status of a refusal.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The read-only part of the node that finding agents needs: its index (and the network
/// behind it) and its peers. Two ways in, one trait: a running node's admin API over HTTP
/// ([`crate::admin::Client`], for `agentnet call` and an `agentnet mcp` beside a running node)
/// and the daemon's own state ([`crate::admin::AdminState`], for `/mcp`, with no loopback HTTP
/// hop). Nothing here publishes or signs.
pub trait Directory: Send + Sync {
    /// Agents with all of `skills` (checked with [`check_tags`] first), at most `limit`
    /// (1 to [`MAX_LIMIT`]).
    fn discover<'a>(
        &'a self,
        skills: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Found>, Error>>;
    /// [`Directory::discover`]'s agents as MCP `discover_agents` shows them. The default
    /// summarizes the cards `discover` returns.
    fn summaries<'a>(
        &'a self,
        skills: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<AgentSummary>, Error>> {
        Box::pin(async move {
            let found = self.discover(skills, limit).await?;
            Ok(found.into_iter().map(summary).collect())
        })
    }
    /// The node's live advertisement of `did` (JSON, as received), or `None`.
    fn advert<'a>(&'a self, did: &'a str) -> BoxFuture<'a, Result<Option<Value>, Error>>;
    /// The node's peers and counters.
    fn peers(&self) -> BoxFuture<'_, Result<Peers, Error>>;
    /// `did`'s live card against the one the operator accepted ([`crate::trust::pins`]; pinned if
    /// first seen). The default: the directory keeps no pins (`None`).
    fn pin<'a>(
        &'a self,
        did: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::trust::pins::PinState>, Error>> {
        let _ = did;
        Box::pin(async { Ok(None) })
    }
    /// The flag rules of what this directory shows: the node's (`[trust] flag_rules`) in the
    /// daemon, the built-in ones elsewhere.
    fn flag_rules(&self) -> std::sync::Arc<crate::trust::flags::Rules> {
        crate::trust::flags::builtin()
    }
    /// The MCP tools `tools` (objects as `tools/list` gave them) of agent `did` against the
    /// ones accepted, in order, and the list as a whole against the one accepted (pinned if
    /// first seen; all accepted now with `accept`). The default: the directory keeps no pins
    /// (`None`).
    fn pin_tools<'a>(
        &'a self,
        did: &'a str,
        tools: &'a [Value],
        accept: bool,
    ) -> BoxFuture<'a, Result<Option<crate::trust::pins::ToolPins>, Error>> {
        let _ = (did, tools, accept);
        Box::pin(async { Ok(None) })
    }
}

/// The endorsement that counts for `did` and `skills`, if one does; a store error is logged
/// and counts as none (the agent is still shown, at its other level).
pub(crate) fn vouch_of(
    e: Option<&crate::trust::endorsements::Endorsements>,
    did: &str,
    skills: &[String],
    now: u64,
) -> Option<crate::trust::endorsements::Vouch> {
    e?.vouch(did, skills, now)
        .map_err(|error| tracing::warn!(%error, "reading endorsements"))
        .ok()
        .flatten()
}

/// `matches` (every match of a query, [`Store::matches`]) in the order a discovery shows
/// them: the policy first (a denied agent, or one below `min_level`, is dropped whatever else
/// it has), then by level, strongest first, then by how long this node has known the DID,
/// oldest first (a DID minted now is never older than one already known, so fresh DIDs buy no
/// place above it), then by DID, so that the order is the same on every call. The advert's
/// freshness plays no part: republishing, or a signer's `issuedAt`, buys nothing.
///
/// [`Store::matches`]: agentnet_discovery::store::Store::matches
///
/// Only the level is worked out for each match ([`crate::trust::Policy::level`]); the reasons
/// for it, for the few shown ([`top`]).
pub fn rank(
    matches: Vec<Match>,
    policy: &crate::trust::Policy,
    endorsements: Option<&crate::trust::endorsements::Endorsements>,
    tags: &[String],
    now: u64,
) -> Vec<(Match, crate::trust::Level)> {
    let mut ranked: Vec<_> = matches
        .into_iter()
        .filter_map(|m| {
            let vouch = vouch_of(endorsements, &m.did, tags, now);
            let level = policy.level(&m.did, vouch.as_ref())?;
            Some((m, level))
        })
        .collect();
    ranked.sort_by(|(a, la), (b, lb)| {
        lb.cmp(la)
            .then(a.first_seen.cmp(&b.first_seen))
            .then_with(|| a.did.cmp(&b.did))
    });
    ranked
}

/// `matches` with the DIDs the operator trusts by name (`[trust] allow`'s DIDs, and every DID
/// an endorser it trusts vouches for) that match `tags` but are not among them: called when
/// the walk of the index was cut ([`Store::matches`]'s `cut`), so that no number of fresher
/// adverts keeps a trusted agent out of the ranking. At most the allow list's and the
/// endorsements' own bounds more.
pub fn with_trusted(
    store: &Store,
    mut matches: Vec<Match>,
    tags: &[String],
    policy: &crate::trust::Policy,
    endorsements: Option<&crate::trust::endorsements::Endorsements>,
    now: u64,
) -> Vec<Match> {
    let vouched = match endorsements.map(|e| e.vouched(now)) {
        Some(Ok(v)) => v,
        Some(Err(error)) => {
            tracing::warn!(%error, "reading endorsements");
            Vec::new()
        }
        None => Vec::new(),
    };
    let known: std::collections::HashSet<String> = matches.iter().map(|m| m.did.clone()).collect();
    let trusted: std::collections::BTreeSet<&str> = policy
        .allowed_dids()
        .chain(vouched.iter().map(String::as_str))
        .filter(|d| !known.contains(*d))
        .collect();
    for did in trusted {
        match store.match_of(did, tags, now) {
            Ok(Some(m)) => matches.push(m),
            Ok(None) => {}
            Err(error) => tracing::debug!(%error, %did, "a trusted DID's advert"),
        }
    }
    matches
}

/// The best `limit` of `matches` for `tags` ([`rank`]), read from `store`: an advert gone
/// since, or one that lacks a tag (the index's tag filter lets a few through), is passed over
/// for the next. Only these `limit` adverts are read; the ranking reads none.
pub fn top(
    store: &Store,
    matches: Vec<Match>,
    tags: &[String],
    limit: usize,
    policy: &crate::trust::Policy,
    endorsements: Option<&crate::trust::endorsements::Endorsements>,
    now: u64,
) -> Vec<(StoredAdvert, crate::trust::Judged)> {
    let mut shown = Vec::with_capacity(limit.min(MAX_LIMIT));
    for (m, _) in rank(matches, policy, endorsements, tags, now) {
        if shown.len() >= limit {
            break;
        }
        let vouch = vouch_of(endorsements, &m.did, tags, now);
        let Ok(judged) = policy.judge_with(&m.did, vouch.as_ref()) else {
            continue;
        };
        match store.get(&m.did, now) {
            Ok(Some(a)) if tags.iter().all(|t| a.tags.contains(t)) => shown.push((a, judged)),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, did = %m.did, "reading a matched advert"),
        }
    }
    shown
}

/// A boxed future, as [`Directory`] returns them.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A skill of an agent.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SkillSummary {
    /// Its id.
    pub id: Option<String>,
    /// Its name.
    pub name: Option<String>,
    /// What it does (at most 500 characters).
    pub description: Option<String>,
    /// Its tags.
    pub tags: Vec<String>,
}

/// A discovered agent (its card not verified yet).
#[derive(Debug, Serialize, JsonSchema)]
pub struct AgentSummary {
    /// Its DID, for the other tools.
    pub did: String,
    /// Its name, from its card.
    pub name: Option<String>,
    /// What it does (at most 500 characters).
    pub description: Option<String>,
    /// Its skill tags.
    pub tags: Vec<String>,
    /// Its skills.
    pub skills: Vec<SkillSummary>,
    /// A domain vouched for its key (false for did:key and did:wba e1_).
    pub domain_verified: bool,
    /// When its advertisement expires (Unix seconds).
    pub expires_at: u64,
    /// The libp2p peer that published it.
    pub peer_id: String,
    /// {pin, flags}: card vs the accepted one; red flags (untrusted text).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Value>")]
    pub trust: Option<Trust>,
}

/// What the MCP tools say of a shown card beside it: its pin ([`crate::trust::pins`]) and its red
/// flags ([`crate::trust::flags`]), in one member (each member of an output schema costs every host's
/// model context).
#[derive(Debug, Clone, Serialize)]
pub struct Trust {
    /// Its level under the node's trust policy, and why (`{"level", "reasons"}`).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub level: Option<crate::trust::Judged>,
    /// The card against the one the operator accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin: Option<crate::trust::pins::PinState>,
    /// Red flags in its text and URLs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<crate::trust::flags::Flag>,
}

impl Trust {
    /// `None` when there is nothing to say.
    pub fn of(
        pin: Option<crate::trust::pins::PinState>,
        flags: Vec<crate::trust::flags::Flag>,
    ) -> Option<Trust> {
        (pin.is_some() || !flags.is_empty()).then_some(Trust {
            level: None,
            pin,
            flags,
        })
    }
}

pub(crate) use agentnet_did::text::shorten;

pub(crate) fn text_of(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(|s| shorten(s, MAX_SUMMARY))
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .take(agentnet_discovery::tags::MAX_TAGS)
                .map(|s| shorten(s, MAX_TAG_LEN))
                .collect()
        })
        .unwrap_or_default()
}

/// The parts of an advertisement that a summary shows, borrowed from its bytes: reading the
/// whole card as a `Value` was most of `discover_agents`' cost (profiled, docs/BENCHMARKS.md).
#[derive(Deserialize)]
struct AdvertView<'a> {
    #[serde(borrow)]
    card: CardView<'a>,
}

#[derive(Deserialize)]
struct CardView<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    description: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    skills: Vec<SkillView<'a>>,
}

#[derive(Deserialize)]
struct SkillView<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    description: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tags: Vec<Cow<'a, str>>,
}

fn short(s: Option<&str>, n: usize) -> Option<String> {
    s.map(|s| shorten(s, n))
}

/// A stored advertisement's summary. A card whose fields are not of the expected JSON types
/// (validation checks the card's signature, not its shape) is read as a `Value` instead, the
/// way [`summary`] tolerates it: a field of another type is left out.
pub(crate) fn summarize(a: agentnet_discovery::store::StoredAdvert) -> AgentSummary {
    let Ok(view) = serde_json::from_slice::<AdvertView>(&a.bytes) else {
        return summary(found(a));
    };
    let card = view.card;
    AgentSummary {
        name: short(card.name.as_deref(), MAX_SUMMARY),
        description: short(card.description.as_deref(), MAX_SUMMARY),
        skills: card
            .skills
            .iter()
            .take(32)
            .map(|s| SkillSummary {
                id: short(s.id.as_deref(), MAX_SUMMARY),
                name: short(s.name.as_deref(), MAX_SUMMARY),
                description: short(s.description.as_deref(), MAX_SUMMARY),
                tags: s
                    .tags
                    .iter()
                    .take(agentnet_discovery::tags::MAX_TAGS)
                    .map(|t| shorten(t, MAX_TAG_LEN))
                    .collect(),
            })
            .collect(),
        domain_verified: a.domain_verified(),
        did: a.did,
        tags: a.tags,
        expires_at: a.expires_at,
        peer_id: a.peer_id,
        trust: None,
    }
}

/// A found agent's summary, from its card as a JSON value.
pub(crate) fn summary(f: Found) -> AgentSummary {
    let skills = f
        .card
        .get("skills")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .take(32)
                .map(|s| SkillSummary {
                    id: text_of(s, "id"),
                    name: text_of(s, "name"),
                    description: text_of(s, "description"),
                    tags: strings(s.get("tags")),
                })
                .collect()
        })
        .unwrap_or_default();
    AgentSummary {
        name: text_of(&f.card, "name"),
        description: text_of(&f.card, "description"),
        did: f.did,
        tags: f.tags,
        skills,
        domain_verified: f.domain_verified,
        expires_at: f.expires_at,
        peer_id: f.peer_id,
        trust: match f.level {
            Some(level) => Some(Trust {
                level: Some(crate::trust::Judged {
                    level,
                    reasons: f.reasons,
                }),
                pin: f.pin,
                flags: f.flags,
            }),
            None => Trust::of(f.pin, f.flags),
        },
    }
}

/// Why skill tags cannot be searched for as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TagError {
    /// None, or more than the search takes.
    #[error("give 1 to {max} tags, not {given}")]
    Count {
        /// How many were given.
        given: usize,
        /// The most the search takes.
        max: usize,
    },
    /// A tag the network would drop (empty, too long, a control or hidden character).
    #[error("tag {0:?} is not usable: 1 to {MAX_TAG_LEN} bytes, no control characters")]
    Unusable(String),
}

/// The one check of the skill tags of a search: 1 to `max` of them ([`MAX_TAGS`] for the
/// network's own bound; a caller may take fewer), each a usable tag
/// ([`agentnet_discovery::tags::normalize`], at most [`MAX_TAG_LEN`] bytes as given).
pub fn check_tags<S: AsRef<str>>(tags: &[S], max: usize) -> Result<(), TagError> {
    if tags.is_empty() || tags.len() > max {
        return Err(TagError::Count {
            given: tags.len(),
            max,
        });
    }
    for t in tags {
        let t = t.as_ref();
        if t.len() > MAX_TAG_LEN || agentnet_discovery::tags::normalize(t).is_none() {
            return Err(TagError::Unusable(shorten(t, 80)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_did(i: u32) -> String {
        let mut seed = [7u8; 32];
        seed[..4].copy_from_slice(&i.to_be_bytes());
        agentnet_did::SecretKey::from_seed(&seed)
            .did_key()
            .to_string()
    }

    fn m(did: &str, issued_at: u64, first_seen: u64) -> agentnet_discovery::store::Match {
        agentnet_discovery::store::Match {
            did: did.to_owned(),
            issued_at,
            first_seen,
        }
    }

    /// Past the walk's cap, an allow-listed agent the walk did not reach is still ranked, and
    /// first; `top` passes over a DID whose advert lacks a tag.
    #[test]
    fn a_trusted_agent_beyond_the_walk_is_ranked_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        let now = 1_000;
        let put = |did: &str, issued_at: u64, tags: &[&str]| {
            store
                .put(&agentnet_discovery::advert::Validated {
                    did: did.to_owned(),
                    seq: 1,
                    issued_at,
                    expires_at: 5_000,
                    tags: tags.iter().map(|t| t.to_string()).collect(),
                    peer_id: "12D3KooWpeer".into(),
                    bytes: b"{}".to_vec(),
                })
                .unwrap();
        };
        let trusted = key_did(2000);
        put(&trusted, 10, &["books"]);
        let flood: Vec<String> = (0..30).map(key_did).collect();
        for (i, d) in flood.iter().enumerate() {
            put(d, 100 + i as u64, &["books"]);
        }
        let tags = vec!["books".to_string()];
        // The walk, cut at 5: the newest five of the flood.
        let (matches, cut) = store.matches(&tags, 5, now).unwrap();
        assert!(cut);
        assert!(matches.iter().all(|m| m.did != trusted));
        let policy = crate::trust::Policy::new(&[trusted.clone()], &[], None).unwrap();
        let all = with_trusted(&store, matches, &tags, &policy, None, now);
        assert_eq!(all.len(), 6);
        let shown = top(&store, all, &tags, 3, &policy, None, now);
        assert_eq!(shown.len(), 3);
        assert_eq!(shown[0].0.did, trusted);
        assert_eq!(shown[0].1.level, crate::trust::Level::AllowListed);
        // A DID allowed but without the tag is not added.
        let other = key_did(2001);
        put(&other, 10, &["music"]);
        let policy = crate::trust::Policy::new(&[other], &[], None).unwrap();
        let (matches, _) = store.matches(&tags, 5, now).unwrap();
        assert_eq!(
            with_trusted(&store, matches, &tags, &policy, None, now).len(),
            5
        );
    }

    /// Forty fresh DIDs, newer by every clock, never outrank what the node knew before them
    /// or what the operator trusts; `deny` and `min_level` apply before any cut.
    #[test]
    fn rank_puts_trust_then_age_before_any_number_of_fresh_dids() {
        let known = key_did(1000);
        let trusted = key_did(1001);
        let sybils: Vec<String> = (0..40).map(key_did).collect();
        // As the index gives them: newest `issued_at` first, the Sybils at the top.
        let mut matches: Vec<_> = sybils
            .iter()
            .enumerate()
            .map(|(i, d)| m(d, 10_000 - i as u64, 500 + i as u64))
            .collect();
        matches.push(m(&trusted, 50, 900));
        matches.push(m(&known, 10, 100));
        let tags = vec!["books".to_string()];
        let open = crate::trust::Policy::default();
        let ranked = rank(matches.clone(), &open, None, &tags, 1);
        assert_eq!(ranked.len(), 42);
        assert_eq!(ranked[0].0.did, known, "the longest known first");
        assert_eq!(ranked[1].0.did, sybils[0]);
        let allow = crate::trust::Policy::new(&[trusted.clone()], &[], None).unwrap();
        let ranked = rank(matches.clone(), &allow, None, &tags, 1);
        assert_eq!(
            ranked[0].0.did, trusted,
            "the allow-listed first, though seen last"
        );
        assert_eq!(ranked[1].0.did, known);
        let strict = crate::trust::Policy::new(
            &[trusted.clone()],
            &[known.clone()],
            Some(crate::trust::Level::AllowListed),
        )
        .unwrap();
        let ranked = rank(matches.clone(), &strict, None, &tags, 1);
        let dids: Vec<&str> = ranked.iter().map(|(m, _)| m.did.as_str()).collect();
        assert_eq!(dids, [trusted.as_str()]);
        let deny = crate::trust::Policy::new(&[], &[known.clone()], None).unwrap();
        let ranked = rank(matches, &deny, None, &tags, 1);
        assert!(ranked.iter().all(|(m, _)| m.did != known));
        assert_eq!(ranked.len(), 41);
    }

    fn stored(card: Value) -> agentnet_discovery::store::StoredAdvert {
        let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
        let bytes = serde_json::to_vec(&serde_json::json!({
            "v": 1, "did": did, "card": card, "peerId": "12D3KooW", "addrs": [], "seq": 3,
            "issuedAt": 1, "expiresAt": 2,
            "proof": {"protected": "e30", "signature": "AA"}
        }))
        .unwrap();
        agentnet_discovery::store::StoredAdvert {
            did: did.into(),
            seq: 3,
            issued_at: 1,
            expires_at: 2,
            tags: vec!["echo".into()],
            peer_id: "12D3KooW".into(),
            bytes,
        }
    }

    /// The fast reading of a stored advertisement says what the `Value` reading says, for
    /// cards of the expected shape and for cards that are not.
    #[test]
    fn summaries_read_from_bytes_match_the_value_reading() {
        let long = "é".repeat(MAX_SUMMARY + 7);
        let cards = [
            serde_json::json!({"name": "A", "description": long, "skills": [
                {"id": "s", "name": "S", "description": "d", "tags": ["echo", "x".repeat(300)]},
                {"id": "t"}
            ]}),
            serde_json::json!({"name": 5, "skills": [{"id": "s", "tags": ["echo", 7]}]}),
            serde_json::json!({"name": null, "skills": "none"}),
            serde_json::json!({"skills": (0..40).map(|i| serde_json::json!({"id": i.to_string(),
                "tags": (0..20).map(|j| format!("t{j}")).collect::<Vec<_>>()})).collect::<Vec<_>>()}),
            serde_json::json!("not an object"),
        ];
        for card in cards {
            let a = stored(card.clone());
            let fast = serde_json::to_value(summarize(a.clone())).unwrap();
            let slow = serde_json::to_value(summary(found(a))).unwrap();
            assert_eq!(fast, slow, "card {card}");
        }
        let s = summarize(stored(serde_json::json!({"description": long})));
        let d = s.description.unwrap();
        assert_eq!(d.chars().count(), MAX_SUMMARY + 1);
        assert!(d.ends_with('…'));
    }

    #[test]
    fn one_tag_check_for_every_search() {
        assert!(check_tags(&["echo"], MAX_TAGS).is_ok());
        assert!(check_tags(&vec!["a"; MAX_TAGS], MAX_TAGS).is_ok());
        let none: [&str; 0] = [];
        for (bad, max) in [
            (vec!["a".to_string(); MAX_TAGS + 1], MAX_TAGS),
            (vec!["a".to_string(); 9], 8),
            (none.iter().map(|s| s.to_string()).collect(), MAX_TAGS),
        ] {
            let e = check_tags(&bad, max).unwrap_err();
            assert!(matches!(e, TagError::Count { .. }), "{e}");
        }
        for bad in [
            "",
            " ",
            "a\u{1}b",
            "a\u{202e}b",
            &"x".repeat(MAX_TAG_LEN + 1),
        ] {
            let e = check_tags(&["ok", bad], MAX_TAGS).unwrap_err();
            assert!(matches!(e, TagError::Unusable(_)), "{bad:?}: {e}");
        }
    }
}
