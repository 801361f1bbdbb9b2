//! The A2A 1.0 client, for both bindings.
//!
//! [`Client::from_card`] picks the first of the card's `supportedInterfaces` whose
//! `protocolBinding` is `JSONRPC` or `HTTP+JSON` and whose `protocolVersion` is 1.0 (a patch
//! number is ignored), and refuses, before anything is sent, when there is none. Every request
//! carries `A2A-Version: 1.0`; before it is sent, the optional [`Signer`] sees its method, URL,
//! headers and body and returns headers to add (the node's RFC 9421 DID signature), unless it
//! holds an access token the server gave ([`Signer::token`]): then the request carries that,
//! and is signed and sent once more if the server refuses it.
//!
//! Bounds: a response body is read up to [`ClientLimits::max_response_bytes`]; SSE streams
//! are decoded with [`crate::sse::Decoder`] (bounded lines and events). The `reqwest::Client`
//! is the caller's: give it a connect timeout, but no total timeout if streams are used (a
//! stream lasts as long as the task works; the server sends keep-alives).

use std::collections::VecDeque;
use std::sync::Arc;

use a2a::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse, SendMessageRequest,
    SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task,
};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use url::Url;

use crate::auth::BoxFuture;
use crate::server::{A2A_JSON, PROTOCOL_VERSION, VERSION_HEADER};
use crate::sse::{Decoder, SseError, SseEvent};

/// A protocol binding this client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Binding {
    /// `JSONRPC`.
    JsonRpc,
    /// `HTTP+JSON`.
    HttpJson,
}

impl Binding {
    /// The binding's name in an Agent Card.
    pub fn name(self) -> &'static str {
        match self {
            Binding::JsonRpc => "JSONRPC",
            Binding::HttpJson => "HTTP+JSON",
        }
    }
}

/// Where and how to reach an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The interface URL (JSON-RPC: the URL posted to; HTTP+JSON: the base of the routes).
    pub url: Url,
    /// The binding.
    pub binding: Binding,
}

/// What a [`Signer`] sees of a request.
#[derive(Debug, Clone, Copy)]
pub struct SignRequest<'a> {
    /// The HTTP method.
    pub method: &'a Method,
    /// The full URL.
    pub url: &'a Url,
    /// The headers set so far (content type, accept, `A2A-Version`).
    pub headers: &'a HeaderMap,
    /// The body bytes as they will be sent.
    pub body: &'a [u8],
}

/// A request built, and signed, as the client sends it, not sent
/// ([`Client::prepare_send_message`]).
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    /// The HTTP method.
    pub method: Method,
    /// The full URL.
    pub url: Url,
    /// Every header the client sets (content type, accept, `A2A-Version`, the signature's).
    pub headers: HeaderMap,
    /// The body bytes (empty for none).
    pub body: Vec<u8>,
}

/// A signer could not sign.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signing the request: {0}")]
pub struct SignError(pub String);

/// The request-signing hook.
pub trait Signer: Send + Sync + 'static {
    /// Headers to add to the request.
    fn sign<'a>(&'a self, request: SignRequest<'a>) -> BoxFuture<'a, Result<HeaderMap, SignError>>;
    /// An `Authorization` value to send to `url` instead of a signature: an access token its
    /// server gave (ANP). The client sends it, and on a 401 signs and sends the request once
    /// more. The default: none, every request is signed.
    fn token(&self, url: &Url) -> Option<HeaderValue> {
        let _ = url;
        None
    }
    /// What the server at `url` answered a request, `with_token` when it was sent with
    /// [`Signer::token`]'s value: where a signer keeping tokens reads a new one, or drops one
    /// that was refused. The default does nothing.
    fn answered(&self, url: &Url, status: u16, headers: &HeaderMap, with_token: bool) {
        let _ = (url, status, headers, with_token);
    }
}

/// What a server answered with as an A2A error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteError {
    /// The JSON-RPC code (for the HTTP+JSON binding, derived from the `ErrorInfo` reason;
    /// 0 when the reason is not one we know).
    pub code: i32,
    /// The `google.rpc.ErrorInfo` reason, when the server sent one.
    pub reason: Option<String>,
    /// The server's message.
    pub message: String,
    /// The HTTP status.
    pub status: u16,
}

/// What was refused and why first (`PERMISSION_DENIED: <the server's message>`); the
/// JSON-RPC code only when no reason names the error, the HTTP status only when it is not 200
/// (a JSON-RPC error comes with 200, which says nothing).
impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reason {
            Some(r) => write!(f, "{r}: {}", self.message)?,
            None => write!(f, "error {}: {}", self.code, self.message)?,
        }
        if self.status != 200 {
            write!(f, " (HTTP {})", self.status)?;
        }
        Ok(())
    }
}

/// A client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The card offers no interface with a binding and version we speak.
    #[error("no supported interface (we speak JSONRPC and HTTP+JSON at 1.0); the card offers: {offered:?}")]
    NoSupportedInterface {
        /// What the card offers, `binding version url`.
        offered: Vec<String>,
    },
    /// The card is not an A2A 1.0 card.
    #[error("invalid agent card: {0}")]
    InvalidCard(String),
    /// The request could not be made or its response read.
    #[error("{url}: {source}")]
    Http {
        /// The URL.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// A non-A2A HTTP error.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The server answered with an A2A error.
    #[error("{url}: {error}")]
    Remote {
        /// The URL.
        url: String,
        /// The error.
        error: RemoteError,
    },
    /// The response does not fit the protocol.
    #[error("{url}: invalid response: {reason}")]
    InvalidResponse {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The response body is over the limit.
    #[error("{url}: response over {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// The SSE stream broke a bound.
    #[error("{url}: {source}")]
    Stream {
        /// The URL.
        url: String,
        /// The decoder's error.
        #[source]
        source: SseError,
    },
    /// The signer failed.
    #[error(transparent)]
    Sign(#[from] SignError),
}

impl ClientError {
    /// The A2A error the server answered with, if that is what this is.
    pub fn remote(&self) -> Option<&RemoteError> {
        match self {
            ClientError::Remote { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// The client's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientLimits {
    /// A response body at most: 4 MiB.
    pub max_response_bytes: usize,
    /// An SSE line at most: 1 MiB.
    pub max_sse_line: usize,
    /// An SSE event's data at most: 4 MiB.
    pub max_sse_event: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            max_response_bytes: 4 << 20,
            max_sse_line: 1 << 20,
            max_sse_event: 4 << 20,
        }
    }
}

/// Whether `v` is an A2A 1.0 protocol version (`1.0`, or `1.0.<patch>`).
fn is_v1_0(v: &str) -> bool {
    let mut it = v.trim().split('.');
    it.next() == Some("1")
        && it.next() == Some("0")
        && it
            .next()
            .is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && it.next().is_none()
}

/// Pick the first interface of `card` we can speak.
pub fn choose_interface(card: &Value) -> Result<Endpoint, ClientError> {
    let Some(list) = card.get("supportedInterfaces").and_then(Value::as_array) else {
        return Err(ClientError::InvalidCard(
            "supportedInterfaces is missing (not an A2A 1.0 card)".into(),
        ));
    };
    let mut offered = Vec::new();
    for i in list.iter().take(64) {
        let s = |k: &str| i.get(k).and_then(Value::as_str).unwrap_or("");
        let (b, v, u) = (s("protocolBinding"), s("protocolVersion"), s("url"));
        offered.push(format!("{b} {v} {u}"));
        let binding = match b {
            "JSONRPC" => Binding::JsonRpc,
            "HTTP+JSON" => Binding::HttpJson,
            _ => continue,
        };
        if !is_v1_0(v) {
            continue;
        }
        let Ok(url) = Url::parse(u) else { continue };
        if url.scheme() != "https" && url.scheme() != "http" {
            continue;
        }
        return Ok(Endpoint { url, binding });
    }
    Err(ClientError::NoSupportedInterface { offered })
}

/// Fetch `<base>/.well-known/agent-card.json` (relative to `base`'s path, as the Python SDK's
/// card resolver does, so an agent hosted under a path has its card there), bounded.
pub async fn fetch_card(
    http: &reqwest::Client,
    base: &Url,
    limits: ClientLimits,
) -> Result<Value, ClientError> {
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    url.path_segments_mut()
        .map_err(|_| ClientError::InvalidCard(format!("{base} cannot be a base URL")))?
        .pop_if_empty()
        .extend([".well-known", "agent-card.json"]);
    let resp = http
        .get(url.clone())
        .header(ACCEPT, "application/json")
        .send()
        .await
        .map_err(|source| ClientError::Http {
            url: url.to_string(),
            source,
        })?;
    let status = resp.status();
    let body = read_bounded(resp, url.as_str(), limits.max_response_bytes).await?;
    if !status.is_success() {
        return Err(ClientError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            body: snippet(&body),
        });
    }
    serde_json::from_slice(&body).map_err(|e| ClientError::InvalidCard(e.to_string()))
}

async fn read_bounded(
    mut resp: reqwest::Response,
    url: &str,
    limit: usize,
) -> Result<Vec<u8>, ClientError> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(ClientError::TooLarge {
            url: url.to_string(),
            limit,
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|source| ClientError::Http {
        url: url.to_string(),
        source,
    })? {
        if body.len() + chunk.len() > limit {
            return Err(ClientError::TooLarge {
                url: url.to_string(),
                limit,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn snippet(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
}

/// The JSON-RPC code of an `ErrorInfo` reason.
fn code_of_reason(reason: &str) -> i32 {
    match reason {
        "TASK_NOT_FOUND" => -32001,
        "TASK_NOT_CANCELABLE" => -32002,
        "PUSH_NOTIFICATION_NOT_SUPPORTED" => -32003,
        "UNSUPPORTED_OPERATION" => -32004,
        "CONTENT_TYPE_NOT_SUPPORTED" => -32005,
        "INVALID_AGENT_RESPONSE" => -32006,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED" => -32007,
        "EXTENSION_SUPPORT_REQUIRED" => -32008,
        "VERSION_NOT_SUPPORTED" => -32009,
        "PARSE_ERROR" => -32700,
        "INVALID_REQUEST" => -32600,
        "METHOD_NOT_FOUND" => -32601,
        "INVALID_PARAMS" => -32602,
        "INTERNAL_ERROR" => -32603,
        _ => 0,
    }
}

fn reason_in(details: Option<&Value>) -> Option<String> {
    details?
        .as_array()?
        .iter()
        .find(|d| d.get("@type").and_then(Value::as_str) == Some(crate::error::ERROR_INFO_TYPE))
        .and_then(|d| d.get("reason")?.as_str())
        .map(str::to_string)
}

/// A JSON-RPC `error` object as a [`RemoteError`].
fn jsonrpc_error(e: &Value, status: u16) -> RemoteError {
    RemoteError {
        code: e
            .get("code")
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok())
            .unwrap_or(0),
        reason: reason_in(e.get("data")),
        message: e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .chars()
            .take(500)
            .collect(),
        status,
    }
}

/// An HTTP+JSON error body (`{"error": google.rpc.Status}`) as a [`RemoteError`].
fn rest_error(v: &Value, status: u16) -> Option<RemoteError> {
    let e = v.get("error")?;
    let reason = reason_in(e.get("details"));
    Some(RemoteError {
        code: reason.as_deref().map(code_of_reason).unwrap_or(0),
        reason,
        message: e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .chars()
            .take(500)
            .collect(),
        status,
    })
}

/// A client bound to one interface of one agent.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    endpoint: Endpoint,
    signer: Option<Arc<dyn Signer>>,
    limits: ClientLimits,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("signed", &self.signer.is_some())
            .finish_non_exhaustive()
    }
}

/// The events of a streamed task, as the server sends them.
pub struct ClientStream {
    resp: reqwest::Response,
    url: String,
    binding: Binding,
    decoder: Decoder,
    queue: VecDeque<SseEvent>,
    done: bool,
}

impl std::fmt::Debug for ClientStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientStream")
            .field("url", &self.url)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl ClientStream {
    /// The next event; `None` when the server closed the stream. After an error the stream is
    /// over.
    pub async fn next(&mut self) -> Option<Result<StreamResponse, ClientError>> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                let r = self.event(ev);
                if r.is_err() {
                    self.done = true;
                }
                return Some(r);
            }
            if self.done {
                return None;
            }
            match self.resp.chunk().await {
                Ok(Some(chunk)) => {
                    if let Err(source) = self.decoder.push(&chunk, &mut self.queue) {
                        self.done = true;
                        return Some(Err(ClientError::Stream {
                            url: self.url.clone(),
                            source,
                        }));
                    }
                }
                Ok(None) => self.done = true,
                Err(source) => {
                    self.done = true;
                    return Some(Err(ClientError::Http {
                        url: self.url.clone(),
                        source,
                    }));
                }
            }
        }
    }

    fn event(&self, ev: SseEvent) -> Result<StreamResponse, ClientError> {
        let invalid = |reason: String| ClientError::InvalidResponse {
            url: self.url.clone(),
            reason,
        };
        let v: Value = serde_json::from_str(&ev.data)
            .map_err(|e| invalid(format!("SSE event is not JSON: {e}")))?;
        let payload = match self.binding {
            Binding::JsonRpc => {
                if let Some(e) = v.get("error") {
                    return Err(ClientError::Remote {
                        url: self.url.clone(),
                        error: jsonrpc_error(e, 200),
                    });
                }
                v.get("result")
                    .cloned()
                    .ok_or_else(|| invalid("JSON-RPC event without result".into()))?
            }
            Binding::HttpJson => {
                if ev.event == "error" || v.get("error").is_some() {
                    let error = rest_error(&v, 200).ok_or_else(|| {
                        invalid(format!("error event: {}", snippet(ev.data.as_bytes())))
                    })?;
                    return Err(ClientError::Remote {
                        url: self.url.clone(),
                        error,
                    });
                }
                v
            }
        };
        serde_json::from_value(payload).map_err(|e| invalid(format!("stream event: {e}")))
    }
}

/// How a prepared request reads its response.
enum Expect {
    Json,
    Stream,
}

impl Client {
    /// A client for `endpoint`.
    pub fn new(http: reqwest::Client, endpoint: Endpoint, signer: Option<Arc<dyn Signer>>) -> Self {
        Client {
            http,
            endpoint,
            signer,
            limits: ClientLimits::default(),
        }
    }

    /// A client for the first interface of `card` we speak; refuses if there is none.
    pub fn from_card(
        http: reqwest::Client,
        card: &Value,
        signer: Option<Arc<dyn Signer>>,
    ) -> Result<Self, ClientError> {
        Ok(Client::new(http, choose_interface(card)?, signer))
    }

    /// With these bounds.
    pub fn with_limits(mut self, limits: ClientLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The interface in use.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn rest_url(&self, segments: &[&str], query: &[(&str, String)]) -> Result<Url, ClientError> {
        let mut url = self.endpoint.url.clone();
        {
            let mut p = url.path_segments_mut().map_err(|_| {
                ClientError::InvalidCard(format!("{} cannot be a base URL", self.endpoint.url))
            })?;
            p.pop_if_empty();
            for s in segments {
                p.push(s);
            }
        }
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        Ok(url)
    }

    /// Build (and sign, when the client has a signer) a request without sending it.
    async fn prepare(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
        content_type: &'static str,
        expect: Expect,
    ) -> Result<PreparedRequest, ClientError> {
        let mut headers = HeaderMap::new();
        headers.insert(VERSION_HEADER, HeaderValue::from_static(PROTOCOL_VERSION));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static(match expect {
                Expect::Json => content_type,
                Expect::Stream => "text/event-stream",
            }),
        );
        if body.is_some() {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        }
        let body = body.unwrap_or_default();
        if let Some(token) = self.signer.as_ref().and_then(|s| s.token(&url)) {
            headers.insert(AUTHORIZATION, token);
        } else if let Some(signer) = &self.signer {
            let extra = signer
                .sign(SignRequest {
                    method: &method,
                    url: &url,
                    headers: &headers,
                    body: &body,
                })
                .await?;
            headers.extend(extra);
        }
        Ok(PreparedRequest {
            method,
            url,
            headers,
            body,
        })
    }

    /// Send a prepared request. One sent with an access token that the server refuses (401)
    /// is signed and sent once more.
    async fn execute(&self, req: PreparedRequest) -> Result<reqwest::Response, ClientError> {
        let with_token = self.signer.is_some()
            && req
                .headers
                .get(AUTHORIZATION)
                .is_some_and(|v| v.as_bytes().starts_with(b"Bearer "));
        let again = with_token.then(|| req.clone());
        let resp = self.send_prepared(req, with_token).await?;
        let (Some(mut req), Some(signer)) = (again, &self.signer) else {
            return Ok(resp);
        };
        if resp.status() != reqwest::StatusCode::UNAUTHORIZED {
            return Ok(resp);
        }
        req.headers.remove(AUTHORIZATION);
        let extra = signer
            .sign(SignRequest {
                method: &req.method,
                url: &req.url,
                headers: &req.headers,
                body: &req.body,
            })
            .await?;
        req.headers.extend(extra);
        self.send_prepared(req, false).await
    }

    async fn send_prepared(
        &self,
        req: PreparedRequest,
        with_token: bool,
    ) -> Result<reqwest::Response, ClientError> {
        let PreparedRequest {
            method,
            url,
            headers,
            body,
        } = req;
        let mut rb = self.http.request(method, url.clone()).headers(headers);
        if !body.is_empty() {
            rb = rb.body(body);
        }
        let resp = rb.send().await.map_err(|source| ClientError::Http {
            url: url.to_string(),
            source,
        })?;
        if let Some(s) = &self.signer {
            s.answered(&url, resp.status().as_u16(), resp.headers(), with_token);
        }
        Ok(resp)
    }

    /// Read a response: the JSON value of a success, or the A2A error.
    async fn read_json(&self, resp: reqwest::Response) -> Result<Value, ClientError> {
        let url = resp.url().to_string();
        let status = resp.status();
        let body = read_bounded(resp, &url, self.limits.max_response_bytes).await?;
        let v: Option<Value> = serde_json::from_slice(&body).ok();
        match self.endpoint.binding {
            Binding::JsonRpc => {
                let Some(v) = v else {
                    return Err(if status.is_success() {
                        ClientError::InvalidResponse {
                            url,
                            reason: "response is not JSON".into(),
                        }
                    } else {
                        ClientError::Status {
                            url,
                            status: status.as_u16(),
                            body: snippet(&body),
                        }
                    });
                };
                if let Some(e) = v.get("error") {
                    return Err(ClientError::Remote {
                        url,
                        error: jsonrpc_error(e, status.as_u16()),
                    });
                }
                if !status.is_success() {
                    return Err(ClientError::Status {
                        url,
                        status: status.as_u16(),
                        body: snippet(&body),
                    });
                }
                v.get("result")
                    .cloned()
                    .ok_or_else(|| ClientError::InvalidResponse {
                        url,
                        reason: "JSON-RPC response without result or error".into(),
                    })
            }
            Binding::HttpJson => {
                if status.is_success() {
                    return v.ok_or_else(|| ClientError::InvalidResponse {
                        url,
                        reason: "response is not JSON".into(),
                    });
                }
                match v.as_ref().and_then(|v| rest_error(v, status.as_u16())) {
                    Some(error) => Err(ClientError::Remote { url, error }),
                    None => Err(ClientError::Status {
                        url,
                        status: status.as_u16(),
                        body: snippet(&body),
                    }),
                }
            }
        }
    }

    /// The request for one operation, in the client's binding, built and signed.
    async fn prepare_call(
        &self,
        jsonrpc_method: &str,
        params: Value,
        rest: (Method, Url, Option<Value>),
        expect: Expect,
    ) -> Result<PreparedRequest, ClientError> {
        match self.endpoint.binding {
            Binding::JsonRpc => {
                let id = uuid::Uuid::new_v4().to_string();
                let body =
                    json!({"jsonrpc": "2.0", "id": id, "method": jsonrpc_method, "params": params});
                self.prepare(
                    Method::POST,
                    self.endpoint.url.clone(),
                    Some(serde_json::to_vec(&body).unwrap_or_default()),
                    "application/json",
                    expect,
                )
                .await
            }
            Binding::HttpJson => {
                let (method, url, body) = rest;
                let body = body.map(|b| serde_json::to_vec(&b).unwrap_or_default());
                self.prepare(method, url, body, A2A_JSON, expect).await
            }
        }
    }

    async fn call(
        &self,
        jsonrpc_method: &str,
        params: Value,
        rest: (Method, Url, Option<Value>),
        expect: Expect,
    ) -> Result<reqwest::Response, ClientError> {
        let req = self
            .prepare_call(jsonrpc_method, params, rest, expect)
            .await?;
        self.execute(req).await
    }

    async fn unary<T: DeserializeOwned>(
        &self,
        jsonrpc_method: &str,
        params: Value,
        rest: (Method, Url, Option<Value>),
    ) -> Result<T, ClientError> {
        let resp = self
            .call(jsonrpc_method, params, rest, Expect::Json)
            .await?;
        let url = resp.url().to_string();
        let v = self.read_json(resp).await?;
        serde_json::from_value(v).map_err(|e| ClientError::InvalidResponse {
            url,
            reason: e.to_string(),
        })
    }

    async fn stream(
        &self,
        jsonrpc_method: &str,
        params: Value,
        rest: (Method, Url, Option<Value>),
    ) -> Result<ClientStream, ClientError> {
        let resp = self
            .call(jsonrpc_method, params, rest, Expect::Stream)
            .await?;
        let is_sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if !resp.status().is_success() || !is_sse {
            let url = resp.url().to_string();
            self.read_json(resp).await?;
            return Err(ClientError::InvalidResponse {
                url,
                reason: "expected an SSE stream".into(),
            });
        }
        Ok(ClientStream {
            url: resp.url().to_string(),
            resp,
            binding: self.endpoint.binding,
            decoder: Decoder::new(self.limits.max_sse_line, self.limits.max_sse_event),
            queue: VecDeque::new(),
            done: false,
        })
    }

    fn to_json<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap_or(Value::Null)
    }

    /// `SendMessage`.
    pub async fn send_message(
        &self,
        req: &SendMessageRequest,
    ) -> Result<SendMessageResponse, ClientError> {
        let p = Self::to_json(req);
        let url = self.rest_url(&["message:send"], &[])?;
        self.unary("SendMessage", p.clone(), (Method::POST, url, Some(p)))
            .await
    }

    /// The `SendMessage` request exactly as [`Client::send_message`] would send it (signed by
    /// the client's [`Signer`], if any), without sending it: for load generators that replay
    /// pre-signed requests (`agentnet-sim --bin signed_requests`).
    pub async fn prepare_send_message(
        &self,
        req: &SendMessageRequest,
    ) -> Result<PreparedRequest, ClientError> {
        let p = Self::to_json(req);
        let url = self.rest_url(&["message:send"], &[])?;
        self.prepare_call(
            "SendMessage",
            p.clone(),
            (Method::POST, url, Some(p)),
            Expect::Json,
        )
        .await
    }

    /// `SendStreamingMessage`.
    pub async fn send_streaming(
        &self,
        req: &SendMessageRequest,
    ) -> Result<ClientStream, ClientError> {
        let p = Self::to_json(req);
        let url = self.rest_url(&["message:stream"], &[])?;
        self.stream(
            "SendStreamingMessage",
            p.clone(),
            (Method::POST, url, Some(p)),
        )
        .await
    }

    /// `GetTask`.
    pub async fn get_task(&self, req: &GetTaskRequest) -> Result<Task, ClientError> {
        let mut q = Vec::new();
        if let Some(h) = req.history_length {
            q.push(("historyLength", h.to_string()));
        }
        let url = self.rest_url(&["tasks", &req.id], &q)?;
        self.unary("GetTask", Self::to_json(req), (Method::GET, url, None))
            .await
    }

    /// `ListTasks`. Missing `nextPageToken`/`pageSize`/`totalSize` (ProtoJSON writers may
    /// omit defaults) are read as their defaults.
    pub async fn list_tasks(
        &self,
        req: &ListTasksRequest,
    ) -> Result<ListTasksResponse, ClientError> {
        let mut q = Vec::new();
        if let Value::Object(m) = Self::to_json(req) {
            for (k, v) in m {
                if k == "tenant" {
                    continue;
                }
                let s = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                q.push((k, s));
            }
        }
        let q: Vec<(&str, String)> = q.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let url = self.rest_url(&["tasks"], &q)?;
        let resp = self
            .call(
                "ListTasks",
                Self::to_json(req),
                (Method::GET, url, None),
                Expect::Json,
            )
            .await?;
        let url = resp.url().to_string();
        let mut v = self.read_json(resp).await?;
        if let Value::Object(m) = &mut v {
            m.entry("tasks").or_insert_with(|| json!([]));
            m.entry("nextPageToken").or_insert_with(|| json!(""));
            m.entry("pageSize").or_insert_with(|| json!(0));
            m.entry("totalSize").or_insert_with(|| json!(0));
        }
        serde_json::from_value(v).map_err(|e| ClientError::InvalidResponse {
            url,
            reason: e.to_string(),
        })
    }

    /// `CancelTask`.
    pub async fn cancel_task(&self, req: &CancelTaskRequest) -> Result<Task, ClientError> {
        let seg = format!("{}:cancel", req.id);
        let url = self.rest_url(&["tasks", &seg], &[])?;
        let mut body = Self::to_json(req);
        if let Value::Object(m) = &mut body {
            m.remove("id");
            m.remove("tenant");
        }
        self.unary(
            "CancelTask",
            Self::to_json(req),
            (Method::POST, url, Some(body)),
        )
        .await
    }

    /// `SubscribeToTask`.
    pub async fn subscribe(
        &self,
        req: &SubscribeToTaskRequest,
    ) -> Result<ClientStream, ClientError> {
        let seg = format!("{}:subscribe", req.id);
        let url = self.rest_url(&["tasks", &seg], &[])?;
        self.stream(
            "SubscribeToTask",
            Self::to_json(req),
            (Method::POST, url, None),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_choice() {
        let card = json!({"supportedInterfaces": [
            {"url": "https://a/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "https://a/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "https://a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "https://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ]});
        let e = choose_interface(&card).unwrap();
        assert_eq!(e.binding, Binding::HttpJson);
        assert_eq!(e.url.as_str(), "https://a/rest");

        let none = json!({"supportedInterfaces": [
            {"url": "https://a/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "https://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "2.0"},
            {"url": "ftp://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ]});
        assert!(matches!(
            choose_interface(&none),
            Err(ClientError::NoSupportedInterface { offered }) if offered.len() == 3
        ));
        assert!(matches!(
            choose_interface(&json!({"url": "x"})),
            Err(ClientError::InvalidCard(_))
        ));
    }

    #[test]
    fn rest_urls_encode_ids() {
        let c = Client::new(
            agentnet_did::http::client(),
            Endpoint {
                url: Url::parse("http://h/agents/echo").unwrap(),
                binding: Binding::HttpJson,
            },
            None,
        );
        let u = c.rest_url(&["tasks", "a/b?c:cancel"], &[]).unwrap();
        assert_eq!(u.as_str(), "http://h/agents/echo/tasks/a%2Fb%3Fc:cancel");
        let u = c.rest_url(&["tasks"], &[("pageSize", "5".into())]).unwrap();
        assert_eq!(u.as_str(), "http://h/agents/echo/tasks?pageSize=5");
    }

    #[test]
    fn a_refusal_reads_as_what_was_refused_and_why() {
        let e = RemoteError {
            code: -32000,
            reason: Some("PERMISSION_DENIED".into()),
            message: "delegation: the agent is not among the agents granted".into(),
            status: 200,
        };
        assert_eq!(
            e.to_string(),
            "PERMISSION_DENIED: delegation: the agent is not among the agents granted"
        );
        let e = RemoteError {
            code: -32001,
            reason: None,
            message: "task not found".into(),
            status: 404,
        };
        assert_eq!(e.to_string(), "error -32001: task not found (HTTP 404)");
    }
}
