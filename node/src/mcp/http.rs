//! `/mcp`: the MCP server over Streamable HTTP, on the node's admin listener.
//!
//! rmcp's Streamable HTTP service answers both eras (2026-07-28 stateless requests, and
//! 2025-11-25 `initialize` with `Mcp-Session-Id` sessions) and makes most of the checks; we
//! configure them. In the order a request meets them:
//!
//! | check | refusal |
//! |---|---|
//! | `Authorization: Bearer <admin token>` (`<data-dir>/admin.token`), on loopback too | `401` with `WWW-Authenticate: Bearer` ([`gate`]) |
//! | `Host` is `localhost`, `127.0.0.1`, `[::1]` (any port) or the listener's address | `403` (rmcp) |
//! | `Origin`, when present, is `http(s)://localhost`, `127.0.0.1` or `[::1]`, any port | `403` (rmcp; the spec's status) |
//! | the body is at most [`MAX_BODY`] bytes, however it is framed | `413` (rmcp) |
//! | `Mcp-Method`/`Mcp-Name` agree with the body | `400`, JSON-RPC `-32020` HeaderMismatch (rmcp; the spec's status) |
//!
//! The token is required on loopback too: a tool call reaches remote agents as the node's DID
//! and reads and cancels its tasks, so any local user or process without the data directory
//! must not. `agentnet mcp` on stdio needs no token (it runs as the data directory's owner).
//! The `Authorization` header a client sends is read by [`gate`] only, never passed on: calls
//! to agents carry the node's own DID signature.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_core::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::{Server, MAX_BODY};
use crate::data_dir::token::Token;

/// Where the MCP endpoint is.
pub const PATH: &str = "/mcp";
/// Most open sessions of the 2025-11-25 era (each has a task and a channel; the 2026-07-28 era
/// has none). A session closes after 5 minutes idle (rmcp's default) or on `DELETE`.
pub const MAX_SESSIONS: usize = 256;
/// Most of them one caller (a verified DID, or the anonymous callers of one source) holds,
/// where the layer in front of rmcp knows the caller (hosted endpoints: [`opened_by`]).
pub const MAX_SESSIONS_PER_OWNER: usize = 16;
/// Most of them one source (an IPv4 address, an IPv6 /64) holds, whatever DIDs it signs with.
pub const MAX_SESSIONS_PER_SOURCE: usize = 16;

/// How long an idle 2025-11-25 session lives (rmcp's keep-alive): the longest a caller refused
/// for a full share waits for one of the sessions to close without closing one itself, and so
/// the `Retry-After` of that refusal ([`overload`]).
pub const SESSION_IDLE: std::time::Duration =
    rmcp::transport::streamable_http_server::session::local::SessionConfig::DEFAULT_KEEP_ALIVE;

/// Who opens a session: what the layer in front of rmcp verified (rmcp's session manager is
/// not told who asks, so the layer passes it down with [`opened_by`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Opener {
    /// The verified DID, or `anonymous@<source>`.
    pub owner: String,
    /// The caller's network block ([`source_of`]).
    pub source: String,
}

tokio::task_local! {
    static OPENER: Opener;
    /// The refusal of a session created in this request, for [`overload`] to answer.
    static REFUSED: std::cell::Cell<Option<Full>>;
}

/// Whose share of sessions was full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    /// Every caller's ([`MAX_SESSIONS`]).
    Total,
    /// The caller's DID's ([`MAX_SESSIONS_PER_OWNER`]).
    Owner,
    /// The caller's address's ([`MAX_SESSIONS_PER_SOURCE`]).
    Source,
}

impl SessionError {
    fn full(&self) -> Option<Full> {
        match self {
            SessionError::TooMany => Some(Full::Total),
            SessionError::TooManyForOwner => Some(Full::Owner),
            SessionError::TooManyForSource => Some(Full::Source),
            SessionError::Local(_) => None,
        }
    }
}

/// Answer a request refused a session for a full share as an overload, not as rmcp's `500`:
/// `503` when every session is taken, `429` when the caller's share is, each with
/// `Retry-After` ([`SESSION_IDLE`]: by then an idle session has closed) and a JSON-RPC error
/// (code `-32000`, `data: {"retryAfter": seconds}`) that says why and what else to do. Put
/// it between the routes and rmcp's service: the refusal is recorded in the request's task.
pub async fn overload(req: Request, next: Next) -> Response {
    let (resp, full) = REFUSED
        .scope(std::cell::Cell::new(None), async {
            let resp = next.run(req).await;
            (resp, REFUSED.with(std::cell::Cell::get))
        })
        .await;
    let Some(full) = full else {
        return resp;
    };
    let (status, error) = match full {
        Full::Total => (StatusCode::SERVICE_UNAVAILABLE, SessionError::TooMany),
        Full::Owner => (StatusCode::TOO_MANY_REQUESTS, SessionError::TooManyForOwner),
        Full::Source => (
            StatusCode::TOO_MANY_REQUESTS,
            SessionError::TooManyForSource,
        ),
    };
    let after = SESSION_IDLE.as_secs();
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32000,
            "message": format!(
                "{error}; or retry in {after} s, when an idle session has closed"
            ),
            "data": {"retryAfter": after},
        },
    });
    (
        status,
        [(header::RETRY_AFTER, after.to_string())],
        axum::Json(body),
    )
        .into_response()
}

/// The [`Opener::owner`] of anonymous callers, before their source: `anonymous@<source>`.
pub const ANONYMOUS: &str = "anonymous@";

/// Run `f` (the rest of the request) with `who` as the opener of any session it creates: rmcp
/// creates a session inside the request's own future, so [`Sessions`] sees it there.
pub async fn opened_by<F: std::future::Future>(who: Opener, f: F) -> F::Output {
    OPENER.scope(who, f).await
}

/// The network block of a client address, the unit of per-source shares
/// ([`agentnet_a2a::auth::Source`]), as the key [`Sessions`] counts by.
pub fn source_of(ip: std::net::IpAddr) -> String {
    agentnet_a2a::auth::Source::of(ip).key()
}

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// [`MAX_SESSIONS`] are open.
    #[error(
        "too many MCP sessions are open ({MAX_SESSIONS}); close one or use protocol 2026-07-28"
    )]
    TooMany,
    /// The caller holds [`MAX_SESSIONS_PER_OWNER`].
    #[error(
        "too many MCP sessions are open for your DID ({MAX_SESSIONS_PER_OWNER}); close one \
         (DELETE) or use protocol 2026-07-28"
    )]
    TooManyForOwner,
    /// The caller's source holds [`MAX_SESSIONS_PER_SOURCE`].
    #[error(
        "too many MCP sessions are open from your address ({MAX_SESSIONS_PER_SOURCE}); close \
         one (DELETE) or use protocol 2026-07-28"
    )]
    TooManyForSource,
    /// rmcp's session manager failed.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// rmcp's in-memory session manager, with at most [`MAX_SESSIONS`] sessions, and, for the
/// sessions whose [`Opener`] is known, at most [`MAX_SESSIONS_PER_OWNER`] per owner and
/// [`MAX_SESSIONS_PER_SOURCE`] per source.
#[derive(Debug, Default)]
pub struct Sessions {
    local: LocalSessionManager,
    shares: std::sync::Mutex<Shares>,
}

/// Who holds which session, and how many each.
#[derive(Debug, Default)]
struct Shares {
    by_session: std::collections::HashMap<SessionId, Opener>,
    owners: std::collections::HashMap<String, usize>,
    sources: std::collections::HashMap<String, usize>,
}

impl Shares {
    /// Take one session for `who`, or say whose share is full.
    fn reserve(&mut self, who: &Opener) -> Result<(), SessionError> {
        if self.owners.get(&who.owner).copied().unwrap_or(0) >= MAX_SESSIONS_PER_OWNER {
            // The anonymous callers of a source are that source: say so, not "your DID".
            return Err(if who.owner.starts_with(ANONYMOUS) {
                SessionError::TooManyForSource
            } else {
                SessionError::TooManyForOwner
            });
        }
        if self.sources.get(&who.source).copied().unwrap_or(0) >= MAX_SESSIONS_PER_SOURCE {
            return Err(SessionError::TooManyForSource);
        }
        *self.owners.entry(who.owner.clone()).or_default() += 1;
        *self.sources.entry(who.source.clone()).or_default() += 1;
        Ok(())
    }

    /// Give back one session of `who`.
    fn release(&mut self, who: &Opener) {
        for (map, key) in [
            (&mut self.owners, &who.owner),
            (&mut self.sources, &who.source),
        ] {
            if let Some(n) = map.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

impl Sessions {
    fn lock_shares(&self) -> std::sync::MutexGuard<'_, Shares> {
        self.shares.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `e`, recorded for [`overload`] when the request runs under it.
fn refused(e: SessionError) -> SessionError {
    let _ = REFUSED.try_with(|r| r.set(e.full()));
    e
}

impl SessionManager for Sessions {
    type Error = SessionError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // Checked, then created: concurrent creations may pass the check together, a few
        // over the bound at most (one per connection in flight).
        if self.local.sessions.read().await.len() >= MAX_SESSIONS {
            tracing::warn!(max = MAX_SESSIONS, "refused an MCP session: too many open");
            return Err(refused(SessionError::TooMany));
        }
        let who = OPENER.try_with(Opener::clone).ok();
        if let Some(w) = &who {
            if let Err(e) = self.lock_shares().reserve(w) {
                tracing::warn!(owner = %w.owner, source = %w.source, "refused an MCP session: {e}");
                return Err(refused(e));
            }
        }
        match self.local.create_session().await {
            Ok((id, t)) => {
                if let Some(w) = who {
                    self.lock_shares().by_session.insert(id.clone(), w);
                }
                Ok((id, t))
            }
            Err(e) => {
                if let Some(w) = &who {
                    self.lock_shares().release(w);
                }
                Err(e.into())
            }
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.local.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.local.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        {
            let mut shares = self.lock_shares();
            if let Some(w) = shares.by_session.remove(id) {
                shares.release(&w);
            }
        }
        Ok(self.local.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.local.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.local.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.local.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.local.resume(id, last_event_id).await?)
    }
}

/// The `Host` values accepted on a listener bound at `addr`.
pub fn allowed_hosts(addr: SocketAddr) -> Vec<String> {
    vec![
        "localhost".into(),
        "127.0.0.1".into(),
        "::1".into(),
        addr.to_string(),
    ]
}

/// The browser origins accepted: pages served from this machine's loopback names.
pub fn allowed_origins() -> Vec<String> {
    let mut v = Vec::new();
    for scheme in ["http", "https"] {
        for host in ["localhost", "127.0.0.1", "[::1]"] {
            v.push(format!("{scheme}://{host}:*"));
        }
    }
    v
}

/// Who may call `/mcp` before rmcp's checks: the admin token's holder, on every listener.
#[derive(Clone, Debug)]
pub struct Gate {
    token: Token,
}

impl Gate {
    /// The gate of the admin token `token`.
    pub fn new(token: Token) -> Self {
        Gate { token }
    }

    /// Whether a request with these headers may pass.
    pub fn admits(&self, headers: &axum::http::HeaderMap) -> bool {
        headers
            .get(header::AUTHORIZATION)
            .is_some_and(|h| self.token.accepts(h.as_bytes()))
    }
}

/// Refuse a request [`Gate::admits`] refuses, with `401`.
pub async fn gate(State(g): State<Gate>, req: Request, next: Next) -> Response {
    if !g.admits(req.headers()) {
        tracing::warn!("refused an /mcp request without the admin token");
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "/mcp needs `Authorization: Bearer <token>` with the token in the node's \
             <data-dir>/admin.token (docs/MCP.md shows a host configuration); \
             or run `agentnet mcp` on stdio",
        )
            .into_response();
    }
    next.run(req).await
}

/// Refuse a peer that is not on loopback, with `403`, as the admin API does: `/mcp` shares its
/// listener (loopback by configuration) and checks it again itself.
pub async fn loopback_only(
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if !remote.ip().is_loopback() {
        tracing::warn!(%remote, "refused an /mcp request from a non-loopback address");
        let body = serde_json::json!({
            "error": "the admin API answers loopback clients only",
            "reason": "forbidden",
        });
        return (StatusCode::FORBIDDEN, axum::Json(body)).into_response();
    }
    next.run(req).await
}

/// The `/mcp` route for a listener bound at `addr`, guarded by itself: a loopback peer
/// ([`loopback_only`]), then the admin token ([`gate`]), then rmcp's checks. Sessions end when
/// `stop` is cancelled.
pub fn router(server: Server, addr: SocketAddr, token: Token, stop: CancellationToken) -> Router {
    let cfg = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts(addr))
        .with_allowed_origins(allowed_origins())
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY)
        .with_json_response(true)
        .with_cancellation_token(stop);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(Sessions::default()),
        cfg,
    );
    Router::new()
        .route_service(PATH, service)
        .layer(middleware::from_fn(overload))
        .layer(middleware::from_fn_with_state(Gate::new(token), gate))
        .layer(middleware::from_fn(loopback_only))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_per_owner_and_per_source_and_given_back() {
        let who = |o: &str, s: &str| Opener {
            owner: o.into(),
            source: s.into(),
        };
        let mut sh = Shares::default();
        for _ in 0..MAX_SESSIONS_PER_OWNER {
            sh.reserve(&who("did:a", "192.0.2.1")).unwrap();
        }
        assert!(matches!(
            sh.reserve(&who("did:a", "192.0.2.9")),
            Err(SessionError::TooManyForOwner)
        ));
        assert!(matches!(
            sh.reserve(&who("did:b", "192.0.2.1")),
            Err(SessionError::TooManyForSource)
        ));
        sh.reserve(&who("did:b", "192.0.2.2")).unwrap();
        sh.release(&who("did:a", "192.0.2.1"));
        sh.reserve(&who("did:c", "192.0.2.1")).unwrap();
        for _ in 0..MAX_SESSIONS_PER_OWNER {
            sh.release(&who("did:a", "192.0.2.1"));
        }
        assert!(!sh.owners.contains_key("did:a"), "no key kept at zero");
        // The anonymous callers of a source are told it is their address's share.
        let anon = who(&format!("{ANONYMOUS}192.0.2.3"), "192.0.2.3");
        for _ in 0..MAX_SESSIONS_PER_OWNER {
            sh.reserve(&anon).unwrap();
        }
        assert!(matches!(
            sh.reserve(&anon),
            Err(SessionError::TooManyForSource)
        ));
        assert_eq!(
            source_of("2001:db8:1:2:3:4:5:6".parse().unwrap()),
            "2001:db8:1:2::/64"
        );
        assert_eq!(source_of("::ffff:192.0.2.7".parse().unwrap()), "192.0.2.7");
    }

    #[test]
    fn the_token_is_required_on_every_listener() {
        let dir = tempfile::tempdir().unwrap();
        let token = Token::create(dir.path()).unwrap();
        let bearer = format!("Bearer {}", token.as_str());
        let mut with = axum::http::HeaderMap::new();
        with.insert(header::AUTHORIZATION, bearer.parse().unwrap());
        let mut wrong = axum::http::HeaderMap::new();
        wrong.insert(header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        let none = axum::http::HeaderMap::new();

        let g = Gate::new(token);
        assert!(!g.admits(&none));
        assert!(!g.admits(&wrong));
        assert!(g.admits(&with));
    }
}
