//! The gossip source of the soak: advertisements signed here, imported through the peer's admin
//! API and announced by it: a pool re-published once a minute, and new short-lived agents.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentnet_did::{card, SecretKey};
use agentnet_discovery::advert::{self, Draft};
use agentnet_discovery::net::unix_now;
use serde_json::{json, Value};

use crate::load::{expect_ok, TAGS};

/// The gossip: agents re-published once a minute, new agents per second and their lifetime.
/// 300 / 60 + 2 = 7 advertisements a second: under the 100 per 10 s a node takes from one
/// peer (`agentnet_discovery::net::Config::per_peer_messages`), past which it mutes the peer.
pub(crate) const POOL: u64 = 300;
const NEW_PER_SEC: u64 = 2;
const NEW_TTL: u64 = 300;

/// The gossip source: advertisements signed here, published by the peer.
pub(crate) struct Gossip {
    pub(crate) http: reqwest::Client,
    pub(crate) url: String,
    pub(crate) auth: String,
    pub(crate) peer_id: String,
    pub(crate) addr: String,
    pub(crate) seed: u64,
    pub(crate) next_new: u64,
    pub(crate) posted: Arc<AtomicU64>,
    pub(crate) failed: Arc<AtomicU64>,
    pub(crate) last_error: Arc<Mutex<Option<String>>>,
}

impl Gossip {
    /// Agent `i`'s advertisement with `seq`, living `ttl` seconds.
    fn advert(&self, i: u64, seq: u64, ttl: u64) -> Result<Value, String> {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.seed.to_le_bytes());
        seed[8..16].copy_from_slice(&i.to_le_bytes());
        seed[16] = 0x50;
        let key = SecretKey::from_seed(&seed);
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        let tags: Vec<String> = (0..2u64)
            .map(|k| format!("soak-{}", (i + k * 7) % TAGS))
            .collect();
        let c = json!({
            "name": format!("Soak agent {i}"),
            "description": "A soak agent: translates, summarizes and classifies short texts.",
            "version": format!("1.0.{seq}"),
            "supportedInterfaces": [{"url": format!("https://agent-{i}.soak.example/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "provider": {"organization": "Soak Org", "url": "https://soak.example"},
            "capabilities": {"streaming": true, "pushNotifications": false},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "main", "name": "Main skill", "description": "Does the thing.", "tags": tags,
                "examples": ["translate this text", "summarize this page"]}]
        });
        let signed = card::sign(&c, &key, &kid).map_err(|e| e.to_string())?;
        let now = unix_now();
        let ad = advert::sign(
            Draft {
                did,
                kid,
                card: signed,
                peer_id: self.peer_id.clone(),
                addrs: vec![self.addr.clone()],
                seq,
                issued_at: now,
                expires_at: now + ttl,
            },
            &key,
        );
        serde_json::to_value(&ad).map_err(|e| e.to_string())
    }

    /// Imports `ad` through the peer.
    async fn post(&self, ad: Value) {
        let r = expect_ok(
            self.http
                .post(&self.url)
                .header("Authorization", &self.auth)
                .header("Content-Type", "application/json")
                .body(ad.to_string()),
        )
        .await;
        match r {
            Ok(()) => self.posted.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                self.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }

    /// Publish pool agent `i` with `seq`.
    pub(crate) async fn pool(&self, i: u64, seq: u64) {
        match self.advert(i, seq, 3600) {
            Ok(ad) => self.post(ad).await,
            Err(e) => {
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Forever: each second, 1/60 of the pool again (higher seq) and NEW_PER_SEC new agents.
    pub(crate) async fn run(mut self) {
        let start = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let per_sec = POOL.div_ceil(60);
        let mut k = 0u64;
        loop {
            tick.tick().await;
            let seq = 2 + start.elapsed().as_secs();
            for _ in 0..per_sec {
                self.pool(k % POOL, seq).await;
                k += 1;
            }
            for _ in 0..NEW_PER_SEC {
                let i = self.next_new;
                self.next_new += 1;
                match self.advert(i, 1, NEW_TTL) {
                    Ok(ad) => self.post(ad).await,
                    Err(_) => {
                        self.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}
