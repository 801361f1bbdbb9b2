//! Fuzz targets over every parser that reads what strangers send the node: one function per
//! target, `pub fn <target>(data: &[u8])`, that feeds the bytes to the project's own parser and
//! validator, exactly as the node calls it, and returns. A target fails by panicking (a crash to
//! AFL) or by allocating past AFL's memory limit; a rejection is a normal return.
//!
//! Two drivers run them: `scripts/fuzz.sh` builds `src/bin/<target>.rs` with AFL++
//! instrumentation (`cargo afl build`, feature `afl`) and runs `afl-fuzz` over
//! `fuzz/corpus/<target>/`; `tests/short_pass.rs`, part of the README's test command, runs every
//! target over its corpus and a fixed batch of mutations of it (no AFL needed).
//!
//! No target touches the network: did:key resolves locally, and a DID that would need a fetch
//! (did:web, did:wba without a pinned document) is only parsed, never resolved.

use std::sync::{Arc, OnceLock};

use agentnet_did::document::Relationship;
use agentnet_did::{didkey, jcs, json, Did, DidUrl, Document, Method, PublicKey, SecretKey};
use serde_json::Value;

pub mod mutate;

/// The time every target runs at, Unix seconds (2027-01-15), so a run is deterministic.
pub const NOW: u64 = 1_800_000_000;

/// A target: its name (the binary's and the corpus directory's) and its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target this build has (the `node` feature adds three).
pub fn targets() -> Vec<Target> {
    #[allow(unused_mut)]
    let mut t: Vec<Target> = vec![
        ("jcs", jcs),
        ("did_document", did_document),
        ("httpsig", httpsig),
        ("card", card),
        ("delegation", delegation),
        ("receipt", receipt),
        ("endorsement", endorsement),
        ("a2a_jsonrpc", a2a_jsonrpc),
    ];
    #[cfg(feature = "node")]
    t.extend([
        ("advert", advert as fn(&[u8])),
        ("anp_jsonrpc", anp_jsonrpc),
        ("ard_query", ard_query),
    ]);
    t
}

/// The agent key the seeds are signed with (and the key targets verify against).
pub fn agent_key() -> SecretKey {
    SecretKey::from_seed(&[7; 32])
}

/// The verification method of [`agent_key`]'s did:key.
pub fn agent_kid() -> DidUrl {
    let did = agent_key().did_key();
    did.with_fragment(did.method_specific_id())
}

/// One current-thread runtime per process for the async entry points.
fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
    })
}

/// A resolver that answers did:key locally and a did:wba document pinned by the seeds; every
/// other DID is checked with [`agentnet_did::Resolver::is_cached`] before it is resolved, so no
/// fetch is ever made.
fn resolver() -> &'static agentnet_did::Resolver {
    static R: OnceLock<agentnet_did::Resolver> = OnceLock::new();
    R.get_or_init(|| {
        let r = agentnet_did::Resolver::new(Default::default()).expect("a resolver");
        r.pin(wba_document())
            .expect("the seeds' did:wba document pins");
        r
    })
}

/// The did:wba document (with its proof) of [`agent_key`] at `example.com:agents:fuzz`.
pub fn wba_document() -> Document {
    let key = agent_key();
    let did = Did::parse("did:wba:example.com:agents:fuzz").expect("a did:wba DID");
    let mut doc = agentnet_did::wba::document_for(&did, &key, "2026-01-01T00:00:00Z");
    let vm = doc.verification_method[0].id.clone();
    agentnet_did::wba::sign_document(&mut doc, &key, &vm, "2026-01-01T00:00:00Z");
    doc
}

/// JSON bounds for a whole message, as the node's bodies allow.
const BODY_JSON: json::Limits = json::Limits {
    max_depth: 64,
    max_values: 100_000,
};

/// RFC 8785 canonical JSON of whatever the bounded parser accepts; the canonical form must parse
/// back and be its own canonical form.
pub fn jcs(data: &[u8]) {
    let Ok(v) = json::from_slice(data, BODY_JSON) else {
        return;
    };
    let c = jcs::canonicalize(&v);
    let back: Value = serde_json::from_slice(&c).expect("JCS output is JSON");
    assert_eq!(
        jcs::canonicalize(&back),
        c,
        "JCS of JCS output differs from it"
    );
}

/// A DID document as a did:web or did:wba fetch returns it: parsed with its bounds, checked to
/// belong to its `id` (the did:wba rules and proof included), every listed key decoded.
pub fn did_document(data: &[u8]) {
    let Ok(doc) = Document::from_json(data) else {
        return;
    };
    let _ = doc.to_json();
    let _ = agentnet_did::wba::verify_proof(&doc);
    let Ok(did) = Did::parse(&doc.id) else {
        return;
    };
    let _ = doc.check_belongs_to(&did);
    if did.method() == &Method::Wba {
        let _ = agentnet_did::wba::check_document(&did, &doc);
    }
    if matches!(did.method(), Method::Web | Method::Wba) {
        let _ = agentnet_did::web::document_url(&did);
    }
    for vm in doc.verification_method.iter().take(16) {
        for rel in [Relationship::Authentication, Relationship::AssertionMethod] {
            let _ = doc.key_for(&vm.id, rel);
        }
    }
}

/// A request split from fuzz bytes: `METHOD TARGET` on the first line, `name: value` header
/// lines up to an empty line, then the body. Header lines that are not a valid name and value
/// are left out, as a server's HTTP parser would refuse them before the node saw them.
pub struct RawRequest<'a> {
    /// The method.
    pub method: &'a str,
    /// The request target (a path, or an absolute URL).
    pub target: &'a str,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The body.
    pub body: &'a [u8],
}

/// Split `data` into a [`RawRequest`]; `None` when the first line is not `METHOD TARGET`.
pub fn split_request(data: &[u8]) -> Option<RawRequest<'_>> {
    let (first, mut rest) = split_line(data)?;
    let first = std::str::from_utf8(first).ok()?;
    let (method, target) = first.split_once(' ')?;
    let mut headers = http::HeaderMap::new();
    loop {
        let Some((line, after)) = split_line(rest) else {
            break;
        };
        rest = after;
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = http::HeaderName::from_bytes(line[..colon].trim_ascii());
        let value = http::HeaderValue::from_bytes(line[colon + 1..].trim_ascii());
        if let (Ok(n), Ok(v)) = (name, value) {
            if headers.len() < 64 {
                headers.append(n, v);
            }
        }
    }
    Some(RawRequest {
        method,
        target,
        headers,
        body: rest,
    })
}

fn split_line(data: &[u8]) -> Option<(&[u8], &[u8])> {
    if data.is_empty() {
        return None;
    }
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => {
            let line = &data[..i];
            Some((line.strip_suffix(b"\r").unwrap_or(line), &data[i + 1..]))
        }
        None => Some((data, &[])),
    }
}

/// The signature headers of a request, RFC 9421 `Signature-Input`/`Signature`/`Content-Digest`
/// or the legacy `Authorization: DIDWba`: read for bookkeeping ([`httpsig::claim`]) and
/// verified ([`httpsig::Verifier::verify`]) when the signer resolves without a fetch.
///
/// [`httpsig::claim`]: agentnet_did::httpsig::claim
/// [`httpsig::Verifier::verify`]: agentnet_did::httpsig::Verifier::verify
pub fn httpsig(data: &[u8]) {
    use agentnet_did::httpsig::{claim, Verifier, VerifyOptions};
    let Some(req) = split_request(data) else {
        return;
    };
    let _ = agentnet_did::httpsig::legacy_audience(req.target);
    let Ok(Some(c)) = claim(&req.headers) else {
        return;
    };
    if !resolver().is_cached(&c.did) {
        return;
    }
    // A verifier per input: its replay cache must not make the outcome depend on earlier inputs.
    let v = Verifier::new(
        resolver().clone(),
        VerifyOptions {
            replay_capacity: 16,
            ..Default::default()
        },
    );
    let _ = rt().block_on(v.verify(req.method, req.target, &req.headers, req.body, NOW));
}

/// A signed A2A Agent Card: normalized, canonicalized, and its signatures verified with the
/// agent's key and with its did:key document.
pub fn card(data: &[u8]) {
    let Ok(v) = json::from_slice(data, BODY_JSON) else {
        return;
    };
    let _ = agentnet_did::a2a::normalize(&v);
    let _ = agentnet_did::a2a::unknown_fields(&v);
    let key = agent_key();
    let did = key.did_key();
    let _ = agentnet_did::card::verify_with_key(&v, &did, &PublicKey::Ed25519(key.public()));
    let doc = didkey::document(&key.public(), Default::default());
    let _ = agentnet_did::card::verify_with_document(&v, &doc);
}

/// A delegation chain (`metadata.actorChain`): parsed, checked for a call by its last audience,
/// and each link whose issuer is a did:key verified.
pub fn delegation(data: &[u8]) {
    use agentnet_did::delegation::{Chain, Request, Target};
    let Ok(v) = json::from_slice(data, BODY_JSON) else {
        return;
    };
    let Ok(chain) = Chain::parse(&v) else {
        return;
    };
    let _ = chain.to_value();
    let links = chain.links();
    let Some(last) = links.last() else {
        return;
    };
    let caller = last.audience.to_string();
    let skills = ["translation".to_string()];
    let req = Request {
        principals: None,
        caller: &caller,
        target: Target {
            agent: "did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH",
            skills: &skills,
            op: "send",
        },
        now: NOW as i64,
    };
    let _ = chain.check(&req);
    for (i, l) in links.iter().enumerate() {
        if l.issuer.method() == &Method::Key {
            if let Ok(doc) = didkey::resolve(&l.issuer, Default::default()) {
                let _ = chain.verify_link(i, &doc);
            }
        }
    }
}

/// A task receipt (compact JWS): parsed and verified with the agent's key and did:key document.
pub fn receipt(data: &[u8]) {
    use agentnet_did::receipt::{parse, verify_with_document, verify_with_key, Expected};
    let Ok(jws) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parsed) = parse(jws) else {
        return;
    };
    let r = &parsed.receipt;
    let _ = r.payload();
    let expect = Expected {
        task_id: &r.task_id,
        agent: &r.agent,
        caller: r.caller.as_deref(),
        message: r.messages.first().map(String::as_str),
    };
    let key = agent_key();
    let _ = verify_with_key(jws, &PublicKey::Ed25519(key.public()), &expect);
    let doc = didkey::document(&key.public(), Default::default());
    let _ = verify_with_document(jws, &doc, &expect);
}

/// An endorsement (compact JWS), verified as the node does when one arrives.
pub fn endorsement(data: &[u8]) {
    let Ok(jws) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(e) = agentnet_did::endorsement::verify(jws, NOW) {
        let _ = e.payload();
        let _ = e.covers(e.skills.first().map(String::as_str));
    }
}

/// Send `data` to `router`: as a request when it splits into one ([`split_request`]), else as
/// the body of a `POST` to `default_path` with `Content-Type: application/json`.
fn serve(router: axum::Router, data: &[u8], default_path: &str) {
    use tower::ServiceExt as _;
    let request = match split_request(data).and_then(|r| {
        let mut b = http::Request::builder().method(r.method).uri(r.target);
        for (n, v) in &r.headers {
            b = b.header(n, v);
        }
        b.body(axum::body::Body::from(r.body.to_vec())).ok()
    }) {
        Some(r) => r,
        None => http::Request::post(default_path)
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .body(axum::body::Body::from(data.to_vec()))
            .expect("a fixed request"),
    };
    rt().block_on(async move {
        let response = router.oneshot(request).await.expect("axum is infallible");
        let _ = axum::body::to_bytes(response.into_body(), 1 << 20).await;
    });
}

/// The sample agents' A2A server (JSON-RPC at `/echo/` and `/ask-name/`, HTTP+JSON below them),
/// open to anonymous callers so requests reach the engine; new for every input.
fn a2a_router() -> (axum::Router, Arc<agentnet_a2a::server::Server>) {
    use agentnet_a2a::auth::{NoAuth, Policy};
    let (router, echo, _ask) = agentnet_a2a::samples::router(
        "http://127.0.0.1:9",
        std::time::Duration::ZERO,
        |card| agentnet_a2a::server::Config::new(card).policy(Policy::Open),
        Arc::new(NoAuth),
    );
    (router, echo)
}

/// An A2A request, either binding, to the sample agents.
pub fn a2a_jsonrpc(data: &[u8]) {
    let (router, echo) = a2a_router();
    serve(router, data, "/echo/");
    echo.engine().shutdown();
}

#[cfg(feature = "node")]
pub use node::{advert, anp_jsonrpc, ard_query};

#[cfg(feature = "node")]
mod node {
    use super::{a2a_router, agent_key, resolver, rt, serve, Arc, OnceLock, SecretKey, NOW};
    use agentnet_discovery::advert::{self, Validator};

    fn validator() -> &'static Validator {
        static V: OnceLock<Validator> = OnceLock::new();
        V.get_or_init(|| Validator::new(resolver().clone(), Default::default()))
    }

    /// A signed advertisement as gossip delivers it: the cheap checks, then, when its keys are
    /// at hand without a fetch, the keys, both signatures and the card's tags.
    pub fn advert(data: &[u8]) {
        let v = validator();
        let Ok(ad) = v.precheck(data, None, NOW) else {
            return;
        };
        if v.needs_resolution(&ad) {
            return;
        }
        let Ok(keys) = rt().block_on(v.keys(&ad)) else {
            return;
        };
        let _ = advert::verify(ad, &keys, data.to_vec());
    }

    /// An ANP JSON-RPC request to an agent's face over the sample echo agent.
    pub fn anp_jsonrpc(data: &[u8]) {
        use agentnet_node::hosted::anp::{router, Face, RPC_PATH};
        let (_, echo) = a2a_router();
        let card = agentnet_a2a::samples::card("echo", "Echoes", "http://127.0.0.1:9/echo");
        let face = Face::new(
            &card,
            agent_key().did_key().as_str(),
            "http://127.0.0.1:9/echo",
            false,
            Arc::new(agentnet_a2a::auth::NoAuth),
        );
        serve(router(Arc::new(face), echo.clone()), data, RPC_PATH);
        echo.engine().shutdown();
    }

    /// The store the ARD target's registry indexes: two adverts, opened once per process.
    fn store() -> &'static agentnet_discovery::Store {
        static S: OnceLock<(tempfile::TempDir, agentnet_discovery::Store)> = OnceLock::new();
        &S.get_or_init(|| {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let store = agentnet_discovery::Store::open(dir.path()).expect("a store");
            for seq in [1, 2] {
                let key = SecretKey::from_seed(&[seq as u8; 32]);
                let bytes = crate::seeds::advert_bytes(&key, seq, NOW);
                let ok = rt()
                    .block_on(validator().validate(&bytes, None, NOW))
                    .expect("the seed advert validates");
                store.put(&ok).expect("the seed advert is stored");
            }
            (dir, store)
        })
        .1
    }

    /// An Agent Registry Discovery query (`/search`, `/explore`, `/agents/...`).
    pub fn ard_query(data: &[u8]) {
        let store = store().clone();
        let router = agentnet_node::ard::router(store, "http://127.0.0.1:9", &agent_key(), &[]);
        serve(router, data, "/search");
    }
}

pub mod seeds;
