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
//! | policy `did`: an RFC 9421 signature (not the legacy `DIDWba` header, which signs no body) that the node's DID verifier accepts: the same one as the A2A routes, with its nonce quota and fetch budget; any policy: a signature that does not verify | `401` |
//! | `Host` is the public URL's host (any port) | `403` (rmcp) |
//! | `Origin`, when present, is the agent's own (the public URL's scheme, host and port) or a loopback one (`http(s)://localhost`, `127.0.0.1`, `[::1]`, any port), as `/mcp` accepts | `403` (rmcp) |
//! | `Mcp-Method`/`Mcp-Name` agree with the body | `400` (rmcp) |
//!
//! Every HTTP request is checked, not only the first of a session: `GET` and `DELETE` of a
//! 2025-11-25 session too. Sessions are in memory, at most [`crate::mcp::http::MAX_SESSIONS`] per
//! agent, [`crate::mcp::http::MAX_SESSIONS_PER_OWNER`] per caller (DID, or the anonymous callers of
//! one source) and [`crate::mcp::http::MAX_SESSIONS_PER_SOURCE`] per source (the guard passes the
//! verified caller down to the session manager, [`crate::mcp::http::opened_by`]), closed after 5
//! minutes idle. One more is answered as an overload ([`crate::mcp::http::overload`]): `429` (`503`
//! when every session is taken) with `Retry-After` and a JSON-RPC error.
//!
//! Tools by kind: `echo` offers the tool `echo` (returns the text). Every other kind (`ask`,
//! `command`, `proxy`) offers `send_message`: one turn of the agent, run by its A2A task engine
//! as the verified caller (the same owner as over A2A: the task is then the caller's there
//! too, `GetTask` finds it), answering with the task's state, its id, and its text; a task
//! waiting for input is continued by calling again with its `task_id`.

use std::sync::Arc;

use agentnet_a2a::auth::{Authenticator, Policy, RequestParts, Source};
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

use crate::call::mcp::{EXTENSION, TRANSPORT, VERSIONS};
use crate::mcp::http::Sessions;

/// Where an agent's MCP endpoint is, under its A2A URL.
pub const PATH: &str = "/mcp";
/// Largest request body.
pub const MAX_BODY: usize = 256 * 1024;
/// Longest text the tools (`echo`, `send_message`) take, bytes.
pub const MAX_TOOL_TEXT: usize = 64 * 1024;

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
    /// The agent's own origin (`scheme://host:port` of the public URL), accepted as an `Origin`
    /// besides the loopback ones; `None` if the public URL has none.
    pub origin: Option<String>,
    /// The agent's task engine, whose turns `send_message` runs; `None`: the `echo` tool.
    pub turns: Option<agentnet_a2a::engine::Engine>,
    /// The agent's delegation policy: a `tools/call` needs `tool:NAME` of a chain in
    /// `params._meta.actorChain` where one is required ([`crate::hosted::authority`]).
    pub authority: Option<Arc<crate::hosted::authority::Authority>>,
}

/// The caller the guard verified (`None`: anonymous, under policy `open`), for the tools.
#[derive(Debug, Clone)]
pub struct Verified(pub Option<String>);

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("require_did", &self.require_did)
            .field("host", &self.host)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// The route [`PATH`], for nesting under the agent's mount; sessions end when `stop` is
    /// cancelled.
    pub fn router(&self, stop: CancellationToken) -> Router {
        let cfg = StreamableHttpServerConfig::default()
            .with_allowed_hosts([self.host.clone()])
            .with_allowed_origins(self.allowed_origins())
            .enforce_origin_validation()
            .with_max_request_body_bytes(MAX_BODY)
            .with_json_response(true)
            .with_cancellation_token(stop);
        let router = match &self.turns {
            None => {
                let service = StreamableHttpService::new(
                    || Ok(EchoTools::new()),
                    Arc::new(Sessions::default()),
                    cfg,
                );
                Router::new().route_service(PATH, service)
            }
            Some(engine) => {
                let engine = engine.clone();
                let service = StreamableHttpService::new(
                    move || Ok(TurnTools::new(engine.clone())),
                    Arc::new(Sessions::default()),
                    cfg,
                );
                Router::new().route_service(PATH, service)
            }
        };
        router
            .layer(middleware::from_fn(crate::mcp::http::overload))
            .layer(middleware::from_fn_with_state(self.clone(), guard))
    }
}

impl Endpoint {
    /// The `Origin` values accepted: the agent's own and the loopback ones `/mcp` accepts.
    pub fn allowed_origins(&self) -> Vec<String> {
        let mut v = crate::mcp::http::allowed_origins();
        v.extend(self.origin.clone());
        v
    }
}

/// The origin of the public base URL `base`, with its port always written out (rmcp reads an
/// origin without a port as any port); `None` without a host.
pub fn origin_of(base: &str) -> Option<String> {
    let u = url::Url::parse(base).ok()?;
    Some(format!(
        "{}://{}:{}",
        u.scheme(),
        u.host_str()?,
        u.port_or_known_default()?
    ))
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
    // The sessions it may open count against the caller's and its address's shares.
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| Source::of(c.0.ip()));
    let policy = if ep.require_did {
        Policy::Did
    } else {
        Policy::Open
    };
    let admitted = policy.admit(who, peer.unwrap_or(Source::Local));
    let caller = match admitted {
        Ok(c) => c.owner.caller().map(str::to_string),
        Err(refusal) => {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "DIDWba")],
                refusal.message(
                    "this MCP endpoint needs requests signed with the caller's DID \
                     (RFC 9421, see urn:agentnet:a2a:did-auth:v1)",
                ),
            )
                .into_response();
        }
    };
    if let Some(did) = &caller {
        tracing::debug!(%did, "signed MCP request");
    }
    let source = peer.map_or_else(|| "unknown".into(), |p| p.key());
    let opener = crate::mcp::http::Opener {
        owner: caller
            .clone()
            .unwrap_or_else(|| format!("{}{source}", crate::mcp::http::ANONYMOUS)),
        source,
    };
    if let Some(authority) = &ep.authority {
        if let Some(refused) = check_tool_call(authority, &bytes, caller.as_deref(), &parts).await {
            return refused;
        }
    }
    let mut parts = parts;
    parts.extensions.insert(Verified(caller));
    crate::mcp::http::opened_by(
        opener,
        next.run(Request::from_parts(parts, Body::from(bytes))),
    )
    .await
}

/// A `tools/call` checked against the agent's delegation policy before it reaches the tool:
/// `tool:NAME` must be granted by the chain in `params._meta.actorChain` (where the agent
/// requires one, or one is presented). The refusal is a JSON-RPC error, `-32000`, whose message
/// names the failing link; `None` lets the request through.
async fn check_tool_call(
    authority: &crate::hosted::authority::Authority,
    body: &[u8],
    caller: Option<&str>,
    parts: &axum::http::request::Parts,
) -> Option<Response> {
    #[derive(Deserialize)]
    struct Call {
        #[serde(default)]
        id: Value,
        method: String,
        #[serde(default)]
        params: Value,
    }
    // Nothing to check unless a delegation is required or one may be presented: then the body
    // is not parsed a second time (rmcp parses it for the tool). A chain spelled with JSON
    // escapes slips past this scan only where none is required, and then reaches no tool
    // unchecked: `send_message` hands it to the A2A gate, `echo` ignores it.
    let key = agentnet_did::delegation::METADATA_MEMBER.as_bytes();
    if !authority.requires() && !body.windows(key.len()).any(|w| w == key) {
        return None;
    }
    let call: Call = serde_json::from_slice(body).ok()?;
    if call.method != "tools/call" {
        return None;
    }
    let name = call
        .params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let chain = call
        .params
        .pointer("/_meta")
        .and_then(|m| m.get(agentnet_did::delegation::METADATA_MEMBER));
    let source = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| agentnet_a2a::auth::Source::of(c.0.ip()))
        .unwrap_or(agentnet_a2a::auth::Source::Local);
    let owner = match caller {
        Some(did) => agentnet_a2a::auth::Owner::Caller(did.to_owned()),
        None => agentnet_a2a::auth::Owner::Anonymous(source),
    };
    let verdict = match chain {
        None => {
            authority.none_presented("params._meta.actorChain (agentnet tool --delegation FILE)")
        }
        Some(c) => {
            authority
                .check(c, &owner, &format!("tool:{name}"), source)
                .await
        }
    };
    let e = verdict.err()?;
    let body = json!({"jsonrpc": "2.0", "id": call.id,
        "error": {"code": e.code(), "message": e.to_string(), "data": {"reason": e.reason()}}});
    Some(
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response(),
    )
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
        if args.text.len() > MAX_TOOL_TEXT {
            return Err(format!("text is longer than {MAX_TOOL_TEXT} bytes"));
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

/// `send_message`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnArgs {
    /// The message to the agent (at most 65 536 bytes).
    #[schemars(length(max = 65536))]
    pub text: String,
    /// Answer this task of yours (state input-required) instead of starting a new one.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub task_id: Option<String>,
    /// Also return the raw A2A task (large).
    #[serde(default)]
    pub full: bool,
}

/// The tools of an agent that is not `echo`: one turn of it.
#[derive(Clone)]
pub struct TurnTools {
    engine: agentnet_a2a::engine::Engine,
    tool_router: ToolRouter<Self>,
}

impl std::fmt::Debug for TurnTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnTools").finish_non_exhaustive()
    }
}

#[tool_router]
impl TurnTools {
    /// The tools, running turns on `engine`.
    pub fn new(engine: agentnet_a2a::engine::Engine) -> Self {
        TurnTools {
            engine,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Send a message to this agent and wait for its answer (one turn of work): \
        the task's state, id and the agent's texts. If the state is input-required, answer its \
        question by calling again with that task_id.",
        annotations(read_only_hint = false, open_world_hint = true)
    )]
    async fn send_message(
        &self,
        rmcp::handler::server::common::Extension(parts): rmcp::handler::server::common::Extension<
            axum::http::request::Parts,
        >,
        meta: rmcp::model::RequestMetaObject,
        Parameters(args): Parameters<TurnArgs>,
    ) -> Result<Json<crate::mcp::TaskResult>, String> {
        use agentnet_a2a::auth::{Caller, Owner, Source};
        use agentnet_a2a::types::{Message, Part, Role, SendMessageRequest, SendMessageResponse};
        if args.text.len() > MAX_TOOL_TEXT {
            return Err(format!("text is longer than {MAX_TOOL_TEXT} bytes"));
        }
        let source = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| Source::of(c.0.ip()))
            .unwrap_or(Source::Local);
        let owner = match parts.extensions.get::<Verified>() {
            Some(Verified(Some(did))) => Owner::Caller(did.clone()),
            Some(Verified(None)) => Owner::Anonymous(source),
            None => return Err("the request was not checked (no caller)".into()),
        };
        let owner = Caller::new(owner, source);
        let mut message = Message::new(Role::User, vec![Part::text(args.text)]);
        message.message_id = uuid::Uuid::new_v4().to_string();
        message.task_id = args.task_id;
        // The chain checked for `tool:send_message` is the turn's too (the A2A gate checks
        // `send`), and stays with the task.
        if let Some(chain) = meta.0.get(agentnet_did::delegation::METADATA_MEMBER) {
            message.metadata = Some(std::collections::HashMap::from([(
                agentnet_did::delegation::METADATA_MEMBER.to_string(),
                chain.clone(),
            )]));
        }
        let full = args.full;
        let req = SendMessageRequest {
            message,
            configuration: None,
            metadata: None,
            tenant: None,
        };
        match self.engine.send_message(&owner, req).await {
            Ok(SendMessageResponse::Task(t)) => Ok(Json(crate::mcp::task_result(
                &crate::call::Outcome::Task(Box::new(t)),
                None,
                full,
                &crate::trust::flags::builtin(),
            ))),
            Ok(SendMessageResponse::Message(m)) => Ok(Json(crate::mcp::task_result(
                &crate::call::Outcome::Message(Box::new(m)),
                None,
                full,
                &crate::trust::flags::builtin(),
            ))),
            Err(e) => Err(format!("the agent refused the message: {e}")),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TurnTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "agentnet-agent",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "An agent hosted by an agentnet node: send_message runs one turn of its work.",
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FileConfig;

    /// An authenticator that verifies every request as `did`.
    struct As(String);

    impl Authenticator for As {
        fn authenticate<'a>(
            &'a self,
            _request: RequestParts<'a>,
        ) -> agentnet_a2a::auth::BoxFuture<'a, Result<Option<String>, agentnet_a2a::auth::AuthError>>
        {
            let did = self.0.clone();
            Box::pin(async move { Ok(Some(did)) })
        }
    }

    async fn initialize_as(did: &str) -> (u16, String) {
        use tower::ServiceExt as _;
        let ep = Endpoint {
            auth: Arc::new(As(did.to_string())),
            require_did: true,
            host: "127.0.0.1".into(),
            origin: None,
            turns: None,
            authority: None,
        };
        let req = Request::builder()
            .method("POST")
            .uri(PATH)
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .body(Body::from(
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}})
                .to_string(),
            ))
            .unwrap();
        let res = ep
            .router(CancellationToken::new())
            .oneshot(req)
            .await
            .unwrap();
        let status = res.status().as_u16();
        let body = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// The MCP face admits callers as the A2A and ANP faces do ([`Policy::admit`]): a verified
    /// identity longer than the A2A bound is refused, not taken as an owner key.
    #[tokio::test]
    async fn a_caller_identity_past_the_bound_is_refused_as_on_the_a2a_routes() {
        let long = format!(
            "did:web:example.com:{}",
            "a".repeat(agentnet_a2a::auth::MAX_CALLER_LEN)
        );
        let (status, body) = initialize_as(&long).await;
        assert_eq!(status, 401, "{body}");
        assert!(
            body.contains("caller identity must be 1 to 512 bytes"),
            "{body}"
        );
        let (status, body) =
            initialize_as("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK").await;
        assert_eq!(status, 200, "{body}");
    }

    fn config(text: &str) -> Result<FileConfig, crate::config::ConfigError> {
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
        let ep = crate::call::mcp::endpoint("did:x", &card).unwrap().unwrap();
        assert_eq!(ep.url.as_str(), "https://node.example/a2a/e/mcp");
        assert_eq!(ep.versions, VERSIONS);

        // Without `mcp`, no extension.
        let cfg = config("[[agent]]\nid = \"e\"\nkind = \"echo\"\n").unwrap();
        let card = crate::hosted::card_for(&cfg.agent[0], "https://node.example/a2a/e");
        assert_eq!(crate::call::mcp::endpoint("did:x", &card).unwrap(), None);
    }

    #[test]
    fn a_token_lifetime_beyond_a_day_is_refused() {
        assert!(config("[auth]\ntoken_ttl_secs = 86400\n").is_ok());
        assert!(config("[auth]\ntoken_ttl_secs = 0\n").is_ok());
        let e = config("[auth]\ntoken_ttl_secs = 86401\n").unwrap_err();
        assert!(e.to_string().contains("token_ttl_secs"), "{e}");
    }

    #[test]
    fn the_own_origin_is_written_with_its_port() {
        assert_eq!(
            origin_of("http://127.0.0.1:7878").as_deref(),
            Some("http://127.0.0.1:7878")
        );
        assert_eq!(
            origin_of("https://node.example").as_deref(),
            Some("https://node.example:443")
        );
        assert_eq!(
            origin_of("http://[::1]:80/").as_deref(),
            Some("http://[::1]:80")
        );
        assert_eq!(origin_of("not a url"), None);
    }

    /// The hosted tools' descriptions are one paragraph each (schemars joins `///` lines with
    /// line breaks): the `task_id` of `send_message` was two lines.
    #[test]
    fn tool_descriptions_are_one_paragraph() {
        let tools = [
            EchoTools::tool_router().list_all(),
            TurnTools::tool_router().list_all(),
        ];
        for t in tools.iter().flatten() {
            let listed = serde_json::to_string(t).unwrap();
            assert!(!listed.contains("\\n"), "{listed}");
        }
    }

    #[test]
    fn every_kind_may_offer_mcp() {
        for kind in ["kind = \"ask\"", "kind = \"command\"\ncommand = [\"cat\"]"] {
            let c = config(&format!("[[agent]]\nid = \"a\"\n{kind}\nmcp = true\n"));
            assert!(c.is_ok(), "{kind}");
        }
    }
}
