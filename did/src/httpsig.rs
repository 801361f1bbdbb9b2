//! DID-signed HTTP requests: RFC 9421 HTTP Message Signatures as the Agent Network Protocol uses
//! them, and ANP's legacy `Authorization: DIDWba` header.
//!
//! The profile (checked against PyPI `anp` 1.0.x, see `docs/ANP.md`):
//! `Signature-Input: sig1=("@method" "@target-uri" "@authority" "content-digest");created=…;
//! expires=…;nonce="…";keyid="<DID URL>"` with the parameters in exactly that order,
//! `Signature: sig1=:<base64>:`, `Content-Digest: sha-256=:<base64>:` (RFC 9530).
//! `keyid` is a DID URL; the verifier resolves the DID and takes the key only if the document
//! lists it under `authentication`.
//!
//! Written here rather than taken from the `anp` crate: that crate pins `ed25519-dalek = 2.1.1`,
//! brings JWT issuing, HPKE and an unguarded HTTP resolver we do not want, and the profile is
//! small; `docs/ANP.md` records the comparison.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use base64::Engine as _;
use http::HeaderMap;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::document::{DocumentError, Relationship};
use crate::key::SecretKey;
use crate::{jcs, Did, DidUrl, ResolveError, Resolver};

/// Longest signature header we parse.
const MAX_HEADER: usize = 8 * 1024;
/// Most covered components in one signature.
const MAX_COMPONENTS: usize = 16;
/// Longest nonce we accept.
const MAX_NONCE: usize = 128;
/// The components agentnet signs, in order.
pub const COMPONENTS: [&str; 4] = ["@method", "@target-uri", "@authority", "content-digest"];

/// The headers that carry a request signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeaders {
    /// `Content-Digest`.
    pub content_digest: String,
    /// `Signature-Input`.
    pub signature_input: String,
    /// `Signature`.
    pub signature: String,
}

impl SignatureHeaders {
    /// Add the three headers to a request's header map.
    pub fn apply(&self, headers: &mut HeaderMap) {
        for (name, value) in [
            ("content-digest", &self.content_digest),
            ("signature-input", &self.signature_input),
            ("signature", &self.signature),
        ] {
            if let Ok(v) = http::HeaderValue::from_str(value) {
                headers.insert(name, v);
            }
        }
    }
}

/// Why a request's signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `Signature-Input`/`Signature` and no `Authorization: DIDWba` header.
    #[error("no DID signature on the request")]
    Missing,
    /// The signature headers do not parse or leave out something required.
    #[error("malformed signature: {0}")]
    Malformed(String),
    /// `created`/`expires`/`timestamp` outside the accepted window.
    #[error("signature time outside the accepted window: {0}")]
    Expired(String),
    /// `Content-Digest` missing or not the digest of the body.
    #[error("Content-Digest does not match the body")]
    DigestMismatch,
    /// The signer's DID could not be resolved.
    #[error("resolving the signer: {0}")]
    Resolve(#[from] ResolveError),
    /// The key is not in the signer's document under `authentication`.
    #[error("{0}")]
    KeyNotAuthorized(DocumentError),
    /// The signature does not verify.
    #[error("signature does not verify for {0}")]
    BadSignature(String),
    /// This nonce was already used by this DID.
    #[error("replayed nonce for {0}")]
    Replay(String),
    /// The replay cache is full of newer nonces, or forgot nonces as old as this signature's
    /// to make room (a flood): sign again with the current time.
    #[error("too many recent signed requests; sign again with the current time")]
    Busy,
}

impl AuthError {
    /// The HTTP status a server should answer with: 401, or 403 for a bad signature, or 503
    /// when busy.
    pub fn status(&self) -> u16 {
        match self {
            AuthError::BadSignature(_) | AuthError::KeyNotAuthorized(_) => 403,
            AuthError::Busy => 503,
            _ => 401,
        }
    }
}

/// `sha-256=:<base64(SHA-256(body))>:` (RFC 9530).
pub fn content_digest(body: &[u8]) -> String {
    format!("sha-256=:{}:", B64.encode(Sha256::digest(body)))
}

/// 16 random bytes as 32 lowercase hex characters, as the ANP SDK makes them.
pub fn new_nonce() -> String {
    let mut b = [0u8; 16];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut b);
    hex::encode(b)
}

/// The authority of an absolute URL as written (`host[:port]`, no userinfo).
fn authority_of(url: &str) -> Result<&str, AuthError> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| AuthError::Malformed(format!("target URI {url:?} is not absolute")))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let auth = &rest[..end];
    Ok(auth.rsplit_once('@').map(|(_, h)| h).unwrap_or(auth))
}

/// Sign a request the ANP way. `created` is Unix seconds; the signature expires 300 s later.
pub fn sign(
    key: &SecretKey,
    keyid: &DidUrl,
    method: &str,
    target_uri: &str,
    body: &[u8],
    created: u64,
    nonce: &str,
) -> Result<SignatureHeaders, AuthError> {
    let digest = content_digest(body);
    let list = COMPONENTS
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(" ");
    let params = format!(
        "({list});created={created};expires={};nonce=\"{nonce}\";keyid=\"{keyid}\"",
        created + 300
    );
    let base = format!(
        "\"@method\": {}\n\"@target-uri\": {target_uri}\n\"@authority\": {}\n\"content-digest\": {digest}\n\"@signature-params\": {params}",
        method.to_ascii_uppercase(),
        authority_of(target_uri)?,
    );
    let sig = key.sign(base.as_bytes());
    Ok(SignatureHeaders {
        content_digest: digest,
        signature_input: format!("sig1={params}"),
        signature: format!("sig1=:{}:", B64.encode(sig)),
    })
}

/// Build ANP's legacy `Authorization: DIDWba …` value. `domain` is the server's authority as
/// [`legacy_audience`] gives it (host, and port unless the scheme's default); `timestamp` is
/// `YYYY-MM-DDTHH:MM:SSZ`.
pub fn sign_legacy(
    key: &SecretKey,
    did: &Did,
    vm_fragment: &str,
    domain: &str,
    nonce: &str,
    timestamp: &str,
) -> String {
    let msg = legacy_message("1.1", did.as_str(), nonce, timestamp, domain);
    let sig = B64URL.encode(key.sign(&msg));
    format!(
        "DIDWba v=\"1.1\", did=\"{did}\", nonce=\"{nonce}\", timestamp=\"{timestamp}\", verification_method=\"{vm_fragment}\", signature=\"{sig}\""
    )
}

/// The audience a legacy `DIDWba` header must be signed for to verify against `target_uri`:
/// its host (lowercased) and, unless it is the scheme's default, its port (`127.0.0.1:7878`,
/// `node.example`). The ANP SDK signs the host name only (`DIDWbaAuthHeader` drops the port),
/// so its legacy headers verify only at a server on the default port: the header signs no port,
/// method, path or body, and a host-only audience would let a header made for one server be
/// replayed at every other server on that host.
pub fn legacy_audience(target_uri: &str) -> Result<String, AuthError> {
    let url = url::Url::parse(target_uri)
        .map_err(|_| AuthError::Malformed(format!("bad target URI {target_uri:?}")))?;
    let host = url
        .host_str()
        .ok_or_else(|| AuthError::Malformed(format!("target URI {target_uri:?} has no host")))?;
    Ok(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

fn legacy_message(v: &str, did: &str, nonce: &str, timestamp: &str, domain: &str) -> Vec<u8> {
    // Version 1.1 names the server "aud"; earlier versions "service".
    let aud = if v == "1.0" || v.starts_with("0.") {
        "service"
    } else {
        "aud"
    };
    let mut obj = json!({"did": did, "nonce": nonce, "timestamp": timestamp});
    obj[aud] = json!(domain);
    Sha256::digest(jcs::canonicalize(&obj)).to_vec()
}

/// What a request's signature headers claim, read without verifying anything: for bookkeeping
/// (replay caches, quotas) before the costly checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The signer's DID.
    pub did: Did,
    /// The nonce.
    pub nonce: String,
    /// When it says it was signed (`created`, or the legacy `timestamp`), Unix seconds.
    pub created: u64,
    /// Which scheme.
    pub scheme: Scheme,
}

/// The [`Claim`] of a request, as [`Verifier::verify`] will read it: `Ok(None)` when it carries
/// no signature; an error when its signature headers are malformed or leave out the signer,
/// nonce or time.
pub fn claim(headers: &HeaderMap) -> Result<Option<Claim>, AuthError> {
    if headers.contains_key("signature-input") || headers.contains_key("signature") {
        let input = header(headers, "signature-input")?
            .ok_or_else(|| AuthError::Malformed("Signature without Signature-Input".into()))?;
        let parsed = parse_input(first_member(input)?.1)?;
        let keyid = parsed
            .keyid
            .ok_or_else(|| AuthError::Malformed("no keyid parameter".into()))?;
        let url = DidUrl::parse(&keyid).map_err(|e| AuthError::Malformed(e.to_string()))?;
        return Ok(Some(Claim {
            did: url.did().clone(),
            nonce: parsed
                .nonce
                .ok_or_else(|| AuthError::Malformed("no nonce parameter".into()))?,
            created: parsed
                .created
                .ok_or_else(|| AuthError::Malformed("no created parameter".into()))?,
            scheme: Scheme::HttpSignature,
        }));
    }
    let Some(auth) = header(headers, "authorization")? else {
        return Ok(None);
    };
    if !auth
        .get(..6)
        .is_some_and(|s| s.eq_ignore_ascii_case("didwba"))
    {
        return Ok(None);
    }
    if auth.len() > MAX_HEADER {
        return Err(AuthError::Malformed("Authorization header too long".into()));
    }
    let fields = parse_legacy(&auth[6..])?;
    let get = |k: &str| {
        fields
            .get(k)
            .ok_or_else(|| AuthError::Malformed(format!("DIDWba header without {k}")))
    };
    let timestamp = get("timestamp")?;
    Ok(Some(Claim {
        did: Did::parse(get("did")?).map_err(|e| AuthError::Malformed(e.to_string()))?,
        nonce: get("nonce")?.clone(),
        created: parse_utc_timestamp(timestamp)
            .ok_or_else(|| AuthError::Malformed(format!("bad timestamp {timestamp:?}")))?,
        scheme: Scheme::LegacyDidWba,
    }))
}

/// How a request was authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// RFC 9421 HTTP Message Signature.
    HttpSignature,
    /// ANP's legacy `Authorization: DIDWba`.
    LegacyDidWba,
}

/// A verified caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The caller's DID.
    pub did: Did,
    /// The verification method that signed.
    pub key_id: String,
    /// How.
    pub scheme: Scheme,
}

/// Verifier settings.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// How far in the future `created` may be, seconds.
    pub max_future_skew: u64,
    /// How old `created` may be, seconds.
    pub max_age: u64,
    /// Most nonces remembered at once; 0 remembers none, for a caller that keeps its own
    /// replay cache (agentnet-node's authenticator does, bounded per DID and per source).
    pub replay_capacity: usize,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            max_future_skew: 60,
            max_age: 300,
            replay_capacity: 100_000,
        }
    }
}

/// Remembers (DID, nonce) pairs for as long as a signature carrying them could be accepted:
/// until `created + max_age`, after which [`Verifier::verify`] refuses the signature anyway.
///
/// Full, it makes room rather than refusing everyone: it forgets the nonce with the oldest
/// `created` and from then on refuses every signature created at or before that one (the
/// *floor*). That never accepts a replay (a forgotten nonce's signature is at or below the
/// floor) and never locks out a signer whose `created` is newer than the oldest remembered one:
/// under a flood the window of accepted `created` times shrinks, from `max_age` to the age of
/// the oldest nonce remembered, and widens again as the flood's nonces expire.
#[derive(Debug, Default)]
struct NonceCache {
    /// Key to its signature's `created`.
    seen: HashMap<String, u64>,
    /// (created, key), oldest first.
    order: BTreeSet<(u64, String)>,
    /// Signatures created at or before this are refused: nonces that old were forgotten.
    floor: Option<u64>,
}

impl NonceCache {
    /// Record `key` of a signature made at `created`; an error if it is already there, or is
    /// at or below the floor, or the cache is full of newer nonces.
    fn insert(
        &mut self,
        key: String,
        created: u64,
        now: u64,
        max_age: u64,
        cap: usize,
    ) -> Result<(), AuthError> {
        while let Some((c, _)) = self.order.first() {
            if c.saturating_add(max_age) >= now {
                break;
            }
            if let Some((_, k)) = self.order.pop_first() {
                self.seen.remove(&k);
            }
        }
        if self.floor.is_some_and(|f| created <= f) {
            return Err(AuthError::Busy);
        }
        if self.seen.contains_key(&key) {
            return Err(AuthError::Replay(key));
        }
        if self.seen.len() >= cap {
            // Forget the oldest, unless this signature is older still.
            match self.order.first() {
                Some((c, _)) if *c < created => {
                    if let Some((c, k)) = self.order.pop_first() {
                        self.seen.remove(&k);
                        self.floor = Some(self.floor.map_or(c, |f| f.max(c)));
                    }
                }
                _ => return Err(AuthError::Busy),
            }
        }
        self.seen.insert(key.clone(), created);
        self.order.insert((created, key));
        Ok(())
    }
}

/// Verifies DID-signed requests: resolves the signer, checks the key, the window, the digest,
/// the signature, and the nonce.
#[derive(Debug)]
pub struct Verifier {
    resolver: Resolver,
    opts: VerifyOptions,
    nonces: Mutex<NonceCache>,
    batch: Option<crate::batch::Batcher>,
}

struct ParsedInput<'a> {
    /// The member value as received: `(...);created=…`, used verbatim in the signature base.
    raw: &'a str,
    components: Vec<String>,
    created: Option<u64>,
    expires: Option<u64>,
    nonce: Option<String>,
    keyid: Option<String>,
}

impl Verifier {
    /// A verifier resolving signers with `resolver`.
    pub fn new(resolver: Resolver, opts: VerifyOptions) -> Self {
        Self {
            resolver,
            opts,
            nonces: Mutex::new(NonceCache::default()),
            batch: None,
        }
    }

    /// Verify Ed25519 request signatures through `batcher`, together with those of concurrent
    /// requests ([`crate::batch`] says what that accepts). Without, each alone.
    pub fn with_batches(mut self, batcher: crate::batch::Batcher) -> Self {
        self.batch = Some(batcher);
        self
    }

    /// Verify a request. `target_uri` is the absolute URL the client addressed; `now` is Unix
    /// seconds.
    pub async fn verify(
        &self,
        method: &str,
        target_uri: &str,
        headers: &HeaderMap,
        body: &[u8],
        now: u64,
    ) -> Result<Verified, AuthError> {
        if headers.contains_key("signature-input") || headers.contains_key("signature") {
            return self
                .verify_rfc9421(method, target_uri, headers, body, now)
                .await;
        }
        if let Some(auth) = header(headers, "authorization")? {
            if auth
                .get(..6)
                .is_some_and(|s| s.eq_ignore_ascii_case("didwba"))
            {
                let domain = legacy_audience(target_uri)?;
                return self.verify_legacy(&auth[6..], &domain, now).await;
            }
        }
        Err(AuthError::Missing)
    }

    async fn verify_rfc9421(
        &self,
        method: &str,
        target_uri: &str,
        headers: &HeaderMap,
        body: &[u8],
        now: u64,
    ) -> Result<Verified, AuthError> {
        let input = header(headers, "signature-input")?
            .ok_or_else(|| AuthError::Malformed("Signature without Signature-Input".into()))?;
        let sig_header = header(headers, "signature")?
            .ok_or_else(|| AuthError::Malformed("Signature-Input without Signature".into()))?;
        let (label, raw) = first_member(input)?;
        let parsed = parse_input(raw)?;
        let sig = signature_bytes(sig_header, label)?;

        for needed in ["@method", "@target-uri", "@authority"] {
            if !parsed.components.iter().any(|c| c == needed) {
                return Err(AuthError::Malformed(format!("{needed} is not covered")));
            }
        }
        let digest_covered = parsed.components.iter().any(|c| c == "content-digest");
        if !body.is_empty() && !digest_covered {
            return Err(AuthError::Malformed("content-digest is not covered".into()));
        }
        let created = parsed
            .created
            .ok_or_else(|| AuthError::Malformed("no created parameter".into()))?;
        self.check_time(created, now)?;
        if let Some(exp) = parsed.expires {
            if exp < now {
                return Err(AuthError::Expired(format!("expired at {exp}, now {now}")));
            }
        }
        let nonce = parsed
            .nonce
            .clone()
            .ok_or_else(|| AuthError::Malformed("no nonce parameter".into()))?;
        let keyid = parsed
            .keyid
            .clone()
            .ok_or_else(|| AuthError::Malformed("no keyid parameter".into()))?;
        if digest_covered || !body.is_empty() {
            let got = header(headers, "content-digest")?.ok_or(AuthError::DigestMismatch)?;
            let want = content_digest(body);
            let matches = got.split(',').map(str::trim).any(|m| m == want);
            if !matches {
                return Err(AuthError::DigestMismatch);
            }
        }

        let mut base = String::new();
        for c in &parsed.components {
            let value = match c.as_str() {
                "@method" => method.to_ascii_uppercase(),
                "@target-uri" => target_uri.to_owned(),
                "@authority" => authority_of(target_uri)?.to_owned(),
                name if name.starts_with('@') => {
                    return Err(AuthError::Malformed(format!(
                        "unsupported component {name}"
                    )))
                }
                name => {
                    let values: Vec<&str> = headers
                        .get_all(name)
                        .iter()
                        .map(|v| v.to_str().map(str::trim))
                        .collect::<Result<_, _>>()
                        .map_err(|_| AuthError::Malformed(format!("{name} is not text")))?;
                    if values.is_empty() {
                        return Err(AuthError::Malformed(format!(
                            "covered header {name} missing"
                        )));
                    }
                    values.join(", ")
                }
            };
            base.push_str(&format!("\"{c}\": {value}\n"));
        }
        base.push_str("\"@signature-params\": ");
        base.push_str(parsed.raw);

        let url = DidUrl::parse(&keyid).map_err(|e| AuthError::Malformed(e.to_string()))?;
        if url.fragment().is_none() {
            return Err(AuthError::Malformed("keyid has no fragment".into()));
        }
        self.check_signature(&url, &keyid, base.as_bytes(), &sig)
            .await?;
        self.remember(url.did(), &nonce, created, now)?;
        Ok(Verified {
            did: url.did().clone(),
            key_id: keyid,
            scheme: Scheme::HttpSignature,
        })
    }

    async fn verify_legacy(
        &self,
        params: &str,
        domain: &str,
        now: u64,
    ) -> Result<Verified, AuthError> {
        if params.len() > MAX_HEADER {
            return Err(AuthError::Malformed("Authorization header too long".into()));
        }
        let fields = parse_legacy(params)?;
        let get = |k: &str| {
            fields
                .get(k)
                .map(String::as_str)
                .ok_or_else(|| AuthError::Malformed(format!("DIDWba header without {k}")))
        };
        let v = fields.get("v").map(String::as_str).unwrap_or("1.1");
        let did_s = get("did")?;
        let nonce = get("nonce")?;
        let timestamp = get("timestamp")?;
        let vm = get("verification_method")?;
        let sig_s = get("signature")?;
        let ts = parse_utc_timestamp(timestamp)
            .ok_or_else(|| AuthError::Malformed(format!("bad timestamp {timestamp:?}")))?;
        self.check_time(ts, now)?;
        let did = Did::parse(did_s).map_err(|e| AuthError::Malformed(e.to_string()))?;
        let keyid = if vm.contains('#') {
            vm.to_owned()
        } else {
            format!("{did}#{vm}")
        };
        let url = DidUrl::parse(&keyid).map_err(|e| AuthError::Malformed(e.to_string()))?;
        if url.did() != &did {
            return Err(AuthError::Malformed(
                "verification_method of another DID".into(),
            ));
        }
        let sig = B64URL
            .decode(sig_s.trim_end_matches('='))
            .map_err(|_| AuthError::Malformed("signature is not base64url".into()))?;
        let msg = legacy_message(v, did.as_str(), nonce, timestamp, domain);
        self.check_signature(&url, &keyid, &msg, &sig)
            .await
            .map_err(|e| match e {
                AuthError::BadSignature(k) => AuthError::BadSignature(format!(
                    "{k} (a DIDWba header must be signed for the audience {domain:?}: this \
                     server's host and port)"
                )),
                e => e,
            })?;
        self.remember(&did, nonce, ts, now)?;
        Ok(Verified {
            did,
            key_id: keyid,
            scheme: Scheme::LegacyDidWba,
        })
    }

    fn check_time(&self, created: u64, now: u64) -> Result<(), AuthError> {
        if created > now.saturating_add(self.opts.max_future_skew) {
            return Err(AuthError::Expired(format!(
                "created {created} is more than {} s ahead of {now}",
                self.opts.max_future_skew
            )));
        }
        if now.saturating_sub(created) > self.opts.max_age {
            return Err(AuthError::Expired(format!(
                "created {created} is more than {} s old at {now}",
                self.opts.max_age
            )));
        }
        Ok(())
    }

    async fn check_signature(
        &self,
        url: &DidUrl,
        keyid: &str,
        msg: &[u8],
        sig: &[u8],
    ) -> Result<(), AuthError> {
        let doc = self.resolver.resolve(url.did()).await?;
        let key = doc
            .key_for(keyid, Relationship::Authentication)
            .map_err(AuthError::KeyNotAuthorized)?;
        let ok = match (&self.batch, key.ed25519()) {
            (Some(b), Some(k)) => b.verify(k, msg, sig).await,
            _ => key.verify(msg, sig),
        };
        if !ok {
            return Err(AuthError::BadSignature(keyid.to_owned()));
        }
        Ok(())
    }

    fn remember(&self, did: &Did, nonce: &str, created: u64, now: u64) -> Result<(), AuthError> {
        if nonce.is_empty() || nonce.len() > MAX_NONCE {
            return Err(AuthError::Malformed(format!(
                "nonce must be 1 to {MAX_NONCE} characters"
            )));
        }
        if self.opts.replay_capacity == 0 {
            return Ok(());
        }
        // A signature is acceptable until created + max_age; its nonce is remembered that long.
        self.nonces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                format!("{did}|{nonce}"),
                created,
                now,
                self.opts.max_age,
                self.opts.replay_capacity,
            )
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, AuthError> {
    let Some(v) = headers.get(name) else {
        return Ok(None);
    };
    if v.len() > MAX_HEADER {
        return Err(AuthError::Malformed(format!(
            "{name} header longer than {MAX_HEADER} bytes"
        )));
    }
    v.to_str()
        .map(|s| Some(s.trim()))
        .map_err(|_| AuthError::Malformed(format!("{name} header is not text")))
}

/// The first member of a structured-field dictionary: `label=value…` up to a top-level comma.
fn first_member(s: &str) -> Result<(&str, &str), AuthError> {
    let (label, rest) = s
        .split_once('=')
        .ok_or_else(|| AuthError::Malformed("Signature-Input is not a dictionary".into()))?;
    let label = label.trim();
    if label.is_empty()
        || !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b))
    {
        return Err(AuthError::Malformed(format!(
            "bad signature label {label:?}"
        )));
    }
    let mut in_str = false;
    let mut esc = false;
    for (i, ch) in rest.char_indices() {
        match (in_str, esc, ch) {
            (true, true, _) => esc = false,
            (true, false, '\\') => esc = true,
            (true, false, '"') => in_str = false,
            (false, _, '"') => in_str = true,
            (false, _, ',') => return Ok((label, rest[..i].trim())),
            _ => {}
        }
    }
    Ok((label, rest.trim()))
}

fn parse_sf_string(s: &str) -> Result<(String, &str), AuthError> {
    let body = s
        .strip_prefix('"')
        .ok_or_else(|| AuthError::Malformed("expected a quoted string".into()))?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &body[i + 1..])),
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\'))) => out.push(e),
                _ => return Err(AuthError::Malformed("bad escape in string".into())),
            },
            c if (' '..='~').contains(&c) => out.push(c),
            _ => return Err(AuthError::Malformed("non-ASCII in string".into())),
        }
    }
    Err(AuthError::Malformed("unterminated string".into()))
}

fn parse_input(raw: &str) -> Result<ParsedInput<'_>, AuthError> {
    let mut rest = raw
        .strip_prefix('(')
        .ok_or_else(|| AuthError::Malformed("component list must start with '('".into()))?;
    let mut components = Vec::new();
    loop {
        rest = rest.trim_start_matches(' ');
        if let Some(r) = rest.strip_prefix(')') {
            rest = r;
            break;
        }
        let (c, r) = parse_sf_string(rest)?;
        if components.len() == MAX_COMPONENTS {
            return Err(AuthError::Malformed("too many components".into()));
        }
        if components.contains(&c) {
            return Err(AuthError::Malformed(format!("component {c} listed twice")));
        }
        if c.is_empty() || c.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(AuthError::Malformed(format!("bad component name {c:?}")));
        }
        components.push(c);
        rest = r;
    }
    let mut p = ParsedInput {
        raw,
        components,
        created: None,
        expires: None,
        nonce: None,
        keyid: None,
    };
    while !rest.is_empty() {
        rest = rest
            .strip_prefix(';')
            .ok_or_else(|| AuthError::Malformed("expected ';' between parameters".into()))?;
        let eq = rest
            .find('=')
            .ok_or_else(|| AuthError::Malformed("parameter without value".into()))?;
        let name = &rest[..eq];
        rest = &rest[eq + 1..];
        if rest.starts_with('"') {
            let (v, r) = parse_sf_string(rest)?;
            rest = r;
            match name {
                "nonce" => p.nonce = Some(v),
                "keyid" => p.keyid = Some(v),
                _ => {}
            }
        } else {
            let end = rest.find(';').unwrap_or(rest.len());
            let v = &rest[..end];
            rest = &rest[end..];
            let int = || {
                v.parse::<u64>()
                    .map_err(|_| AuthError::Malformed(format!("{name} is not an integer")))
            };
            match name {
                "created" => p.created = Some(int()?),
                "expires" => p.expires = Some(int()?),
                _ => {}
            }
        }
    }
    Ok(p)
}

fn signature_bytes(header: &str, label: &str) -> Result<Vec<u8>, AuthError> {
    for member in header.split(',') {
        let Some((l, v)) = member.trim().split_once('=') else {
            continue;
        };
        if l.trim() != label {
            continue;
        }
        let b = v
            .trim()
            .strip_prefix(':')
            .and_then(|v| v.strip_suffix(':'))
            .ok_or_else(|| AuthError::Malformed("Signature value is not a byte sequence".into()))?;
        return B64
            .decode(b)
            .map_err(|_| AuthError::Malformed("Signature is not base64".into()));
    }
    Err(AuthError::Malformed(format!(
        "Signature has no member {label}"
    )))
}

fn parse_legacy(s: &str) -> Result<HashMap<String, String>, AuthError> {
    let mut out = HashMap::new();
    for part in s.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| AuthError::Malformed(format!("DIDWba field {part:?} has no value")))?;
        let v = v.trim().trim_matches('"');
        if out.len() > 16 {
            return Err(AuthError::Malformed("too many DIDWba fields".into()));
        }
        out.insert(k.trim().to_ascii_lowercase(), v.to_owned());
    }
    Ok(out)
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` to Unix seconds. Hand-written: the one format ANP sends does not
/// justify a date-time crate in the light crate.
pub fn parse_utc_timestamp(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z')?;
    let s = s.split_once('.').map(|(a, _)| a).unwrap_or(s);
    let b = s.as_bytes();
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<u64>().ok();
    let (y, mo, d, h, mi, se) = (
        n(0..4)?,
        n(5..7)?,
        n(8..10)?,
        n(11..13)?,
        n(14..16)?,
        n(17..19)?,
    );
    if !(1970..=9999).contains(&y)
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
        || h > 23
        || mi > 59
        || se > 60
    {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let (y, mo) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + se)
}

/// Unix seconds to `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_utc_timestamp(t: u64) -> String {
    let days = t / 86_400;
    let secs = t % 86_400;
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fixture() -> (serde_json::Value, Vec<u8>) {
        (
            serde_json::from_slice(include_bytes!("../tests/fixtures/anp_http_sig_sample.json"))
                .unwrap(),
            include_bytes!("../tests/fixtures/anp_http_sig_sample.body").to_vec(),
        )
    }

    fn headers(pairs: &serde_json::Value) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs.as_object().unwrap() {
            h.insert(
                http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).unwrap(),
                v.as_str().unwrap().parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn timestamps_round_trip() {
        assert_eq!(parse_utc_timestamp("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_utc_timestamp("2026-11-30T09:19:28Z"),
            Some(1_796_030_368)
        );
        assert_eq!(format_utc_timestamp(1_796_030_368), "2026-11-30T09:19:28Z");
        assert_eq!(
            parse_utc_timestamp("2024-02-29T12:00:00.123Z"),
            Some(1_709_208_000)
        );
        assert_eq!(parse_utc_timestamp("2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_utc_timestamp("2024-01-01 00:00:00Z"), None);
    }

    #[test]
    fn our_signature_base_matches_the_anp_sdk_byte_for_byte() {
        // Re-sign the SDK sample's request with the SDK's key, created and nonce: the SDK's
        // Ed25519 signature is deterministic, so equal headers prove an equal signature base.
        let (f, body) = fixture();
        let jwk: crate::key::Jwk =
            serde_json::from_slice(include_bytes!("../tests/fixtures/did_wba_e1.key.json"))
                .unwrap();
        let key = SecretKey::from_jwk(&jwk).unwrap();
        let r = &f["rfc9421"];
        let input = r["headers"]["Signature-Input"].as_str().unwrap();
        let parsed = parse_input(first_member(input).unwrap().1).unwrap();
        let keyid = DidUrl::parse(parsed.keyid.as_deref().unwrap()).unwrap();
        let ours = sign(
            &key,
            &keyid,
            "post",
            r["url"].as_str().unwrap(),
            &body,
            parsed.created.unwrap(),
            parsed.nonce.as_deref().unwrap(),
        )
        .unwrap();
        assert_eq!(ours.signature_input, input);
        assert_eq!(
            ours.content_digest,
            r["headers"]["Content-Digest"].as_str().unwrap()
        );
        assert_eq!(ours.signature, r["headers"]["Signature"].as_str().unwrap());

        let l = &f["legacy_didwba"];
        let auth = l["headers"]["Authorization"].as_str().unwrap();
        let fields = parse_legacy(&auth[6..]).unwrap();
        let did = Did::parse(&fields["did"]).unwrap();
        let ours = sign_legacy(
            &key,
            &did,
            "key-1",
            l["service_domain"].as_str().unwrap(),
            &fields["nonce"],
            &fields["timestamp"],
        );
        assert_eq!(ours, auth);
    }

    fn verifier_with_sdk_document() -> Verifier {
        let resolver = Resolver::new(Default::default()).unwrap();
        let doc = crate::Document::from_json(include_bytes!("../tests/fixtures/did_wba_e1.json"))
            .unwrap();
        resolver.pin(doc).unwrap();
        Verifier::new(resolver, VerifyOptions::default())
    }

    #[tokio::test]
    async fn verifies_headers_the_anp_sdk_made_and_refuses_replays_and_tampering() {
        let (f, body) = fixture();
        let r = &f["rfc9421"];
        let url = r["url"].as_str().unwrap();
        let h = headers(&r["headers"]);
        let created = 1_796_030_368;
        let v = verifier_with_sdk_document();
        let ok = v
            .verify("POST", url, &h, &body, created + 10)
            .await
            .unwrap();
        assert_eq!(ok.scheme, Scheme::HttpSignature);
        assert!(ok.did.as_str().starts_with("did:wba:agentnet.example"));
        assert!(matches!(
            v.verify("POST", url, &h, &body, created + 11).await,
            Err(AuthError::Replay(_))
        ));

        let v = verifier_with_sdk_document();
        let mut tampered = body.clone();
        tampered.push(b' ');
        assert_eq!(
            v.verify("POST", url, &h, &tampered, created).await,
            Err(AuthError::DigestMismatch)
        );
        assert!(matches!(
            v.verify("PUT", url, &h, &body, created).await,
            Err(AuthError::BadSignature(_))
        ));
        assert!(matches!(
            v.verify("POST", &url.replace("x=1", "x=2"), &h, &body, created)
                .await,
            Err(AuthError::BadSignature(_))
        ));
        assert!(matches!(
            v.verify("POST", url, &h, &body, created + 301).await,
            Err(AuthError::Expired(_))
        ));
        assert!(matches!(
            v.verify("POST", url, &h, &body, created - 61).await,
            Err(AuthError::Expired(_))
        ));
        // A bad signature must not burn the nonce: the genuine request still goes through.
        v.verify("POST", url, &h, &body, created).await.unwrap();

        let l = &f["legacy_didwba"];
        let lh = headers(&l["headers"]);
        let ts = parse_utc_timestamp("2026-11-30T09:19:28Z").unwrap();
        // The SDK signed the host name only: the header verifies at that host's default port,
        // not at port 8443 (a header made for one server must not verify at another on the
        // same host).
        assert_eq!(legacy_audience(url).unwrap(), "peer.agentnet.example:8443");
        let e = v.verify("GET", url, &lh, b"", ts + 5).await.unwrap_err();
        assert!(matches!(e, AuthError::BadSignature(_)), "{e}");
        assert!(e.to_string().contains("peer.agentnet.example:8443"), "{e}");
        let url = "https://peer.agentnet.example/anp/rpc?x=1";
        let ok = v.verify("GET", url, &lh, b"", ts + 5).await.unwrap();
        assert_eq!(ok.scheme, Scheme::LegacyDidWba);
        assert!(matches!(
            v.verify("GET", url, &lh, b"", ts + 6).await,
            Err(AuthError::Replay(_))
        ));
        let v = verifier_with_sdk_document();
        let other_host = "https://other.example/anp/rpc";
        assert!(matches!(
            v.verify("GET", other_host, &lh, b"", ts).await,
            Err(AuthError::BadSignature(_))
        ));
    }

    #[tokio::test]
    async fn key_must_be_listed_under_authentication() {
        let key = SecretKey::from_seed(&[8; 32]);
        let did = Did::parse("did:web:agents.example").unwrap();
        let mut doc = crate::wba::document_for(&did, &key, "2026-01-01T00:00:00Z");
        doc.proof = None;
        doc.authentication.clear();
        let resolver = Resolver::new(Default::default()).unwrap();
        resolver.pin(doc).unwrap();
        let v = Verifier::new(resolver, VerifyOptions::default());
        let keyid = DidUrl::parse("did:web:agents.example#key-1").unwrap();
        let h = sign(&key, &keyid, "GET", "https://b.example/x", b"", 1000, "n1").unwrap();
        let mut map = HeaderMap::new();
        h.apply(&mut map);
        let e = v
            .verify("GET", "https://b.example/x", &map, b"", 1000)
            .await
            .unwrap_err();
        assert!(matches!(e, AuthError::KeyNotAuthorized(_)), "{e}");
        assert_eq!(e.status(), 403);
    }

    #[test]
    fn replay_cache_forgets_expired_nonces_and_makes_room_without_accepting_replays() {
        let mut c = NonceCache::default();
        let max_age = 10;
        c.insert("a".into(), 0, 0, max_age, 2).unwrap();
        c.insert("b".into(), 1, 1, max_age, 2).unwrap();
        assert!(matches!(
            c.insert("a".into(), 0, 5, max_age, 2),
            Err(AuthError::Replay(_))
        ));
        // Full: a newer signature makes room by forgetting the oldest ("a", created 0)...
        c.insert("c".into(), 5, 5, max_age, 2).unwrap();
        assert_eq!(c.seen.len(), 2);
        // ...whose replay, still inside its window, is refused by the floor.
        assert_eq!(c.insert("a".into(), 0, 6, max_age, 2), Err(AuthError::Busy));
        // A signature older than everything remembered is refused rather than let in.
        c.floor = None;
        assert_eq!(c.insert("d".into(), 1, 6, max_age, 2), Err(AuthError::Busy));
        // A nonce is forgotten once its signature's window has passed (created + max_age).
        c.insert("e".into(), 12, 12, max_age, 2).unwrap();
        assert!(!c.seen.contains_key("b"), "created 1 expires after 11");
        assert!(c.seen.contains_key("c"));
        assert!(matches!(
            c.insert("c".into(), 5, 15, max_age, 2),
            Err(AuthError::Replay(_))
        ));
    }

    /// Against any sequence of signatures (times, nonces, clock) the cache never accepts a
    /// (key, created) twice while the signature could still verify, and it accepts a fresh
    /// nonce whose `created` is newer than every one it remembers and than its floor (which is
    /// never above the oldest one it remembers).
    #[test]
    fn replay_cache_never_accepts_a_live_replay() {
        let max_age = 20;
        let cap = 5;
        let mut c = NonceCache::default();
        let mut accepted: Vec<(String, u64)> = Vec::new();
        let mut rng = 12345u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut now = 100u64;
        for i in 0..5_000 {
            now += next() % 3;
            let (key, created) = if next() % 3 == 0 && !accepted.is_empty() {
                accepted[(next() % accepted.len() as u64) as usize].clone()
            } else {
                (format!("k{i}"), now + 5 - next() % 15)
            };
            let newest = c.order.last().map(|(c, _)| *c);
            let above_floor = c.floor.is_none_or(|f| created > f);
            let fresh = !accepted.iter().any(|(k, _)| *k == key);
            let ok = c.insert(key.clone(), created, now, max_age, cap).is_ok();
            if ok {
                assert!(
                    !accepted
                        .iter()
                        .any(|(k, cr)| *k == key && cr + max_age >= now),
                    "accepted a live replay of {key}"
                );
                accepted.push((key, created));
            } else if fresh && above_floor && newest.is_none_or(|n| created > n) {
                panic!("refused a fresh nonce newer than all remembered: {key} at {created}");
            }
            assert!(c.seen.len() <= cap);
        }
    }

    #[test]
    fn claims_are_read_from_both_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(claim(&h), Ok(None));
        h.insert(
            "signature-input",
            r#"sig1=("@method");created=17;nonce="n1";keyid="did:key:z6MkabcTEST#z6MkabcTEST""#
                .parse()
                .unwrap(),
        );
        let c = claim(&h).unwrap().unwrap();
        assert_eq!(c.did.as_str(), "did:key:z6MkabcTEST");
        assert_eq!((c.nonce.as_str(), c.created), ("n1", 17));
        assert_eq!(c.scheme, Scheme::HttpSignature);
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            r#"DIDWba v="1.1", did="did:web:example.com", nonce="n2", timestamp="1970-01-01T00:01:00Z""#
                .parse()
                .unwrap(),
        );
        let c = claim(&h).unwrap().unwrap();
        assert_eq!(c.did.as_str(), "did:web:example.com");
        assert_eq!((c.nonce.as_str(), c.created), ("n2", 60));
        assert_eq!(c.scheme, Scheme::LegacyDidWba);
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer x".parse().unwrap());
        assert_eq!(claim(&h), Ok(None));
        for bad in [
            r#"sig1=("@method");nonce="n1";keyid="did:key:z6Mk#z6Mk""#,
            r#"sig1=("@method");created=1;keyid="did:key:z6Mk#z6Mk""#,
            r#"sig1=("@method");created=1;nonce="n""#,
        ] {
            let mut h = HeaderMap::new();
            h.insert("signature-input", bad.parse().unwrap());
            assert!(claim(&h).is_err(), "{bad}");
        }
        let mut h = HeaderMap::new();
        h.insert("signature", "sig1=:AA==:".parse().unwrap());
        assert!(claim(&h).is_err(), "Signature without Signature-Input");
    }

    #[test]
    fn legacy_audience_is_host_and_port_unless_default() {
        for (url, aud) in [
            ("http://127.0.0.1:7878/a2a/echo", "127.0.0.1:7878"),
            ("https://Node.Example/a2a/echo", "node.example"),
            ("https://node.example:443/x", "node.example"),
            ("http://node.example:443/x", "node.example:443"),
            ("http://[::1]:8080/", "[::1]:8080"),
        ] {
            assert_eq!(legacy_audience(url).unwrap(), aud, "{url}");
        }
        assert!(legacy_audience("/relative").is_err());
    }

    #[test]
    fn parser_refuses_broken_inputs() {
        for bad in [
            "(\"@method\"",
            "\"@method\");created=1",
            "(\"@method\" \"@method\");created=1",
            "(\"@Method\");created=1",
            "(\"@method\");created=x",
            "(\"@method\");created",
            "(\"@method\")created=1",
            "(\"@method\");nonce=\"abc",
            "(\"a\\q\");created=1",
        ] {
            assert!(parse_input(bad).is_err(), "{bad}");
        }
        assert!(signature_bytes("sig2=:AAAA:", "sig1").is_err());
        assert!(signature_bytes("sig1=AAAA", "sig1").is_err());
    }

    proptest! {
        #[test]
        fn signature_header_parsers_never_panic(s in "\\PC{0,300}") {
            if let Ok((label, raw)) = first_member(&s) {
                let _ = parse_input(raw);
                let _ = signature_bytes(&s, label);
            }
            let _ = parse_legacy(&s);
            let _ = parse_utc_timestamp(&s);
            let _ = authority_of(&s);
        }

        #[test]
        fn structured_inputs_never_panic(
            comps in proptest::collection::vec("[@a-z\"\\\\-]{0,12}", 0..6),
            params in proptest::collection::vec(("[a-z]{1,8}", "[0-9]{1,12}|\"[ -~]{0,20}\""), 0..6),
        ) {
            let mut s = format!("({})", comps.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(" "));
            for (k, v) in params { s.push_str(&format!(";{k}={v}")); }
            let _ = parse_input(&s);
        }

        #[test]
        fn timestamps_format_then_parse(t in 0u64..253_402_300_799) {
            prop_assert_eq!(parse_utc_timestamp(&format_utc_timestamp(t)), Some(t));
        }
    }
}
