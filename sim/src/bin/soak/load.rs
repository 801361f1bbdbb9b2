//! The load generator: the request kinds and their mix, the sources they go out from, and one
//! request of each kind as the soak sends it (A2A open, signed and with a token, streaming, MCP,
//! ARD search, discover).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use agentnet_a2a::client::{Client, Endpoint, SignError, SignRequest, Signer};
use agentnet_node::call;
use agentnet_node::DidSigner;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

/// The request kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    A2aOpen,
    A2aSigned,
    A2aToken,
    A2aStream,
    McpAgent,
    McpDiscover,
    McpSend,
    ArdSearch,
    Discover,
}

impl Kind {
    /// Every kind, once.
    pub(crate) const ALL: [Kind; 9] = [
        Kind::A2aOpen,
        Kind::A2aSigned,
        Kind::A2aToken,
        Kind::A2aStream,
        Kind::McpAgent,
        Kind::McpDiscover,
        Kind::McpSend,
        Kind::ArdSearch,
        Kind::Discover,
    ];
    /// The kind's name in the results.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::A2aOpen => "a2a_open",
            Kind::A2aSigned => "a2a_signed",
            Kind::A2aToken => "a2a_token",
            Kind::A2aStream => "a2a_stream",
            Kind::McpAgent => "mcp_agent",
            Kind::McpDiscover => "mcp_discover",
            Kind::McpSend => "mcp_send",
            Kind::ArdSearch => "ard_search",
            Kind::Discover => "discover",
        }
    }
    /// Whether it goes to the admin listener.
    fn admin(self) -> bool {
        matches!(self, Kind::McpDiscover | Kind::McpSend | Kind::Discover)
    }
}

/// One round of the mix, 20 requests: the order the kinds are sent in, over and over.
pub(crate) const MIX: [Kind; 20] = [
    Kind::A2aOpen,
    Kind::A2aSigned,
    Kind::ArdSearch,
    Kind::A2aOpen,
    Kind::A2aToken,
    Kind::A2aStream,
    Kind::McpDiscover,
    Kind::A2aOpen,
    Kind::A2aSigned,
    Kind::Discover,
    Kind::McpAgent,
    Kind::A2aOpen,
    Kind::A2aSigned,
    Kind::ArdSearch,
    Kind::A2aToken,
    Kind::A2aStream,
    Kind::McpSend,
    Kind::A2aOpen,
    Kind::Discover,
    Kind::McpDiscover,
];

/// Public-listener sources (`127.0.k.1`, k = 1..=SOURCES).
pub(crate) const SOURCES: usize = 24;
/// In flight per public source. The listener holds 32 connections per source, and 384 of its
/// 512 for sources holding 4 or more (`server::Limits::PUBLIC`): 24 x 12 = 288 stays under,
/// idle pooled connections included.
pub(crate) const PER_SOURCE: usize = 12;
/// In flight on the admin listener (64 connections).
pub(crate) const ADMIN_INFLIGHT: usize = 48;
/// Requests due but not yet sent at most (beyond: shed and counted).
pub(crate) const MAX_PENDING: usize = 20_000;
/// did:key identities of `a2a_signed` and of `a2a_token`.
pub(crate) const SIGNED_DIDS: usize = 64;
pub(crate) const TOKEN_DIDS: usize = 16;
/// Tags of the pool (each agent carries 2: every tag on 24 agents).
pub(crate) const TAGS: u64 = 25;

/// Signs every request, never an access token (the default [`Signer::token`]).
pub(crate) struct AlwaysSign(pub(crate) DidSigner);

impl Signer for AlwaysSign {
    fn sign<'a>(
        &'a self,
        request: SignRequest<'a>,
    ) -> agentnet_a2a::auth::BoxFuture<'a, Result<HeaderMap, SignError>> {
        self.0.sign(request)
    }
}

/// One public source.
pub(crate) struct Lane {
    pub(crate) http: reqwest::Client,
    pub(crate) slots: Semaphore,
}

/// Everything a request needs.
pub(crate) struct Target {
    pub(crate) lanes: Vec<Lane>,
    pub(crate) next_lane: AtomicUsize,
    pub(crate) admin_http: reqwest::Client,
    pub(crate) admin_slots: Semaphore,
    pub(crate) admin: String,
    pub(crate) token: String,
    pub(crate) public: String,
    pub(crate) open: Endpoint,
    pub(crate) did_ep: Endpoint,
    pub(crate) signed: Vec<Arc<AlwaysSign>>,
    pub(crate) tokens: Vec<Arc<DidSigner>>,
    pub(crate) echo_did: String,
    pub(crate) n: AtomicU64,
}

/// The `_meta` of a stateless 2026-07-28 MCP request.
const MCP_META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"soak","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

/// A stateless 2026-07-28 `tools/call`, as `scripts/bench_mcp.sh` sends it; the result must be
/// a tool result without `isError: true`.
pub(crate) async fn mcp_call(
    http: &reqwest::Client,
    url: &str,
    auth: Option<&str>,
    tool: &str,
    args: Value,
) -> Result<(), String> {
    let meta: Value = serde_json::from_str(MCP_META).map_err(|e| e.to_string())?;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": meta}});
    let mut req = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
        .body(body.to_string());
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    let resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {}", &text[..text.len().min(200)]));
    }
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| format!("not JSON ({e}): {}", &text[..text.len().min(200)]))?;
    match v.get("result") {
        Some(r) if r.get("isError") != Some(&Value::Bool(true)) => Ok(()),
        _ => Err(text.chars().take(300).collect()),
    }
}

/// A plain HTTP exchange that must answer 2xx, its body read whole.
pub(crate) async fn expect_ok(req: reqwest::RequestBuilder) -> Result<(), String> {
    let resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ))
    }
}

impl Target {
    /// Sends one request of `kind`, on the next lane (or the admin listener).
    pub(crate) async fn run(&self, kind: Kind) -> Result<(), String> {
        let n = self.next_lane.fetch_add(1, Ordering::Relaxed);
        if kind.admin() {
            let _slot = self
                .admin_slots
                .acquire()
                .await
                .map_err(|e| e.to_string())?;
            return self.run_admin(kind, n).await;
        }
        let lane = &self.lanes[n % self.lanes.len()];
        let _slot = lane.slots.acquire().await.map_err(|e| e.to_string())?;
        let http = &lane.http;
        let msg = || call::message("hello from the soak", None).map_err(|e| e.to_string());
        let i = self.n.fetch_add(1, Ordering::Relaxed) as usize;
        match kind {
            Kind::A2aOpen | Kind::A2aSigned | Kind::A2aToken => {
                let (endpoint, signer): (_, Option<Arc<dyn agentnet_a2a::client::Signer>>) =
                    match kind {
                        Kind::A2aOpen => (self.open.clone(), None),
                        Kind::A2aSigned => (
                            self.did_ep.clone(),
                            Some(self.signed[i % self.signed.len()].clone()),
                        ),
                        _ => (
                            self.did_ep.clone(),
                            Some(self.tokens[i % self.tokens.len()].clone()),
                        ),
                    };
                Client::new(http.clone(), endpoint, signer)
                    .send_message(&call::send_request(msg()?))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Kind::A2aStream => {
                let c = Client::new(http.clone(), self.open.clone(), None);
                let mut s = c
                    .send_streaming(&call::send_request(msg()?))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut events = 0;
                while let Some(ev) = s.next().await {
                    ev.map_err(|e| e.to_string())?;
                    events += 1;
                }
                if events == 0 {
                    return Err("a stream without events".into());
                }
                Ok(())
            }
            Kind::McpAgent => {
                let url = format!("{}/a2a/echo/mcp", self.public);
                mcp_call(http, &url, None, "echo", json!({"text": "hello"})).await
            }
            Kind::ArdSearch => {
                let words = ["translates", "summarizes", "classifies", "soak agent"];
                let body = json!({"query": {"text": words[i % words.len()]}, "pageSize": 10});
                expect_ok(
                    http.post(format!("{}/search", self.public))
                        .header("Content-Type", "application/json")
                        .body(body.to_string()),
                )
                .await
            }
            _ => Err("not a public kind".into()),
        }
    }

    /// Sends one admin request of `kind`.
    async fn run_admin(&self, kind: Kind, n: usize) -> Result<(), String> {
        let tag = format!("soak-{}", n as u64 % TAGS);
        let auth = format!("Bearer {}", self.token);
        let url = format!("{}/mcp", self.admin);
        match kind {
            Kind::McpDiscover => {
                mcp_call(
                    &self.admin_http,
                    &url,
                    Some(&auth),
                    "discover_agents",
                    json!({"tags": [tag]}),
                )
                .await
            }
            Kind::McpSend => {
                mcp_call(
                    &self.admin_http,
                    &url,
                    Some(&auth),
                    "send_message",
                    json!({"did": self.echo_did, "text": "hello", "wait_secs": 10}),
                )
                .await
            }
            Kind::Discover => {
                expect_ok(
                    self.admin_http
                        .get(format!(
                            "{}/admin/v1/discover?skill={tag}&limit=10",
                            self.admin
                        ))
                        .header("Authorization", auth),
                )
                .await
            }
            _ => Err("not an admin kind".into()),
        }
    }
}
