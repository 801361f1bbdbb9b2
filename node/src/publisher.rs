//! Publishing Agent Cards: sign the card if needed, wrap it in an advertisement with a fresh
//! sequence number, hand it to the network, and re-announce it at 2/3 of its lifetime.
//!
//! What was published is remembered in memory only. Sequence numbers come from
//! [`Store::next_own_seq`], which persists them, so a re-announce after a restart still goes
//! above everything the network has seen from us.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use agentnet_did::a2a;
use agentnet_did::card::{self, CardSignatureError};
use agentnet_did::key::PublicKey;
use agentnet_discovery::advert::{self, Draft, Reject};
use agentnet_discovery::net::{self, unix_now};
use agentnet_discovery::store::{Store, StoreError};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::identity::Identity;

/// Most agents one node re-announces.
pub const MAX_PUBLISHED: usize = 1024;
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
    /// The card has no usable skill tags (or too many); nothing to index it under.
    #[error("{0}")]
    Tags(Reject),
    /// The lifetime is out of range.
    #[error("ttl of {ttl} s is not within {MIN_TTL}..={max} s")]
    Ttl {
        /// Requested.
        ttl: u64,
        /// Largest accepted.
        max: u64,
    },
    /// Already re-announcing [`MAX_PUBLISHED`] agents.
    #[error("this node already publishes {MAX_PUBLISHED} agents")]
    TooMany,
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
            PublishError::Tags(r) => Some(r),
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
}

struct Entry {
    id: Identity,
    card: Value,
    ttl: u64,
    due: Instant,
}

/// Publishes cards and keeps them announced. Share it behind an `Arc`; [`Publisher::run`] is
/// the re-announce loop.
pub struct Publisher {
    client: net::Client,
    store: Store,
    max_ttl: u64,
    entries: Mutex<HashMap<String, Entry>>,
    changed: Notify,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").finish_non_exhaustive()
    }
}

/// Check a card before anything is signed: it fits the A2A model and has skill tags.
pub fn check_card(card: &Value) -> Result<Vec<String>, PublishError> {
    a2a::normalize(card).map_err(CardSignatureError::from)?;
    advert::card_tags(card).map_err(PublishError::Tags)
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
        }
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
        let published = self.announce(&id, &card, ttl).await?;
        let due = reannounce_at(ttl);
        self.entries
            .lock()
            .expect("publisher lock poisoned")
            .insert(did, Entry { id, card, ttl, due });
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
                let next_due = match self.announce(&id, &card, ttl).await {
                    Ok(p) => {
                        tracing::debug!(did = %p.did, seq = p.seq, "re-announced");
                        reannounce_at(ttl)
                    }
                    Err(error) => {
                        tracing::warn!(%error, %did, "re-announcing");
                        Instant::now()
                            + RETRY.min(Duration::from_secs(ttl / 3).max(Duration::from_secs(1)))
                    }
                };
                if let Some(e) = self
                    .entries
                    .lock()
                    .expect("publisher lock poisoned")
                    .get_mut(&did)
                {
                    // A publish that replaced the entry meanwhile set its own schedule.
                    if e.due <= now {
                        e.due = next_due;
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
