//! `/mcp`: the MCP server over Streamable HTTP, on the node's admin listener.
//!
//! rmcp's Streamable HTTP service answers both eras (2026-07-28 stateless requests, and
//! 2025-11-25 `initialize` with `Mcp-Session-Id` sessions) and makes most of the checks; we
//! configure them. In the order a request meets them:
//!
//! | check | refusal |
//! |---|---|
//! | the admin token, only if the listener is not on a loopback address | `401` ([`gate`]) |
//! | `Host` is `localhost`, `127.0.0.1`, `[::1]` (any port) or the listener's address | `403` (rmcp) |
//! | `Origin`, when present, is `http(s)://localhost`, `127.0.0.1` or `[::1]`, any port | `403` (rmcp; the spec's status) |
//! | the body is at most [`MAX_BODY`] bytes, however it is framed | `413` (rmcp) |
//! | `Mcp-Method`/`Mcp-Name` agree with the body | `400`, JSON-RPC `-32020` HeaderMismatch (rmcp; the spec's status) |
//!
//! The `Authorization` header a client sends is read by [`gate`] only, never passed on: calls
//! to agents carry the node's own DID signature.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::{Server, MAX_BODY};
use crate::auth::Token;

/// Where the MCP endpoint is.
pub const PATH: &str = "/mcp";

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

/// Who may call `/mcp` before rmcp's checks: anyone on a loopback listener (the only bind
/// `agentnet up` accepts), the admin token's holder otherwise.
#[derive(Clone, Debug)]
pub struct Gate {
    token: Option<Token>,
}

impl Gate {
    /// The gate of a listener bound at `addr`.
    pub fn new(token: Token, addr: SocketAddr) -> Self {
        Gate {
            token: (!addr.ip().is_loopback()).then_some(token),
        }
    }

    /// Whether a request with these headers may pass.
    pub fn admits(&self, headers: &axum::http::HeaderMap) -> bool {
        match &self.token {
            None => true,
            Some(t) => headers
                .get(header::AUTHORIZATION)
                .is_some_and(|h| t.accepts(h.as_bytes())),
        }
    }
}

/// Refuse a request [`Gate::admits`] refuses, with `401`.
pub async fn gate(State(g): State<Gate>, req: Request, next: Next) -> Response {
    if !g.admits(req.headers()) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "/mcp on a non-loopback listener needs `Authorization: Bearer <admin token>`",
        )
            .into_response();
    }
    next.run(req).await
}

/// The `/mcp` route for a listener bound at `addr`; sessions end when `stop` is cancelled.
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
        Arc::new(LocalSessionManager::default()),
        cfg,
    );
    Router::new()
        .route_service(PATH, service)
        .layer(middleware::from_fn_with_state(Gate::new(token, addr), gate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_required_off_loopback_only() {
        let dir = tempfile::tempdir().unwrap();
        let token = Token::create(dir.path()).unwrap();
        let bearer = format!("Bearer {}", token.as_str());
        let mut with = axum::http::HeaderMap::new();
        with.insert(header::AUTHORIZATION, bearer.parse().unwrap());
        let mut wrong = axum::http::HeaderMap::new();
        wrong.insert(header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        let none = axum::http::HeaderMap::new();

        let local = Gate::new(token.clone(), "127.0.0.1:7879".parse().unwrap());
        assert!(local.admits(&none) && local.admits(&wrong) && local.admits(&with));
        for addr in ["0.0.0.0:7879", "192.0.2.1:7879", "[::]:7879"] {
            let g = Gate::new(token.clone(), addr.parse().unwrap());
            assert!(!g.admits(&none), "{addr}");
            assert!(!g.admits(&wrong), "{addr}");
            assert!(g.admits(&with), "{addr}");
        }
    }
}
