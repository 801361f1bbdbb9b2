//! did:web and did:wba resolution against a real HTTPS server on 127.0.0.1, with a self-signed
//! certificate for `localhost`: document checks, error codes, SSRF rules, caps, timeouts, cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agentnet_did::document::DocumentError;
use agentnet_did::resolver::Options;
use agentnet_did::web::HttpOptions;
use agentnet_did::{Document, Relationship, ResolveError, Resolver, SecretKey};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::stream::{self, StreamExt};

/// The resolver's HTTP timeout in these tests.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long any single resolution may take before the test fails instead of hanging.
const BOUND: Duration = Duration::from_secs(10);
const WELL_KNOWN: &str = "/.well-known/did.json";

/// What the server answers on one path.
#[derive(Clone)]
enum Reply {
    /// 200 with this body and a Content-Length.
    Body(Vec<u8>),
    /// 200 with this body streamed in 16 KiB chunks, without a Content-Length.
    Chunked(Vec<u8>),
    /// 302 to this Location.
    Redirect(String),
    /// Sleep this long, then answer 200 `{}`.
    Slow(Duration),
    /// Sleep this long, then answer 200 with this body.
    SlowBody(Duration, Vec<u8>),
    /// Send the headers and a first chunk, then never finish the body.
    Stall,
}

#[derive(Clone, Default)]
struct Shared {
    hits: Arc<AtomicUsize>,
    routes: Arc<Mutex<HashMap<String, Reply>>>,
}

/// A test server on 127.0.0.1 with an ephemeral port. Unknown paths get 404. Every request that
/// reaches HTTP handling is counted, whatever the path.
struct Server {
    port: u16,
    shared: Shared,
}

impl Server {
    async fn https() -> Self {
        Self::start(true).await
    }

    async fn http() -> Self {
        Self::start(false).await
    }

    async fn start(tls: bool) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let shared = Shared::default();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        if tls {
            let listener = TlsListener::new(listener, identity());
            tokio::spawn(async move { axum::serve(listener, app).await });
        } else {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
        Self { port, shared }
    }

    fn route(&self, path: &str, reply: Reply) -> &Self {
        let mut routes = self.shared.routes.lock().unwrap();
        routes.insert(path.to_owned(), reply);
        self
    }

    fn hits(&self) -> usize {
        self.shared.hits.load(Ordering::SeqCst)
    }

    /// `did:<method>:localhost%3A<port>` followed by `segments` (`""` or `":user:alice"`).
    fn did(&self, method: &str, segments: &str) -> String {
        format!("did:{method}:localhost%3A{}{segments}", self.port)
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }
}

async fn handle(State(shared): State<Shared>, uri: Uri) -> Response {
    shared.hits.fetch_add(1, Ordering::SeqCst);
    let reply = shared.routes.lock().unwrap().get(uri.path()).cloned();
    let json = [(header::CONTENT_TYPE, "application/did+json")];
    match reply {
        None => StatusCode::NOT_FOUND.into_response(),
        Some(Reply::Body(body)) => (json, body).into_response(),
        Some(Reply::Chunked(body)) => {
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                body.chunks(16 * 1024).map(|c| Ok(c.to_vec())).collect();
            (json, Body::from_stream(stream::iter(chunks))).into_response()
        }
        Some(Reply::Redirect(to)) => (StatusCode::FOUND, [(header::LOCATION, to)]).into_response(),
        Some(Reply::SlowBody(delay, body)) => {
            tokio::time::sleep(delay).await;
            (json, body).into_response()
        }
        Some(Reply::Slow(delay)) => {
            tokio::time::sleep(delay).await;
            (json, "{}").into_response()
        }
        Some(Reply::Stall) => {
            let first = stream::iter([Ok::<_, std::io::Error>(b"{\"id\": ".to_vec())]);
            (json, Body::from_stream(first.chain(stream::pending()))).into_response()
        }
    }
}

/// The self-signed certificate for `localhost` and its key, PEM, made once per test binary.
fn identity() -> &'static (String, String) {
    static ID: OnceLock<(String, String)> = OnceLock::new();
    ID.get_or_init(|| {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        (ck.cert.pem(), ck.key_pair.serialize_pem())
    })
}

/// axum's listener for HTTPS on loopback (rustls on ring, HTTP/1.1 only, as the node serves):
/// the test's certificate, a handshake a client gives up on (one that refuses the certificate)
/// is skipped, and none holds up the next connection for more than 5 s.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl TlsListener {
    fn new(listener: std::net::TcpListener, (cert, key): &(String, String)) -> Self {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap();
        Self {
            tcp: tokio::net::TcpListener::from_std(listener).unwrap(),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            let handshake = self.acceptor.accept(tcp);
            if let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_secs(5), handshake).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// Options that trust the test certificate and allow loopback, nothing more.
fn options() -> Options {
    Options {
        http: HttpOptions {
            allow_loopback: true,
            extra_root_pems: vec![identity().0.clone().into_bytes()],
            timeout: TIMEOUT,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn key() -> SecretKey {
    SecretKey::from_seed(&[7; 32])
}

/// A good document for `did`: one Multikey method `<did>#key-1`, listed under authentication.
fn good_doc(did: &str) -> Vec<u8> {
    serde_json::to_vec(&good_doc_value(did)).unwrap()
}

fn good_doc_value(did: &str) -> serde_json::Value {
    let vm = format!("{did}#key-1");
    serde_json::json!({
        "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
        "id": did,
        "verificationMethod": [{
            "id": vm, "type": "Multikey", "controller": did,
            "publicKeyMultibase": key().did_key().method_specific_id(),
        }],
        "authentication": [vm],
    })
}

/// Resolve `did` with `resolver`, failing the test if it takes longer than [`BOUND`].
async fn resolve(resolver: &Resolver, did: &str) -> Result<Arc<Document>, ResolveError> {
    tokio::time::timeout(BOUND, resolver.resolve_str(did))
        .await
        .unwrap_or_else(|_| panic!("resolving {did} did not finish within {BOUND:?}"))
}

/// The error of `result`, checked to have `code` and to mention every one of `mentions`.
#[track_caller]
fn expect_err(
    result: Result<Arc<Document>, ResolveError>,
    code: &str,
    mentions: &[&str],
) -> ResolveError {
    let err = match result {
        Ok(doc) => panic!("expected {code}, got a document for {}", doc.id),
        Err(e) => e,
    };
    assert_eq!(err.code(), code, "{err}");
    let msg = err.to_string();
    for m in mentions {
        assert!(msg.contains(m), "{msg:?} does not mention {m:?}");
    }
    err
}

/// The document is the one [`good_doc`] serves: its key verifies a signature by [`key`].
#[track_caller]
fn assert_good(doc: &Document, did: &str) {
    assert_eq!(doc.id, did);
    let public = doc.key_for("#key-1", Relationship::Authentication).unwrap();
    assert!(public.verify(b"hello", &key().sign(b"hello")));
    let absolute = format!("{did}#key-1");
    assert!(doc.key_for(&absolute, Relationship::Authentication).is_ok());
    assert!(doc
        .key_for("#key-1", Relationship::AssertionMethod)
        .is_err());
}

#[tokio::test]
async fn good_did_web_document_resolves() {
    let server = Server::https().await;
    let root = server.did("web", "");
    let alice = server.did("web", ":user:alice");
    server
        .route(WELL_KNOWN, Reply::Body(good_doc(&root)))
        .route("/user/alice/did.json", Reply::Body(good_doc(&alice)));
    let r = Resolver::new(options()).unwrap();
    assert_good(&resolve(&r, &root).await.unwrap(), &root);
    assert_good(&resolve(&r, &alice).await.unwrap(), &alice);
    assert_eq!(server.hits(), 2);
}

#[tokio::test]
async fn good_did_wba_document_resolves() {
    let server = Server::https().await;
    let did = server.did("wba", ":user:alice");
    server.route("/user/alice/did.json", Reply::Body(good_doc(&did)));
    let r = Resolver::new(options()).unwrap();
    assert_good(&resolve(&r, &did).await.unwrap(), &did);
}

#[tokio::test]
async fn document_for_another_did_is_refused() {
    let server = Server::https().await;
    let did = server.did("web", "");
    server.route(WELL_KNOWN, Reply::Body(good_doc("did:web:evil.example")));
    let r = Resolver::new(options()).unwrap();
    let err = expect_err(
        resolve(&r, &did).await,
        "invalidDidDocument",
        &[&did, "did:web:evil.example"],
    );
    assert!(
        matches!(
            err,
            ResolveError::InvalidDocument {
                source: DocumentError::IdMismatch { .. },
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn missing_document_is_not_found() {
    let server = Server::https().await;
    let did = server.did("web", ":nobody");
    let r = Resolver::new(options()).unwrap();
    let url = server.url("/nobody/did.json");
    expect_err(resolve(&r, &did).await, "notFound", &[&did, &url, "404"]);
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn body_over_the_cap_is_refused_with_or_without_content_length() {
    let default_cap = HttpOptions::default().max_body;
    assert_eq!(default_cap, 256 * 1024);
    let server = Server::https().await;
    let r = Resolver::new(options()).unwrap();
    assert_eq!(r.options().http.max_body, default_cap);

    // A valid document padded to exactly the cap is still accepted.
    let exact = server.did("web", ":exact");
    let mut value = good_doc_value(&exact);
    value["padding"] = "".into();
    let short = default_cap - serde_json::to_vec(&value).unwrap().len();
    value["padding"] = "a".repeat(short).into();
    let body = serde_json::to_vec(&value).unwrap();
    assert_eq!(body.len(), default_cap);
    server.route("/exact/did.json", Reply::Chunked(body));
    assert_good(&resolve(&r, &exact).await.unwrap(), &exact);

    let big = vec![b' '; 300 * 1024];
    server
        .route("/sized/did.json", Reply::Body(big.clone()))
        .route("/chunked/did.json", Reply::Chunked(big));
    for name in ["sized", "chunked"] {
        let did = server.did("web", &format!(":{name}"));
        let err = expect_err(
            resolve(&r, &did).await,
            "invalidDidDocument",
            &[&did, "larger than", &default_cap.to_string()],
        );
        assert!(matches!(err, ResolveError::TooLarge { .. }), "{err:?}");
    }
    assert_eq!(server.hits(), 3);
}

#[tokio::test]
async fn redirects_leave_neither_host_nor_scheme() {
    let server = Server::https().await;
    let port = server.port;
    let r = Resolver::new(options()).unwrap();
    let targets = [
        "https://10.1.2.3/did.json".to_owned(),
        format!("https://127.0.0.2:{port}/moved/did.json"),
        format!("http://localhost:{port}/moved/did.json"),
    ];
    for (i, target) in targets.iter().enumerate() {
        let did = server.did("web", &format!(":r{i}"));
        server.route(&format!("/r{i}/did.json"), Reply::Redirect(target.clone()));
        // Had the client connected, 10.1.2.3 would time out and 127.0.0.2 would refuse the
        // connection (both internalError), and plain http to this TLS port would fail; only a
        // refusal before connecting gives notAllowedUrl.
        expect_err(
            resolve(&r, &did).await,
            "notAllowedUrl",
            &[&did, target, "refused"],
        );
        assert_eq!(server.hits(), i + 1, "only the first request reached us");
    }

    // On the same host, relative and absolute redirects to another path are followed.
    let hits = server.hits();
    for (name, location) in [
        ("rel", "/same/rel/did.json".to_owned()),
        ("abs", server.url("/same/abs/did.json")),
    ] {
        let did = server.did("web", &format!(":{name}"));
        server
            .route(&format!("/{name}/did.json"), Reply::Redirect(location))
            .route(
                &format!("/same/{name}/did.json"),
                Reply::Body(good_doc(&did)),
            );
        assert_good(&resolve(&r, &did).await.unwrap(), &did);
    }
    assert_eq!(server.hits(), hits + 4);
}

/// A server behaving as `reply` makes resolution fail with a timeout, within a bounded time.
async fn expect_timeout(reply: Reply) {
    let server = Server::https().await;
    let did = server.did("web", "");
    server.route(WELL_KNOWN, reply);
    let r = Resolver::new(options()).unwrap();
    expect_err(
        resolve(&r, &did).await,
        "internalError",
        &[&did, &server.url(WELL_KNOWN), "timed out"],
    );
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn server_slow_to_answer_times_out() {
    expect_timeout(Reply::Slow(TIMEOUT * 3)).await;
}

#[tokio::test]
async fn server_stalling_the_body_times_out() {
    expect_timeout(Reply::Stall).await;
}

#[tokio::test]
async fn path_traversal_is_refused_before_any_request() {
    let server = Server::https().await;
    server.route(WELL_KNOWN, Reply::Body(good_doc(&server.did("web", ""))));
    let r = Resolver::new(options()).unwrap();
    for segments in [
        ":..", ":%2E%2E", ":a%2Fb", ":user:..", ":.", ":a%3Fb", ":a%23b",
    ] {
        let did = server.did("web", segments);
        let err = expect_err(resolve(&r, &did).await, "invalidDid", &[&did]);
        assert!(
            matches!(err, ResolveError::InvalidDid { .. }),
            "{segments}: {err:?}"
        );
    }
    assert_eq!(server.hits(), 0);
}

#[tokio::test]
async fn loopback_is_refused_by_default() {
    let server = Server::https().await;
    let did = server.did("web", "");
    server.route(WELL_KNOWN, Reply::Body(good_doc(&did)));
    let mut opts = options();
    opts.http.allow_loopback = false;
    let r = Resolver::new(opts).unwrap();
    expect_err(
        resolve(&r, &did).await,
        "notAllowedUrl",
        &[&did, "localhost"],
    );
    let literal = format!("did:web:127.0.0.1%3A{}", server.port);
    expect_err(
        resolve(&r, &literal).await,
        "notAllowedUrl",
        &[&literal, "127.0.0.1 is not a public address"],
    );
    assert_eq!(server.hits(), 0);

    // The very same resolution with loopback allowed works: the refusal was the policy.
    let r = Resolver::new(options()).unwrap();
    assert_good(&resolve(&r, &did).await.unwrap(), &did);
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn plain_http_only_with_allow_http_loopback() {
    let server = Server::http().await;
    let did = server.did("web", "");
    server.route(WELL_KNOWN, Reply::Body(good_doc(&did)));

    // By default the resolver speaks TLS, which a plain http server cannot answer.
    let r = Resolver::new(options()).unwrap();
    expect_err(
        resolve(&r, &did).await,
        "internalError",
        &[&did, &server.url(WELL_KNOWN)],
    );
    assert_eq!(server.hits(), 0);

    let opts = Options {
        http: HttpOptions {
            allow_http_loopback: true,
            timeout: TIMEOUT,
            ..Default::default()
        },
        ..Default::default()
    };
    let r = Resolver::new(opts).unwrap();
    assert_good(&resolve(&r, &did).await.unwrap(), &did);
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn results_and_failures_are_cached() {
    let server = Server::https().await;
    let found = server.did("web", "");
    let later = server.did("web", ":later");
    server.route(WELL_KNOWN, Reply::Body(good_doc(&found)));
    let negative_ttl = Duration::from_millis(150);
    let r = Resolver::new(Options {
        ttl: Duration::from_secs(60),
        negative_ttl,
        ..options()
    })
    .unwrap();

    let first = resolve(&r, &found).await.unwrap();
    let second = resolve(&r, &found).await.unwrap();
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(server.hits(), 1);

    for _ in 0..2 {
        expect_err(resolve(&r, &later).await, "notFound", &[&later]);
    }
    assert_eq!(server.hits(), 2, "the 404 is remembered");

    // Once the negative TTL has passed the server is asked again, and now has the document.
    server.route("/later/did.json", Reply::Body(good_doc(&later)));
    tokio::time::sleep(negative_ttl + Duration::from_millis(50)).await;
    assert_good(&resolve(&r, &later).await.unwrap(), &later);
    resolve(&r, &found).await.unwrap();
    assert_eq!(
        server.hits(),
        3,
        "only the expired failure was fetched again"
    );

    // With a zero TTL nothing is reused.
    let r = Resolver::new(Options {
        ttl: Duration::ZERO,
        ..options()
    })
    .unwrap();
    resolve(&r, &found).await.unwrap();
    resolve(&r, &found).await.unwrap();
    assert_eq!(server.hits(), 5);
}

#[tokio::test]
async fn deeply_nested_json_is_refused() {
    let server = Server::https().await;
    let did = server.did("web", "");
    let deep = format!(
        "{{\"id\": \"{did}\", \"x\": {}{}}}",
        "[".repeat(100),
        "]".repeat(100)
    );
    server.route(WELL_KNOWN, Reply::Body(deep.into_bytes()));
    let r = Resolver::new(options()).unwrap();
    let err = expect_err(
        resolve(&r, &did).await,
        "invalidDidDocument",
        &[&did, "nested deeper"],
    );
    assert!(
        matches!(
            err,
            ResolveError::InvalidDocument {
                source: DocumentError::Invalid(_),
                ..
            }
        ),
        "{err:?}"
    );
}

/// Attack: many gossiped advertisements of one uncached did:web DID arrive at once; each
/// validation resolves it, and without single flight each one fetches (up to the concurrency
/// limit), multiplying the load on the DID's server.
#[tokio::test]
async fn concurrent_resolutions_of_one_did_make_one_fetch() {
    let server = Server::https().await;
    let did = server.did("web", "");
    // The answer is slow, so that every resolution starts while the first fetch is in flight.
    server.route(
        WELL_KNOWN,
        Reply::SlowBody(Duration::from_millis(300), good_doc(&did)),
    );
    let r = Resolver::new(options()).unwrap();
    let all: Vec<_> = (0..32)
        .map(|_| {
            let (r, did) = (r.clone(), did.clone());
            tokio::spawn(async move { resolve(&r, &did).await })
        })
        .collect();
    let mut docs = Vec::new();
    for t in all {
        docs.push(t.await.unwrap().unwrap());
    }
    assert_eq!(server.hits(), 1, "32 concurrent resolutions, one fetch");
    assert!(docs.iter().all(|d| Arc::ptr_eq(d, &docs[0])));

    // Failures are shared too.
    let missing = server.did("web", ":missing");
    let all: Vec<_> = (0..8)
        .map(|_| {
            let (r, did) = (r.clone(), missing.clone());
            tokio::spawn(async move { resolve(&r, &did).await })
        })
        .collect();
    for t in all {
        expect_err(t.await.unwrap(), "notFound", &[]);
    }
    assert_eq!(server.hits(), 2);
}

/// A document near the limits: `n` services with 60-byte endpoints, about `n * 4` values.
fn big_doc(did: &str, n: usize) -> Vec<u8> {
    let mut v = good_doc_value(did);
    v["service"] = (0..n)
        .map(|i| {
            serde_json::json!({"id": format!("#s{i}"), "type": "X",
                "serviceEndpoint": format!("https://example.com/{}", "e".repeat(40))})
        })
        .collect();
    serde_json::to_vec(&v).unwrap()
}

/// Attack: fill the resolver cache with large documents. It is bounded by their estimated parsed
/// bytes, not by their count.
#[tokio::test]
async fn the_cache_stays_under_its_byte_cap() {
    let server = Server::https().await;
    let cap = 2 * 1024 * 1024;
    let r = Resolver::new(Options {
        cache_bytes: cap,
        ..options()
    })
    .unwrap();
    let mut body_bytes = 0;
    for i in 0..12 {
        let did = server.did("web", &format!(":u{i}"));
        let body = big_doc(&did, 900);
        body_bytes += body.len();
        server.route(&format!("/u{i}/did.json"), Reply::Body(body));
        resolve(&r, &did).await.unwrap();
    }
    let weight = r.cache_weight().await;
    assert!(weight <= cap, "cache holds {weight} bytes, cap {cap}");
    assert!(weight > 0);
    // Twelve such documents are estimated well above the cap (so some were evicted), though
    // their bodies alone would fit.
    assert!(body_bytes < cap as usize, "{body_bytes}");

    // A small document still resolves and is cached.
    let did = server.did("web", ":small");
    server.route("/small/did.json", Reply::Body(good_doc(&did)));
    resolve(&r, &did).await.unwrap();
    let hits = server.hits();
    resolve(&r, &did).await.unwrap();
    assert_eq!(server.hits(), hits);
}

/// Attack: a document under the body cap made of tiny values (a 256 KiB array of one-digit
/// numbers parses into megabytes, held twice).
#[tokio::test]
async fn a_document_of_many_tiny_values_is_refused() {
    let server = Server::https().await;
    let did = server.did("web", "");
    let mut v = good_doc_value(&did);
    v["x"] = serde_json::Value::Array(vec![0.into(); 100_000]);
    let body = serde_json::to_vec(&v).unwrap();
    assert!(body.len() < HttpOptions::default().max_body);
    server.route(WELL_KNOWN, Reply::Body(body));
    let r = Resolver::new(options()).unwrap();
    expect_err(
        resolve(&r, &did).await,
        "invalidDidDocument",
        &[&did, "more than 4096 values"],
    );
}

/// Attack: a document naming `id` (or a key) twice, read differently by different parsers.
#[tokio::test]
async fn a_document_with_a_repeated_member_is_refused() {
    let server = Server::https().await;
    let did = server.did("web", "");
    let body = String::from_utf8(good_doc(&did)).unwrap().replacen(
        "\"id\":",
        "\"id\":\"did:web:evil.example\",\"id\":",
        1,
    );
    server.route(WELL_KNOWN, Reply::Body(body.into_bytes()));
    let r = Resolver::new(options()).unwrap();
    expect_err(
        resolve(&r, &did).await,
        "invalidDidDocument",
        &["duplicate member name \"id\""],
    );
}

/// A caller who names the issuer of a delegation link (or a signer, or a publisher) chooses
/// where this node fetches from: fresh paths of one host each cost a GET (79 in 10 s at one
/// target from four addresses, more with more). Every path of a host, every port, and every
/// clone of the resolver spend one budget of that host.
#[tokio::test]
async fn fresh_paths_of_one_host_spend_one_fetch_budget() {
    let server = Server::http().await;
    let other_port = Server::http().await;
    let opts = Options {
        http: HttpOptions {
            allow_http_loopback: true,
            timeout: TIMEOUT,
            ..Default::default()
        },
        ..Default::default()
    };
    let r = Resolver::new(opts).unwrap();
    let clone = r.clone();
    let mut refused = 0;
    for n in 0..100 {
        let (resolver, s) = if n % 2 == 0 {
            (&r, &server)
        } else {
            (&clone, &other_port)
        };
        let host = if n % 3 == 0 { "LOCALHOST" } else { "localhost" };
        let did = format!("did:web:{host}%3A{}:fresh:p{n}", s.port);
        let err = resolve(resolver, &did).await.unwrap_err();
        if err.to_string().contains("fetch budget") {
            refused += 1;
        }
    }
    // The default budget: 32, then two a second (the loop takes well under 4 s).
    let hits = server.hits() + other_port.hits();
    assert!(hits <= 40, "{hits} GETs at one host");
    assert!(refused >= 60, "{refused} refused for the budget");
}
