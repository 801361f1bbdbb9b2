//! The A2A server: one [`Engine`] behind both bindings, as an [`axum::Router`].
//!
//! [`Server::router`] serves, relative to where it is mounted (the node nests it under the
//! agent's path on its public listener, behind its bounded HTTP server):
//!
//! | route | what |
//! | --- | --- |
//! | `GET /.well-known/agent-card.json` | the agent's card, as configured (a signed card is served byte-for-byte as its JSON value), with `Cache-Control: public, max-age=300`, a strong `ETag` (SHA-256 of the bytes) and `Last-Modified`; 304 for a matching `If-None-Match` (else `If-Modified-Since`) |
//! | `POST /` | JSON-RPC 2.0 (also at `<base>/` where the router is nested: [`Server::jsonrpc_route`]): `SendMessage`, `SendStreamingMessage` (SSE), `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask` (SSE), `GetExtendedAgentCard`; the push-config methods answer `PushNotificationNotSupported` |
//! | `POST /message:send`, `POST /message:stream` | HTTP+JSON send, blocking and SSE |
//! | `GET /tasks/{id}`, `GET /tasks`, `POST /tasks/{id}:cancel` | HTTP+JSON get, list (query parameters in camelCase), cancel |
//! | `GET` or `POST /tasks/{id}:subscribe` | HTTP+JSON subscribe, SSE (the proto says GET, the spec's table and the Python SDK POST) |
//! | `/tasks/{id}/pushNotificationConfigs…` | `PushNotificationNotSupported` |
//! | `GET /extendedAgentCard` | the extended card, if configured, to identified callers |
//!
//! Every request except the card goes through, in this order: the body read with the size
//! limit (413), the content type of a body (`application/a2a+json` or `application/json`,
//! else 415), for JSON-RPC the JSON parse (-32700) and the request object (-32600), the
//! `A2A-Version` header or query parameter (missing means 0.3; only 1.0 is served, else
//! `VersionNotSupported`), then the [`Authenticator`] and the agent's [`Policy`] (401). JSON-RPC
//! errors travel with HTTP 200, except 401, 413 and 415 (with -32005); HTTP+JSON errors use the
//! spec's status codes and a `google.rpc.Status` body. Every JSON response is
//! `application/json`. Request fields may use their proto names (`history_length`) beside their
//! JSON names, as ProtoJSON parsers accept both.
//!
//! SSE streams send a keep-alive comment every [`Limits::keep_alive`], and are never cut by a
//! timeout here (the node's request timeout covers the response head only).

use std::convert::Infallible;
use std::sync::Arc;

use a2a::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, SendMessageRequest, StreamResponse,
    SubscribeToTaskRequest,
};
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use crate::auth::{decide, Authenticator, Caller, Owner, Policy, RequestParts, Source};
use crate::engine::{Engine, EventStream, Limits};
use crate::error::ProtocolError;
use crate::gate::Gate;
use crate::handler::Handler;
use crate::store::TaskStore;

/// The media type of the HTTP+JSON binding, accepted in requests beside `application/json`.
pub const A2A_JSON: &str = "application/a2a+json";

/// The media type of every JSON response of both bindings: `application/json`, as A2A 1.0
/// section 11.1 and the official TCK expect (`HTTP_JSON-SVC-001`, `HTTP_JSON-ERR-001`).
pub const RESPONSE_JSON: &str = "application/json";

/// The protocol version this server speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The version header (A2A 1.0 section 3.6).
pub const VERSION_HEADER: &str = "A2A-Version";

/// How one agent is served.
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// The public Agent Card, served as is at `/.well-known/agent-card.json`.
    pub card: Value,
    /// The extended card for identified callers (`GetExtendedAgentCard`); `None` answers
    /// `ExtendedAgentCardNotConfigured`.
    pub extended_card: Option<Value>,
    /// Who may call.
    pub policy: Policy,
    /// The bounds.
    pub limits: Limits,
    /// The admission check before any work ([`crate::gate`]).
    pub gate: Option<Arc<dyn Gate>>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .field("gate", &self.gate.is_some())
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Serve `card` with the default policy ([`Policy::Did`]) and limits.
    pub fn new(card: Value) -> Self {
        Config {
            card,
            extended_card: None,
            policy: Policy::default(),
            limits: Limits::default(),
            gate: None,
        }
    }

    /// With an admission check.
    pub fn gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// With this policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// With these limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// With an extended card.
    pub fn extended_card(mut self, card: Value) -> Self {
        self.extended_card = Some(card);
        self
    }
}

/// How long a client may cache the card (`Cache-Control: max-age`): 5 minutes. The card only
/// changes when the node restarts with another configuration; a client that cached it longer
/// revalidates with `If-None-Match` for a body-less 304.
pub const CARD_MAX_AGE_SECS: u64 = 300;

/// A card as served: its bytes and their validators, computed once. The agent's card is one;
/// the node serves its own card with one too.
pub struct ServedCard {
    bytes: Bytes,
    /// `"<base64url SHA-256 of the bytes>"`: a strong ETag, so it matches the bytes exactly.
    etag: HeaderValue,
    /// When this server was built (an HTTP date).
    last_modified: HeaderValue,
    modified: chrono::DateTime<chrono::Utc>,
}

impl std::fmt::Debug for ServedCard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedCard")
            .field("etag", &self.etag)
            .field("bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl ServedCard {
    /// `card` serialized once, with its `ETag` and, as `Last-Modified`, now.
    pub fn new(card: &Value) -> ServedCard {
        use base64::Engine as _;
        use sha2::Digest as _;
        let bytes = Bytes::from(serde_json::to_vec(card).unwrap_or_default());
        let digest = sha2::Sha256::digest(&bytes);
        let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
        // Second precision: an HTTP date carries no more, and If-Modified-Since compares it.
        let modified =
            chrono::DateTime::from_timestamp(chrono::Utc::now().timestamp(), 0).unwrap_or_default();
        ServedCard {
            bytes,
            etag: HeaderValue::from_str(&format!("\"{tag}\""))
                .unwrap_or_else(|_| HeaderValue::from_static("\"card\"")),
            last_modified: HeaderValue::from_str(
                &modified.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
            )
            .unwrap_or_else(|_| HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT")),
            modified,
        }
    }

    /// Does the request's `If-None-Match` (else its `If-Modified-Since`) say the client has
    /// these bytes already? (RFC 9110 section 13.1: `If-None-Match` wins; weak comparison.)
    fn not_modified(&self, headers: &HeaderMap) -> bool {
        let ours = self.etag.as_bytes();
        let inm: Vec<&HeaderValue> = headers.get_all(header::IF_NONE_MATCH).iter().collect();
        if !inm.is_empty() {
            return inm.iter().any(|v| {
                v.to_str().unwrap_or("").split(',').any(|t| {
                    let t = t.trim();
                    t == "*" || t.strip_prefix("W/").unwrap_or(t).as_bytes() == ours
                })
            });
        }
        headers
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| chrono::DateTime::parse_from_rfc2822(v.trim()).ok())
            .is_some_and(|since| since >= self.modified)
    }

    /// The answer to a `GET` with these request headers: the card (`application/json`), or 304
    /// when the client's validator matches; `ETag`, `Last-Modified` and `Cache-Control` either
    /// way.
    pub fn response(&self, headers: &HeaderMap) -> Response {
        let mut r = if self.not_modified(headers) {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            r
        } else {
            let mut r = Response::new(Body::from(self.bytes.clone()));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(RESPONSE_JSON),
            );
            r
        };
        let h = r.headers_mut();
        h.insert(header::ETAG, self.etag.clone());
        h.insert(header::LAST_MODIFIED, self.last_modified.clone());
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_str(&format!("public, max-age={CARD_MAX_AGE_SECS}"))
                .unwrap_or_else(|_| HeaderValue::from_static("public, max-age=300")),
        );
        r
    }
}

/// One agent's A2A server.
pub struct Server {
    engine: Engine,
    card: ServedCard,
    extended_card: Option<Value>,
    policy: Policy,
    auth: Arc<dyn Authenticator>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("policy", &self.policy)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

/// Which binding a request came by, for the shape of its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    JsonRpc,
    Rest,
}

impl Server {
    /// A server for `handler`'s agent, keeping tasks in `store`, identifying callers with
    /// `auth`.
    pub fn new(
        config: Config,
        handler: Arc<dyn Handler>,
        store: Arc<dyn TaskStore>,
        auth: Arc<dyn Authenticator>,
    ) -> Arc<Server> {
        Arc::new(Server {
            engine: Engine::gated(handler, store, config.limits, config.gate),
            card: ServedCard::new(&config.card),
            extended_card: config.extended_card,
            policy: config.policy,
            auth,
        })
    }

    /// The engine (to shut it down, or for tests).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The routes of both bindings, relative to the agent's base URL.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/.well-known/agent-card.json", get(card))
            .route("/", post(jsonrpc))
            .route("/message:send", post(rest_send))
            .route("/message:stream", post(rest_stream))
            .route("/tasks", get(rest_list))
            .route(
                "/tasks/{*rest}",
                get(rest_task).post(rest_task).delete(rest_task),
            )
            .route("/extendedAgentCard", get(rest_extended_card))
            .fallback(rest_not_found)
            .with_state(self.clone())
    }

    /// JSON-RPC alone, for `<base>/` where the router is nested at `<base>`: nested routers
    /// do not match a trailing slash, and JSON-RPC clients (the official TCK's, httpx joining
    /// `"/"` to the interface URL) post to `<interface url>/`. Route it beside the nest:
    /// `outer.nest(base, s.router()).route(&format!("{base}/"), s.jsonrpc_route())`.
    pub fn jsonrpc_route(self: &Arc<Self>) -> axum::routing::MethodRouter {
        post(jsonrpc).with_state(self.clone())
    }

    /// Size, media type, version: the checks before anything is parsed or authenticated.
    async fn read(&self, req: Request) -> Result<(Parts, Bytes), ProtocolError> {
        let (parts, body) = req.into_parts();
        let limit = self.engine.limits().max_body_bytes;
        if let Some(len) = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        {
            if len > limit as u64 {
                return Err(ProtocolError::TooLarge(limit));
            }
        }
        let bytes = axum::body::to_bytes(body, limit)
            .await
            .map_err(|_| ProtocolError::TooLarge(limit))?;
        // Checked once, here: a message nested just under serde_json's limit would be stored
        // one level deeper, inside the task, and then could not be read back.
        let max_depth = self
            .engine
            .limits()
            .max_json_depth
            .min(crate::store::MAX_RECORD_DEPTH - 8);
        if crate::store::json_depth(&bytes) > max_depth {
            return Err(ProtocolError::InvalidRequest(format!(
                "the request's JSON is nested deeper than {max_depth} levels"
            )));
        }
        if !bytes.is_empty() || parts.method == Method::POST {
            check_media_type(&parts.headers, bytes.is_empty())?;
        }
        // The node serves with `into_make_service_with_connect_info`; a router called in
        // process (tests) has no peer address: its callers are one local source.
        let source = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| Source::of(c.0.ip()))
            .unwrap_or(Source::Local);
        Ok((
            Parts {
                method: parts.method,
                uri: parts.uri,
                headers: parts.headers,
                source,
            },
            bytes,
        ))
    }

    async fn caller(&self, parts: &Parts, body: &[u8]) -> Result<Caller, ProtocolError> {
        let identity = self
            .auth
            .authenticate(RequestParts {
                method: &parts.method,
                uri: &parts.uri,
                headers: &parts.headers,
                body,
            })
            .await;
        decide(self.policy, identity, parts.source)
    }

    fn extended(&self, caller: &Caller) -> Result<Value, ProtocolError> {
        match (&self.extended_card, &caller.owner) {
            (Some(card), Owner::Caller(_)) => Ok(card.clone()),
            _ => Err(ProtocolError::ExtendedAgentCardNotConfigured),
        }
    }
}

/// What the server keeps of a request after reading its body.
struct Parts {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    source: Source,
}

fn check_media_type(headers: &HeaderMap, empty: bool) -> Result<(), ProtocolError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        // A POST without a body (cancel, subscribe) needs no content type.
        return if empty {
            Ok(())
        } else {
            Err(ProtocolError::MediaType(String::new()))
        };
    };
    let ct = ct.to_str().unwrap_or("");
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence == A2A_JSON || essence == "application/json" {
        Ok(())
    } else {
        Err(ProtocolError::MediaType(ct.chars().take(100).collect()))
    }
}

/// The requested version: the header, else the `A2A-Version` query parameter, else 0.3.
fn check_version(parts: &Parts) -> Result<(), ProtocolError> {
    let from_header = parts
        .headers
        .get(VERSION_HEADER)
        .map(|v| v.to_str().unwrap_or("?").trim().to_string());
    let from_query = || {
        url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
            .find(|(k, _)| k.eq_ignore_ascii_case(VERSION_HEADER))
            .map(|(_, v)| v.trim().to_string())
    };
    let v = from_header
        .filter(|v| !v.is_empty())
        .or_else(|| from_query().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "0.3".to_string());
    // Major.Minor decides; a patch number, which clients should not send, is ignored.
    let mut it = v.split('.');
    let (major, minor) = (it.next(), it.next());
    let patch_ok = it
        .next()
        .is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if major == Some("1") && minor == Some("0") && patch_ok && it.next().is_none() {
        Ok(())
    } else {
        Err(ProtocolError::VersionNotSupported(
            v.chars().take(32).collect(),
        ))
    }
}

fn json_response(status: StatusCode, content_type: &'static str, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut r = Response::new(Body::from(bytes));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, ProtocolError> {
    serde_json::to_value(v).map_err(|e| ProtocolError::Internal(format!("serializing: {e}")))
}

fn parse<T: DeserializeOwned>(v: Value) -> Result<T, ProtocolError> {
    serde_json::from_value(v).map_err(|e| ProtocolError::InvalidParams(e.to_string()))
}

fn error_response(binding: Binding, id: &Value, e: &ProtocolError) -> Response {
    let mut r = match binding {
        Binding::JsonRpc => {
            let status = match e {
                ProtocolError::Unauthenticated(_)
                | ProtocolError::TooLarge(_)
                | ProtocolError::MediaType(_) => e.http_status(),
                _ => StatusCode::OK,
            };
            json_response(
                status,
                "application/json",
                &json!({"jsonrpc": "2.0", "id": id, "error": e.to_jsonrpc()}),
            )
        }
        Binding::Rest => json_response(e.http_status(), RESPONSE_JSON, &e.to_rest()),
    };
    if matches!(e, ProtocolError::Unauthenticated(_)) {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Signature"),
        );
    }
    r
}

/// An SSE response over `events`; each event's data is `wrap(StreamResponse)`.
fn sse(
    events: EventStream,
    keep_alive: std::time::Duration,
    wrap: impl Fn(&StreamResponse) -> Value + Send + Sync + 'static,
) -> Response {
    let stream = futures_util::stream::unfold((events, wrap), |(mut events, wrap)| async move {
        let ev = events.next().await?;
        let data = serde_json::to_string(&wrap(&ev)).unwrap_or_default();
        Some((
            Ok::<_, Infallible>(Event::default().data(data)),
            (events, wrap),
        ))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response()
}

/// The card, with `Cache-Control`, `ETag` and `Last-Modified` (A2A 1.0 section 8.6); a
/// conditional GET whose validator matches gets 304 without the body.
async fn card(State(s): State<Arc<Server>>, headers: HeaderMap) -> Response {
    s.card.response(&headers)
}

// ---- JSON-RPC ------------------------------------------------------------------------------

/// A JSON-RPC request as read off the wire: the members are kept as raw JSON text and checked
/// one by one, so that `params` is deserialized once, straight into its request type (no
/// intermediate `Value` tree: profiled, that was a tenth of a `SendMessage`'s CPU with the
/// result's own `Value`).
#[derive(serde::Deserialize)]
struct RawEnvelope<'a> {
    #[serde(borrow)]
    jsonrpc: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    id: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    method: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    params: Option<&'a serde_json::value::RawValue>,
}

/// A checked JSON-RPC request.
struct Envelope<'a> {
    method: String,
    params: Params<'a>,
}

/// A request's `params`: an object, or absent (read as `{}`).
struct Params<'a>(Option<&'a str>);

impl Params<'_> {
    fn parse<T: DeserializeOwned>(&self) -> Result<T, ProtocolError> {
        let text = self.0.unwrap_or("{}");
        // A proto field name has an underscore; without one there is nothing to rename and the
        // params go straight into their type.
        if !text.contains('_') {
            return serde_json::from_str(text)
                .map_err(|e| ProtocolError::InvalidParams(e.to_string()));
        }
        let mut v: Value =
            serde_json::from_str(text).map_err(|e| ProtocolError::InvalidParams(e.to_string()))?;
        json_names(&mut v);
        parse(v)
    }
}

/// Rename proto field names (`history_length`) to their JSON names (`historyLength`) in a
/// request's params, as ProtoJSON parsers accept both (the official TCK's JSON-RPC client sends
/// the proto names). Only the request messages' own fields are renamed: the params object, its
/// `configuration`, its `message` and the message's `parts`. `metadata` and a data part's
/// `data` are the caller's JSON and are left as they are. A JSON name present beside its
/// proto name wins.
fn json_names(v: &mut Value) {
    fn rename(o: &mut Map<String, Value>) {
        let snake: Vec<String> = o.keys().filter(|k| k.contains('_')).cloned().collect();
        for k in snake {
            let mut camel = String::with_capacity(k.len());
            let mut upper = false;
            for c in k.chars() {
                if c == '_' {
                    upper = true;
                } else if upper {
                    camel.extend(c.to_uppercase());
                    upper = false;
                } else {
                    camel.push(c);
                }
            }
            if let Some(val) = o.remove(&k) {
                o.entry(camel).or_insert(val);
            }
        }
    }
    let Some(params) = v.as_object_mut() else {
        return;
    };
    rename(params);
    if let Some(c) = params
        .get_mut("configuration")
        .and_then(Value::as_object_mut)
    {
        rename(c);
    }
    if let Some(m) = params.get_mut("message").and_then(Value::as_object_mut) {
        rename(m);
        if let Some(parts) = m.get_mut("parts").and_then(Value::as_array_mut) {
            for p in parts.iter_mut().filter_map(Value::as_object_mut) {
                rename(p);
            }
        }
    }
}

impl<'a> Envelope<'a> {
    /// Check the request; its `id` goes to `id_out` as soon as it is known to be valid, so
    /// that an error about the other members still answers that id.
    fn parse(body: &'a [u8], id_out: &mut Value) -> Result<Envelope<'a>, ProtocolError> {
        use serde_json::error::Category;
        let raw: RawEnvelope<'a> =
            serde_json::from_slice(body).map_err(|e| match e.classify() {
                Category::Data => ProtocolError::InvalidRequest(
                    "a JSON-RPC request must be an object (batches are not supported)".into(),
                ),
                _ => ProtocolError::Parse(e.to_string()),
            })?;
        // Each member is valid JSON already (the parse above checked it); only its kind is
        // checked here.
        *id_out = match raw.id.map(|r| serde_json::from_str::<Value>(r.get())) {
            Some(Ok(id @ (Value::String(_) | Value::Number(_) | Value::Null))) => id,
            Some(_) => {
                return Err(ProtocolError::InvalidRequest(
                    "id must be a string, a number or null".into(),
                ))
            }
            None => return Err(ProtocolError::InvalidRequest("id is required".into())),
        };
        if raw.jsonrpc.map(|r| r.get()) != Some("\"2.0\"") {
            return Err(ProtocolError::InvalidRequest(
                "jsonrpc must be \"2.0\"".into(),
            ));
        }
        let method = match raw.method.map(|r| serde_json::from_str::<String>(r.get())) {
            Some(Ok(m)) => m,
            _ => {
                return Err(ProtocolError::InvalidRequest(
                    "method must be a string".into(),
                ))
            }
        };
        let params = match raw.params.map(|r| r.get()) {
            None | Some("null") => Params(None),
            Some(p) if p.starts_with('{') => Params(Some(p)),
            Some(_) => {
                return Err(ProtocolError::InvalidRequest(
                    "params must be an object".into(),
                ))
            }
        };
        Ok(Envelope { method, params })
    }
}

/// A JSON-RPC success, serialized straight from the result.
fn rpc_ok<T: serde::Serialize>(id: &Value, result: &T) -> Result<Response, ProtocolError> {
    #[derive(serde::Serialize)]
    struct Success<'a, T> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a T,
    }
    let bytes = serde_json::to_vec(&Success {
        jsonrpc: "2.0",
        id,
        result,
    })
    .map_err(|e| ProtocolError::Internal(format!("serializing: {e}")))?;
    let mut r = Response::new(Body::from(bytes));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

async fn jsonrpc(State(s): State<Arc<Server>>, req: Request) -> Response {
    let mut id = Value::Null;
    match jsonrpc_inner(&s, req, &mut id).await {
        Ok(r) => r,
        Err(e) => error_response(Binding::JsonRpc, &id, &e),
    }
}

async fn jsonrpc_inner(
    s: &Arc<Server>,
    req: Request,
    id_out: &mut Value,
) -> Result<Response, ProtocolError> {
    let (parts, body) = s.read(req).await?;
    let env = Envelope::parse(&body, id_out)?;
    check_version(&parts)?;
    let owner = s.caller(&parts, &body).await?;
    let id = id_out.clone();
    let params = env.params;
    let method = env.method;
    let e = &s.engine;
    let keep_alive = e.limits().keep_alive;
    Ok(match method.as_str() {
        "SendMessage" => rpc_ok(&id, &e.send_message(&owner, params.parse()?).await?)?,
        "GetTask" => rpc_ok(
            &id,
            &e.get_task(&owner, params.parse::<GetTaskRequest>()?)
                .await?,
        )?,
        "ListTasks" => rpc_ok(
            &id,
            &e.list_tasks(&owner, params.parse::<ListTasksRequest>()?)
                .await?,
        )?,
        "CancelTask" => rpc_ok(
            &id,
            &e.cancel_task(&owner, params.parse::<CancelTaskRequest>()?)
                .await?,
        )?,
        "GetExtendedAgentCard" => rpc_ok(&id, &s.extended(&owner)?)?,
        "SendStreamingMessage" | "SubscribeToTask" => {
            let events = if method == "SendStreamingMessage" {
                e.send_streaming(&owner, params.parse::<SendMessageRequest>()?)
                    .await?
            } else {
                e.subscribe(&owner, params.parse::<SubscribeToTaskRequest>()?)
                    .await?
            };
            let id = id_out.clone();
            sse(
                events,
                keep_alive,
                move |ev| json!({"jsonrpc": "2.0", "id": id, "result": ev}),
            )
        }
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => {
            return Err(ProtocolError::PushNotificationNotSupported)
        }
        other => {
            return Err(ProtocolError::MethodNotFound(
                other.chars().take(64).collect(),
            ))
        }
    })
}

// ---- HTTP+JSON -----------------------------------------------------------------------------

fn rest_ok(v: Value) -> Response {
    json_response(StatusCode::OK, RESPONSE_JSON, &v)
}

fn rest_result(r: Result<Response, ProtocolError>) -> Response {
    r.unwrap_or_else(|e| error_response(Binding::Rest, &Value::Null, &e))
}

/// Read, check version, authenticate: the common start of every HTTP+JSON operation.
async fn rest_start(s: &Server, req: Request) -> Result<(Parts, Bytes, Caller), ProtocolError> {
    let (parts, body) = s.read(req).await?;
    check_version(&parts)?;
    let owner = s.caller(&parts, &body).await?;
    Ok((parts, body, owner))
}

fn body_json(body: &[u8]) -> Result<Value, ProtocolError> {
    if body.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let mut v = serde_json::from_slice(body).map_err(|e| ProtocolError::Parse(e.to_string()))?;
    json_names(&mut v);
    Ok(v)
}

/// Query parameters as the JSON object of a request message: camelCase names (or the proto
/// names, `history_length`), numbers and booleans typed as the named fields are. Unknown
/// names are ignored.
fn query_object(uri: &Uri) -> Result<Map<String, Value>, ProtocolError> {
    let mut m = Map::new();
    for (k, v) in url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
        let k: std::borrow::Cow<'_, str> = match k.as_ref() {
            "page_size" => "pageSize".into(),
            "history_length" => "historyLength".into(),
            "include_artifacts" => "includeArtifacts".into(),
            "context_id" => "contextId".into(),
            "page_token" => "pageToken".into(),
            "status_timestamp_after" => "statusTimestampAfter".into(),
            _ => k,
        };
        let value = match k.as_ref() {
            "pageSize" | "historyLength" => Value::from(
                v.parse::<i32>()
                    .map_err(|_| ProtocolError::InvalidParams(format!("{k} must be an integer")))?,
            ),
            "includeArtifacts" => match v.as_ref() {
                "true" | "True" => Value::Bool(true),
                "false" | "False" => Value::Bool(false),
                _ => {
                    return Err(ProtocolError::InvalidParams(
                        "includeArtifacts must be true or false".into(),
                    ))
                }
            },
            "contextId" | "status" | "pageToken" | "statusTimestampAfter" => {
                Value::String(v.into_owned())
            }
            _ => continue,
        };
        m.insert(k.into_owned(), value);
    }
    Ok(m)
}

async fn rest_send(State(s): State<Arc<Server>>, req: Request) -> Response {
    rest_result(
        async {
            let (_, body, owner) = rest_start(&s, req).await?;
            let r = s
                .engine
                .send_message(&owner, parse(body_json(&body)?)?)
                .await?;
            Ok(rest_ok(to_value(&r)?))
        }
        .await,
    )
}

async fn rest_stream(State(s): State<Arc<Server>>, req: Request) -> Response {
    rest_result(
        async {
            let (_, body, owner) = rest_start(&s, req).await?;
            let events = s
                .engine
                .send_streaming(&owner, parse(body_json(&body)?)?)
                .await?;
            Ok(sse(events, s.engine.limits().keep_alive, |ev| {
                serde_json::to_value(ev).unwrap_or_default()
            }))
        }
        .await,
    )
}

async fn rest_list(State(s): State<Arc<Server>>, req: Request) -> Response {
    rest_result(
        async {
            let (parts, _, owner) = rest_start(&s, req).await?;
            let q = parse::<ListTasksRequest>(Value::Object(query_object(&parts.uri)?))?;
            Ok(rest_ok(to_value(&s.engine.list_tasks(&owner, q).await?)?))
        }
        .await,
    )
}

async fn rest_task(
    State(s): State<Arc<Server>>,
    Path(rest): Path<String>,
    req: Request,
) -> Response {
    rest_result(
        async {
            let method = req.method().clone();
            let (parts, body, owner) = rest_start(&s, req).await?;
            let e = &s.engine;
            if rest.contains("/pushNotificationConfigs") {
                return Err(ProtocolError::PushNotificationNotSupported);
            }
            if let Some(id) = rest.strip_suffix(":cancel") {
                if method != Method::POST {
                    return Err(ProtocolError::MethodNotFound(format!("{method} :cancel")));
                }
                let mut obj = match body_json(&body)? {
                    Value::Object(o) => o,
                    _ => {
                        return Err(ProtocolError::InvalidParams(
                            "body must be an object".into(),
                        ))
                    }
                };
                obj.insert("id".into(), Value::String(id.to_string()));
                let t = e.cancel_task(&owner, parse(Value::Object(obj))?).await?;
                return Ok(rest_ok(to_value(&t)?));
            }
            if let Some(id) = rest.strip_suffix(":subscribe") {
                if method == Method::DELETE {
                    return Err(ProtocolError::MethodNotFound(format!(
                        "{method} :subscribe"
                    )));
                }
                let events = e
                    .subscribe(
                        &owner,
                        SubscribeToTaskRequest {
                            id: id.to_string(),
                            tenant: None,
                        },
                    )
                    .await?;
                return Ok(sse(events, e.limits().keep_alive, |ev| {
                    serde_json::to_value(ev).unwrap_or_default()
                }));
            }
            if method != Method::GET || rest.contains('/') || rest.contains(':') {
                return Err(ProtocolError::MethodNotFound(format!(
                    "{method} /tasks/{}",
                    rest.chars().take(64).collect::<String>()
                )));
            }
            let mut q = query_object(&parts.uri)?;
            q.insert("id".into(), Value::String(rest.clone()));
            let t = e.get_task(&owner, parse(Value::Object(q))?).await?;
            Ok(rest_ok(to_value(&t)?))
        }
        .await,
    )
}

async fn rest_extended_card(State(s): State<Arc<Server>>, req: Request) -> Response {
    rest_result(
        async {
            let (_, _, owner) = rest_start(&s, req).await?;
            Ok(rest_ok(s.extended(&owner)?))
        }
        .await,
    )
}

async fn rest_not_found(uri: Uri, method: Method) -> Response {
    error_response(
        Binding::Rest,
        &Value::Null,
        &ProtocolError::MethodNotFound(format!(
            "{method} {}",
            uri.path().chars().take(64).collect::<String>()
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(header: Option<&str>, query: &str) -> Parts {
        let mut headers = HeaderMap::new();
        if let Some(h) = header {
            headers.insert(VERSION_HEADER, HeaderValue::from_str(h).unwrap());
        }
        Parts {
            method: Method::GET,
            uri: format!("/tasks{query}").parse().unwrap(),
            headers,
            source: Source::Local,
        }
    }

    #[test]
    fn version_rules() {
        assert!(check_version(&parts(Some("1.0"), "")).is_ok());
        assert!(check_version(&parts(Some(" 1.0 "), "")).is_ok());
        assert!(check_version(&parts(Some("1.0.1"), "")).is_ok());
        assert!(check_version(&parts(None, "?A2A-Version=1.0")).is_ok());
        assert_eq!(
            check_version(&parts(None, "")),
            Err(ProtocolError::VersionNotSupported("0.3".into()))
        );
        for bad in ["0.3", "1.1", "2.0", "1", "1.0.x", "1.0.1.2", "abc"] {
            assert!(check_version(&parts(Some(bad), "")).is_err(), "{bad}");
        }
    }

    #[test]
    fn media_types() {
        let mut h = HeaderMap::new();
        assert!(check_media_type(&h, true).is_ok());
        assert!(check_media_type(&h, false).is_err());
        for ok in [
            "application/json",
            "application/a2a+json",
            "Application/JSON; charset=utf-8",
        ] {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ok));
            assert!(check_media_type(&h, false).is_ok(), "{ok}");
        }
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(check_media_type(&h, false).is_err());
    }
}
