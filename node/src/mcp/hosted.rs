//! MCP endpoints of hosted agents: `/a2a/<id>/mcp` on the node's **public** listener, beside
//! the agent's A2A routes, for an `[[agent]]` with `mcp = true` (`docs/PROTOCOL.md`, "MCP
//! endpoints of agents").
//!
//! rmcp's Streamable HTTP service (both eras) behind our guard. In the order a request meets
//! them:
//!
//! | check | refusal |
//! |---|---|
//! | the body is at most [`MAX_BODY`] bytes (read before anything else) | `413` |
//! | policy `did`: an RFC 9421 signature (or ANP `DIDWba`) that the node's DID verifier accepts: the same one as the A2A routes, with its nonce quota and fetch budget; any policy: a signature that does not verify | `401` |
//! | `Host` is the public URL's host (any port) | `403` (rmcp) |
//! | no `Origin` (browsers send one; non-browser MCP clients do not) | `403` (rmcp) |
//! | `Mcp-Method`/`Mcp-Name` agree with the body | `400` (rmcp) |
//!
//! Every HTTP request is checked, not only the first of a session: `GET` and `DELETE` of a
//! 2025-11-25 session too. Sessions are in memory, at most [`super::http::MAX_SESSIONS`] per
//! agent, closed after 5 minutes idle.
//!
//! Tools by kind: `echo` offers the tool `echo` (returns the text). Other kinds offer no MCP
//! endpoint yet (the configuration refuses `mcp = true` for them).

use std::sync::Arc;

use agentnet_a2a::auth::{Authenticator, RequestParts};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::client::{EXTENSION, TRANSPORT, VERSIONS};
use super::http::Sessions;

/// Where an agent's MCP endpoint is, under its A2A URL.
pub const PATH: &str = "/mcp";
/// Largest request body.
pub const MAX_BODY: usize = 256 * 1024;
/// Longest text the `echo` tool takes, bytes.
pub const MAX_ECHO: usize = 64 * 1024;

/// The card extension advertising the MCP endpoint at `url`.
pub fn extension(url: &str) -> Value {
    json!({
        "uri": EXTENSION,
        "description": "An MCP server (Streamable HTTP) with this agent's tools. Requests are signed like A2A requests when the agent's policy requires it.",
        "required": false,
        "params": {
            "url": url,
            "transport": TRANSPORT,
            "protocolVersions": VERSIONS,
        },
    })
}

/// The MCP endpoint of one hosted agent, ready to mount.
#[derive(Clone)]
pub struct Endpoint {
    /// Verifies DID signatures (the node's, shared with the A2A routes).
    pub auth: Arc<dyn Authenticator>,
    /// Every request must be signed (policy `did`).
    pub require_did: bool,
    /// The host clients address (the public URL's).
    pub host: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("require_did", &self.require_did)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// The route [`PATH`], for nesting under the agent's mount; sessions end when `stop` is
    /// cancelled.
    pub fn router(&self, stop: CancellationToken) -> Router {
        let cfg = StreamableHttpServerConfig::default()
            .with_allowed_hosts([self.host.clone()])
            // An empty allowlist with validation on: any Origin is refused.
            .with_allowed_origins(Vec::<String>::new())
            .enforce_origin_validation()
            .with_max_request_body_bytes(MAX_BODY)
            .with_json_response(true)
            .with_cancellation_token(stop);
        let service =
            StreamableHttpService::new(|| Ok(EchoTools::new()), Arc::new(Sessions::default()), cfg);
        Router::new()
            .route_service(PATH, service)
            .layer(middleware::from_fn_with_state(self.clone(), guard))
    }
}

/// Bound the body, then verify the caller's signature under policy `did`.
async fn guard(State(ep): State<Endpoint>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {MAX_BODY} bytes"),
        )
            .into_response()
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return too_large();
    };
    // As on the A2A routes: a signature that does not verify is refused whatever the policy;
    // no signature is refused under `did` only.
    let who = ep
        .auth
        .authenticate(RequestParts {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
            body: &bytes,
        })
        .await;
    let refusal = match who {
        Ok(Some(did)) => {
            tracing::debug!(%did, "signed MCP request");
            None
        }
        Ok(None) if ep.require_did => Some(
            "this MCP endpoint needs requests signed with the caller's DID \
             (RFC 9421, see urn:agentnet:a2a:did-auth:v1)"
                .to_string(),
        ),
        Ok(None) => None,
        Err(e) => Some(e.0),
    };
    if let Some(m) = refusal {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "DIDWba")],
            m,
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// `echo`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EchoArgs {
    /// The text to echo (at most 65 536 bytes).
    #[schemars(length(max = 65536))]
    pub text: String,
}

/// What `echo` returns.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Echoed {
    /// The text, unchanged.
    pub text: String,
}

/// The tools of an `echo` agent.
#[derive(Clone)]
pub struct EchoTools {
    tool_router: ToolRouter<Self>,
}

impl std::fmt::Debug for EchoTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EchoTools").finish_non_exhaustive()
    }
}

impl Default for EchoTools {
    fn default() -> Self {
        Self::new()
    }
}

#[tool_router]
impl EchoTools {
    /// The tools.
    pub fn new() -> Self {
        EchoTools {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Return the given text unchanged.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> Result<Json<Echoed>, String> {
        if args.text.len() > MAX_ECHO {
            return Err(format!("text is longer than {MAX_ECHO} bytes"));
        }
        Ok(Json(Echoed { text: args.text }))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for EchoTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "agentnet-echo",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions("An agentnet sample agent: the echo tool returns its text.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosted::FileConfig;

    fn config(text: &str) -> Result<FileConfig, crate::hosted::ConfigError> {
        let cfg: FileConfig = toml::from_str(text).expect("TOML of our shape");
        cfg.check().map(|()| cfg)
    }

    #[test]
    fn the_card_carries_the_extension_and_a2a_types_read_it() {
        let cfg = config("[[agent]]\nid = \"e\"\nkind = \"echo\"\nmcp = true\n").unwrap();
        let card = crate::hosted::card_for(&cfg.agent[0], "https://node.example/a2a/e");
        // a2a-lf's AgentCard (what the A2A SDK types accept): params is a map of JSON values.
        let typed: agentnet_a2a::types::AgentCard = serde_json::from_value(card.clone()).unwrap();
        let exts = typed.capabilities.extensions.unwrap();
        let mcp = exts.iter().find(|e| e.uri == EXTENSION).unwrap();
        assert_eq!(mcp.required, Some(false));
        let params = mcp.params.as_ref().unwrap();
        assert_eq!(params["url"], "https://node.example/a2a/e/mcp");
        assert_eq!(params["transport"], TRANSPORT);
        // Our client reads back what we advertise.
        let ep = crate::mcp::client::endpoint("did:x", &card)
            .unwrap()
            .unwrap();
        assert_eq!(ep.url.as_str(), "https://node.example/a2a/e/mcp");
        assert_eq!(ep.versions, VERSIONS);

        // Without `mcp`, no extension.
        let cfg = config("[[agent]]\nid = \"e\"\nkind = \"echo\"\n").unwrap();
        let card = crate::hosted::card_for(&cfg.agent[0], "https://node.example/a2a/e");
        assert_eq!(crate::mcp::client::endpoint("did:x", &card).unwrap(), None);
    }

    #[test]
    fn only_echo_agents_offer_mcp() {
        for kind in ["kind = \"ask\"", "kind = \"command\"\ncommand = [\"cat\"]"] {
            let e = config(&format!("[[agent]]\nid = \"a\"\n{kind}\nmcp = true\n"));
            assert!(e.is_err(), "{kind}");
        }
        assert!(config("[[agent]]\nid = \"a\"\nkind = \"ask\"\nmcp = false\n").is_ok());
    }
}
