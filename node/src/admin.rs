//! The local admin API (`/admin/v1/…`) the `publish`, `discover` and `peers` commands use, and
//! its client.
//!
//! The API has no authentication yet: it answers only clients on a loopback address, with a
//! loopback `Host` header and no foreign `Origin` (so that a web page cannot reach it through
//! the browser), and the daemon binds it only where `--http` says. Anyone who can open a
//! loopback connection on this machine can publish through the node.
//!
//! | route | body / query | answer |
//! |---|---|---|
//! | `POST /admin/v1/publish` | [`PublishRequest`] | [`Published`] |
//! | `GET /admin/v1/discover?skill=a&skill=b&limit=N` | | `[`[`Found`]`]` |
//! | `GET /admin/v1/peers` | | [`Peers`] |
//! | `POST /admin/v1/adverts` | a signed advertisement | [`Published`] |
//! | `GET /admin/v1/adverts/{did}` | | the stored advertisement, as received |
//! | `GET /admin/v1/metrics` | | libp2p metrics (gossipsub, bandwidth) in the Prometheus text format |
//!
//! Errors are [`ApiError`] bodies: `{"error": "...", "reason": "..."}`, where `reason` is the
//! validator's short reason (`stale_seq`, `bad_card`, …) when it refused an advertisement.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use agentnet_did::key::Jwk;
use agentnet_did::SecretKey;
use agentnet_discovery::advert::Advertisement;
use agentnet_discovery::net::{self, unix_now};
use agentnet_discovery::store::StoredAdvert;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path as UrlPath, RawQuery, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::publisher::{PublishError, Published, Publisher};

/// Default lifetime of a publication, seconds.
pub const DEFAULT_TTL: u64 = 3600;
/// Default and largest `limit` of a discovery.
pub const DEFAULT_LIMIT: usize = 20;
/// Largest `limit` of a discovery.
pub const MAX_LIMIT: usize = 100;
/// Largest admin request body.
pub const MAX_BODY: usize = 256 * 1024;
/// Largest admin response the client reads.
pub const MAX_RESPONSE: usize = 8 * 1024 * 1024;

/// `POST /admin/v1/publish`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// The A2A Agent Card, signed or not.
    pub card: Value,
    /// Lifetime of each advertisement, seconds; re-announced at 2/3 of it.
    #[serde(default = "default_ttl")]
    pub ttl_secs: u64,
    /// The agent's private Ed25519 JWK; default: the node's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Jwk>,
}

fn default_ttl() -> u64 {
    DEFAULT_TTL
}

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
    /// Unix seconds.
    pub expires_at: u64,
    /// The signed Agent Card.
    pub card: Value,
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
    /// Gossip copies and bytes since the node started.
    #[serde(default)]
    pub traffic: net::Traffic,
    /// Connections closed by the connection manager.
    #[serde(default)]
    pub connections_trimmed: u64,
}

/// A connected peer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Peer {
    /// Its PeerId.
    pub peer_id: String,
    /// Addresses it listens on, as it told us.
    pub addrs: Vec<String>,
}

/// `GET /admin/v1/peers`.
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

/// An error answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiError {
    /// What went wrong, for people.
    pub error: String,
    /// Short machine reason (validator reasons, `not_found`, `bad_request`, …).
    pub reason: String,
    #[serde(skip)]
    status: u16,
}

impl ApiError {
    fn new(status: StatusCode, reason: &str, error: impl Into<String>) -> Self {
        Self {
            error: error.into(),
            reason: reason.into(),
            status: status.as_u16(),
        }
    }

    fn bad_request(error: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self)).into_response()
    }
}

impl From<PublishError> for ApiError {
    fn from(e: PublishError) -> Self {
        if let Some(r) = e.reject() {
            let status = if r.penalize() {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::CONFLICT
            };
            return Self::new(status, r.reason(), e.to_string());
        }
        match &e {
            PublishError::Card(_) => Self::new(StatusCode::BAD_REQUEST, "bad_card", e.to_string()),
            PublishError::Ttl { .. } => Self::bad_request(e.to_string()),
            PublishError::TooMany => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many", e.to_string())
            }
            _ => from_net_context(e.to_string()),
        }
    }
}

fn from_net(e: net::Error) -> ApiError {
    match &e {
        net::Error::Rejected(r) => {
            let status = if r.penalize() {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::CONFLICT
            };
            ApiError::new(status, r.reason(), e.to_string())
        }
        _ => from_net_context(e.to_string()),
    }
}

fn from_net_context(error: String) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", error)
}

/// What the admin handlers share.
#[derive(Clone)]
pub struct AdminState {
    /// The network.
    pub client: net::Client,
    /// Publications.
    pub publisher: Arc<Publisher>,
    /// The node's key seed (the default publishing key).
    pub node_seed: Arc<[u8; 32]>,
}

/// The `/admin/v1` routes, loopback clients only.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/admin/v1/publish", post(publish))
        .route("/admin/v1/discover", get(discover))
        .route("/admin/v1/peers", get(peers))
        .route("/admin/v1/adverts", post(import))
        .route("/admin/v1/adverts/{did}", get(advert))
        .route("/admin/v1/metrics", get(metrics))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(local_only))
        .with_state(state)
}

/// Refuse anything that does not come from this machine: the peer address must be loopback,
/// the `Host` a loopback name, and an `Origin` (sent by browsers) absent or loopback too.
async fn local_only(
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if !remote.ip().is_loopback() {
        tracing::warn!(%remote, "refused admin request from a non-loopback address");
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the admin API answers loopback clients only",
        )
        .into_response();
    }
    let headers = req.headers();
    let host_ok = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(is_loopback_authority);
    let origin_ok = headers
        .get(header::ORIGIN)
        .map(|o| {
            o.to_str()
                .ok()
                .and_then(|o| url::Url::parse(o).ok())
                .and_then(|u| u.host_str().map(is_loopback_host))
                .unwrap_or(false)
        })
        .unwrap_or(true);
    if !host_ok || !origin_ok {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the admin API answers requests for a loopback host only",
        )
        .into_response();
    }
    next.run(req).await
}

fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn is_loopback_authority(authority: &str) -> bool {
    let host = match authority.rsplit_once(':') {
        // `[::1]:7878`, `127.0.0.1:7878`, `localhost:7878`; a bare IPv6 literal has no port.
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => authority,
    };
    is_loopback_host(host)
}

async fn publish(
    State(state): State<AdminState>,
    body: Result<Json<PublishRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Published>, ApiError> {
    let Json(req) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let key = match &req.key {
        Some(jwk) => {
            SecretKey::from_jwk(jwk).map_err(|e| ApiError::bad_request(format!("key: {e}")))?
        }
        None => SecretKey::from_seed(&state.node_seed),
    };
    let published = state
        .publisher
        .publish(&req.card, key, req.ttl_secs)
        .await?;
    Ok(Json(published))
}

/// Parse `skill=a&skill=b&limit=N` (repeated keys, which serde's query parsing does not do).
fn parse_discover_query(query: &str) -> Result<(Vec<String>, usize), ApiError> {
    let mut skills = Vec::new();
    let mut limit = DEFAULT_LIMIT;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "skill" => {
                if skills.len() >= agentnet_discovery::tags::MAX_TAGS {
                    return Err(ApiError::bad_request("too many skills"));
                }
                skills.push(v.into_owned());
            }
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("limit must be 1..={MAX_LIMIT}, got {v:?}"))
                    })?;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown parameter {other:?}"
                )))
            }
        }
    }
    if skills.is_empty() {
        return Err(ApiError::bad_request("give at least one skill"));
    }
    Ok((skills, limit))
}

fn found(a: StoredAdvert) -> Found {
    let card = serde_json::from_slice::<Advertisement>(&a.bytes)
        .map(|ad| ad.card)
        .unwrap_or(Value::Null);
    Found {
        did: a.did,
        seq: a.seq,
        tags: a.tags,
        peer_id: a.peer_id,
        expires_at: a.expires_at,
        card,
    }
}

async fn discover(
    State(state): State<AdminState>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<Found>>, ApiError> {
    let (skills, limit) = parse_discover_query(query.as_deref().unwrap_or_default())?;
    let found_ = state
        .client
        .discover(&skills, limit)
        .await
        .map_err(from_net)?;
    Ok(Json(found_.into_iter().map(found).collect()))
}

async fn peers(State(state): State<AdminState>) -> Result<Json<Peers>, ApiError> {
    let c = &state.client;
    let peers = c.peers().await.map_err(from_net)?;
    let listen = c.listen_addrs().await.map_err(from_net)?;
    let s = c.stats();
    let rejected_by_reason = s
        .rejected
        .lock()
        .map(|m| m.iter().map(|(k, v)| (k.to_string(), *v)).collect())
        .unwrap_or_default();
    Ok(Json(Peers {
        peer_id: c.peer_id().to_string(),
        listen: listen.iter().map(|a| a.to_string()).collect(),
        peers: peers
            .into_iter()
            .map(|p| Peer {
                peer_id: p.peer_id,
                addrs: p.addrs,
            })
            .collect(),
        stats: Stats {
            accepted: s.accepted.load(Ordering::Relaxed),
            ignored: s.ignored.load(Ordering::Relaxed),
            rejected_by_reason,
            throttled: s.throttled.load(Ordering::Relaxed),
            traffic: c.traffic(),
            connections_trimmed: s.trimmed.load(Ordering::Relaxed),
        },
    }))
}

async fn metrics(State(state): State<AdminState>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.client.metrics_text(),
    )
        .into_response()
}

/// Validate, store and announce an advertisement signed elsewhere.
async fn import(State(state): State<AdminState>, body: Bytes) -> Result<Json<Published>, ApiError> {
    let v = state
        .client
        .publish(body.to_vec())
        .await
        .map_err(from_net)?;
    Ok(Json(Published {
        did: v.did,
        seq: v.seq,
        tags: v.tags,
        expires_at: v.expires_at,
    }))
}

async fn advert(
    State(state): State<AdminState>,
    UrlPath(did): UrlPath<String>,
) -> Result<Response, ApiError> {
    let store = state.client.store().clone();
    let d = did.clone();
    let stored = tokio::task::spawn_blocking(move || store.get(&d, unix_now()))
        .await
        .map_err(|e| from_net_context(format!("store task failed: {e}")))?
        .map_err(|e| ApiError::bad_request(format!("{did}: {e}")))?;
    match stored {
        Some(a) => Ok(([(header::CONTENT_TYPE, "application/json")], a.bytes).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no live advertisement of {did}"),
        )),
    }
}

/// Why an admin call failed, as the commands report it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Nothing answers where the node should be.
    #[error("no running node found at {0}: start one with `agentnet up`")]
    NotRunning(String),
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
    /// Transport trouble other than "nothing listens", or an answer we cannot read.
    #[error("talking to the node at {url}: {detail}")]
    Http {
        /// The node's URL.
        url: String,
        /// What happened.
        detail: String,
    },
}

/// A client of a running node's admin API.
#[derive(Debug, Clone)]
pub struct Client {
    base: url::Url,
    http: reqwest::Client,
}

impl Client {
    /// A client of the node at `base` (`http://127.0.0.1:7878`).
    pub fn new(base: &str, timeout: Duration) -> Result<Self, ClientError> {
        let http_err = |detail: String| ClientError::Http {
            url: base.to_owned(),
            detail,
        };
        let base = url::Url::parse(base).map_err(|e| http_err(format!("bad URL: {e}")))?;
        if base.scheme() != "http" && base.scheme() != "https" {
            return Err(http_err("the node URL must be http or https".into()));
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(5))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| http_err(e.to_string()))?;
        Ok(Self { base, http })
    }

    /// The client of the node recorded in `<data-dir>/node.json`.
    pub fn from_data_dir(dir: &Path, timeout: Duration) -> Result<Self, ClientError> {
        let not_running = || ClientError::NotRunning(dir.display().to_string());
        let info = crate::daemon::NodeFile::read(dir).map_err(|_| not_running())?;
        Self::new(&format!("http://{}", info.http), timeout)
    }

    /// The node's URL.
    pub fn base(&self) -> &url::Url {
        &self.base
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let url = self.base.to_string();
        let mut resp = req.send().await.map_err(|e| {
            if e.is_connect() {
                ClientError::NotRunning(url.clone())
            } else {
                ClientError::Http {
                    url: url.clone(),
                    detail: e.to_string(),
                }
            }
        })?;
        let status = resp.status();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| ClientError::Http {
            url: url.clone(),
            detail: format!("reading the answer: {e}"),
        })? {
            if body.len() + chunk.len() > MAX_RESPONSE {
                return Err(ClientError::Http {
                    url,
                    detail: format!("answer larger than {MAX_RESPONSE} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let (reason, error) = match serde_json::from_slice::<ApiError>(&body) {
                Ok(e) => (e.reason, e.error),
                Err(_) => (
                    String::new(),
                    format!(
                        "HTTP {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(200)])
                    ),
                ),
            };
            return Err(ClientError::Refused {
                status: status.as_u16(),
                reason,
                error,
            });
        }
        serde_json::from_slice(&body).map_err(|e| ClientError::Http {
            url,
            detail: format!("unreadable answer: {e}"),
        })
    }

    fn url(&self, path: &str) -> url::Url {
        let mut u = self.base.clone();
        u.set_path(path);
        u
    }

    /// `POST /admin/v1/publish`.
    pub async fn publish(&self, req: &PublishRequest) -> Result<Published, ClientError> {
        self.send(self.http.post(self.url("/admin/v1/publish")).json(req))
            .await
    }

    /// `GET /admin/v1/discover`.
    pub async fn discover(
        &self,
        skills: &[String],
        limit: usize,
    ) -> Result<Vec<Found>, ClientError> {
        let mut u = self.url("/admin/v1/discover");
        {
            let mut q = u.query_pairs_mut();
            for s in skills {
                q.append_pair("skill", s);
            }
            q.append_pair("limit", &limit.to_string());
        }
        self.send(self.http.get(u)).await
    }

    /// `GET /admin/v1/peers`.
    pub async fn peers(&self) -> Result<Peers, ClientError> {
        self.send(self.http.get(self.url("/admin/v1/peers"))).await
    }

    /// `GET /admin/v1/adverts/{did}`: the node's stored advertisement of `did`, or `None` if it
    /// has no live one.
    pub async fn advert(&self, did: &str) -> Result<Option<Value>, ClientError> {
        let mut u = self.url("/admin/v1/adverts/");
        u.path_segments_mut()
            .map_err(|()| ClientError::Http {
                url: self.base.to_string(),
                detail: "the node URL cannot take a path".into(),
            })?
            .pop_if_empty()
            .push(did);
        match self.send(self.http.get(u)).await {
            Ok(v) => Ok(Some(v)),
            Err(ClientError::Refused { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Check the `Host`/`Origin` rules without a server.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_authorities() {
        for ok in [
            "127.0.0.1:7878",
            "localhost",
            "LOCALHOST:1",
            "[::1]:80",
            "[::1]",
            "127.9.9.9",
        ] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "example.com",
            "evil.localhost.example:80",
            "10.0.0.1:7878",
            "[::2]:1",
            "",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }

    #[test]
    fn discover_query() {
        let (s, l) = parse_discover_query("skill=a&skill=b%20c&limit=5").unwrap();
        assert_eq!(s, ["a", "b c"]);
        assert_eq!(l, 5);
        assert!(parse_discover_query("limit=5").is_err());
        assert!(parse_discover_query("skill=a&limit=0").is_err());
        assert!(parse_discover_query("skill=a&limit=101").is_err());
        assert!(parse_discover_query("skill=a&x=1").is_err());
    }
}
