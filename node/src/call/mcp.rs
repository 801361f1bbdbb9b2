//! Calling the MCP server an agent advertises on its card: the library behind `agentnet tools`
//! and `agentnet tool`.
//!
//! An agent's card may advertise an MCP endpoint in `capabilities.extensions` (URI
//! [`EXTENSION`], `docs/PROTOCOL.md`). Before anything is sent to it, in this order:
//!
//! 1. **Find** the card: by DID in the node's index ([`call::Caller::card_of`]), or a card in
//!    hand.
//! 2. **Verify** it as the agent's ([`call::Caller::verify`], the same check as A2A calls):
//!    every signature, and one signer is the agent's DID. The extension is inside the signed
//!    card, so the endpoint is the agent's word.
//! 3. **Read** the extension ([`endpoint`]): an `http(s)` URL, transport `streamable-http`, the
//!    protocol versions.
//! 4. **Check** where the URL points ([`call::Caller::check_address`]): `https` and public
//!    addresses only unless `allow_private`; the addresses checked are the ones connected to
//!    (pinned in the HTTP client); no redirects, no proxy.
//!
//! Then an MCP session with rmcp's client over Streamable HTTP, on [`SignedHttp`]: every HTTP
//! request of the session (POST, and the GET and DELETE of a 2025-11-25 session) is signed with
//! the caller's [`call::DidSigner`] (RFC 9421), over the exact body sent. The era: 2026-07-28
//! (`server/discover`, stateless) if the card lists it, else 2025-11-25 (`initialize`).
//!
//! Bounds: one response at most [`MAX_RESPONSE`] bytes (JSON body or SSE event), at most
//! [`MAX_TOOLS`] tools over [`MAX_PAGES`] pages, arguments at most [`MAX_ARGS`] bytes, the whole
//! exchange under the caller's deadline ([`call::CallOptions::timeout`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use agentnet_a2a::client::{SignRequest, Signer};
use agentnet_did::Did;
use futures_core::Stream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, JsonObject, PaginatedRequestParams, ProtocolVersion,
    Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt as _, RoleClient};
use serde_json::Value;
use sse_stream::Sse;

use crate::call::{self, CallError, Caller, Progress};

/// The extension URI of an agent's MCP endpoint in its card's `capabilities.extensions`.
pub const EXTENSION: &str = "urn:agentnet:mcp:v1";
/// The one transport defined: MCP Streamable HTTP.
pub const TRANSPORT: &str = "streamable-http";
/// The protocol versions we speak, preferred first.
pub const VERSIONS: [&str; 2] = ["2026-07-28", "2025-11-25"];
/// Largest response read: one JSON body or one SSE event.
pub const MAX_RESPONSE: usize = 4 << 20;
/// Most tools listed.
pub const MAX_TOOLS: usize = 512;
/// Most `tools/list` pages read.
pub const MAX_PAGES: usize = 16;
/// Largest tool arguments sent, bytes of JSON.
pub const MAX_ARGS: usize = 64 * 1024;
/// Longest URL read from a card.
const MAX_URL: usize = 2048;

/// Why an MCP exchange with an agent failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Finding or verifying the card, or checking the address (the A2A caller's refusals).
    #[error("finding the MCP agent: {0}")]
    Call(#[from] CallError),
    /// The card advertises no MCP endpoint.
    #[error("the card of {0} advertises no MCP endpoint ({EXTENSION})")]
    NoEndpoint(String),
    /// The card's MCP extension is not one we can use.
    #[error("the MCP endpoint of {did} cannot be used: {reason}")]
    BadEndpoint {
        /// The agent.
        did: String,
        /// Why.
        reason: String,
    },
    /// The tool arguments are not a JSON object of at most [`MAX_ARGS`] bytes.
    #[error("tool arguments must be a JSON object of at most {MAX_ARGS} bytes")]
    BadArgs,
    /// The MCP session could not be set up (the server refused, or did not answer MCP).
    #[error("connecting to the MCP endpoint {url}: {reason}")]
    Connect {
        /// The endpoint.
        url: String,
        /// Why.
        reason: String,
    },
    /// A request of the session failed.
    #[error("MCP {method} at {url}: {reason}")]
    Request {
        /// The MCP method.
        method: &'static str,
        /// The endpoint.
        url: String,
        /// Why.
        reason: String,
    },
    /// The server lists more tools than we read.
    #[error("the server lists more than {MAX_TOOLS} tools (or {MAX_PAGES} pages)")]
    TooManyTools,
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Http(String),
    /// The deadline passed.
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
}

/// An MCP endpoint as a card advertises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Where.
    pub url: url::Url,
    /// The protocol versions the card lists, those we speak, in our order of preference.
    pub versions: Vec<&'static str>,
}

/// The MCP endpoint `card` advertises: `Ok(None)` if it advertises none.
pub fn endpoint(did: &str, card: &Value) -> Result<Option<Endpoint>, Error> {
    let bad = |reason: &str| Error::BadEndpoint {
        did: did.chars().take(200).collect(),
        reason: reason.to_owned(),
    };
    let Some(exts) = card
        .pointer("/capabilities/extensions")
        .and_then(Value::as_array)
    else {
        return Ok(None);
    };
    let Some(ext) = exts
        .iter()
        .find(|e| e.get("uri").and_then(Value::as_str) == Some(EXTENSION))
    else {
        return Ok(None);
    };
    let params = ext.get("params").ok_or_else(|| bad("no params"))?;
    let url = params
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("params.url is not a string"))?;
    if url.len() > MAX_URL {
        return Err(bad("params.url is too long"));
    }
    let url = url::Url::parse(url).map_err(|_| bad("params.url is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("params.url is not an http(s) URL"));
    }
    if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
        return Err(bad("params.url carries credentials or a fragment"));
    }
    match params.get("transport").and_then(Value::as_str) {
        Some(TRANSPORT) => {}
        _ => return Err(bad("params.transport is not \"streamable-http\"")),
    }
    let listed: Vec<&str> = params
        .get("protocolVersions")
        .and_then(Value::as_array)
        .map(|a| a.iter().take(32).filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let versions: Vec<&'static str> = VERSIONS
        .iter()
        .copied()
        .filter(|v| listed.contains(v))
        .collect();
    if versions.is_empty() {
        return Err(bad(&format!(
            "params.protocolVersions lists none of {}",
            VERSIONS.join(", ")
        )));
    }
    Ok(Some(Endpoint { url, versions }))
}

/// An agent's MCP endpoint, its card verified, its address checked.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The agent.
    pub did: Did,
    /// The `kid`s of its card's signatures.
    pub signers: Vec<String>,
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The addresses its host resolved to, checked, and the only ones connected to.
    pub addrs: Vec<SocketAddr>,
}

/// An open MCP session with an agent.
pub type Session = RunningService<RoleClient, ()>;

impl Remote {
    /// Find `did`'s card in the node's index (or take `card`, claimed to be `did`'s), verify
    /// it, read its MCP endpoint and check the address. Nothing is sent to the agent.
    pub async fn find(
        caller: &Caller,
        did: &str,
        card: Option<Value>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Remote, Error> {
        let timeout = caller.options().timeout;
        let fut = async {
            let card = match card {
                Some(c) => c,
                None => caller.card_of(did).await?,
            };
            let v = caller.verify(did, card, progress).await?;
            let endpoint =
                endpoint(did, &v.card)?.ok_or_else(|| Error::NoEndpoint(did.to_owned()))?;
            let addrs = caller.check_address(&endpoint.url).await?;
            Ok(Remote {
                did: v.did,
                signers: v.signers,
                endpoint,
                addrs,
            })
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| Error::Timeout(timeout))?
    }

    /// The first agent with all of `tags` whose card advertises an MCP endpoint and verifies
    /// ([`Remote::find`]), of at most [`crate::call::MAX_CANDIDATES`] found, in the directory's
    /// order; each skipped one is reported to `progress`.
    pub async fn find_by_skill(
        caller: &Caller,
        tags: &[String],
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Remote, Error> {
        let mut last = None;
        for f in caller.candidates(tags).await? {
            if !matches!(endpoint(&f.did, &f.card), Ok(Some(_))) {
                continue;
            }
            let did = f.did.clone();
            match Remote::find(caller, &did, Some(f.card), progress).await {
                Ok(r) => return Ok(r),
                Err(e) => {
                    progress(Progress::Skipped {
                        did,
                        reason: e.to_string(),
                    });
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::Call(CallError::NotFound(format!(
                "no agent found with skill {} that advertises an MCP endpoint",
                tags.join(" + ")
            )))
        }))
    }

    /// Open an MCP session, every request signed by `caller`'s signer (none: unsigned).
    pub async fn connect(&self, caller: &Caller) -> Result<Session, Error> {
        let opts = caller.options();
        let url = self.endpoint.url.to_string();
        let http = SignedHttp::new(
            pinned_client(&self.endpoint.url, &self.addrs, opts)?,
            caller.signer().cloned(),
        );
        let cfg = StreamableHttpClientTransportConfig::with_uri(url.clone())
            .max_sse_event_size(MAX_RESPONSE)
            .max_json_response_size(MAX_RESPONSE)
            .max_error_response_size(4096)
            .reinit_on_expired_session(false);
        let transport = StreamableHttpClientTransport::with_client(http, cfg);
        let mode = if self.endpoint.versions.contains(&"2026-07-28") {
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            }
        } else {
            ClientLifecycleMode::Initialize
        };
        let timeout = opts.timeout;
        tokio::time::timeout(timeout, ().serve_with_lifecycle(transport, mode))
            .await
            .map_err(|_| Error::Timeout(timeout))?
            .map_err(|e| Error::Connect {
                url,
                reason: e.to_string(),
            })
    }

    /// The tools of the endpoint (every page, within [`MAX_TOOLS`] and [`MAX_PAGES`]).
    pub async fn list_tools(&self, caller: &Caller) -> Result<Vec<Tool>, Error> {
        let s = self.connect(caller).await?;
        let r = self.deadline(caller, list_tools(&s, &self.endpoint)).await;
        let _ = s.cancel().await;
        r
    }

    /// Call tool `name` with `args` (a JSON object).
    pub async fn call_tool(
        &self,
        caller: &Caller,
        name: &str,
        args: Value,
    ) -> Result<CallToolResult, Error> {
        let Value::Object(args) = args else {
            return Err(Error::BadArgs);
        };
        if serde_json::to_vec(&args).map_or(usize::MAX, |b| b.len()) > MAX_ARGS {
            return Err(Error::BadArgs);
        }
        let s = self.connect(caller).await?;
        let chain = caller
            .options()
            .delegation
            .as_ref()
            .map(|d| d.for_agent(&self.did));
        let r = self
            .deadline(caller, call_tool(&s, &self.endpoint, name, args, chain))
            .await;
        let _ = s.cancel().await;
        r
    }

    async fn deadline<T>(
        &self,
        caller: &Caller,
        fut: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let t = caller.options().timeout;
        tokio::time::timeout(t, fut)
            .await
            .map_err(|_| Error::Timeout(t))?
    }
}

async fn list_tools(s: &Session, ep: &Endpoint) -> Result<Vec<Tool>, Error> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let page = s
            .list_tools(Some(params))
            .await
            .map_err(|e| Error::Request {
                method: "tools/list",
                url: ep.url.to_string(),
                reason: e.to_string(),
            })?;
        tools.extend(page.tools);
        if tools.len() > MAX_TOOLS {
            return Err(Error::TooManyTools);
        }
        match page.next_cursor {
            Some(c) if !c.is_empty() => cursor = Some(c),
            _ => return Ok(tools),
        }
    }
    Err(Error::TooManyTools)
}

async fn call_tool(
    s: &Session,
    ep: &Endpoint,
    name: &str,
    args: JsonObject,
    chain: Option<Value>,
) -> Result<CallToolResult, Error> {
    let mut params = CallToolRequestParams::new(name.to_owned()).with_arguments(args);
    if let Some(c) = chain {
        // `_meta.actorChain`: the delegation this call is made under (docs/PROTOCOL.md).
        let mut meta = rmcp::model::RequestMetaObject::default();
        meta.0
             .0
            .insert(agentnet_did::delegation::METADATA_MEMBER.to_string(), c);
        params.meta = Some(meta);
    }
    s.call_tool(params).await.map_err(|e| Error::Request {
        method: "tools/call",
        url: ep.url.to_string(),
        reason: e.to_string(),
    })
}

/// The HTTP client of one endpoint: connections to the checked addresses only, no redirects,
/// no proxy; TLS set up by `agentnet_did::http` (no process-wide crypto provider needed).
fn pinned_client(
    url: &url::Url,
    addrs: &[SocketAddr],
    opts: &call::CallOptions,
) -> Result<reqwest::Client, Error> {
    let mut b = agentnet_did::http::client_builder()
        .connect_timeout(opts.connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(host) = url.host_str() {
        if host.parse::<std::net::IpAddr>().is_err() {
            b = b.resolve_to_addrs(host, addrs);
        }
    }
    b.build().map_err(|e| Error::Http(e.to_string()))
}

type SseStream = Pin<Box<dyn Stream<Item = Result<Sse, SseError>> + Send + 'static>>;
type HttpError = StreamableHttpError<reqwest::Error>;

/// rmcp's Streamable HTTP client on reqwest, each request signed (RFC 9421) before it goes:
/// the signature covers the method, the URL, its authority and the digest of the exact body.
/// The `Authorization` header rmcp would send (none is configured) is dropped.
#[derive(Clone)]
pub struct SignedHttp {
    http: reqwest::Client,
    signer: Option<Arc<dyn Signer>>,
}

impl std::fmt::Debug for SignedHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedHttp")
            .field("signed", &self.signer.is_some())
            .finish_non_exhaustive()
    }
}

impl SignedHttp {
    /// Requests through `http`, signed by `signer` (none: unsigned).
    pub fn new(http: reqwest::Client, signer: Option<Arc<dyn Signer>>) -> Self {
        SignedHttp { http, signer }
    }

    async fn sign(
        &self,
        method: reqwest::Method,
        uri: &str,
        body: &[u8],
        headers: &mut HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        let Some(signer) = &self.signer else {
            return Ok(());
        };
        let io = |m: String| StreamableHttpError::Io(std::io::Error::other(m));
        let url = url::Url::parse(uri).map_err(|e| io(format!("signing: {uri}: {e}")))?;
        let none = reqwest::header::HeaderMap::new();
        let signed = signer
            .sign(SignRequest {
                method: &method,
                url: &url,
                headers: &none,
                body,
            })
            .await
            .map_err(|e| io(format!("signing the request: {e}")))?;
        for (name, value) in &signed {
            headers.insert(name.clone(), value.clone());
        }
        Ok(())
    }
}

impl StreamableHttpClient for SignedHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            None,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            None,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        // reqwest's `json` serializes with `serde_json::to_vec`: the same bytes as signed.
        let body = serde_json::to_vec(&message)?;
        self.sign(reqwest::Method::POST, &uri, &body, &mut custom_headers)
            .await?;
        self.http
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                None,
                custom_headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.sign(reqwest::Method::DELETE, &uri, b"", &mut custom_headers)
            .await?;
        self.http
            .delete_session(uri, session_id, None, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream, HttpError> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            None,
            custom_headers,
            MAX_RESPONSE,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, HttpError> {
        self.sign(reqwest::Method::GET, &uri, b"", &mut custom_headers)
            .await?;
        self.http
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                None,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(params: Value) -> Value {
        json!({"capabilities": {"extensions": [
            {"uri": "urn:agentnet:a2a:did-auth:v1"},
            {"uri": EXTENSION, "required": false, "params": params},
        ]}})
    }

    #[test]
    fn the_extension_is_read_and_checked() {
        let ok = endpoint(
            "did:x",
            &card(
                json!({"url": "https://a.example/mcp", "transport": "streamable-http",
                "protocolVersions": ["2025-11-25", "2026-07-28", "1999-01-01"]}),
            ),
        )
        .unwrap()
        .unwrap();
        assert_eq!(ok.url.as_str(), "https://a.example/mcp");
        assert_eq!(ok.versions, ["2026-07-28", "2025-11-25"]);
        assert_eq!(
            endpoint("did:x", &json!({"capabilities": {}})).unwrap(),
            None
        );
        for params in [
            json!(null),
            json!({"url": "ftp://a.example/mcp", "transport": "streamable-http", "protocolVersions": ["2026-07-28"]}),
            json!({"url": "https://u:p@a.example/mcp", "transport": "streamable-http", "protocolVersions": ["2026-07-28"]}),
            json!({"url": "https://a.example/mcp", "transport": "sse", "protocolVersions": ["2026-07-28"]}),
            json!({"url": "https://a.example/mcp", "transport": "streamable-http", "protocolVersions": ["2024-11-05"]}),
            json!({"url": format!("https://a.example/{}", "x".repeat(MAX_URL)), "transport": "streamable-http", "protocolVersions": ["2026-07-28"]}),
        ] {
            assert!(
                matches!(
                    endpoint("did:x", &card(params.clone())),
                    Err(Error::BadEndpoint { .. })
                ),
                "{params}"
            );
        }
    }
}
