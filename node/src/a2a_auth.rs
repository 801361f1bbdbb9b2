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
//! 2. The signer's DID and nonce are read from the headers (string scans, bounded header
//!    sizes). Then, before any signature or document work: a nonce this DID already used is a
//!    replay; a DID holding [`DidAuthConfig::per_did_nonces`] live nonces is refused; a full
//!    cache ([`DidAuthConfig::max_nonces`]) refuses everyone new (see below).
//! 3. A DID whose document is not in the resolver's cache (did:web, did:wba; did:key never
//!    needs a fetch) costs the client's address one token of its fetch budget
//!    ([`DidAuthConfig::fetch_burst`], refilled at [`DidAuthConfig::fetches_per_minute`]); an
//!    empty budget refuses the request without fetching.
//! 4. The verifier: its own cheap checks first (header syntax, covered components, time
//!    window, content digest), then it resolves the DID, checks the key is an `authentication`
//!    key and verifies the signature, and records the nonce in its own cache.
//! 5. The nonce is recorded here, charged to the DID: only verified requests are charged, so
//!    nobody can use up another DID's quota without its key.
//!
//! # Why the per-DID quota, and what remains
//!
//! The identity crate's verifier remembers nonces in one cache with one capacity: a single DID
//! signing requests as fast as it can fills it, and then every other caller is refused until
//! entries age out (up to `max_age + max_future_skew`, 360 s). Here each DID may hold at most
//! `per_did_nonces` live nonces, so filling the cache takes `max_nonces / per_did_nonces`
//! distinct DIDs (10 by default) signing at full rate. did:key identities are free to mint, so
//! this bounds one identity, not a determined attacker with many: the fetch budget does not
//! apply to did:key (no fetch), and a many-DID flood from many addresses can still fill the
//! cache, after which new signatures are refused (never accepted twice) until entries expire.
//! The verifier's own cache is given twice our capacity so that ours always decides first.
//!
//! Every refusal is a 401 to the caller (the A2A server maps all authenticator errors to 401),
//! with a message saying which check failed.
//!
//! # Access tokens, as ANP hands them out
//!
//! A caller whose signature verified gets a short-lived bearer token with the answer, in the
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

use agentnet_a2a::auth::{AuthError, Authenticator, BoxFuture, RequestParts};
use agentnet_did::httpsig::{Verifier, VerifyOptions};
use agentnet_did::{Did, Resolver};
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
    /// Live nonces in all: 100,000.
    pub max_nonces: usize,
    /// Uncached DID resolutions one client address may start at once: 20.
    pub fetch_burst: u32,
    /// And per minute, sustained: 20.
    pub fetches_per_minute: u32,
    /// Most client addresses with a fetch budget in use: 10,000.
    pub max_clients: usize,
    /// The verifier's time window.
    pub max_age: u64,
    /// How far ahead a signature's `created` may be.
    pub max_future_skew: u64,
    /// Lifetime of the access tokens given to callers whose signature verified: 15 minutes;
    /// zero gives none (see the module doc).
    pub token_ttl: Duration,
}

impl DidAuthConfig {
    /// The defaults, verifying against `public_base`.
    pub fn new(public_base: impl Into<String>) -> Self {
        let v = VerifyOptions::default();
        DidAuthConfig {
            public_base: public_base.into().trim_end_matches('/').to_string(),
            per_did_nonces: 10_000,
            max_nonces: 100_000,
            fetch_burst: 20,
            fetches_per_minute: 20,
            max_clients: 10_000,
            max_age: v.max_age,
            max_future_skew: v.max_future_skew,
            token_ttl: Duration::from_secs(15 * 60),
        }
    }
}

/// Live nonces, per DID and in all.
#[derive(Debug, Default)]
struct Nonces {
    per_did: HashMap<String, HashSet<String>>,
    /// (until, did, nonce), oldest first.
    order: BTreeSet<(u64, String, String)>,
}

/// Why the nonce bookkeeping refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NonceRefusal {
    /// The DID used this nonce already.
    #[error("replayed nonce")]
    Replay,
    /// The DID holds its quota of live nonces.
    #[error("too many recent signed requests from {0}; try again in a few minutes")]
    DidQuota(String),
    /// The cache is full.
    #[error("too many recent signed requests; try again shortly")]
    Full,
}

impl Nonces {
    fn expire(&mut self, now: u64) {
        while let Some(first) = self.order.first() {
            if first.0 >= now {
                break;
            }
            let Some((_, did, nonce)) = self.order.pop_first() else {
                break;
            };
            if let Some(set) = self.per_did.get_mut(&did) {
                set.remove(&nonce);
                if set.is_empty() {
                    self.per_did.remove(&did);
                }
            }
        }
    }

    fn check(
        &mut self,
        did: &str,
        nonce: &str,
        now: u64,
        per_did: usize,
        max: usize,
    ) -> Result<(), NonceRefusal> {
        self.expire(now);
        if let Some(set) = self.per_did.get(did) {
            if set.contains(nonce) {
                return Err(NonceRefusal::Replay);
            }
            if set.len() >= per_did {
                return Err(NonceRefusal::DidQuota(did.chars().take(120).collect()));
            }
        }
        if self.order.len() >= max {
            return Err(NonceRefusal::Full);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        did: &str,
        nonce: &str,
        now: u64,
        until: u64,
        per_did: usize,
        max: usize,
    ) -> Result<(), NonceRefusal> {
        self.check(did, nonce, now, per_did, max)?;
        self.per_did
            .entry(did.to_string())
            .or_default()
            .insert(nonce.to_string());
        self.order
            .insert((until, did.to_string(), nonce.to_string()));
        Ok(())
    }

    fn len(&self) -> usize {
        self.order.len()
    }
}

/// A token bucket per client address.
#[derive(Debug, Default)]
struct Budgets {
    buckets: HashMap<IpAddr, (f64, Instant)>,
}

impl Budgets {
    fn take(&mut self, ip: IpAddr, burst: u32, per_minute: u32, max_clients: usize) -> bool {
        let now = Instant::now();
        let rate = f64::from(per_minute) / 60.0;
        let burst = f64::from(burst);
        let refill = |(tokens, at): (f64, Instant)| {
            (
                burst.min(tokens + now.duration_since(at).as_secs_f64() * rate),
                now,
            )
        };
        if !self.buckets.contains_key(&ip) && self.buckets.len() >= max_clients {
            // A full bucket is the same as none: forget those.
            self.buckets.retain(|_, b| refill(*b).0 < burst);
            if self.buckets.len() >= max_clients {
                return false;
            }
        }
        let b = self.buckets.entry(ip).or_insert((burst, now));
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

/// The value of `name="…"` in a header parameter list.
fn quoted_param<'a>(s: &'a str, name: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(i) = s[from..].find(name) {
        let at = from + i;
        let before_ok = at == 0 || matches!(s.as_bytes()[at - 1], b';' | b',' | b' ');
        let rest = &s[at + name.len()..];
        if before_ok {
            if let Some(v) = rest.strip_prefix("=\"") {
                return v.find('"').map(|end| &v[..end]);
            }
        }
        from = at + name.len();
    }
    None
}

/// The signer's DID and nonce, read without verifying anything.
fn signer_and_nonce(headers: &axum::http::HeaderMap) -> Option<(Did, String)> {
    let text = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    if let Some(input) = text("signature-input") {
        let keyid = quoted_param(input, "keyid")?;
        let nonce = quoted_param(input, "nonce")?;
        let did = Did::parse(keyid.split('#').next()?).ok()?;
        return Some((did, nonce.to_string()));
    }
    let auth = text("authorization")?;
    if !auth.get(..6)?.eq_ignore_ascii_case("didwba") {
        return None;
    }
    let did = Did::parse(quoted_param(auth, "did")?).ok()?;
    Some((did, quoted_param(auth, "nonce")?.to_string()))
}

/// The token of an `Authorization: Bearer …` header.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let v = headers.get("authorization")?.to_str().ok()?;
    let scheme = v.get(..7)?;
    scheme
        .eq_ignore_ascii_case("bearer ")
        .then(|| v[7..].trim())
}

fn has_identity(headers: &axum::http::HeaderMap) -> bool {
    headers.contains_key("signature-input")
        || headers.contains_key("signature")
        || headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.get(..6))
            .is_some_and(|s| s.eq_ignore_ascii_case("didwba"))
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
            replay_capacity: cfg.max_nonces.saturating_mul(2),
        };
        DidAuthenticator {
            verifier: Verifier::new(resolver.clone(), opts),
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
        if !has_identity(request.headers) {
            return Ok(None);
        }
        let refuse = |m: String| Err(AuthError(m));
        let Some((did, nonce)) = signer_and_nonce(request.headers) else {
            return refuse("malformed DID signature: no signer DID or nonce".into());
        };
        let now = unix_now();
        let (per, max) = (self.cfg.per_did_nonces, self.cfg.max_nonces);
        if let Err(e) = self
            .lock_nonces()
            .check(did.as_str(), &nonce, now, per, max)
        {
            return refuse(e.to_string());
        }
        if !self.resolver.is_cached(&did) {
            let Some(ip) = origin.as_ref().and_then(|o| o.ip) else {
                return refuse("cannot resolve a DID for a client of unknown address".into());
            };
            let ok = self.budgets.lock().unwrap_or_else(|p| p.into_inner()).take(
                ip,
                self.cfg.fetch_burst,
                self.cfg.fetches_per_minute,
                self.cfg.max_clients,
            );
            if !ok {
                return refuse(format!(
                    "too many DID resolutions from {ip}; try again in a minute"
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
        if verified.did != did {
            return refuse("malformed DID signature: signer changed while parsing".into());
        }
        let until = now + self.cfg.max_age + self.cfg.max_future_skew;
        if let Err(e) = self
            .lock_nonces()
            .record(did.as_str(), &nonce, now, until, per, max)
        {
            return refuse(e.to_string());
        }
        let did = verified.did.to_string();
        if let (Some(tokens), Some(slot)) = (&self.tokens, issued) {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(tokens.issue(&did, now));
        }
        Ok(Some(did))
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

    #[test]
    fn one_did_cannot_fill_the_cache() {
        let mut n = Nonces::default();
        for i in 0..3 {
            n.record("did:a", &i.to_string(), 100, 200, 3, 5).unwrap();
        }
        assert_eq!(
            n.check("did:a", "x", 100, 3, 5),
            Err(NonceRefusal::DidQuota("did:a".into()))
        );
        assert_eq!(n.check("did:a", "1", 100, 3, 5), Err(NonceRefusal::Replay));
        n.record("did:b", "1", 100, 200, 3, 5).unwrap();
        n.record("did:c", "1", 100, 200, 3, 5).unwrap();
        assert_eq!(n.check("did:d", "1", 100, 3, 5), Err(NonceRefusal::Full));
        // After the window everything is forgotten.
        n.check("did:a", "x", 201, 3, 5).unwrap();
        assert_eq!(n.len(), 0);
        assert!(n.per_did.is_empty());
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
    fn fetch_budget_per_address() {
        let mut b = Budgets::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let c: IpAddr = "192.0.2.2".parse().unwrap();
        assert!(b.take(a, 2, 1, 10));
        assert!(b.take(a, 2, 1, 10));
        assert!(!b.take(a, 2, 1, 10));
        assert!(b.take(c, 2, 1, 10), "another address has its own budget");
        // At the client cap, a new address is refused while the others are not full.
        let mut b = Budgets::default();
        assert!(b.take(a, 2, 1, 1));
        assert!(!b.take(c, 2, 1, 1));
    }

    #[test]
    fn params_are_read_from_both_headers() {
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            "signature-input",
            r#"sig1=("@method");created=1;nonce="n1";keyid="did:key:z6MkabcTEST#z6MkabcTEST""#
                .parse()
                .unwrap(),
        );
        let (did, nonce) = signer_and_nonce(&h).unwrap();
        assert_eq!(did.as_str(), "did:key:z6MkabcTEST");
        assert_eq!(nonce, "n1");
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            "authorization",
            r#"DIDWba v="1.1", did="did:web:example.com", nonce="n2", timestamp="t""#
                .parse()
                .unwrap(),
        );
        let (did, nonce) = signer_and_nonce(&h).unwrap();
        assert_eq!(did.as_str(), "did:web:example.com");
        assert_eq!(nonce, "n2");
        assert!(quoted_param(r#"xnonce="a""#, "nonce").is_none());
    }
}
