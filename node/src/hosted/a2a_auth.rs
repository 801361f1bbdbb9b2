//! Who calls the hosted agents: the A2A [`Authenticator`] backed by the identity crate's
//! RFC 9421 / `DIDWba` [`Verifier`], with the bounds the verifier leaves to its user.
//!
//! A request is verified against the absolute URL the client addressed: the node's public base
//! URL ([`DidAuthConfig::public_base`], the `http://` address of the public listener unless
//! configured) followed by the request's original path and query. The Host header is never
//! used: a signature made for another server must not verify here. The original path and the
//! client's address come from [`origin_layer`], which the node puts around the A2A routes (the
//! agent routers are nested, and see a stripped path).
//!
//! # Order of checks, and what each costs an outsider
//!
//! 1. No `Signature-Input`/`Signature` and no `Authorization: DIDWba`: no identity
//!    (`Ok(None)`; the agent's policy decides).
//! 2. The signer's DID, nonce and `created` are read from the headers
//!    ([`httpsig::claim`]: string scans, bounded header sizes).
//! 3. A legacy `DIDWba` header is taken only for a message that starts a new task (see
//!    below); anything else with it is refused.
//! 4. Before any signature or document work: a nonce this DID already used is a replay; a DID
//!    holding [`DidAuthConfig::per_did_nonces`] live nonces is refused, and so is a source (the
//!    client's IPv4 address or IPv6 /64) holding [`DidAuthConfig::per_source_nonces`]; a
//!    signature created at or before the cache's floor is refused (see below).
//! 5. A DID whose document is not in the resolver's cache (did:web, did:wba; did:key never
//!    needs a fetch) costs the client's source one token of its fetch budget
//!    ([`DidAuthConfig::fetch_burst`], refilled at [`DidAuthConfig::fetches_per_minute`]); an
//!    empty budget refuses the request without fetching.
//! 6. The verifier: its own cheap checks first (header syntax, covered components, time
//!    window, content digest), then it resolves the DID, checks the key is an `authentication`
//!    key and verifies the signature, and records the nonce in its own cache.
//! 7. The nonce is recorded here, charged to the DID and to the source: only verified requests
//!    are charged, so nobody can use up another DID's quota without its key.
//!
//! # The nonce cache: per DID, per source, in all, and when it is full
//!
//! A nonce is remembered for as long as its signature could verify: until its `created` plus
//! `max_age` (300 s). Each DID may hold `per_did_nonces` of them and each source
//! `per_source_nonces` (`max_nonces / 32` by default), so one address signing with as many
//! fresh did:keys as it likes (free to mint) holds 1/32 of the cache: filling it takes 32
//! networks signing at full rate. (Issue 15: from one address 11 DIDs filled the whole cache
//! and every new signer got 401 for the rest of the window.)
//!
//! Full, the cache does not refuse everyone until entries age out: a verified signature newer
//! than the oldest nonce remembered takes that nonce's place, and from then on every signature
//! created at or before the forgotten one is refused (the *floor*). A forgotten nonce's
//! signature is at or below the floor, so no replay is ever accepted; an honest signer, whose
//! `created` is now, gets in. Under a flood from many networks the window of accepted `created`
//! times shrinks, from `max_age` to the age of the oldest nonce remembered (the cache's size
//! over the flood's rate: about 300 s at the 320 signed requests a second of issue 15, 10 s at
//! 10,000 a second), and it widens again as the flood's nonces expire. What remains: a flood
//! that replaces the whole cache faster than a client's clock lag plus its request's transit
//! refuses that client until the flood stops; since a signature may be dated up to
//! `max_future_skew` (60 s) ahead, a flood dated ahead refuses correct clocks once it replaces
//! the cache within that minute (at the default size, about 1,700 verified signatures a second,
//! from at least 64 networks, since a source at its share is refused, not evicted). A client
//! that keeps the access token it is answered with signs once per token and is not affected.
//! The verifier's own cache (twice this capacity, so that ours decides first) works the same
//! way.
//!
//! # The legacy `DIDWba` header
//!
//! ANP's legacy header signs the DID, a nonce, a timestamp and the server's authority (`aud`)
//! only: no method, path or body. Its `aud` must be this node's authority exactly, host and
//! port as in [`DidAuthConfig::public_base`] ([`httpsig::legacy_audience`]), so a header made
//! for another server, or another port of this host, does not verify here. Since it signs no
//! request, it is taken only for a message that starts a new task (JSON-RPC `SendMessage` or
//! `SendStreamingMessage`, HTTP+JSON `message:send` or `message:stream`, the message naming no
//! `taskId`): whoever captured one could otherwise read (`GetTask`, `ListTasks`, subscribe),
//! continue or cancel the signer's tasks, or call the agent's MCP tools, with it. It earns no
//! access token either. What remains, and `docs/PROTOCOL.md` says: a header captured before it
//! reached the node (plain http, a proxy's log) can start one task as its signer, at any agent
//! of this node, with a message of the captor's choosing, within its 5 minutes; the signer's own
//! request is then a replay.
//!
//! Every refusal is a 401 to the caller (the A2A server maps all authenticator errors to 401),
//! with a message saying which check failed.
//!
//! # Access tokens, as ANP hands them out
//!
//! A caller whose RFC 9421 signature verified gets a short-lived bearer token with the answer, in the
//! headers the ANP SDK reads (`Authentication-Info: access_token="…", token_type="Bearer",
//! expires_in=N`, and the older `Authorization: Bearer …`). It may send it as
//! `Authorization: Bearer …` instead of signing its next requests, to any hosted agent of this
//! node (the ANP client keeps one token per host), until it expires
//! ([`DidAuthConfig::token_ttl`], 15 minutes; zero issues none). A token checks in
//! microseconds where a signature costs an Ed25519 verification and a nonce; it is a bearer
//! credential, so whoever reads it off an unencrypted connection can use it until then: serve
//! the public listener over TLS (`public_url` https) outside testnets, or turn tokens off.
//!
//! [`Tokens`] are stateless, so an outsider cannot make the node store anything with them:
//! `v1.<expiry, Unix s>.<base64url(DID)>.<base64url(HMAC-SHA256)>` under a key drawn at start,
//! so every token ends with the process. Refused: a wrong MAC, an expired token, one longer
//! than [`MAX_TOKEN_LEN`].

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agentnet_a2a::auth::{AuthError, Authenticator, BoxFuture, RequestParts, Source};
use agentnet_did::httpsig::{self, Scheme, Verifier, VerifyOptions};
use agentnet_did::Resolver;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;

/// Where a request came from, as the node's HTTP server saw it before routing.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The client's address.
    pub ip: Option<IpAddr>,
    /// The request target as received (path and query), before any nesting stripped it.
    pub path_and_query: String,
    /// The access token issued to the request's verified caller, for [`origin_layer`] to put
    /// in the response headers.
    pub issued: std::sync::Arc<Mutex<Option<Issued>>>,
}

/// An access token and its lifetime in seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The token.
    pub token: String,
    /// Seconds until it expires.
    pub expires_in: u64,
}

/// Longest bearer token looked at.
pub const MAX_TOKEN_LEN: usize = 1024;

/// Stateless access tokens (see the module doc).
pub struct Tokens {
    key: [u8; 32],
    ttl: Duration,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").field("ttl", &self.ttl).finish()
    }
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

impl Tokens {
    /// Tokens valid for `ttl`, under a fresh random key.
    pub fn new(ttl: Duration) -> Self {
        let mut key = [0u8; 32];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut key);
        Tokens { key, ttl }
    }

    fn mac(&self, payload: &str) -> HmacSha256 {
        use hmac::Mac;
        // HMAC takes a key of any length: this cannot fail.
        let mut m = HmacSha256::new_from_slice(&self.key).expect("HMAC keys of any length");
        m.update(payload.as_bytes());
        m
    }

    /// A token for `did`, issued at `now` (Unix seconds).
    pub fn issue(&self, did: &str, now: u64) -> Issued {
        use base64::Engine as _;
        use hmac::Mac as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let expires_in = self.ttl.as_secs();
        let payload = format!("v1.{}.{}", now.saturating_add(expires_in), b64.encode(did));
        let tag = b64.encode(self.mac(&payload).finalize().into_bytes());
        Issued {
            token: format!("{payload}.{tag}"),
            expires_in,
        }
    }

    /// The DID a token was issued to, if it is one of ours and has not expired at `now`.
    pub fn check(&self, token: &str, now: u64) -> Result<String, &'static str> {
        use base64::Engine as _;
        use hmac::Mac as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        if token.len() > MAX_TOKEN_LEN {
            return Err("access token too long");
        }
        let (payload, tag) = token.rsplit_once('.').ok_or("malformed access token")?;
        let tag = b64.decode(tag).map_err(|_| "malformed access token")?;
        self.mac(payload).verify_slice(&tag).map_err(|_| {
            "unknown access token (tokens end when the node restarts; sign the request)"
        })?;
        let mut parts = payload.splitn(3, '.');
        let (Some("v1"), Some(exp), Some(did)) = (parts.next(), parts.next(), parts.next()) else {
            return Err("malformed access token");
        };
        let exp: u64 = exp.parse().map_err(|_| "malformed access token")?;
        if exp <= now {
            return Err("expired access token; sign the request");
        }
        let did = b64.decode(did).map_err(|_| "malformed access token")?;
        String::from_utf8(did).map_err(|_| "malformed access token")
    }
}

tokio::task_local! {
    static ORIGIN: Origin;
}

/// Middleware that records the request's [`Origin`] for the authenticator. Put it around the
/// A2A routes (outside the nesting).
pub async fn origin_layer(req: Request, next: Next) -> Response {
    let ip = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let issued = std::sync::Arc::new(Mutex::new(None));
    let origin = Origin {
        ip,
        path_and_query,
        issued: issued.clone(),
    };
    let mut response = ORIGIN.scope(origin, next.run(req)).await;
    let issued = issued.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(Issued { token, expires_in }) = issued {
        let info =
            format!(r#"access_token="{token}", token_type="Bearer", expires_in={expires_in}"#);
        let h = response.headers_mut();
        if let Ok(v) = axum::http::HeaderValue::from_str(&info) {
            h.insert("authentication-info", v);
        }
        if let Ok(v) = axum::http::HeaderValue::from_str(&format!("Bearer {token}")) {
            h.insert(axum::http::header::AUTHORIZATION, v);
        }
    }
    response
}

/// The verifier's bounds and the URL requests are verified against.
#[derive(Debug, Clone)]
pub struct DidAuthConfig {
    /// `scheme://authority` of the public listener as clients address it, no trailing slash.
    pub public_base: String,
    /// Live nonces one DID may hold: 10,000 (at the default 360 s window, about 28 signed
    /// requests a second, sustained; bursts above are fine until the quota fills).
    pub per_did_nonces: usize,
    /// Live nonces the clients of one source (an IPv4 address, an IPv6 /64) may hold together:
    /// 3,125 (`max_nonces / 32`, so that filling the cache takes 32 networks signing at full
    /// rate; about 10 signed requests a second, sustained, at the 300 s window; a client that
    /// keeps the access token it is answered with signs once per token).
    pub per_source_nonces: usize,
    /// Live nonces in all: 100,000.
    pub max_nonces: usize,
    /// Uncached DID resolutions one source (IPv4 address, IPv6 /64) may start at once: 20.
    pub fetch_burst: u32,
    /// And per minute, sustained: 20.
    pub fetches_per_minute: u32,
    /// Most sources with a fetch budget in use: 10,000.
    pub max_clients: usize,
    /// The verifier's time window.
    pub max_age: u64,
    /// How far ahead a signature's `created` may be.
    pub max_future_skew: u64,
    /// Lifetime of the access tokens given to callers whose signature verified: 15 minutes;
    /// zero gives none (see the module doc).
    pub token_ttl: Duration,
    /// Most Ed25519 request signatures verified together (`agentnet_did::batch`); 0 (the
    /// default) or 1 verifies each alone (docs/BENCHMARKS.md: on two cores batches did not
    /// raise the signed throughput).
    pub verify_batch: usize,
}

impl DidAuthConfig {
    /// The defaults, verifying against `public_base`.
    pub fn new(public_base: impl Into<String>) -> Self {
        let v = VerifyOptions::default();
        DidAuthConfig {
            public_base: public_base.into().trim_end_matches('/').to_string(),
            per_did_nonces: 10_000,
            per_source_nonces: 100_000 / 32,
            max_nonces: 100_000,
            fetch_burst: 20,
            fetches_per_minute: 20,
            max_clients: 10_000,
            max_age: v.max_age,
            max_future_skew: v.max_future_skew,
            token_ttl: Duration::from_secs(15 * 60),
            verify_batch: 0,
        }
    }
}

/// The bounds of [`Nonces`].
#[derive(Debug, Clone, Copy)]
struct NonceQuota {
    /// Live nonces per DID.
    per_did: usize,
    /// Live nonces per source.
    per_source: usize,
    /// Live nonces in all.
    max: usize,
    /// A signature verifies until `created + max_age`: its nonce is kept that long.
    max_age: u64,
}

/// Live nonces, per DID, per source and in all (see the module doc).
#[derive(Debug, Default)]
struct Nonces {
    per_did: HashMap<String, HashSet<String>>,
    per_source: HashMap<Option<Source>, usize>,
    /// (created, did, nonce, source), oldest first.
    order: BTreeSet<(u64, String, String, Option<Source>)>,
    /// Signatures created at or before this are refused: nonces that old were forgotten to
    /// make room.
    floor: Option<u64>,
}

/// Why the nonce bookkeeping refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NonceRefusal {
    /// The DID used this nonce already.
    #[error("replayed nonce")]
    Replay,
    /// The DID holds its quota of live nonces.
    #[error("too many recent signed requests from {0}; send the access token the node answered with, or try again in a few minutes")]
    DidQuota(String),
    /// The client's network holds its share of live nonces.
    #[error("too many recent signed requests from {0}; send the access token the node answered with, or try again in a few minutes")]
    SourceQuota(String),
    /// The cache is full of newer nonces, or forgot nonces as old as this signature's.
    #[error("too many recent signed requests; sign again with the current time")]
    Full,
}

impl Nonces {
    /// Forget the nonces whose signatures no longer verify at `now`.
    fn expire(&mut self, now: u64, max_age: u64) {
        while let Some(first) = self.order.first() {
            if first.0.saturating_add(max_age) >= now {
                break;
            }
            self.pop_oldest();
        }
    }

    /// Forget the oldest nonce; its `created`.
    fn pop_oldest(&mut self) -> Option<u64> {
        let (created, did, nonce, source) = self.order.pop_first()?;
        if let Some(set) = self.per_did.get_mut(&did) {
            set.remove(&nonce);
            if set.is_empty() {
                self.per_did.remove(&did);
            }
        }
        if let Some(n) = self.per_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
        Some(created)
    }

    fn check(
        &mut self,
        did: &str,
        nonce: &str,
        created: u64,
        source: Option<Source>,
        now: u64,
        q: NonceQuota,
    ) -> Result<(), NonceRefusal> {
        self.expire(now, q.max_age);
        if self.floor.is_some_and(|f| created <= f) {
            return Err(NonceRefusal::Full);
        }
        if let Some(set) = self.per_did.get(did) {
            if set.contains(nonce) {
                return Err(NonceRefusal::Replay);
            }
            if set.len() >= q.per_did {
                return Err(NonceRefusal::DidQuota(did.chars().take(120).collect()));
            }
        }
        if self.per_source.get(&source).copied().unwrap_or(0) >= q.per_source {
            return Err(NonceRefusal::SourceQuota(match source {
                Some(s) => s.to_string(),
                None => "clients of unknown address".into(),
            }));
        }
        if self.order.len() >= q.max && self.order.first().is_none_or(|f| created <= f.0) {
            return Err(NonceRefusal::Full);
        }
        Ok(())
    }

    /// Remember a verified signature's nonce, making room if the cache is full (see the
    /// module doc).
    fn record(
        &mut self,
        did: &str,
        nonce: &str,
        created: u64,
        source: Option<Source>,
        now: u64,
        q: NonceQuota,
    ) -> Result<(), NonceRefusal> {
        self.check(did, nonce, created, source, now, q)?;
        if self.order.len() >= q.max {
            let Some(c) = self.pop_oldest() else {
                return Err(NonceRefusal::Full);
            };
            self.floor = Some(self.floor.map_or(c, |f| f.max(c)));
        }
        self.per_did
            .entry(did.to_string())
            .or_default()
            .insert(nonce.to_string());
        *self.per_source.entry(source).or_default() += 1;
        self.order
            .insert((created, did.to_string(), nonce.to_string(), source));
        Ok(())
    }

    fn len(&self) -> usize {
        self.order.len()
    }
}

/// A token bucket per source (client address, IPv6 by /64).
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    buckets: HashMap<Source, (f64, Instant)>,
}

impl Budgets {
    pub(crate) fn take(
        &mut self,
        source: Source,
        burst: u32,
        per_minute: u32,
        max_clients: usize,
        now: Instant,
    ) -> bool {
        let rate = f64::from(per_minute) / 60.0;
        let burst = f64::from(burst);
        let refill = |(tokens, at): (f64, Instant)| {
            (
                burst.min(tokens + now.duration_since(at).as_secs_f64() * rate),
                now,
            )
        };
        if !self.buckets.contains_key(&source) && self.buckets.len() >= max_clients {
            // A full bucket is the same as none: forget those.
            self.buckets.retain(|_, b| refill(*b).0 < burst);
            if self.buckets.len() >= max_clients {
                return false;
            }
        }
        let b = self.buckets.entry(source).or_insert((burst, now));
        *b = refill(*b);
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The DID authenticator of the hosted agents (one per node, shared by every agent).
pub struct DidAuthenticator {
    verifier: Verifier,
    resolver: Resolver,
    cfg: DidAuthConfig,
    nonces: Mutex<Nonces>,
    budgets: Mutex<Budgets>,
    tokens: Option<Tokens>,
}

impl std::fmt::Debug for DidAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DidAuthenticator")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// The token of an `Authorization: Bearer …` header.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let v = headers.get("authorization")?.to_str().ok()?;
    let scheme = v.get(..7)?;
    scheme
        .eq_ignore_ascii_case("bearer ")
        .then(|| v[7..].trim())
}

/// Whether a request carrying the legacy `DIDWba` header may be served with it: only a
/// message that starts a new task (JSON-RPC `SendMessage`/`SendStreamingMessage`, or HTTP+JSON
/// `POST message:send`/`message:stream`, whose message names no `taskId`). The header signs no
/// method, path or body, so whoever holds one (a man in the middle, a log) could otherwise read
/// or cancel the signer's tasks with it; a new task shows only what the request itself sent.
/// `path` is the agent-relative path the A2A server routes on.
fn legacy_allowed(method: &axum::http::Method, path: &str, body: &[u8]) -> Result<(), String> {
    use serde::de::IgnoredAny;
    #[derive(serde::Deserialize)]
    struct Rpc {
        method: String,
        params: Option<Send>,
    }
    #[derive(serde::Deserialize)]
    struct Send {
        message: HashMap<String, IgnoredAny>,
    }
    const WHY: &str = "the legacy DIDWba header signs no method, path or body, so this node \
        accepts it only for a message that starts a new task (SendMessage without taskId); \
        sign this request with RFC 9421 HTTP Message Signatures (Signature-Input, Signature)";
    let refuse = || Err(WHY.to_string());
    if method != axum::http::Method::POST {
        return refuse();
    }
    let message = match path {
        "/" | "" => match serde_json::from_slice::<Rpc>(body) {
            Ok(Rpc {
                method,
                params: Some(Send { message }),
            }) if method == "SendMessage" || method == "SendStreamingMessage" => message,
            _ => return refuse(),
        },
        "/message:send" | "/message:stream" => match serde_json::from_slice::<Send>(body) {
            Ok(Send { message }) => message,
            Err(_) => return refuse(),
        },
        _ => return refuse(),
    };
    // However a parser spells it (`taskId`, `task_id`), a message naming a task continues it.
    let names_task = message
        .keys()
        .any(|k| k.replace('_', "").eq_ignore_ascii_case("taskid"));
    if names_task {
        return refuse();
    }
    Ok(())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl DidAuthenticator {
    /// An authenticator resolving signers with `resolver`.
    pub fn new(resolver: Resolver, cfg: DidAuthConfig) -> Self {
        let opts = VerifyOptions {
            max_future_skew: cfg.max_future_skew,
            max_age: cfg.max_age,
            // The nonces are ours (`Nonces`: per DID, per source, in all): the verifier's own
            // cache would hold each a second time.
            replay_capacity: 0,
        };
        let mut verifier = Verifier::new(resolver.clone(), opts);
        // Off (the default): no batcher at all, so a signature is verified as before, with no
        // queue or lock on the way.
        if cfg.verify_batch >= 2 {
            verifier = verifier.with_batches(agentnet_did::batch::Batcher::new(cfg.verify_batch));
        }
        DidAuthenticator {
            verifier,
            resolver,
            nonces: Mutex::new(Nonces::default()),
            budgets: Mutex::new(Budgets::default()),
            tokens: (!cfg.token_ttl.is_zero()).then(|| Tokens::new(cfg.token_ttl)),
            cfg,
        }
    }

    /// Live nonces remembered now (for tests and metrics).
    pub fn live_nonces(&self) -> usize {
        self.lock_nonces().len()
    }

    fn lock_nonces(&self) -> std::sync::MutexGuard<'_, Nonces> {
        self.nonces.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Verify one request (what [`Authenticator::authenticate`] does), with its origin given.
    pub async fn verify(
        &self,
        request: RequestParts<'_>,
        origin: Option<Origin>,
    ) -> Result<Option<String>, AuthError> {
        if let Some(token) = bearer(request.headers) {
            let Some(tokens) = &self.tokens else {
                return Err(AuthError(
                    "this node gives no access tokens; sign the request".into(),
                ));
            };
            return tokens
                .check(token, unix_now())
                .map(Some)
                .map_err(|e| AuthError(e.into()));
        }
        let refuse = |m: String| Err(AuthError(m));
        let claim = match httpsig::claim(request.headers) {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(None),
            Err(e) => return refuse(e.to_string()),
        };
        if claim.scheme == Scheme::LegacyDidWba {
            if let Err(m) = legacy_allowed(request.method, request.uri.path(), request.body) {
                return refuse(m);
            }
        }
        let did = claim.did;
        let nonce = claim.nonce;
        let source = origin.as_ref().and_then(|o| o.ip).map(Source::of);
        let now = unix_now();
        let quota = self.quota();
        if let Err(e) =
            self.lock_nonces()
                .check(did.as_str(), &nonce, claim.created, source, now, quota)
        {
            return refuse(e.to_string());
        }
        if !self.resolver.is_cached(&did) {
            let Some(source) = source else {
                return refuse("cannot resolve a DID for a client of unknown address".into());
            };
            let ok = self.budgets.lock().unwrap_or_else(|p| p.into_inner()).take(
                source,
                self.cfg.fetch_burst,
                self.cfg.fetches_per_minute,
                self.cfg.max_clients,
                Instant::now(),
            );
            if !ok {
                return refuse(format!(
                    "too many DID resolutions from {source}; try again in a minute"
                ));
            }
        }
        let issued = origin.as_ref().map(|o| o.issued.clone());
        let path = origin
            .map(|o| o.path_and_query)
            .or_else(|| request.uri.path_and_query().map(|p| p.to_string()))
            .unwrap_or_else(|| "/".into());
        let target = format!("{}{}", self.cfg.public_base, path);
        let verified = self
            .verifier
            .verify(
                request.method.as_str(),
                &target,
                request.headers,
                request.body,
                now,
            )
            .await
            .map_err(|e| AuthError(e.to_string()))?;
        if verified.did != did || verified.scheme != claim.scheme {
            return refuse("malformed DID signature: signer changed while parsing".into());
        }
        if let Err(e) =
            self.lock_nonces()
                .record(did.as_str(), &nonce, claim.created, source, now, quota)
        {
            return refuse(e.to_string());
        }
        let did = verified.did.to_string();
        // A legacy header is no credential for anything but the request it came with: no token.
        if verified.scheme == Scheme::HttpSignature {
            if let (Some(tokens), Some(slot)) = (&self.tokens, issued) {
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(tokens.issue(&did, now));
            }
        }
        Ok(Some(did))
    }

    fn quota(&self) -> NonceQuota {
        NonceQuota {
            per_did: self.cfg.per_did_nonces,
            per_source: self.cfg.per_source_nonces,
            max: self.cfg.max_nonces,
            max_age: self.cfg.max_age,
        }
    }
}

impl Authenticator for DidAuthenticator {
    fn authenticate<'a>(
        &'a self,
        request: RequestParts<'a>,
    ) -> BoxFuture<'a, Result<Option<String>, AuthError>> {
        let origin = ORIGIN.try_with(|o| o.clone()).ok();
        Box::pin(self.verify(request, origin))
    }
}

/// How long a signature stays acceptable (for docs and tests).
pub fn window(cfg: &DidAuthConfig) -> Duration {
    Duration::from_secs(cfg.max_age + cfg.max_future_skew)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const Q: NonceQuota = NonceQuota {
        per_did: 3,
        per_source: 4,
        max: 6,
        max_age: 100,
    };

    fn src(ip: &str) -> Option<Source> {
        Some(Source::of(ip.parse().unwrap()))
    }

    #[test]
    fn sources_are_ipv4_addresses_and_ipv6_64s() {
        let a = src("2001:db8:1:2:aaaa::1");
        assert_eq!(a, src("2001:db8:1:2:ffff:ffff:ffff:ffff"), "same /64");
        assert_ne!(a, src("2001:db8:1:3::1"), "another /64");
        assert_eq!(src("::ffff:192.0.2.7"), src("192.0.2.7"), "IPv4-mapped");
        assert_ne!(src("192.0.2.7"), src("192.0.2.8"));
        assert_eq!(a.unwrap().to_string(), "2001:db8:1:2::/64");
        assert_eq!(src("192.0.2.7").unwrap().to_string(), "192.0.2.7");
    }

    #[test]
    fn one_did_cannot_fill_the_cache() {
        let mut n = Nonces::default();
        let (x, y) = (src("192.0.2.1"), src("192.0.2.2"));
        for i in 0..3 {
            n.record("did:a", &i.to_string(), 100, x, 100, Q).unwrap();
        }
        assert_eq!(
            n.check("did:a", "x", 100, y, 100, Q),
            Err(NonceRefusal::DidQuota("did:a".into()))
        );
        assert_eq!(
            n.check("did:a", "1", 100, y, 100, Q),
            Err(NonceRefusal::Replay)
        );
        // After the window (created + max_age) everything is forgotten.
        n.check("did:a", "x", 100, x, 201, Q).unwrap();
        assert_eq!(n.len(), 0);
        assert!(n.per_did.is_empty() && n.per_source.is_empty());
    }

    /// The attack of issue 15: many DIDs from one address used to fill the whole cache and
    /// lock every new signer out. Now one source holds its share only, and others still sign.
    #[test]
    fn many_dids_from_one_source_hold_its_share_only() {
        const Q: NonceQuota = NonceQuota {
            max: 100,
            ..super::tests::Q
        };
        let mut n = Nonces::default();
        let (attacker, honest) = (src("192.0.2.66"), src("198.51.100.1"));
        for i in 0..4 {
            n.record(&format!("did:{i}"), "n", 100, attacker, 100, Q)
                .unwrap();
        }
        assert_eq!(
            n.record("did:new", "n", 100, attacker, 100, Q),
            Err(NonceRefusal::SourceQuota("192.0.2.66".into()))
        );
        // The same /64 is one source, whatever the address in it.
        let v6 = |i: u16| src(&format!("2001:db8::{i:x}"));
        for i in 0..4 {
            n.record(&format!("did:v6-{i}"), "n", 100, v6(i), 100, Q)
                .unwrap();
        }
        assert!(matches!(
            n.check("did:v6-new", "n", 100, v6(9), 100, Q),
            Err(NonceRefusal::SourceQuota(s)) if s == "2001:db8::/64"
        ));
        // Another network still gets in.
        n.check("did:honest", "n", 100, honest, 100, Q).unwrap();
    }

    /// A full cache makes room (the oldest nonce goes) instead of refusing everyone until it
    /// expires; the forgotten nonce's replay stays refused: its `created` is at or below the
    /// floor.
    #[test]
    fn a_full_cache_lets_new_signers_in_and_never_a_replay() {
        let mut n = Nonces::default();
        // Six sources fill the cache, one nonce a second.
        for i in 0..6u64 {
            let s = src(&format!("192.0.2.{i}"));
            n.record(&format!("did:{i}"), "n", 100 + i, s, 100 + i, Q)
                .unwrap();
        }
        assert_eq!(n.len(), 6);
        let honest = src("198.51.100.1");
        n.record("did:honest", "h", 110, honest, 110, Q).unwrap();
        assert_eq!(n.len(), 6, "made room");
        assert!(!n.per_did.contains_key("did:0"), "the oldest went");
        assert_eq!(n.floor, Some(100));
        // did:0's nonce, created at 100, is still inside its window (until 200), yet refused.
        assert_eq!(
            n.check("did:0", "n", 100, honest, 150, Q),
            Err(NonceRefusal::Full)
        );
        // A signature older than everything in a full cache is refused, not let in.
        assert_eq!(
            n.check("did:late", "l", 101, honest, 150, Q),
            Err(NonceRefusal::Full)
        );
        // Newer ones keep getting in.
        n.record("did:honest", "h2", 150, honest, 150, Q).unwrap();
        assert_eq!(n.per_source.values().sum::<usize>(), n.len());
    }

    #[test]
    fn tokens_stand_for_their_did_until_they_expire() {
        let t = Tokens::new(Duration::from_secs(60));
        let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
        let Issued { token, expires_in } = t.issue(did, 1000);
        assert_eq!(expires_in, 60);
        assert_eq!(t.check(&token, 1000).as_deref(), Ok(did));
        assert_eq!(t.check(&token, 1059).as_deref(), Ok(did));
        assert!(t.check(&token, 1060).is_err(), "expired");
        assert!(
            Tokens::new(Duration::from_secs(60))
                .check(&token, 1000)
                .is_err(),
            "other key"
        );
        // No input makes it panic or accept.
        let mut junk = vec![String::new(), ".".into(), "v1...".into(), "v1.5.x.y".into()];
        for cut in 0..token.len() {
            junk.push(token[..cut].to_string());
            let mut b = token.clone().into_bytes();
            b[cut] ^= 1;
            junk.push(String::from_utf8_lossy(&b).into_owned());
        }
        junk.push(format!("{token}{}", "A".repeat(MAX_TOKEN_LEN)));
        for j in junk {
            assert!(t.check(&j, 1000).is_err(), "accepted {j:?}");
        }
    }

    #[test]
    fn fetch_budget_per_source() {
        let now = Instant::now();
        let mut b = Budgets::default();
        let a = src("192.0.2.1").unwrap();
        let c = src("192.0.2.2").unwrap();
        assert!(b.take(a, 2, 1, 10, now));
        assert!(b.take(a, 2, 1, 10, now));
        assert!(!b.take(a, 2, 1, 10, now));
        assert!(
            b.take(c, 2, 1, 10, now),
            "another address has its own budget"
        );
        // One IPv6 /64 is one budget, whichever of its addresses asks.
        let v6 = |i: u16| src(&format!("2001:db8::{i:x}")).unwrap();
        assert!(b.take(v6(1), 2, 1, 10, now));
        assert!(b.take(v6(2), 2, 1, 10, now));
        assert!(!b.take(v6(3), 2, 1, 10, now));
        assert!(
            b.take(a, 2, 1, 10, now + Duration::from_secs(60)),
            "refilled"
        );
        // At the client cap, a new source is refused while the others are not full.
        let mut b = Budgets::default();
        assert!(b.take(a, 2, 1, 1, now));
        assert!(!b.take(c, 2, 1, 1, now));
    }

    #[test]
    fn the_legacy_header_only_starts_new_tasks() {
        let post = axum::http::Method::POST;
        let rpc = |method: &str, message: Value| {
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method,
                "params": {"message": message}}))
            .unwrap()
        };
        let new = json!({"role": "ROLE_USER", "parts": [{"text": "hi"}], "messageId": "m"});
        let mut cont = new.clone();
        cont["taskId"] = json!("t-1");
        let mut snake = new.clone();
        snake["task_id"] = json!("t-1");
        for m in ["SendMessage", "SendStreamingMessage"] {
            legacy_allowed(&post, "/", &rpc(m, new.clone())).unwrap();
            assert!(legacy_allowed(&post, "/", &rpc(m, cont.clone())).is_err());
            assert!(legacy_allowed(&post, "/", &rpc(m, snake.clone())).is_err());
        }
        for m in [
            "GetTask",
            "ListTasks",
            "CancelTask",
            "SubscribeToTask",
            "GetExtendedAgentCard",
        ] {
            assert!(
                legacy_allowed(&post, "/", &rpc(m, new.clone())).is_err(),
                "{m}"
            );
        }
        let rest = serde_json::to_vec(&json!({ "message": new })).unwrap();
        legacy_allowed(&post, "/message:send", &rest).unwrap();
        legacy_allowed(&post, "/message:stream", &rest).unwrap();
        let rest_cont = serde_json::to_vec(&json!({ "message": cont })).unwrap();
        assert!(legacy_allowed(&post, "/message:send", &rest_cont).is_err());
        for (method, path) in [
            (axum::http::Method::GET, "/tasks"),
            (axum::http::Method::GET, "/tasks/t-1"),
            (post.clone(), "/tasks/t-1:cancel"),
            (post.clone(), "/mcp"),
            (axum::http::Method::GET, "/message:send"),
        ] {
            assert!(
                legacy_allowed(&method, path, &rest).is_err(),
                "{method} {path}"
            );
        }
        assert!(legacy_allowed(&post, "/", b"[]").is_err(), "a batch");
        assert!(legacy_allowed(&post, "/", b"{").is_err());
    }
}
