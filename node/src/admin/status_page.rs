//! The status page on the admin listener: `GET /status` (a page for a browser) and the JSON it
//! reads, `GET /admin/v1/status`.
//!
//! The page (`status_page.html`, `.css`, `.js` beside this file, compiled in) holds no data
//! and no secret, so it is served without the token ([`page`]); it asks for the admin token
//! (the browser's login), keeps it in `sessionStorage` and sends it as `Authorization: Bearer`
//! to `/admin/v1/status` ([`api`], mounted behind the admin guard like every `/admin/v1`
//! route). A link `http://<admin>/status#token=<token>` logs in once: the fragment never
//! reaches the server, and the page removes it from the address bar. Everything it shows is
//! set with `textContent` (card names are a stranger's text); the assets are served with a
//! `Content-Security-Policy` of `default-src 'self'` (no inline script, no other origin) and
//! `X-Frame-Options: DENY`. The public listener has none of these routes.
//!
//! What `/admin/v1/status` answers ([`Report`]): the node (DID, peer id, uptime), its
//! connected peers and network counters, the hosted agents, the newest live advertisements in
//! its index with their verification, trust level, pin (read only: the page pins nothing) and
//! flags, as `discover` judges them, the node's own live advertisements (`published`, at most
//! [`MAX_PUBLISHED`]), the bootstrap addresses and how their dials went, the store's use, the
//! newest tasks ([`TaskDb::recent`]) and a history of
//! the counters, sampled every [`SAMPLE_EVERY`] by a task of this module for the last
//! [`HISTORY`] samples, which the page draws as charts.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentnet_discovery::net::{self, unix_now};
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::admin::{AdminState, ApiError};
use crate::hosted::tasks::{RecentTask, TaskDb};
use crate::hosted::Hosted;
use crate::network::directory::{Peer, Stats};

/// The page's path.
pub const PATH: &str = "/status";
/// The JSON's path (behind the admin guard), as the admin client names it.
pub use crate::admin::STATUS_PATH as API_PATH;
/// How often the counters are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Samples kept: half an hour at [`SAMPLE_EVERY`].
pub const HISTORY: usize = 360;
/// Most advertisements listed (the newest).
pub const MAX_DISCOVERED: usize = 50;
/// Most tasks listed (the newest).
pub const MAX_TASKS: usize = 20;
/// Most peers listed.
pub const MAX_PEERS: usize = 100;
/// Most of the node's own advertisements listed (the newest), out of the
/// [`agentnet_discovery::store::MAX_FIND_LIMIT`] newest of the index.
pub const MAX_PUBLISHED: usize = 100;
/// Longest card name or description shown, in characters.
const MAX_TEXT: usize = 200;

const HTML: &str = include_str!("status_page.html");
const CSS: &str = include_str!("status_page.css");
const JS: &str = include_str!("status_page.js");

/// The page's `Content-Security-Policy`: its own script and style files only, fetches to its
/// own origin only, no frames, no forms sent anywhere.
pub const CSP: &str = "default-src 'self'; img-src 'self' data:; base-uri 'none'; \
                       form-action 'none'; frame-ancestors 'none'";

/// What the status JSON is gathered from.
#[derive(Clone)]
pub struct Status {
    admin: AdminState,
    tasks: Arc<TaskDb>,
    did: String,
    public_url: String,
    hosted: Arc<[HostedAgent]>,
    started: Instant,
    started_at: u64,
    history: Arc<Mutex<VecDeque<Sample>>>,
}

impl Status {
    /// The status of a node whose DID is `did`, reachable at `public_url`, hosting `hosted`.
    pub fn new(
        admin: AdminState,
        tasks: Arc<TaskDb>,
        did: &str,
        public_url: &str,
        hosted: &[Hosted],
    ) -> Status {
        Status {
            admin,
            tasks,
            did: did.to_owned(),
            public_url: public_url.to_owned(),
            hosted: hosted
                .iter()
                .map(|h| HostedAgent::of(h, public_url))
                .collect(),
            started: Instant::now(),
            started_at: unix_now(),
            history: Arc::new(Mutex::new(VecDeque::with_capacity(HISTORY))),
        }
    }

    fn client(&self) -> &net::Client {
        &self.admin.client
    }

    /// The counters now.
    async fn sample(&self) -> Sample {
        let c = self.client();
        let s = c.stats();
        let t = c.traffic();
        Sample {
            t: unix_now(),
            gossip_received: t.gossip_received,
            gossip_unique: t.gossip_unique,
            accepted: s.accepted.get(),
            ignored: s.ignored.get(),
            rejected: s.rejected_total(),
            throttled: s.throttled.get(),
            peers: c.peers().await.map(|p| p.len()).unwrap_or_default(),
            tasks: self.tasks.len(),
        }
    }

    fn record(&self, sample: Sample) {
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        if h.len() >= HISTORY {
            h.pop_front();
        }
        h.push_back(sample);
    }

    /// Sample every [`SAMPLE_EVERY`] until `stop`.
    async fn sample_until(self, stop: CancellationToken) {
        loop {
            let s = self.sample().await;
            self.record(s);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(SAMPLE_EVERY) => {}
            }
        }
    }

    /// What `GET /admin/v1/status` answers.
    pub async fn report(&self) -> Result<Report, Error> {
        let peers = self.admin.peers().await.map_err(Error::Admin)?;
        let now = unix_now();
        let store = self.client().store().clone();
        let tasks = self.tasks.clone();
        // What the publisher announces (not a scan of the index, which holds others' too).
        let listed = self.admin.publisher.list(MAX_PUBLISHED);
        let (found, own, total, recent) = tokio::task::spawn_blocking(move || {
            let found = store.find(&[], MAX_DISCOVERED, now);
            let own: Result<Vec<_>, agentnet_discovery::store::StoreError> = listed
                .into_iter()
                .map(|l| {
                    let seq = store.get(&l.did, now)?.map_or(0, |a| a.seq);
                    Ok((l, seq))
                })
                .collect();
            let total = store.len();
            let recent = tasks.recent(MAX_TASKS);
            (found, own, total, recent)
        })
        .await
        .map_err(|e| Error::Store(format!("reading the store: {e}")))?;
        let found = found.map_err(|e| Error::Store(format!("listing advertisements: {e}")))?;
        let own_adverts = own.map_err(|e| Error::Store(format!("listing advertisements: {e}")))?;
        let recent = recent.map_err(|e| Error::Store(format!("listing tasks: {e}")))?;
        let published = own_adverts
            .into_iter()
            .map(|(l, seq)| {
                let card = l.card.unwrap_or(serde_json::Value::Null);
                PublishedAgent {
                    name: text(&card["name"]),
                    tags: agentnet_discovery::advert::card_tags(&card).unwrap_or_default(),
                    announced: !card.is_null(),
                    did: l.did,
                    seq,
                    expires_at: l.expires_at,
                }
            })
            .collect();
        let usage = self.client().store().usage();
        let discovered = self.judge(found, peers.peer_id.clone(), now).await?;
        let mut history: Vec<Sample> = self
            .history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        history.push(self.sample().await);
        let connected = peers.peers.len();
        Ok(Report {
            node: Node {
                did: self.did.clone(),
                peer_id: peers.peer_id,
                version: env!("CARGO_PKG_VERSION"),
                public_url: self.public_url.clone(),
                listen: peers.listen,
                started_at: self.started_at,
                uptime_secs: self.started.elapsed().as_secs(),
            },
            connected,
            peers: peers.peers.into_iter().take(MAX_PEERS).collect(),
            stats: peers.stats,
            hosted: self.hosted.to_vec(),
            published,
            bootstrap: self.client().bootstrap_status(),
            store: StoreUse {
                bytes: usage.bytes,
                max_bytes: self.client().store().limits().max_total_bytes,
                adverts: usage.adverts,
                refused: usage.refused.store_full
                    + usage.refused.peer_quota
                    + usage.refused.did_quota
                    + usage.refused.disk_low,
                free_disk_bytes: self.client().store().free_disk_bytes(),
            },
            discovered,
            discovered_total: total.unwrap_or_default(),
            tasks: Tasks {
                total: self.tasks.len(),
                bytes: self.tasks.bytes(),
                quarantined: self.tasks.quarantined(),
                recent: recent.tasks,
                complete: recent.complete,
            },
            sample_secs: SAMPLE_EVERY.as_secs(),
            history,
        })
    }
}

impl Status {
    /// `found` as the page lists them, each with what `discover` would say of it: its level
    /// under the trust policy (or why the policy denies it), its pin, read only
    /// ([`crate::trust::pins::Pins::peek`]: the page pins nothing), and its flags.
    async fn judge(
        &self,
        found: Vec<agentnet_discovery::store::StoredAdvert>,
        own: String,
        now: u64,
    ) -> Result<Vec<Discovered>, Error> {
        let a = &self.admin;
        let (pins, rules, policy) = (a.pins.clone(), a.flags.clone(), a.trust.clone());
        let endorsements = a.endorsements.clone();
        tokio::task::spawn_blocking(move || {
            found
                .into_iter()
                .map(crate::network::directory::found)
                .map(|f| {
                    // An endorsement that counts for anything, as for a search by no skill.
                    let vouch = endorsements.as_deref().and_then(|e| {
                        e.vouch(&f.did, &[], now)
                            .map_err(|error| tracing::warn!(%error, "reading endorsements"))
                            .ok()
                            .flatten()
                    });
                    let (level, reasons, denied) = match policy.judge_with(&f.did, vouch.as_ref()) {
                        Ok(j) => (Some(j.level), j.reasons, None),
                        Err(why) => (None, Vec::new(), Some(why)),
                    };
                    Discovered {
                        name: text(&f.card["name"]),
                        description: text(&f.card["description"]),
                        own: f.peer_id == own,
                        signature_verified: true,
                        domain: f.domain,
                        domain_verified: f.domain_verified,
                        level,
                        reasons,
                        denied,
                        pin: pins.as_ref().and_then(|p| p.peek(&f.did, &f.card)),
                        flags: rules.card(&f.card),
                        did: f.did,
                        peer_id: f.peer_id,
                        seq: f.seq,
                        tags: f.tags,
                        expires_at: f.expires_at,
                    }
                })
                .collect()
        })
        .await
        .map_err(|e| Error::Store(format!("judging advertisements: {e}")))
    }
}

/// Why [`Status::report`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The network's part (peers, listen addresses) failed, as the admin API says it.
    Admin(ApiError),
    /// Reading the advert index or the task store failed.
    Store(String),
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        match self {
            Error::Admin(e) => e.into_response(),
            Error::Store(error) => {
                tracing::warn!(%error, "status report");
                let body = serde_json::json!({"error": error, "reason": "internal"});
                (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response()
            }
        }
    }
}

/// The first [`MAX_TEXT`] characters of a JSON string, or nothing.
fn text(v: &serde_json::Value) -> String {
    v.as_str()
        .map(|s| s.chars().take(MAX_TEXT).collect())
        .unwrap_or_default()
}

/// `GET /admin/v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// This node.
    pub node: Node,
    /// Peers connected.
    pub connected: usize,
    /// The first [`MAX_PEERS`] of them.
    pub peers: Vec<Peer>,
    /// The network's counters now.
    pub stats: Stats,
    /// The hosted agents.
    pub hosted: Vec<HostedAgent>,
    /// What the node publishes (hosted agents and `agentnet publish`), by DID, then the kept
    /// publications it could not announce; at most [`MAX_PUBLISHED`].
    pub published: Vec<PublishedAgent>,
    /// The bootstrap addresses and their last dial ([`net::Client::bootstrap_status`]).
    pub bootstrap: Vec<agentnet_discovery::BootstrapStatus>,
    /// The advert index's use.
    pub store: StoreUse,
    /// The newest [`MAX_DISCOVERED`] live advertisements of the index, newest first.
    pub discovered: Vec<Discovered>,
    /// Advertisements in the index, live or not yet swept.
    pub discovered_total: usize,
    /// The task store.
    pub tasks: Tasks,
    /// Seconds between two samples of `history`.
    pub sample_secs: u64,
    /// The counters over time, oldest first; the last sample is now.
    pub history: Vec<Sample>,
}

/// The node itself.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    /// Its did:key.
    pub did: String,
    /// Its libp2p PeerId.
    pub peer_id: String,
    /// The agentnet version.
    pub version: &'static str,
    /// How clients reach the public listener.
    pub public_url: String,
    /// libp2p listen addresses.
    pub listen: Vec<String>,
    /// Unix seconds.
    pub started_at: u64,
    /// Seconds since it started.
    pub uptime_secs: u64,
}

/// A hosted agent.
#[derive(Debug, Clone, Serialize)]
pub struct HostedAgent {
    /// Its id (the path segment under `/a2a/`).
    pub id: String,
    /// Its card's name.
    pub name: String,
    /// Its did:key.
    pub did: String,
    /// Its A2A URL.
    pub url: String,
    /// Whether the node publishes its card.
    pub published: bool,
    /// Whether it has an MCP endpoint.
    pub mcp: bool,
}

impl HostedAgent {
    fn of(h: &Hosted, public_url: &str) -> HostedAgent {
        HostedAgent {
            id: h.id.clone(),
            name: text(&h.card["name"]),
            did: h.key.did_key().to_string(),
            url: crate::hosted::agent_url(public_url, &h.id),
            published: h.publish,
            mcp: h.mcp.is_some(),
        }
    }
}

/// One of the node's own live advertisements.
#[derive(Debug, Clone, Serialize)]
pub struct PublishedAgent {
    /// The agent's DID.
    pub did: String,
    /// Its card's name.
    pub name: String,
    /// Sequence number.
    pub seq: u64,
    /// Skill tags.
    pub tags: Vec<String>,
    /// Unix seconds; 0 when not announced.
    pub expires_at: u64,
    /// Re-announced; false for a kept publication whose key is missing (it is announced again
    /// once the key is back in `<data-dir>/agents/` and the node restarts, or until
    /// `agentnet unpublish`).
    pub announced: bool,
}

/// The advert index's use ([`agentnet_discovery::store::Store::usage`]).
#[derive(Debug, Clone, Serialize)]
pub struct StoreUse {
    /// Bytes charged (adverts, their index and replay records).
    pub bytes: u64,
    /// The most it keeps of other nodes' adverts (`--store-max-mib`).
    pub max_bytes: u64,
    /// Adverts stored, expired ones until swept.
    pub adverts: usize,
    /// Adverts of other nodes refused for space since the node started (store full, a peer's
    /// or a DID's quota, low disk).
    pub refused: u64,
    /// Free bytes on the store's disk, if known.
    pub free_disk_bytes: Option<u64>,
}

/// An advertisement of the index.
#[derive(Debug, Clone, Serialize)]
pub struct Discovered {
    /// The agent's DID.
    pub did: String,
    /// Its card's name (a stranger's text: the page shows it as text only).
    pub name: String,
    /// Its card's description (likewise).
    pub description: String,
    /// The node that published it.
    pub peer_id: String,
    /// Published by this node.
    pub own: bool,
    /// Sequence number.
    pub seq: u64,
    /// Skill tags.
    pub tags: Vec<String>,
    /// Unix seconds.
    pub expires_at: u64,
    /// The advertisement and its card verified against the DID's key: always true, the index
    /// holds nothing else.
    pub signature_verified: bool,
    /// The domain the DID names, checked or not ([`crate::network::directory::Found::domain`]);
    /// `null` for a did:key.
    pub domain: Option<String>,
    /// Whether a domain vouched for the key ([`crate::network::directory::Found::domain_verified`]):
    /// false for a did:key, which names none.
    pub domain_verified: bool,
    /// Its level under the node's trust policy ([`crate::trust`]); `null` when it denies it.
    pub level: Option<crate::trust::Level>,
    /// Why it has that level, a sentence each.
    pub reasons: Vec<String>,
    /// Why the policy denies it (`discover` does not return it), if it does.
    pub denied: Option<String>,
    /// Its card against the one accepted ([`crate::trust::pins`]), read only: `null` when nothing is
    /// pinned for it yet (`discover` pins a card when it first shows it).
    pub pin: Option<crate::trust::pins::PinState>,
    /// Red flags in its card's text and URLs ([`crate::trust::flags`]).
    pub flags: Vec<crate::trust::flags::Flag>,
}

/// The task store.
#[derive(Debug, Clone, Serialize)]
pub struct Tasks {
    /// Tasks stored.
    pub total: u64,
    /// Bytes of their records.
    pub bytes: u64,
    /// Unreadable records set aside, ever.
    pub quarantined: u64,
    /// The newest [`MAX_TASKS`].
    pub recent: Vec<RecentTask>,
    /// Whether every task was looked at for `recent` ([`crate::hosted::tasks::Recent::complete`]).
    pub complete: bool,
}

/// The counters at one time; all since the node started but `peers` and `tasks`.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Unix seconds.
    pub t: u64,
    /// Gossip messages received, duplicates included.
    pub gossip_received: u64,
    /// The same, duplicates removed.
    pub gossip_unique: u64,
    /// Advertisements accepted by validation.
    pub accepted: u64,
    /// Duplicates and stale ones.
    pub ignored: u64,
    /// Refused by validation.
    pub rejected: u64,
    /// Dropped by rate limits before validation.
    pub throttled: u64,
    /// Peers connected.
    pub peers: usize,
    /// Tasks stored.
    pub tasks: u64,
}

/// `GET /status`, `/status.css`, `/status.js`: the page, without a token (it holds none and
/// shows nothing until the admin API accepts the token). Mount it outside the admin guard,
/// merged before the admin router (`page().merge(admin)`) so that the admin router's guarded
/// fallback stays the one of unknown paths.
pub fn page() -> Router {
    Router::new()
        .route(
            PATH,
            get(|c: Remote| asset(c, HTML, "text/html; charset=utf-8")),
        )
        .route(
            "/status.css",
            get(|c: Remote| asset(c, CSS, "text/css; charset=utf-8")),
        )
        .route(
            "/status.js",
            get(|c: Remote| asset(c, JS, "text/javascript; charset=utf-8")),
        )
}

/// `GET /admin/v1/status`, to mount behind the admin guard ([`crate::admin::router_with`]),
/// and the sampling task behind its history, which ends with `stop`.
pub fn api(status: Status, stop: CancellationToken) -> Router {
    tokio::spawn(status.clone().sample_until(stop));
    Router::new()
        .route(API_PATH, get(report))
        .with_state(status)
}

async fn report(State(status): State<Status>) -> Result<Json<Report>, Error> {
    Ok(Json(status.report().await?))
}

type Remote = ConnectInfo<SocketAddr>;

async fn asset(
    ConnectInfo(remote): Remote,
    body: &'static str,
    content_type: &'static str,
) -> Response {
    // The admin listener binds loopback only; this holds if it ever did not.
    if !remote.ip().is_loopback() {
        return StatusCode::FORBIDDEN.into_response();
    }
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
