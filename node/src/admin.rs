//! The local admin API (`/admin/v1/…`) the `publish`, `discover` and `peers` commands use, and
//! its client.
//!
//! It has a listener of its own (`--admin`, loopback only, see [`crate::daemon`]) and every
//! route requires the credential from the data directory ([`crate::auth`]): `Authorization:
//! Bearer <token>` with the token of `<data-dir>/admin.token`. In order, a request is refused
//! - `403 forbidden` if the peer address is not loopback, the `Host` is not a loopback name
//!   (DNS rebinding), or an `Origin` is present and is not exactly the admin listener's own
//!   origin (a web page);
//! - `401 unauthorized` without the right token (compared in constant time);
//! - `415 unsupported_media_type` if it has a body (any method but `GET`/`HEAD`) whose
//!   `Content-Type` is not `application/json`: a browser's "simple" cross-site `text/plain` POST
//!   never reaches a handler.
//!
//! Private keys never travel over HTTP: `agentnet publish --key` installs the agent's key into
//! `<data-dir>/agents/` ([`AgentKeys`]) and the request names the agent's DID.
//!
//! | route | body / query | answer |
//! |---|---|---|
//! | `POST /admin/v1/publish` | [`PublishRequest`] | [`Published`] |
//! | `GET /admin/v1/discover?skill=a&skill=b&limit=N` | | `[`[`Found`]`]` |
//! | `GET /admin/v1/peers` | | [`Peers`] |
//! | `POST /admin/v1/adverts` | a signed advertisement | [`Published`] |
//! | `GET /admin/v1/adverts/{did}` | | the stored advertisement, as received |
//! | `GET /admin/v1/metrics` | | libp2p metrics (gossipsub, bandwidth) and the node's own counters (`agentnet_*`) in the Prometheus text format |
//!
//! Errors are [`ApiError`] bodies: `{"error": "...", "reason": "..."}`, where `reason` is the
//! validator's short reason (`stale_seq`, `bad_card`, …) when it refused an advertisement, and
//! otherwise one of `bad_request` (400: bad input), `unknown_agent` (400: no key for that DID),
//! `unauthorized` (401), `forbidden` (403), `not_found` (404), `unsupported_media_type` (415),
//! `too_many` (429), `internal` (500: the node's own failure) or `unavailable` (503: the network
//! is stopped or unreachable).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentnet_did::SecretKey;
use agentnet_discovery::net::{self, unix_now};
use agentnet_discovery::store::{StoreError, StoredAdvert};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path as UrlPath, RawQuery, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::Token;
use crate::data_dir::{AgentKeyError, AgentKeys};
use crate::directory::{
    self, check_tags, AgentSummary, BoxFuture, Directory, Peer, Stats, TagError,
};
use crate::publisher::{PublishError, Published, Publisher};

pub use crate::directory::{Error as ClientError, Found, Peers, DEFAULT_LIMIT, MAX_LIMIT};

/// Default lifetime of a publication, seconds.
pub const DEFAULT_TTL: u64 = 3600;
/// Largest admin request body.
pub const MAX_BODY: usize = 256 * 1024;
/// Largest admin response the client reads.
pub const MAX_RESPONSE: usize = 8 * 1024 * 1024;

/// `POST /admin/v1/publish`. Unknown members are refused, a private `key` included.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// The A2A Agent Card, signed or not.
    pub card: Value,
    /// Lifetime of each advertisement, seconds; re-announced at 2/3 of it.
    #[serde(default = "default_ttl")]
    pub ttl_secs: u64,
    /// The agent's did:key, whose private key is installed in `<data-dir>/agents/`; default:
    /// the node's own DID and key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub did: Option<String>,
}

fn default_ttl() -> u64 {
    DEFAULT_TTL
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
    /// The HTTP status it is answered with.
    pub fn status(&self) -> u16 {
        self.status
    }

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

    fn internal(error: impl std::fmt::Display) -> Self {
        tracing::warn!(%error, "admin request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            error.to_string(),
        )
    }

    fn forbidden(error: &str) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", error)
    }

    fn rejected(r: &agentnet_discovery::advert::Reject, error: String) -> Self {
        let status = if r.penalize() {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::CONFLICT
        };
        Self::new(status, r.reason(), error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (status, Json(self)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

impl From<PublishError> for ApiError {
    fn from(e: PublishError) -> Self {
        if let Some(r) = e.reject() {
            return Self::rejected(r, e.to_string());
        }
        match &e {
            PublishError::Card(_) => Self::new(StatusCode::BAD_REQUEST, "bad_card", e.to_string()),
            PublishError::Ttl { .. } => Self::bad_request(e.to_string()),
            PublishError::TooMany => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many", e.to_string())
            }
            PublishError::Seq {
                source: StoreError::InvalidInput { .. },
                ..
            } => Self::bad_request(e.to_string()),
            PublishError::Net { source, .. } => from_net_kind(source, e.to_string()),
            _ => Self::internal(&e),
        }
    }
}

impl From<TagError> for ApiError {
    fn from(e: TagError) -> Self {
        Self::bad_request(e.to_string())
    }
}

impl From<AgentKeyError> for ApiError {
    fn from(e: AgentKeyError) -> Self {
        match &e {
            AgentKeyError::NotDidKey(_) | AgentKeyError::Identity { .. } => {
                Self::bad_request(e.to_string())
            }
            AgentKeyError::Unknown { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "unknown_agent", e.to_string())
            }
            _ => Self::internal(&e),
        }
    }
}

/// The status of a network-layer failure: the validator's refusal is the caller's, a stopped
/// or unreachable network is 503, a store failure is ours.
fn from_net_kind(e: &net::Error, error: String) -> ApiError {
    match e {
        net::Error::Rejected(r) => ApiError::rejected(r, error),
        net::Error::Stopped | net::Error::Network(_) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", error)
        }
        _ => ApiError::internal(error),
    }
}

fn from_net(e: net::Error) -> ApiError {
    from_net_kind(&e, e.to_string())
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
    /// The agents' keys in the data directory.
    pub agent_keys: AgentKeys,
}

/// Who may call: the token, and the admin listener's own origin (`http://127.0.0.1:PORT`).
#[derive(Clone, Debug)]
pub struct Guard {
    /// The credential.
    pub token: Token,
    /// The only `Origin` accepted when one is sent.
    pub origin: String,
}

impl Guard {
    /// The guard of an admin listener bound at `addr`.
    pub fn new(token: Token, addr: SocketAddr) -> Self {
        Self {
            token,
            origin: format!("http://{addr}"),
        }
    }
}

/// The `/admin/v1` routes, behind [`Guard`]. Other routers merged beside it (`/mcp`,
/// [`crate::mcp::http::router`]) guard themselves; paths no router has are refused by this
/// guard the same way, so that an unauthenticated caller learns nothing about the routes.
pub fn router(state: AdminState, guard: Guard) -> Router {
    Router::new()
        .route("/admin/v1/publish", post(publish))
        .route("/admin/v1/discover", get(discover))
        .route("/admin/v1/peers", get(peers))
        .route("/admin/v1/adverts", post(import))
        .route("/admin/v1/adverts/{did}", get(advert))
        .route("/admin/v1/metrics", get(metrics))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        // A fallback of its own (axum's answer, a bare 404), so that it stays behind the guard
        // whatever is merged beside it.
        .fallback(|| async { StatusCode::NOT_FOUND })
        .with_state(state)
        .layer(middleware::from_fn_with_state(guard, check))
}

/// The checks of the module documentation, in that order.
async fn check(
    State(guard): State<Guard>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if let Err(e) = guard.admit(remote, &req) {
        return e.into_response();
    }
    next.run(req).await
}

impl Guard {
    fn admit(&self, remote: SocketAddr, req: &Request) -> Result<(), ApiError> {
        if !remote.ip().is_loopback() {
            tracing::warn!(%remote, "refused admin request from a non-loopback address");
            return Err(ApiError::forbidden(
                "the admin API answers loopback clients only",
            ));
        }
        let headers = req.headers();
        let host_ok = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .is_some_and(is_loopback_authority);
        if !host_ok {
            return Err(ApiError::forbidden(
                "the admin API answers requests for a loopback host only",
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            if origin.as_bytes() != self.origin.as_bytes() {
                tracing::warn!(?origin, "refused admin request from a web origin");
                return Err(ApiError::forbidden(
                    "the admin API does not answer web pages of other origins",
                ));
            }
        }
        let authorized = headers
            .get(header::AUTHORIZATION)
            .is_some_and(|h| self.token.accepts(h.as_bytes()));
        if !authorized {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the admin API needs `Authorization: Bearer <token>` with the token in the node's admin.token",
            ));
        }
        if req.method() != Method::GET && req.method() != Method::HEAD && !is_json(req) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the admin API takes request bodies as Content-Type: application/json only",
            ));
        }
        Ok(())
    }
}

/// `Content-Type: application/json`, parameters (`; charset=utf-8`) allowed.
fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
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
    let node_key = SecretKey::from_seed(&state.node_seed);
    let id = match req.did {
        Some(did) if did != node_key.did_key().as_str() => {
            let keys = state.agent_keys.clone();
            tokio::task::spawn_blocking(move || keys.load_identity(&did))
                .await
                .map_err(ApiError::internal)??
        }
        _ => crate::identity::Identity::did_key(node_key),
    };
    let published = state.publisher.publish(&req.card, id, req.ttl_secs).await?;
    Ok(Json(published))
}

/// Parse `skill=a&skill=b&limit=N` (repeated keys, which serde's query parsing does not do).
fn parse_discover_query(query: &str) -> Result<(Vec<String>, usize), ApiError> {
    let mut skills = Vec::new();
    let mut limit = DEFAULT_LIMIT;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "skill" => skills.push(v.into_owned()),
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
    check_tags(&skills, directory::MAX_TAGS)?;
    Ok((skills, limit))
}

async fn discover(
    State(state): State<AdminState>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<Found>>, ApiError> {
    let (skills, limit) = parse_discover_query(query.as_deref().unwrap_or_default())?;
    Ok(Json(state.discover(&skills, limit).await?))
}

async fn peers(State(state): State<AdminState>) -> Result<Json<Peers>, ApiError> {
    Ok(Json(state.peers().await?))
}

impl AdminState {
    /// What `GET /admin/v1/discover` answers, for `skills` already checked
    /// ([`check_tags`]).
    pub async fn discover(&self, skills: &[String], limit: usize) -> Result<Vec<Found>, ApiError> {
        Ok(self
            .stored(skills, limit)
            .await?
            .into_iter()
            .map(directory::found)
            .collect())
    }

    /// The stored advertisements [`AdminState::discover`] answers with.
    async fn stored(&self, skills: &[String], limit: usize) -> Result<Vec<StoredAdvert>, ApiError> {
        self.client
            .discover(skills, limit.clamp(1, MAX_LIMIT))
            .await
            .map_err(from_net)
    }

    /// What `GET /admin/v1/peers` answers.
    pub async fn peers(&self) -> Result<Peers, ApiError> {
        let c = &self.client;
        let peers = c.peers().await.map_err(from_net)?;
        let listen = c.listen_addrs().await.map_err(from_net)?;
        let s = c.stats();
        let rejected_by_reason = s
            .rejected
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.to_string(), *v)).collect())
            .unwrap_or_default();
        Ok(Peers {
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
                accepted: s.accepted.get(),
                ignored: s.ignored.get(),
                rejected_by_reason,
                throttled: s.throttled.get(),
                traffic: c.traffic(),
                connections_trimmed: s.trimmed.get(),
            },
        })
    }

    /// The stored advertisement of `did` as received, or `None` without a live one.
    pub async fn advert_bytes(&self, did: &str) -> Result<Option<Vec<u8>>, ApiError> {
        let store = self.client.store().clone();
        let d = did.to_owned();
        let stored = tokio::task::spawn_blocking(move || store.get(&d, unix_now()))
            .await
            .map_err(ApiError::internal)?
            .map_err(|e| match e {
                StoreError::InvalidInput { .. } => ApiError::bad_request(e.to_string()),
                e => ApiError::internal(e),
            })?;
        Ok(stored.map(|a| a.bytes))
    }
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
    match state.advert_bytes(&did).await? {
        Some(bytes) => Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no live advertisement of {did}"),
        )),
    }
}

impl From<ApiError> for ClientError {
    /// The in-process answer as the HTTP client would have reported it.
    fn from(e: ApiError) -> Self {
        ClientError::Refused {
            status: e.status,
            reason: e.reason,
            error: e.error,
        }
    }
}

impl Directory for Client {
    fn discover<'a>(
        &'a self,
        skills: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Found>, ClientError>> {
        Box::pin(Client::discover(self, skills, limit))
    }
    fn advert<'a>(&'a self, did: &'a str) -> BoxFuture<'a, Result<Option<Value>, ClientError>> {
        Box::pin(Client::advert(self, did))
    }
    fn peers(&self) -> BoxFuture<'_, Result<Peers, ClientError>> {
        Box::pin(Client::peers(self))
    }
}

impl Directory for AdminState {
    fn discover<'a>(
        &'a self,
        skills: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Found>, ClientError>> {
        Box::pin(async move {
            check_tags(skills, directory::MAX_TAGS).map_err(ApiError::from)?;
            Ok(AdminState::discover(self, skills, limit).await?)
        })
    }
    /// Summarized from the stored advertisements' bytes, without building their cards as
    /// JSON values (`directory::summarize`).
    fn summaries<'a>(
        &'a self,
        skills: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<AgentSummary>, ClientError>> {
        Box::pin(async move {
            check_tags(skills, directory::MAX_TAGS).map_err(ApiError::from)?;
            let stored = self.stored(skills, limit).await?;
            Ok(stored.into_iter().map(directory::summarize).collect())
        })
    }
    fn advert<'a>(&'a self, did: &'a str) -> BoxFuture<'a, Result<Option<Value>, ClientError>> {
        Box::pin(async move {
            match self.advert_bytes(did).await? {
                None => Ok(None),
                Some(b) => {
                    serde_json::from_slice(&b)
                        .map(Some)
                        .map_err(|source| ClientError::Unreadable {
                            url: "the node's store".into(),
                            source,
                        })
                }
            }
        })
    }
    fn peers(&self) -> BoxFuture<'_, Result<Peers, ClientError>> {
        Box::pin(async move { Ok(AdminState::peers(self).await?) })
    }
}

/// A client of a running node's admin API.
#[derive(Debug, Clone)]
pub struct Client {
    base: url::Url,
    http: reqwest::Client,
    token: Token,
}

impl Client {
    /// A client of the admin API at `base` (`http://127.0.0.1:PORT`) with credential `token`.
    pub fn new(base: &str, token: Token, timeout: Duration) -> Result<Self, ClientError> {
        let bad = |reason: String| ClientError::BadUrl {
            url: base.to_owned(),
            reason,
        };
        let base = url::Url::parse(base).map_err(|e| bad(format!("is not a URL: {e}")))?;
        if base.scheme() != "http" && base.scheme() != "https" {
            return Err(bad("must be http or https".into()));
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(5))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|source| ClientError::Transport {
                url: base.to_string(),
                source,
            })?;
        Ok(Self { base, http, token })
    }

    /// The client of the node recorded in `<data-dir>/node.json`, with the token of
    /// `<data-dir>/admin.token`.
    pub fn from_data_dir(dir: &Path, timeout: Duration) -> Result<Self, ClientError> {
        let not_running = || ClientError::NotRunning(dir.display().to_string());
        let info = crate::data_dir::NodeFile::read(dir).map_err(|_| not_running())?;
        let token = Token::read(dir)?;
        Self::new(&format!("http://{}", info.admin), token, timeout)
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
        let transport = |source: reqwest::Error| ClientError::Transport {
            url: url.clone(),
            source,
        };
        let mut resp = req
            .bearer_auth(self.token.as_str())
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    ClientError::NotRunning(url.clone())
                } else {
                    transport(e)
                }
            })?;
        let status = resp.status();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(transport)? {
            if body.len() + chunk.len() > MAX_RESPONSE {
                return Err(ClientError::TooLarge {
                    url,
                    limit: MAX_RESPONSE,
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
        serde_json::from_slice(&body).map_err(|source| ClientError::Unreadable { url, source })
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
            .map_err(|()| ClientError::BadUrl {
                url: self.base.to_string(),
                reason: "cannot take a path".into(),
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

/// The guard's rules and the query parsing, without a server.
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

    fn guard() -> (Guard, String) {
        let dir = tempfile::tempdir().unwrap();
        let token = Token::create(dir.path()).unwrap();
        let bearer = format!("Bearer {}", token.as_str());
        (Guard::new(token, "127.0.0.1:7879".parse().unwrap()), bearer)
    }

    fn req(method: &str, headers: &[(&str, &str)]) -> Request {
        let mut b = axum::http::Request::builder()
            .method(method)
            .uri("/admin/v1/publish");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(axum::body::Body::empty()).unwrap()
    }

    fn status(r: Result<(), ApiError>) -> u16 {
        r.map(|()| 200).unwrap_or_else(|e| e.status)
    }

    #[test]
    fn guard_refuses_missing_wrong_and_cross_site() {
        let (g, bearer) = guard();
        let local: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        let host = ("Host", "127.0.0.1:7879");
        let auth = ("Authorization", bearer.as_str());
        let json = ("Content-Type", "application/json");
        // The CLI's request.
        assert_eq!(
            status(g.admit(local, &req("POST", &[host, auth, json]))),
            200
        );
        assert_eq!(status(g.admit(local, &req("GET", &[host, auth]))), 200);
        // No or wrong credentials.
        assert_eq!(status(g.admit(local, &req("GET", &[host]))), 401);
        for wrong in [
            "Bearer ",
            "Bearer AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "Basic dXNlcjpwYXNz",
            &bearer[7..],
        ] {
            let r = req("GET", &[host, ("Authorization", wrong)]);
            assert_eq!(status(g.admit(local, &r)), 401, "{wrong}");
        }
        // A web page's "simple" cross-site POST: text/plain, its own Origin. Refused for the
        // Origin even if it somehow had the token, and for the media type even without Origin.
        let page = ("Origin", "http://localhost:3000");
        let text = ("Content-Type", "text/plain");
        assert_eq!(
            status(g.admit(local, &req("POST", &[host, page, text]))),
            403
        );
        assert_eq!(
            status(g.admit(local, &req("POST", &[host, auth, page, text]))),
            403
        );
        assert_eq!(
            status(g.admit(local, &req("POST", &[host, auth, text]))),
            415
        );
        assert_eq!(status(g.admit(local, &req("POST", &[host, auth]))), 415);
        assert_eq!(
            status(g.admit(
                local,
                &req(
                    "POST",
                    &[
                        host,
                        auth,
                        ("Content-Type", "application/json; charset=utf-8")
                    ]
                )
            )),
            200
        );
        // Only the listener's own origin passes.
        let own = ("Origin", "http://127.0.0.1:7879");
        assert_eq!(
            status(g.admit(local, &req("POST", &[host, auth, own, json]))),
            200
        );
        let null = ("Origin", "null");
        assert_eq!(
            status(g.admit(local, &req("GET", &[host, auth, null]))),
            403
        );
        // DNS rebinding and remote peers.
        let evil = ("Host", "attacker.example");
        assert_eq!(status(g.admit(local, &req("GET", &[evil, auth]))), 403);
        let remote: SocketAddr = "192.0.2.7:50000".parse().unwrap();
        assert_eq!(status(g.admit(remote, &req("GET", &[host, auth]))), 403);
    }

    #[test]
    fn publish_requests_carry_no_private_key() {
        let with_key = serde_json::json!({
            "card": {}, "key": {"kty": "OKP", "crv": "Ed25519", "x": "a", "d": "b"}
        });
        let e = serde_json::from_value::<PublishRequest>(with_key).unwrap_err();
        assert!(e.to_string().contains("unknown field `key`"), "{e}");
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
        // An unusable tag is a 400, not silently dropped from the search.
        let long = format!("skill=a&skill={}", "x".repeat(65));
        for bad in ["skill=a&skill=", "skill=%20", "skill=a%01b", &long] {
            let e = parse_discover_query(bad).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
        }
    }
}
