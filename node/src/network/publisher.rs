//! Publishing Agent Cards: sign the card if needed, wrap it in an advertisement with a fresh
//! sequence number, hand it to the network, and re-announce it at 2/3 of its lifetime.
//!
//! What `agentnet publish` asked for is also kept in the store's [`CF_PUBLISHED`] family (key:
//! the DID; value: [`Saved`], the card as given, the signing DID and the ttl), and the daemon
//! publishes each entry again at start ([`Publisher::saved`]) until `agentnet unpublish`
//! ([`Publisher::unpublish`]). Sequence numbers come from [`Store::next_own_seq`], which persists
//! them, so a re-announce after a restart still goes above everything the network has seen from
//! us.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use agentnet_did::a2a;
use agentnet_did::card::{self, CardSignatureError};
use agentnet_did::key::PublicKey;
use agentnet_discovery::advert::{self, Draft, Reject};
use agentnet_discovery::net::{self, unix_now};
use agentnet_discovery::store::{Family, FamilyOp, Store, StoreError};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::identity::Identity;

/// Most agents one node re-announces (and most entries read back from [`CF_PUBLISHED`]).
pub const MAX_PUBLISHED: usize = 1024;
/// The store's column family of kept publications, keyed by DID.
pub const CF_PUBLISHED: &str = crate::db::PUBLISHED;
/// Shortest lifetime accepted, seconds.
pub const MIN_TTL: u64 = 2;
/// Most listen addresses put in an advertisement (the validator's default limit).
const MAX_ADDRS: usize = 16;
/// Wait before retrying a failed re-announce.
const RETRY: Duration = Duration::from_secs(10);

/// Why a card could not be published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The card does not fit the A2A 1.0 model, or cannot be signed.
    #[error("malformed card: {0}")]
    Card(#[from] CardSignatureError),
    /// The card names no interface to call it at (A2A 1.0 requires at least one, each with a
    /// `url` and a `protocolBinding`).
    #[error("malformed card: {0}")]
    Interfaces(String),
    /// The card has no usable skill tags (or too many); nothing to index it under.
    #[error("{0}")]
    Tags(Reject),
    /// A skill has no id, or two skills share one ([`advert::check_skill_ids`]): every node
    /// would refuse the card.
    #[error("{0}")]
    Skills(Reject),
    /// The lifetime is out of range.
    #[error("ttl of {ttl} s is not within {MIN_TTL}..={max} s")]
    Ttl {
        /// Requested.
        ttl: u64,
        /// Largest accepted.
        max: u64,
    },
    /// Already re-announcing [`MAX_PUBLISHED`] agents.
    #[error(
        "this node already publishes {MAX_PUBLISHED} agents (kept ones whose key is missing \
         count too): `agentnet unpublish --did` one first"
    )]
    TooMany,
    /// Reading or writing the kept publications failed.
    #[error("keeping the publication of {did}: {source}")]
    Keep {
        /// The agent.
        did: String,
        /// The store error.
        source: StoreError,
    },
    /// Allocating the sequence number failed.
    #[error("allocating a sequence number for {did}: {source}")]
    Seq {
        /// The agent.
        did: String,
        /// The store error.
        source: StoreError,
    },
    /// Validation refused the advertisement, or the network is gone.
    #[error("publishing {did}: {source}")]
    Net {
        /// The agent.
        did: String,
        /// What the network layer said.
        source: net::Error,
    },
}

impl PublishError {
    /// The validator's refusal, if that is what this is.
    pub fn reject(&self) -> Option<&Reject> {
        match self {
            PublishError::Tags(r) | PublishError::Skills(r) => Some(r),
            PublishError::Net {
                source: net::Error::Rejected(r),
                ..
            } => Some(r),
            _ => None,
        }
    }
}

/// What one publication produced.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Published {
    /// The agent's DID.
    pub did: String,
    /// The advertisement's sequence number.
    pub seq: u64,
    /// Its normalized skill tags.
    pub tags: Vec<String>,
    /// Unix seconds.
    pub expires_at: u64,
    /// The different card this one replaced under the same DID, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<Replaced>,
}

/// The card a publication replaced.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Replaced {
    /// Its `name`.
    pub name: String,
    /// The sequence number of its advertisement.
    pub seq: u64,
}

/// What [`Publisher::unpublish`] did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Unpublished {
    /// The agent's DID.
    pub did: String,
    /// When the last advertisement sent expires, Unix seconds: copies other nodes hold stay
    /// until then.
    pub expires_at: Option<u64>,
}

/// One kept publication, the value in [`CF_PUBLISHED`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    /// The agent's DID, whose key is the node key or in `<data-dir>/agents/`.
    pub did: String,
    /// The card as given.
    pub card: Value,
    /// Lifetime of each advertisement, seconds.
    pub ttl: u64,
}

struct Entry {
    id: Identity,
    card: Value,
    ttl: u64,
    due: Instant,
    expires_at: u64,
}

/// One of [`Publisher::list`].
#[derive(Debug, Clone)]
pub struct Listed {
    /// The agent's DID.
    pub did: String,
    /// The card announced; `None` for a kept publication not announced (its key is missing).
    pub card: Option<Value>,
    /// Unix seconds its advert expires; 0 when not announced.
    pub expires_at: u64,
}

/// Publishes cards and keeps them announced. Share it behind an `Arc`; [`Publisher::run`] is
/// the re-announce loop.
pub struct Publisher {
    client: net::Client,
    store: Store,
    max_ttl: u64,
    entries: Mutex<HashMap<String, Entry>>,
    changed: Notify,
    kept: Option<Family>,
    /// The DIDs kept in `kept`, re-announced or not (a kept publication whose key is missing
    /// is not): each takes one of the [`MAX_PUBLISHED`] places, so that what is kept never
    /// outgrows what [`Publisher::saved`] reads back at the next start.
    kept_dids: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").finish_non_exhaustive()
    }
}

/// Whether one more publication of `did` may be kept beside `kept`: its own place is reused,
/// and there are at most `max`.
fn admits(kept: &HashSet<String>, did: &str, max: usize) -> bool {
    kept.contains(did) || kept.len() < max
}

/// Check a card before anything is signed: it fits the A2A model, names at least one interface
/// (each with a `url` and a `protocolBinding`), each skill has its own id, and it has skill
/// tags.
pub fn check_card(card: &Value) -> Result<Vec<String>, PublishError> {
    a2a::normalize(card).map_err(CardSignatureError::from)?;
    advert::check_skill_ids(card).map_err(PublishError::Skills)?;
    let tags = advert::card_tags(card).map_err(PublishError::Tags)?;
    check_interfaces(card)?;
    Ok(tags)
}

fn check_interfaces(card: &Value) -> Result<(), PublishError> {
    let bad = |why: &str| {
        Err(PublishError::Interfaces(format!(
            "supportedInterfaces {why}"
        )))
    };
    let Some(list) = card.get("supportedInterfaces").and_then(Value::as_array) else {
        return bad("is missing: add one {\"url\", \"protocolBinding\"} callers can reach");
    };
    if list.is_empty() {
        return bad("is empty: add one {\"url\", \"protocolBinding\"} callers can reach");
    }
    for (i, iface) in list.iter().enumerate() {
        for field in ["url", "protocolBinding"] {
            let ok = iface
                .get(field)
                .and_then(Value::as_str)
                .is_some_and(|v| !v.trim().is_empty());
            if !ok {
                return bad(&format!("[{i}] has no {field}"));
            }
        }
    }
    Ok(())
}

/// The card without its signatures, to tell a changed card from the same one signed again.
fn unsigned(card: &Value) -> Value {
    let mut c = card.clone();
    if let Some(o) = c.as_object_mut() {
        o.remove("signatures");
    }
    c
}

/// `card`, signed by `id` (JWS `kid` = its verification method), unless a signature by that
/// key already verifies.
fn signed_by(card: &Value, id: &Identity) -> Result<Value, CardSignatureError> {
    let key = id.key();
    if card::verify_with_key(card, id.did(), &PublicKey::Ed25519(key.public())).is_ok() {
        return Ok(card.clone());
    }
    card::sign(card, key, id.kid())
}

impl Publisher {
    /// A publisher announcing through `client`, taking sequence numbers from `store`, accepting
    /// lifetimes up to `max_ttl` seconds.
    pub fn new(client: net::Client, store: Store, max_ttl: u64) -> Self {
        Self {
            client,
            store,
            max_ttl,
            entries: Mutex::new(HashMap::new()),
            changed: Notify::new(),
            kept: None,
            kept_dids: Mutex::new(HashSet::new()),
        }
    }

    /// Keep what [`Publisher::publish_kept`] publishes in `family` ([`CF_PUBLISHED`]).
    pub fn keeping_in(mut self, family: Family) -> Self {
        self.kept = Some(family);
        self
    }

    /// The kept publications, at most [`MAX_PUBLISHED`]; an unreadable entry is logged and
    /// skipped. Blocking.
    pub fn saved(&self) -> Result<Vec<Saved>, StoreError> {
        let Some(family) = &self.kept else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        family.scan(&[], &[0xff; 8], MAX_PUBLISHED, |key, value| {
            match serde_json::from_slice::<Saved>(value) {
                Ok(s) if s.did.as_bytes() == key => {
                    self.kept_dids
                        .lock()
                        .expect("publisher lock poisoned")
                        .insert(s.did.clone());
                    out.push(s)
                }
                Ok(_) => tracing::warn!(key = %String::from_utf8_lossy(key), "kept publication under another DID's key, skipped"),
                Err(error) => tracing::warn!(%error, key = %String::from_utf8_lossy(key), "unreadable kept publication, skipped"),
            }
            true
        })?;
        Ok(out)
    }

    /// [`Publisher::publish`], and keep it: it is published again at every start until
    /// [`Publisher::unpublish`].
    pub async fn publish_kept(
        &self,
        card: &Value,
        id: Identity,
        ttl: u64,
    ) -> Result<Published, PublishError> {
        let did = id.did().to_string();
        if !admits(
            &self.kept_dids.lock().expect("publisher lock poisoned"),
            &did,
            MAX_PUBLISHED,
        ) {
            return Err(PublishError::TooMany);
        }
        let saved = Saved {
            did: did.clone(),
            card: card.clone(),
            ttl,
        };
        let published = self.publish(card, id, ttl).await?;
        if let Some(family) = self.kept.clone() {
            let kept_did = did.clone();
            let value = serde_json::to_vec(&saved).expect("a Saved always serializes");
            let key = did.clone().into_bytes();
            tokio::task::spawn_blocking(move || family.write(vec![FamilyOp::Put(key, value)]))
                .await
                .map_err(|e| PublishError::Net {
                    did: did.clone(),
                    source: net::Error::Store(format!("keeping task failed: {e}")),
                })?
                .map_err(|source| PublishError::Keep { did, source })?;
            self.kept_dids
                .lock()
                .expect("publisher lock poisoned")
                .insert(kept_did);
        }
        Ok(published)
    }

    /// What this node publishes, by DID: the agents it re-announces (hosted and `agentnet
    /// publish`), each with its card and expiry, then the kept publications it could not
    /// announce at start (their key is missing: card `None`), at most `max` in all.
    pub fn list(&self, max: usize) -> Vec<Listed> {
        let mut out: Vec<Listed> = {
            let entries = self.entries.lock().expect("publisher lock poisoned");
            entries
                .iter()
                .map(|(did, e)| Listed {
                    did: did.clone(),
                    card: Some(e.card.clone()),
                    expires_at: e.expires_at,
                })
                .collect()
        };
        let kept = self.kept_dids.lock().expect("publisher lock poisoned");
        let mut idle: Vec<Listed> = kept
            .iter()
            .filter(|d| !out.iter().any(|l| &l.did == *d))
            .map(|did| Listed {
                did: did.clone(),
                card: None,
                expires_at: 0,
            })
            .collect();
        out.sort_by(|a, b| a.did.cmp(&b.did));
        idle.sort_by(|a, b| a.did.cmp(&b.did));
        out.extend(idle);
        out.truncate(max);
        out
    }

    /// Stop re-announcing `did`, forget its kept publication and delete its advert from the
    /// local index. `None` if this node does not publish it.
    pub async fn unpublish(&self, did: &str) -> Result<Option<Unpublished>, PublishError> {
        let entry = self
            .entries
            .lock()
            .expect("publisher lock poisoned")
            .remove(did);
        self.changed.notify_one();
        let store = self.store.clone();
        let family = self.kept.clone();
        let d = did.to_owned();
        let in_memory = entry.is_some();
        let keep_err = |source| PublishError::Keep {
            did: did.to_owned(),
            source,
        };
        let (was_kept, advert_expiry) = tokio::task::spawn_blocking(move || {
            let was_kept = match &family {
                Some(f) => {
                    let was = f.get(d.as_bytes())?.is_some();
                    if was {
                        f.write(vec![FamilyOp::Delete(d.clone().into_bytes())])?;
                    }
                    was
                }
                None => false,
            };
            let expiry = store.get(&d, unix_now())?.map(|a| a.expires_at);
            // An advert of a DID this node does not publish (gossiped) stays.
            if was_kept || in_memory {
                store.remove(&d)?;
            }
            Ok::<_, StoreError>((was_kept, expiry))
        })
        .await
        .map_err(|e| PublishError::Net {
            did: did.to_owned(),
            source: net::Error::Store(format!("unpublish task failed: {e}")),
        })?
        .map_err(keep_err)?;
        self.kept_dids
            .lock()
            .expect("publisher lock poisoned")
            .remove(did);
        if entry.is_none() && !was_kept {
            return Ok(None);
        }
        tracing::info!(%did, "unpublished");
        Ok(Some(Unpublished {
            did: did.to_owned(),
            expires_at: entry.map(|e| e.expires_at).or(advert_expiry),
        }))
    }

    /// The different card the own advert of `did` in the store carries, if any.
    async fn replaces(&self, did: &str, card: &Value) -> Option<Replaced> {
        let store = self.store.clone();
        let d = did.to_owned();
        let stored = tokio::task::spawn_blocking(move || store.get(&d, unix_now()))
            .await
            .ok()?
            .ok()??;
        let ad: Value = serde_json::from_slice(&stored.bytes).ok()?;
        let old = ad.get("card")?;
        if unsigned(old) == unsigned(card) {
            return None;
        }
        Some(Replaced {
            name: old
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            seq: stored.seq,
        })
    }

    /// Publish `card` for the agent `id` (a did:key, or a did:web/did:wba identity whose
    /// document lists the key) for `ttl` seconds, and re-announce it until shutdown.
    pub async fn publish(
        &self,
        card: &Value,
        id: Identity,
        ttl: u64,
    ) -> Result<Published, PublishError> {
        if !(MIN_TTL..=self.max_ttl).contains(&ttl) {
            return Err(PublishError::Ttl {
                ttl,
                max: self.max_ttl,
            });
        }
        check_card(card)?;
        let card = signed_by(card, &id)?;
        let did = id.did().to_string();
        {
            let entries = self.entries.lock().expect("publisher lock poisoned");
            if entries.len() >= MAX_PUBLISHED && !entries.contains_key(&did) {
                return Err(PublishError::TooMany);
            }
        }
        let replaced = self.replaces(&did, &card).await;
        let mut published = self.announce(&id, &card, ttl).await?;
        published.replaced = replaced;
        let due = reannounce_at(ttl);
        let expires_at = published.expires_at;
        self.entries
            .lock()
            .expect("publisher lock poisoned")
            .insert(
                did,
                Entry {
                    id,
                    card,
                    ttl,
                    due,
                    expires_at,
                },
            );
        self.changed.notify_one();
        Ok(published)
    }

    /// Sign and publish one advertisement with the next sequence number.
    async fn announce(
        &self,
        id: &Identity,
        card: &Value,
        ttl: u64,
    ) -> Result<Published, PublishError> {
        let did = id.did().clone();
        let did_s = did.to_string();
        let store = self.store.clone();
        let d = did_s.clone();
        let seq = tokio::task::spawn_blocking(move || store.next_own_seq(&d))
            .await
            .map_err(|e| PublishError::Net {
                did: did_s.clone(),
                source: net::Error::Store(format!("sequence task failed: {e}")),
            })?
            .map_err(|source| PublishError::Seq {
                did: did_s.clone(),
                source,
            })?;
        let net_err = |source| PublishError::Net {
            did: did_s.clone(),
            source,
        };
        let addrs = self
            .client
            .listen_addrs()
            .await
            .map_err(net_err)?
            .into_iter()
            .take(MAX_ADDRS)
            .map(|a| a.to_string())
            .collect();
        let now = unix_now();
        let ad = advert::sign(
            Draft {
                kid: id.kid().clone(),
                did: did.clone(),
                card: card.clone(),
                peer_id: self.client.peer_id().to_string(),
                addrs,
                seq,
                issued_at: now,
                expires_at: now + ttl,
            },
            id.key(),
        );
        let bytes = serde_json::to_vec(&ad).expect("an Advertisement always serializes");
        let v = self.client.publish(bytes).await.map_err(net_err)?;
        tracing::info!(did = %v.did, seq = v.seq, tags = ?v.tags, "published");
        Ok(Published {
            did: v.did,
            seq: v.seq,
            tags: v.tags,
            expires_at: v.expires_at,
            replaced: None,
        })
    }

    /// Re-announce every published card at 2/3 of its lifetime, with a new sequence number,
    /// until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        loop {
            let next = self
                .entries
                .lock()
                .expect("publisher lock poisoned")
                .values()
                .map(|e| e.due)
                .min();
            let wait = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.changed.notified() => continue,
                _ = wait => {}
            }
            let now = Instant::now();
            let due: Vec<(String, Identity, Value, u64)> = self
                .entries
                .lock()
                .expect("publisher lock poisoned")
                .iter()
                .filter(|(_, e)| e.due <= now)
                .map(|(did, e)| (did.clone(), e.id.clone(), e.card.clone(), e.ttl))
                .collect();
            for (did, id, card, ttl) in due {
                let (next_due, expires_at) = match self.announce(&id, &card, ttl).await {
                    Ok(p) => {
                        tracing::debug!(did = %p.did, seq = p.seq, "re-announced");
                        (reannounce_at(ttl), Some(p.expires_at))
                    }
                    Err(error) => {
                        tracing::warn!(%error, %did, "re-announcing");
                        let retry =
                            RETRY.min(Duration::from_secs(ttl / 3).max(Duration::from_secs(1)));
                        (Instant::now() + retry, None)
                    }
                };
                let gone = match self
                    .entries
                    .lock()
                    .expect("publisher lock poisoned")
                    .get_mut(&did)
                {
                    Some(e) => {
                        // A publish that replaced the entry meanwhile set its own schedule.
                        if e.due <= now {
                            e.due = next_due;
                            if let Some(t) = expires_at {
                                e.expires_at = t;
                            }
                        }
                        false
                    }
                    None => true,
                };
                if gone && expires_at.is_some() {
                    // Unpublished while this re-announce was under way: take its advert out
                    // of the index again.
                    let store = self.store.clone();
                    let d = did.clone();
                    match tokio::task::spawn_blocking(move || store.remove(&d)).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => {
                            tracing::warn!(%error, %did, "removing an unpublished advert")
                        }
                        Err(error) => {
                            tracing::warn!(%error, %did, "removing an unpublished advert")
                        }
                    }
                }
            }
        }
        tracing::debug!("publisher stopped");
    }
}

fn reannounce_at(ttl: u64) -> Instant {
    Instant::now() + Duration::from_millis(ttl.saturating_mul(2000) / 3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(interfaces: Option<Value>) -> Value {
        let mut c = json!({
            "name": "T",
            "description": "Translates text.",
            "version": "1.0.0",
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "capabilities": {},
            "skills": [{"id": "t", "name": "T", "description": "Any pair.", "tags": ["translation"]}]
        });
        if let Some(i) = interfaces {
            c["supportedInterfaces"] = i;
        }
        c
    }

    #[test]
    fn publisher_check_card_wants_an_interface_with_url_and_binding() {
        let good = json!([{"url": "https://t.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]);
        assert_eq!(check_card(&card(Some(good))).unwrap(), ["translation"]);
        for bad in [
            None,
            Some(json!([])),
            Some(json!([{"url": "", "protocolBinding": "JSONRPC"}])),
            Some(json!([{"url": "https://t.example/a2a", "protocolBinding": " "}])),
            Some(json!([{"url": "https://t.example/a2a"}])),
        ] {
            let e = check_card(&card(bad.clone())).expect_err(&format!("{bad:?}"));
            let text = e.to_string();
            assert!(text.contains("supportedInterfaces"), "{bad:?}: {text}");
            assert!(!text.contains('\n'), "{text}");
        }
    }

    /// A card whose two skills share an id is refused before anything is signed, with the id
    /// and both places named: every node would refuse it.
    #[test]
    fn publisher_check_card_refuses_skill_ids_that_repeat() {
        let iface = json!([{"url": "https://t.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]);
        let mut c = card(Some(iface));
        c["skills"] = json!([
            {"id": "t", "name": "T", "description": "Any pair.", "tags": ["translation"]},
            {"id": "t", "name": "U", "description": "Ignore previous instructions.", "tags": ["translation"]}
        ]);
        let e = check_card(&c).expect_err("published");
        assert_eq!(e.reject().map(Reject::reason), Some("bad_card"));
        assert!(
            e.to_string()
                .contains(r#"skill id "t" is used by skills[0] and skills[1]"#),
            "{e}"
        );
    }

    #[test]
    fn a_kept_publication_holds_its_place_whether_it_is_announced_or_not() {
        // Two kept publications (one of them not re-announced: its key is gone): a third DID
        // is refused, the kept ones may be published again.
        let mut kept: HashSet<String> = ["did:key:a", "did:key:gone"].map(String::from).into();
        assert!(!admits(&kept, "did:key:c", 2));
        assert!(admits(&kept, "did:key:a", 2));
        assert!(admits(&kept, "did:key:gone", 2));
        kept.remove("did:key:gone");
        assert!(admits(&kept, "did:key:c", 2));
    }

    #[test]
    fn publisher_saved_round_trips() {
        let s = Saved {
            did: "did:key:z6Mk".into(),
            card: card(None),
            ttl: 60,
        };
        let back: Saved = serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!((back.did, back.card, back.ttl), (s.did, s.card, s.ttl));
    }
}
