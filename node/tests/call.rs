//! The calling side of A2A (`agentnet_node::call`) over real HTTP on 127.0.0.1: requests signed
//! with the caller's DID and checked by a server-side RFC 9421 verifier (did:key, and did:web and
//! did:wba documents served over HTTPS with a private CA), cards verified before anything is
//! sent, the refusals (nothing reaches the agent), a stream dropped mid-task (recovered with
//! GetTask, never a second send), INPUT_REQUIRED continued, and the Python `a2a-sdk` server.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agentnet_a2a::auth::{AuthError, Authenticator, BoxFuture, Policy, RequestParts};
use agentnet_a2a::server::{Config, Server};
use agentnet_a2a::types::TaskState;
use agentnet_a2a::{samples, store};
use agentnet_did::httpsig::{Verifier, VerifyOptions};
use agentnet_did::resolver::Options;
use agentnet_did::web::HttpOptions;
use agentnet_did::{card, Resolver, SecretKey};
use agentnet_node::call::{CallError, CallOptions, Caller, DidSigner, Outcome, Progress, Target};
use agentnet_node::identity::{self, DomainSpec, Identity};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

#[path = "../../did/tests/support/tls.rs"]
mod tls;
use tls::TlsListener;

/// The self-signed certificate for `localhost` the HTTPS DID server uses, trusted as a root.
fn tls() -> &'static (String, String) {
    static ID: OnceLock<(String, String)> = OnceLock::new();
    ID.get_or_init(|| {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        (ck.cert.pem(), ck.key_pair.serialize_pem())
    })
}

/// Resolver options trusting the test CA, loopback allowed.
fn resolver_opts() -> Options {
    Options {
        http: HttpOptions {
            allow_loopback: true,
            extra_root_pems: vec![tls().0.clone().into_bytes()],
            timeout: Duration::from_secs(5),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn resolver() -> Resolver {
    Resolver::new(resolver_opts()).unwrap()
}

/// The server side: verifies RFC 9421 signatures with the identity crate's verifier, as the
/// node will; records who called. `prefix` is where the agent is mounted (axum's `nest`
/// strips it from the URI the server sees; the signature covers the URL the client used).
struct DidAuth {
    verifier: Verifier,
    origin: String,
    prefix: String,
    callers: Mutex<Vec<String>>,
}

impl Authenticator for DidAuth {
    fn authenticate<'a>(
        &'a self,
        r: RequestParts<'a>,
    ) -> BoxFuture<'a, Result<Option<String>, AuthError>> {
        Box::pin(async move {
            if !r.headers.contains_key("signature-input") {
                return Ok(None);
            }
            // `nest` gives "/" for the agent's own URL, which has no trailing slash.
            let rest = if r.uri.path() == "/" && r.uri.query().is_none() {
                String::new()
            } else {
                r.uri.to_string()
            };
            let target = format!("{}{}{rest}", self.origin, self.prefix);
            let now = agentnet_discovery::net::unix_now();
            match self
                .verifier
                .verify(r.method.as_str(), &target, r.headers, r.body, now)
                .await
            {
                Ok(v) => {
                    self.callers.lock().unwrap().push(v.did.to_string());
                    Ok(Some(v.did.to_string()))
                }
                Err(e) => Err(AuthError(e.to_string())),
            }
        })
    }
}

/// The two sample agents on 127.0.0.1, each requiring a DID signature, with cards signed by
/// `agent`; every request counted.
struct Agents {
    origin: String,
    echo_card: Value,
    ask_card: Value,
    echo_auth: Arc<DidAuth>,
    requests: Arc<AtomicUsize>,
}

async fn agents(agent: &Identity) -> Agents {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let auth = |prefix: &str| {
        Arc::new(DidAuth {
            verifier: Verifier::new(resolver(), VerifyOptions::default()),
            origin: origin.clone(),
            prefix: prefix.into(),
            callers: Mutex::new(Vec::new()),
        })
    };
    let (echo_auth, ask_auth) = (auth("/echo"), auth("/ask-name"));
    let sign = |c: Value| card::sign(&c, agent.key(), agent.kid()).unwrap();
    let echo_card = sign(samples::card("echo", "Echoes", &format!("{origin}/echo")));
    let ask_card = sign(samples::card(
        "ask-name",
        "Asks",
        &format!("{origin}/ask-name"),
    ));
    let echo = Server::new(
        Config::new(echo_card.clone()).policy(Policy::Did),
        Arc::new(samples::Echo),
        Arc::new(store::MemoryStore::default()),
        echo_auth.clone(),
    );
    let ask = Server::new(
        Config::new(ask_card.clone()).policy(Policy::Did),
        Arc::new(samples::AskName {
            work: Duration::from_millis(300),
        }),
        Arc::new(store::MemoryStore::default()),
        ask_auth,
    );
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let router = axum::Router::new()
        .nest("/echo", echo.router())
        .nest("/ask-name", ask.router())
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                counter.fetch_add(1, Ordering::SeqCst);
                next.run(req)
            },
        ));
    tokio::spawn(async move { axum::serve(listener, router).await });
    Agents {
        origin,
        echo_card,
        ask_card,
        echo_auth,
        requests,
    }
}

fn opts(stream: bool) -> CallOptions {
    let mut o = CallOptions::default();
    o.stream = stream;
    o.allow_private = true;
    o.timeout = Duration::from_secs(30);
    o.poll_initial = Duration::from_millis(50);
    o
}

fn caller(id: Option<&Identity>, o: CallOptions) -> Caller {
    let signer = id.map(|i| Arc::new(DidSigner::new(i.clone())) as Arc<_>);
    Caller::new(None, resolver(), signer, o)
}

fn quiet() -> impl FnMut(Progress) + Send {
    |p| eprintln!("progress: {p}")
}

fn task(o: Outcome) -> agentnet_a2a::types::Task {
    match o {
        Outcome::Task(t) => *t,
        other => panic!("expected a task, got {other:?}"),
    }
}

fn artifact_text(t: &agentnet_a2a::types::Task) -> String {
    t.artifacts.as_ref().unwrap()[0].parts[0]
        .as_text()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_calls_with_did_key_both_ways_of_following_and_input_required() {
    let agent = Identity::did_key(SecretKey::generate());
    let me = Identity::did_key(SecretKey::generate());
    let a = agents(&agent).await;
    for stream in [false, true] {
        let c = caller(Some(&me), opts(stream));
        let echo = c
            .find(
                &Target::Card {
                    did: agent.did().to_string(),
                    card: a.echo_card.clone(),
                },
                &mut quiet(),
            )
            .await
            .unwrap();
        let t = task(c.send(&echo, "hello", &mut quiet()).await.unwrap());
        assert_eq!(t.status.state, TaskState::Completed);
        assert_eq!(artifact_text(&t), "hello");

        let ask = c
            .find(
                &Target::Card {
                    did: agent.did().to_string(),
                    card: a.ask_card.clone(),
                },
                &mut quiet(),
            )
            .await
            .unwrap();
        let t = task(
            c.send(&ask, "what time is it?", &mut quiet())
                .await
                .unwrap(),
        );
        assert_eq!(t.status.state, TaskState::InputRequired, "stream {stream}");
        let done = task(
            c.continue_task(&ask, &t.id, "Ada", &mut quiet())
                .await
                .unwrap(),
        );
        assert_eq!(done.id, t.id);
        assert_eq!(done.status.state, TaskState::Completed);
        assert!(artifact_text(&done).contains("Ada"), "{done:?}");
        // A task that is done is not continued: refused before anything is sent.
        let before = a.requests.load(Ordering::SeqCst);
        let e = c
            .continue_task(&ask, &t.id, "again", &mut quiet())
            .await
            .unwrap_err();
        assert!(matches!(e, CallError::NotWaiting { .. }), "{e}");
        assert_eq!(
            a.requests.load(Ordering::SeqCst),
            before + 1,
            "one GetTask only"
        );
    }
    // The server saw our DID, verified.
    let callers = a.echo_auth.callers.lock().unwrap().clone();
    assert!(!callers.is_empty());
    assert!(
        callers.iter().all(|c| c == me.did().as_str()),
        "{callers:?}"
    );

    // Unsigned, the DID-only agent answers 401, and the call says so.
    let c = caller(None, opts(false));
    let echo = c
        .find(
            &Target::Card {
                did: agent.did().to_string(),
                card: a.echo_card.clone(),
            },
            &mut quiet(),
        )
        .await
        .unwrap();
    let e = c.send(&echo, "hello", &mut quiet()).await.unwrap_err();
    assert!(e.to_string().contains("401"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_send_nothing_to_the_agent() {
    let agent = Identity::did_key(SecretKey::generate());
    let other = Identity::did_key(SecretKey::generate());
    let me = Identity::did_key(SecretKey::generate());
    let a = agents(&agent).await;
    let c = caller(Some(&me), opts(false));
    let did = agent.did().to_string();
    let try_card = |card: Value, did: String| {
        let c = &c;
        async move {
            c.find(&Target::Card { did, card }, &mut quiet())
                .await
                .unwrap_err()
        }
    };

    // Tampered after signing: the signature breaks.
    let mut tampered = a.echo_card.clone();
    tampered["supportedInterfaces"][0]["url"] = json!("http://127.0.0.1:1/evil");
    let e = try_card(tampered, did.clone()).await;
    assert!(matches!(e, CallError::CardSignature { .. }), "{e}");

    // Unsigned.
    let mut unsigned = a.echo_card.clone();
    unsigned.as_object_mut().unwrap().remove("signatures");
    let e = try_card(unsigned, did.clone()).await;
    assert!(matches!(e, CallError::CardSignature { .. }), "{e}");

    // Validly signed, by someone else: not the agent's card.
    let by_other = card::sign(
        &samples::card("echo", "Echoes", &format!("{}/echo", a.origin)),
        other.key(),
        other.kid(),
    )
    .unwrap();
    let e = try_card(by_other, did.clone()).await;
    assert!(matches!(e, CallError::NotTheAgents { .. }), "{e}");

    // No interface we speak (gRPC, JSON-RPC 0.3, an ftp URL).
    let mut card = samples::card("echo", "Echoes", &format!("{}/echo", a.origin));
    card["supportedInterfaces"] = json!([
        {"url": format!("{}/echo", a.origin), "protocolBinding": "GRPC", "protocolVersion": "1.0"},
        {"url": format!("{}/echo", a.origin), "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        {"url": "ftp://127.0.0.1/echo", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ]);
    let e = try_card(
        card::sign(&card, agent.key(), agent.kid()).unwrap(),
        did.clone(),
    )
    .await;
    assert!(matches!(e, CallError::Interface(_)), "{e}");

    // A loopback (or private, or metadata) address, or plain http, without allow_private.
    let strict = caller(Some(&me), CallOptions::default());
    for url in [
        format!("{}/echo", a.origin),
        "https://127.0.0.1:1/echo".into(),
        "https://169.254.169.254/latest".into(),
        "https://10.0.0.1/a".into(),
        "https://[::1]:1/a".into(),
    ] {
        let card = card::sign(
            &samples::card("echo", "Echoes", &url),
            agent.key(),
            agent.kid(),
        )
        .unwrap();
        let e = strict
            .find(
                &Target::Card {
                    did: did.clone(),
                    card,
                },
                &mut quiet(),
            )
            .await
            .unwrap_err();
        assert!(matches!(e, CallError::Address { .. }), "{url}: {e}");
    }

    // A name that is not a DID.
    let e = try_card(a.echo_card.clone(), "not a did".into()).await;
    assert!(matches!(e, CallError::BadDid(_)), "{e}");

    assert_eq!(
        a.requests.load(Ordering::SeqCst),
        0,
        "nothing may reach the agent"
    );
}

/// Read one HTTP/1.1 request (head and Content-Length body) from `s`: its head and JSON body.
async fn read_request(s: &mut tokio::net::TcpStream) -> Option<(String, Value)> {
    let (raw, _) = read_raw(s).await?;
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let body = serde_json::from_slice(&raw[head_end..]).unwrap_or(Value::Null);
    Some((head, body))
}

/// A JSON-RPC agent that answers `SendStreamingMessage` with the task's first event and then
/// drops the connection (or drops it at once, `drop_at_once`), and `GetTask` with the task
/// completed. Counts each method.
async fn dropping_agent(
    drop_at_once: bool,
) -> (String, Arc<Mutex<std::collections::HashMap<String, usize>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/rpc", listener.local_addr().unwrap());
    let counts = Arc::new(Mutex::new(std::collections::HashMap::new()));
    let c2 = counts.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let counts = c2.clone();
            tokio::spawn(async move {
                while let Some((_head, body)) = read_request(&mut s).await {
                    let method = body["method"].as_str().unwrap_or("").to_owned();
                    *counts.lock().unwrap().entry(method.clone()).or_insert(0) += 1;
                    let id = body["id"].clone();
                    let task = |state: &str, artifacts: bool| {
                        let mut t = json!({"id": "t-1", "contextId": "c-1",
                            "status": {"state": state}});
                        if artifacts {
                            t["artifacts"] =
                                json!([{"artifactId": "a", "parts": [{"text": "done"}]}]);
                        }
                        t
                    };
                    match method.as_str() {
                        "SendStreamingMessage" => {
                            if drop_at_once {
                                return;
                            }
                            let ev = json!({"jsonrpc": "2.0", "id": id,
                                "result": {"task": task("TASK_STATE_WORKING", false)}});
                            let msg = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                            let data = format!("data: {ev}\n\n");
                            let chunk = format!("{:x}\r\n{data}\r\n", data.len());
                            let _ = s.write_all(msg.as_bytes()).await;
                            let _ = s.write_all(chunk.as_bytes()).await;
                            let _ = s.flush().await;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            // Dropped mid-stream: no terminating chunk.
                            return;
                        }
                        "GetTask" => {
                            let out = json!({"jsonrpc": "2.0", "id": id,
                                "result": task("TASK_STATE_COMPLETED", true)})
                            .to_string();
                            let resp = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{out}",
                                out.len()
                            );
                            let _ = s.write_all(resp.as_bytes()).await;
                        }
                        _ => return,
                    }
                }
            });
        }
    });
    (url, counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_is_recovered_with_get_task_never_a_second_send() {
    let agent = Identity::did_key(SecretKey::generate());
    let me = Identity::did_key(SecretKey::generate());
    let (url, counts) = dropping_agent(false).await;
    let mut card = samples::card("flaky", "Drops streams", &url);
    card["supportedInterfaces"] =
        json!([{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]);
    let card = card::sign(&card, agent.key(), agent.kid()).unwrap();
    let c = caller(Some(&me), opts(true));
    let target = Target::Card {
        did: agent.did().to_string(),
        card: card.clone(),
    };
    let found = c.find(&target, &mut quiet()).await.unwrap();
    let mut seen = Vec::new();
    let t = task(
        c.send(&found, "work", &mut |p: Progress| seen.push(p.to_string()))
            .await
            .unwrap(),
    );
    assert_eq!(t.status.state, TaskState::Completed);
    assert_eq!(artifact_text(&t), "done");
    assert!(seen.iter().any(|s| s.contains("stream lost")), "{seen:?}");
    {
        let counts = counts.lock().unwrap();
        assert_eq!(counts.get("SendStreamingMessage"), Some(&1), "{counts:?}");
        assert_eq!(counts.get("SendMessage"), None, "{counts:?}");
        assert!(counts.get("GetTask").is_some_and(|n| *n >= 1), "{counts:?}");
    }

    // Dropped before the agent named the task: nothing to recover, nothing sent again.
    let (url, counts) = dropping_agent(true).await;
    let mut card = samples::card("flaky", "Drops streams", &url);
    card["supportedInterfaces"] =
        json!([{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]);
    let card = card::sign(&card, agent.key(), agent.kid()).unwrap();
    let found = c
        .find(
            &Target::Card {
                did: agent.did().to_string(),
                card,
            },
            &mut quiet(),
        )
        .await
        .unwrap();
    let e = c.send(&found, "work", &mut quiet()).await.unwrap_err();
    assert!(
        matches!(e, CallError::Send(_) | CallError::LostBeforeTask(_)),
        "{e}"
    );
    let counts = counts.lock().unwrap();
    assert_eq!(counts.get("SendStreamingMessage"), Some(&1), "{counts:?}");
    assert_eq!(counts.len(), 1, "{counts:?}");
}

/// An HTTPS server on 127.0.0.1 serving `docs` (path → body), for `localhost`.
async fn did_server(docs: Arc<Mutex<std::collections::HashMap<String, Vec<u8>>>>) -> u16 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let docs = docs.clone();
        async move {
            match docs.lock().unwrap().get(uri.path()) {
                Some(b) => (
                    axum::http::StatusCode::OK,
                    [("content-type", "application/json")],
                    b.clone(),
                ),
                None => (
                    axum::http::StatusCode::NOT_FOUND,
                    [("content-type", "text/plain")],
                    b"not found".to_vec(),
                ),
            }
        }
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let listener = TlsListener::new(listener, tls());
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// A domain identity made the way `agentnet identity new` makes it, installed in a data
/// directory and loaded back.
fn domain_identity(spec: DomainSpec, dir: &std::path::Path) -> (Identity, Vec<u8>) {
    let key = SecretKey::generate();
    let (_did, doc) = identity::create(&spec, &key, "2026-01-01T00:00:00Z").unwrap();
    let keys = agentnet_node::data_dir::AgentKeys::new(dir);
    let (_k, doc_file) = keys.install_domain(&key, &doc).unwrap();
    let id = keys.load_identity(&doc.id).unwrap();
    (id, std::fs::read(doc_file).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domain_identities_sign_cards_and_requests_with_documents_served_over_https() {
    let docs = Arc::new(Mutex::new(std::collections::HashMap::new()));
    let port = did_server(docs.clone()).await;
    let tmp = tempfile::tempdir().unwrap();
    let host = format!("localhost%3A{port}");
    let (agent, agent_doc) =
        domain_identity(DomainSpec::Web(format!("{host}:agents:echo")), tmp.path());
    let (me_web, me_web_doc) =
        domain_identity(DomainSpec::Web(format!("{host}:users:me")), tmp.path());
    let (me_wba, me_wba_doc) =
        domain_identity(DomainSpec::Wba(format!("{host}:users")), tmp.path());
    assert!(
        me_wba.did().as_str().contains(":users:e1_"),
        "{}",
        me_wba.did()
    );
    for (id, doc) in [
        (&agent, agent_doc),
        (&me_web, me_web_doc),
        (&me_wba, me_wba_doc),
    ] {
        let url = agentnet_did::web::document_url(id.did()).unwrap();
        docs.lock().unwrap().insert(url.path().to_owned(), doc);
    }
    // The agent's card is signed by its did:web; the caller resolves the document over HTTPS.
    let a = agents(&agent).await;
    for me in [&me_web, &me_wba] {
        let c = caller(Some(me), opts(false));
        let echo = c
            .find(
                &Target::Card {
                    did: agent.did().to_string(),
                    card: a.echo_card.clone(),
                },
                &mut quiet(),
            )
            .await
            .unwrap();
        let t = task(c.send(&echo, "hi", &mut quiet()).await.unwrap());
        assert_eq!(artifact_text(&t), "hi");
        assert_eq!(
            a.echo_auth
                .callers
                .lock()
                .unwrap()
                .last()
                .map(String::as_str),
            Some(me.did().as_str()),
            "the server verified the request as {}",
            me.did()
        );
    }

    // The document taken down: the card no longer verifies, nothing is sent.
    docs.lock().unwrap().clear();
    let before = a.requests.load(Ordering::SeqCst);
    let c = Caller::new(
        None,
        resolver(), // a fresh cache
        Some(Arc::new(DidSigner::new(me_web.clone()))),
        opts(false),
    );
    let e = c
        .find(
            &Target::Card {
                did: agent.did().to_string(),
                card: a.echo_card.clone(),
            },
            &mut quiet(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, CallError::CardSignature { .. }), "{e}");
    assert_eq!(a.requests.load(Ordering::SeqCst), before);
}

#[test]
fn identity_files_are_private_never_replaced_and_checked_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = agentnet_node::data_dir::AgentKeys::new(tmp.path());
    let key = SecretKey::generate();
    let (did, doc) = identity::create(
        &DomainSpec::Web("example.com:agents:x".into()),
        &key,
        "2026-01-01T00:00:00Z",
    )
    .unwrap();
    let (kf, df) = keys.install_domain(&key, &doc).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&kf).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    // Never replaced.
    assert!(keys.install_domain(&SecretKey::generate(), &doc).is_err());
    let other = SecretKey::generate();
    let (_, doc2) = identity::create(
        &DomainSpec::Web("example.com:agents:x".into()),
        &other,
        "2026-01-01T00:00:00Z",
    )
    .unwrap();
    assert!(keys.install_domain(&other, &doc2).is_err());
    assert_eq!(
        keys.load_identity(did.as_str()).unwrap().kid().to_string(),
        format!("{did}#key-1")
    );
    // A document swapped for one listing another key: refused at load.
    std::fs::write(&df, serde_json::to_vec(&doc2.to_json()).unwrap()).unwrap();
    assert!(keys.load_identity(did.as_str()).is_err());
    // Names that would leave the directory, or are not DIDs.
    for bad in [
        "did:web:../x",
        "did:web:a/b",
        "did:web:",
        "../x",
        "did:example:x",
    ] {
        assert!(keys.load_identity(bad).is_err(), "{bad}");
    }
    assert!(keys
        .load_identity(&format!("did:web:{}", "a".repeat(300)))
        .is_err());
}

fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("AGENTNET_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/agentnet/venv"))
        })?;
    let py = venv.join("bin/python");
    py.exists().then_some(py)
}

/// The interop venv's Python if it can `import` `imports`; `None` (the test skips) otherwise.
/// `scripts/test.sh` installs the tools and sets `AGENTNET_INTEROP_REQUIRED`: there a missing
/// tool fails the test instead.
fn python_with(imports: &str) -> Option<PathBuf> {
    let ok = venv_python().filter(|python| {
        std::process::Command::new(python)
            .args(["-c", &format!("import {imports}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if ok.is_none() {
        assert!(
            std::env::var_os("AGENTNET_INTEROP_REQUIRED").is_none(),
            "interop tools missing ({imports}) although scripts/test.sh installed them"
        );
        eprintln!("SKIPPED: no interop venv that imports {imports} (run interop/setup.sh)");
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_caller_against_the_python_sdk_server_with_a_verified_card() {
    let Some(python) = python_with("a2a.server.routes, starlette, sse_starlette, uvicorn") else {
        return;
    };
    let script = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../interop/python/a2a_server.py");
    let log = std::env::temp_dir().join(format!("a2a_server_call_{}.log", std::process::id()));
    let mut child = tokio::process::Command::new(&python)
        .arg(&script)
        .args(["0", "300"])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .kill_on_drop(true)
        .spawn()
        .expect("starting the Python server");
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let base = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the Python server did not start")
        .unwrap()
        .expect("no base URL");
    let http = agentnet_did::http::client();
    // The SDK serves its card unsigned; the operator publishing it signs it with the agent's
    // DID (as `agentnet publish` does).
    let agent = Identity::did_key(SecretKey::generate());
    let me = Identity::did_key(SecretKey::generate());
    let mut cards = Vec::new();
    for name in ["echo", "ask-name"] {
        let url = url::Url::parse(&format!("{base}/{name}")).unwrap();
        let mut card = None;
        for _ in 0..50 {
            if let Ok(c) = agentnet_a2a::client::fetch_card(&http, &url, Default::default()).await {
                card = Some(c);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let card = card.unwrap_or_else(|| panic!("no card at {url}"));
        cards.push(card::sign(&card, agent.key(), agent.kid()).unwrap());
    }
    for stream in [false, true] {
        let c = caller(Some(&me), opts(stream));
        let find = |card: &Value| Target::Card {
            did: agent.did().to_string(),
            card: card.clone(),
        };
        let echo = c.find(&find(&cards[0]), &mut quiet()).await.unwrap();
        let t = task(c.send(&echo, "hello", &mut quiet()).await.unwrap());
        assert_eq!(t.status.state, TaskState::Completed, "stream {stream}");
        assert_eq!(artifact_text(&t), "hello");

        let ask = c.find(&find(&cards[1]), &mut quiet()).await.unwrap();
        let t = task(
            c.send(&ask, "what time is it?", &mut quiet())
                .await
                .unwrap(),
        );
        assert_eq!(t.status.state, TaskState::InputRequired, "stream {stream}");
        let done = task(
            c.continue_task(&ask, &t.id, "Rust", &mut quiet())
                .await
                .unwrap(),
        );
        assert_eq!(done.status.state, TaskState::Completed, "stream {stream}");
        assert!(artifact_text(&done).contains("Rust"), "{done:?}");
    }
    // A tampered copy of the SDK's card is refused before anything is sent.
    let mut bad = cards[0].clone();
    bad["name"] = json!("evil");
    let c = caller(Some(&me), opts(false));
    let e = c
        .find(
            &Target::Card {
                did: agent.did().to_string(),
                card: bad,
            },
            &mut quiet(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, CallError::CardSignature { .. }), "{e}");
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anp_sdk_resolves_and_verifies_our_did_wba_document_over_https() {
    let Some(python) = python_with("anp.authentication") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let docs = Arc::new(Mutex::new(std::collections::HashMap::new()));
    let port = did_server(docs.clone()).await;
    let (id, doc) = domain_identity(
        DomainSpec::Wba(format!("localhost%3A{port}:agents")),
        tmp.path(),
    );
    let url = agentnet_did::web::document_url(id.did()).unwrap();
    docs.lock()
        .unwrap()
        .insert(url.path().to_owned(), doc.clone());
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &tls().0).unwrap();
    let script = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../interop/python/anp_didwba.py");
    // The SDK's own resolver fetches it over HTTPS (trusting the test CA) and verifies it.
    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .args(["resolve", "--did", id.did().as_str()])
        .env("SSL_CERT_FILE", &ca)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "the ANP SDK did not resolve and verify {}: {}{}",
        id.did(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let path = tmp.path().join("doc.json");
    std::fs::write(&path, &doc).unwrap();
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args(["check", "--did-doc"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the ANP SDK refused our did:wba document of {}: {}{}",
        id.did(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // And a tampered one is refused by it.
    let mut v: Value = serde_json::from_slice(&doc).unwrap();
    v["verificationMethod"][0]["publicKeyMultibase"] = json!(agentnet_did::key::encode_multikey(
        &SecretKey::generate().public()
    ));
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args(["check", "--did-doc"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the ANP SDK accepted a tampered document"
    );
}

/// One HTTP/1.1 message (head and Content-Length body) from `s`, as raw bytes, and whether it
/// is a `SendMessage` (a JSON-RPC request body naming it).
async fn read_raw(s: &mut tokio::net::TcpStream) -> Option<(Vec<u8>, bool)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    buf.truncate(head_end + len);
    let body: Value = serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
    Some((buf, body["method"] == "SendMessage"))
}

/// A proxy to `upstream` that passes every request and answer through, except the answer to
/// the first `SendMessage`: the request reaches the agent, its answer is read and the caller's
/// connection closed instead. Counts the `SendMessage`s passed on.
async fn losing_proxy(upstream: std::net::SocketAddr) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let sends = Arc::new(AtomicUsize::new(0));
    let counter = sends.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let sends = counter.clone();
            tokio::spawn(async move {
                while let Some((request, is_send)) = read_raw(&mut client).await {
                    let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    if up.write_all(&request).await.is_err() {
                        return;
                    }
                    let Some((answer, _)) = read_raw(&mut up).await else {
                        return;
                    };
                    if is_send && sends.fetch_add(1, Ordering::SeqCst) == 0 {
                        return; // the answer is lost: the caller's connection closes
                    }
                    if client.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (base, sends)
}

/// [`samples::Echo`], counting the turns it runs.
struct CountingEcho(Arc<AtomicUsize>);

impl agentnet_a2a::handler::Handler for CountingEcho {
    fn handle(
        &self,
        turn: agentnet_a2a::handler::Turn,
        updates: agentnet_a2a::handler::Updates,
    ) -> BoxFuture<
        'static,
        Result<agentnet_a2a::handler::Outcome, agentnet_a2a::handler::HandlerError>,
    > {
        self.0.fetch_add(1, Ordering::SeqCst);
        samples::Echo.handle(turn, updates)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_sent_again_to_an_agent_that_keeps_one_task_per_message() {
    let agent = Identity::did_key(SecretKey::generate());
    let me = Identity::did_key(SecretKey::generate());
    for declares in [true, false] {
        // The echo agent behind a proxy that loses the first SendMessage's answer.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = listener.local_addr().unwrap();
        let (base, sends) = losing_proxy(upstream).await;
        let url = format!("{base}/echo");
        let mut c = samples::card("echo", "Echoes", &url);
        if declares {
            c["capabilities"]["extensions"] = json!([{
                "uri": agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION, "required": false
            }]);
        }
        let signed = card::sign(&c, agent.key(), agent.kid()).unwrap();
        let turns = Arc::new(AtomicUsize::new(0));
        let echo = Server::new(
            Config::new(signed.clone()).policy(Policy::Open),
            Arc::new(CountingEcho(turns.clone())),
            Arc::new(store::MemoryStore::default()),
            Arc::new(agentnet_a2a::auth::NoAuth),
        );
        let router = axum::Router::new().nest("/echo", echo.router());
        tokio::spawn(async move { axum::serve(listener, router).await });

        let c = caller(Some(&me), opts(false));
        let target = Target::Card {
            did: agent.did().to_string(),
            card: signed,
        };
        let found = c.find(&target, &mut quiet()).await.unwrap();
        let mut seen = Vec::new();
        let sent = c
            .send(&found, "once", &mut |p: Progress| seen.push(p.to_string()))
            .await;
        if declares {
            let t = task(sent.unwrap_or_else(|e| panic!("{e}: {seen:?}")));
            assert_eq!(t.status.state, TaskState::Completed);
            assert_eq!(sends.load(Ordering::SeqCst), 2, "sent again once: {seen:?}");
            assert!(
                seen.iter()
                    .any(|s| s.contains("sending the same message again")),
                "{seen:?}"
            );
            // Two sends, one turn: the agent answered the repeat with the first task.
            assert_eq!(turns.load(Ordering::SeqCst), 1, "{seen:?}");
        } else {
            // An agent that does not say it keeps one task per message gets it once.
            let e = sent.unwrap_err();
            assert!(matches!(e, CallError::Send(_)), "{e}");
            assert_eq!(sends.load(Ordering::SeqCst), 1, "{seen:?}");
        }
    }
}
