//! What the official A2A TCK (a2aproject/a2a-tck, branch 1.0-dev) found wrong, each as a test
//! of ours over real HTTP on loopback (issue 17; the TCK itself is not in this repository,
//! `docs/A2A.md` "TCK" says how it was run): the trailing slash its JSON-RPC client posts to,
//! proto field names, `SubscribeToTask` on a task waiting for input, the media type of
//! responses, the error of an unsupported request media type, the card's caching headers, and
//! the [`samples::Tck`] agent its data-model scenarios run against.

mod common;

use std::sync::Arc;
use std::time::Duration;

use agentnet_a2a::auth::Policy;
use agentnet_a2a::client::{self, Binding};
use agentnet_a2a::engine::Limits;
use agentnet_a2a::samples;
use agentnet_a2a::server::{Config, Server};
use agentnet_a2a::store::MemoryStore;
use agentnet_a2a::types::{
    Message, Part, PartContent, Role, SendMessageRequest, SendMessageResponse, StreamResponse,
    SubscribeToTaskRequest, TaskState,
};
use common::*;
use reqwest::Method;
use serde_json::{json, Value};

fn state(ev: &StreamResponse) -> Option<TaskState> {
    match ev {
        StreamResponse::Task(t) => Some(t.status.state.clone()),
        StreamResponse::StatusUpdate(s) => Some(s.status.state.clone()),
        _ => None,
    }
}

/// Every event of `s` until it ends (each within 10 s).
async fn collect(mut s: client::ClientStream) -> Vec<StreamResponse> {
    let mut out = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("stream stalled")
    {
        out.push(ev.expect("stream event"));
    }
    out
}

/// A JSON-RPC request to `url` as the TCK's client sends it: `application/json`, version 1.0.
async fn rpc_at(http: &reqwest::Client, url: &str, method: &str, params: Value) -> (u16, Value) {
    let r = http
        .post(url)
        .header("content-type", "application/json")
        .header("A2A-Version", "1.0")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The TCK sample agent alone, open, on a loopback listener at `<base>/tck`, mounted as the
/// node mounts its hosted agents (nested, and JSON-RPC at `/tck/` too).
async fn start_tck() -> (String, Arc<Server>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let url = format!("{base}/tck");
    let server = Server::new(
        Config::new(samples::card("tck", "TCK scenarios", &url)).policy(Policy::Open),
        Arc::new(samples::Tck),
        Arc::new(MemoryStore::default()),
        Arc::new(TestAuth),
    );
    let router = axum::Router::new()
        .nest("/tck", server.router())
        .route("/tck/", server.jsonrpc_route());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, server)
}

fn tck_msg(id: &str) -> SendMessageRequest {
    let mut m = Message::new(Role::User, vec![Part::text("TCK")]);
    m.message_id = format!("{id}-{}", uuid_ish());
    SendMessageRequest {
        message: m,
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

fn uuid_ish() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    N.fetch_add(1, Ordering::Relaxed)
}

fn tck_client(url: &str, binding: Binding) -> client::Client {
    client::Client::new(
        agentnet_did::http::client(),
        client::Endpoint {
            url: url::Url::parse(url).unwrap(),
            binding,
        },
        None,
    )
}

/// The TCK's JSON-RPC client posts to `<interface url>/` (httpx joins "/" to its base URL): a
/// nested router does not match it by itself, and it was 404 with an empty body.
#[tokio::test]
async fn json_rpc_is_served_at_the_interface_url_with_a_trailing_slash() {
    let h = start(Policy::Open).await;
    let (status, r) = rpc_at(
        &h.http,
        &h.url("/echo/"),
        "SendMessage",
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        r["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let id = r["result"]["task"]["id"].as_str().unwrap().to_string();
    // Without the slash, as before; and a task-not-found error, not a 404 page, with it.
    let (status, r) = rpc_at(&h.http, &h.url("/echo"), "GetTask", json!({"id": id})).await;
    assert_eq!(status, 200);
    assert_eq!(r["result"]["id"], id.as_str());
    let (status, r) = rpc_at(&h.http, &h.url("/echo/"), "GetTask", json!({"id": "nope"})).await;
    assert_eq!(status, 200);
    assert_eq!(r["error"]["code"], -32001);
}

/// ProtoJSON parsers accept a field's proto name beside its JSON name; the TCK's JSON-RPC
/// client sends `history_length`, `context_id`, `page_size`. They were ignored: the task came
/// back with its whole history, the list unfiltered.
#[tokio::test]
async fn proto_field_names_are_read_as_their_json_names() {
    let h = start(Policy::Open).await;
    let me = Some("did:example:proto");
    let (_, r) = h
        .rpc(
            "echo",
            me,
            "SendMessage",
            json!({"message": {"message_id": "m-1", "role": "ROLE_USER", "context_id": "ctx-proto",
                   "parts": [{"text": "hi"}], "metadata": {"my_key": 1}}}),
        )
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["contextId"], "ctx-proto", "{r}");
    // The caller's metadata is its own JSON: its keys are not renamed.
    assert_eq!(task["history"][0]["metadata"], json!({"my_key": 1}), "{r}");
    let id = task["id"].as_str().unwrap().to_string();
    assert!(!task["history"].as_array().unwrap().is_empty());

    let (_, r) = h
        .rpc(
            "echo",
            me,
            "GetTask",
            json!({"id": id, "history_length": 0}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    assert!(r["result"].get("history").is_none(), "{r}");

    // Another context, then a list by `context_id` finds only the first.
    h.rpc(
        "echo",
        me,
        "SendMessage",
        json!({"message": {"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "x"}]}}),
    )
    .await;
    let (_, r) = h
        .rpc(
            "echo",
            me,
            "ListTasks",
            json!({"context_id": "ctx-proto", "page_size": 1}),
        )
        .await;
    let tasks = r["result"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{r}");
    assert_eq!(tasks[0]["id"], id.as_str());
    assert_eq!(r["result"]["pageSize"], 1);

    // `return_immediately` in the configuration, on HTTP+JSON.
    let (status, r) = h
        .rest(
            Method::POST,
            "/ask-name/message:send",
            me,
            Some(json!({"message": {"messageId": "m-3", "role": "ROLE_USER",
                "parts": [{"text": "x"}]}, "configuration": {"return_immediately": true}})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(r["task"]["status"]["state"], "TASK_STATE_SUBMITTED", "{r}");
    // And the query parameters of HTTP+JSON.
    let (status, r) = h
        .rest(
            Method::GET,
            &format!("/echo/tasks/{id}?history_length=0"),
            me,
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert!(r.get("history").is_none(), "{r}");
}

/// `SubscribeToTask` on a task waiting for input stays open until the task ends (it sent the
/// task and closed): a client waiting on an interrupted task sees it go on and finish.
#[tokio::test]
async fn subscribe_to_a_task_waiting_for_input_stays_open_until_it_ends() {
    let h = start_with(Policy::Did, Limits::default(), Duration::from_millis(50)).await;
    for binding in BINDINGS {
        let me = h.client("ask-name", binding, Some("did:example:me"));
        let SendMessageResponse::Task(t) = me.send_message(&msg("hi")).await.unwrap() else {
            panic!("expected a task")
        };
        assert_eq!(t.status.state, TaskState::InputRequired);
        let mut s = me
            .subscribe(&SubscribeToTaskRequest {
                id: t.id.clone(),
                tenant: None,
            })
            .await
            .unwrap();
        let first = s.next().await.unwrap().unwrap();
        assert_eq!(state(&first), Some(TaskState::InputRequired));
        // The answer continues the task; the open subscription carries it to its end.
        let SendMessageResponse::Task(done) = me.send_message(&reply(&t.id, "Ada")).await.unwrap()
        else {
            panic!("expected a task")
        };
        assert_eq!(done.status.state, TaskState::Completed);
        let rest = collect(s).await;
        assert_eq!(
            rest.last().and_then(state),
            Some(TaskState::Completed),
            "{binding:?}: {rest:?}"
        );
        // A `SendStreamingMessage` stream still ends at the question: its turn is over.
        let evs = collect(me.send_streaming(&msg("again")).await.unwrap()).await;
        assert_eq!(evs.last().and_then(state), Some(TaskState::InputRequired));
    }
}

/// HTTP+JSON answers `application/json` (section 11.1; the TCK's HTTP_JSON-SVC-001 and
/// HTTP_JSON-ERR-001), for results and errors; it answered `application/a2a+json`.
#[tokio::test]
async fn http_json_answers_application_json() {
    let h = start(Policy::Open).await;
    for (path, method, body, status) in [
        (
            "/echo/message:send",
            Method::POST,
            Some(
                json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}),
            ),
            200,
        ),
        ("/echo/tasks/nope", Method::GET, None, 404),
        ("/echo/no/such/route", Method::GET, None, 404),
    ] {
        let mut rb = h
            .http
            .request(method, h.url(path))
            .header("A2A-Version", "1.0");
        if let Some(b) = body {
            rb = rb
                .header("content-type", "application/a2a+json")
                .body(b.to_string());
        }
        let r = rb.send().await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{path}");
        assert_eq!(r.headers()["content-type"], "application/json", "{path}");
    }
}

/// A JSON-RPC request with a media type we do not read is HTTP 415 with
/// `ContentTypeNotSupportedError` (-32005), as the spec pairs them; it was -32600.
#[tokio::test]
async fn an_unsupported_request_media_type_is_415_and_minus_32005() {
    let h = start(Policy::Open).await;
    let r = h
        .http
        .post(h.url("/echo/"))
        .header("content-type", "text/plain")
        .header("A2A-Version", "1.0")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32005, "{v}");
    assert_eq!(
        v["error"]["data"][0]["reason"],
        "CONTENT_TYPE_NOT_SUPPORTED"
    );
    // HTTP+JSON: 415 with the same reason.
    let r = h
        .http
        .post(h.url("/echo/message:send"))
        .header("content-type", "text/plain")
        .header("A2A-Version", "1.0")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["details"][0]["reason"],
        "CONTENT_TYPE_NOT_SUPPORTED"
    );
}

/// The card carries `Cache-Control` with a `max-age`, an `ETag` that is the bytes' own, and
/// `Last-Modified`; a conditional GET that matches gets 304 without a body (section 8.6; the
/// TCK's CARD-CACHE-001…003).
#[tokio::test]
async fn the_card_has_caching_headers_and_answers_conditional_gets() {
    use sha2::Digest as _;
    let h = start(Policy::Open).await;
    let url = h.url("/echo/.well-known/agent-card.json");
    let r = h.http.get(&url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let headers = r.headers().clone();
    let body = r.bytes().await.unwrap();
    let cc = headers["cache-control"].to_str().unwrap();
    assert!(cc.contains("max-age="), "{cc}");
    let etag = headers["etag"].to_str().unwrap().to_string();
    use base64::Engine as _;
    let want = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(&body));
    assert_eq!(etag, format!("\"{want}\""));
    let modified = headers["last-modified"].to_str().unwrap().to_string();
    assert!(modified.ends_with(" GMT"), "{modified}");

    for (name, value) in [
        ("if-none-match", etag.clone()),
        ("if-none-match", format!("\"other\", W/{etag}")),
        ("if-none-match", "*".to_string()),
        ("if-modified-since", modified.clone()),
    ] {
        let r = h.http.get(&url).header(name, &value).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 304, "{name}: {value}");
        assert_eq!(r.headers()["etag"], etag.as_str());
        assert!(r.bytes().await.unwrap().is_empty());
    }
    // A validator that does not match gets the card; If-None-Match wins over the date.
    let r = h
        .http
        .get(&url)
        .header("if-none-match", "\"other\"")
        .header("if-modified-since", &modified)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.bytes().await.unwrap(), body);
    let r = h
        .http
        .get(&url)
        .header("if-modified-since", "Thu, 01 Jan 1970 00:00:00 GMT")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

fn parts_of(t: &agentnet_a2a::types::Task) -> Vec<Part> {
    t.artifacts
        .as_ref()
        .map(|a| a.iter().flat_map(|a| a.parts.clone()).collect())
        .unwrap_or_default()
}

/// The TCK's data-model scenarios, on both bindings: text, file (bytes and URL) and data
/// artifacts, a direct message reply (no task), input required, a rejection.
#[tokio::test]
async fn the_tck_sample_runs_the_tck_scenarios() {
    let (url, server) = start_tck().await;
    for binding in BINDINGS {
        let c = tck_client(&url, binding);
        let task = |r: SendMessageResponse| match r {
            SendMessageResponse::Task(t) => t,
            other => panic!("{binding:?}: expected a task, got {other:?}"),
        };

        let t = task(c.send_message(&tck_msg("tck-artifact-text")).await.unwrap());
        assert_eq!(t.status.state, TaskState::Completed);
        assert_eq!(parts_of(&t)[0].as_text(), Some("Generated text content"));

        for (prefix, want) in [
            (
                "tck-artifact-file-url",
                PartContent::Url("https://example.com/output.txt".into()),
            ),
            (
                "tck-artifact-file",
                PartContent::Raw(b"Hello from TCK\n".to_vec()),
            ),
            (
                "tck-artifact-data",
                PartContent::Data(json!({"key": "value", "count": 42})),
            ),
        ] {
            let t = task(c.send_message(&tck_msg(prefix)).await.unwrap());
            let p = &parts_of(&t)[0];
            assert_eq!(p.content, want, "{binding:?} {prefix}");
            if prefix != "tck-artifact-data" {
                assert_eq!(p.filename.as_deref(), Some("output.txt"));
                assert_eq!(p.media_type.as_deref(), Some("text/plain"));
            }
        }

        // A message, not a task; in the caller's context when it names one.
        let mut req = tck_msg("tck-message-response");
        req.message.context_id = Some("ctx-1".into());
        match c.send_message(&req).await.unwrap() {
            SendMessageResponse::Message(m) => {
                assert_eq!(m.role, Role::Agent);
                assert_eq!(m.parts[0].as_text(), Some("Direct message response"));
                assert_eq!(m.context_id.as_deref(), Some("ctx-1"));
                assert_eq!(m.task_id, None);
            }
            other => panic!("{binding:?}: expected a message, got {other:?}"),
        }
        // Streamed: the one message, and the stream ends.
        let evs = collect(
            c.send_streaming(&tck_msg("tck-message-response"))
                .await
                .unwrap(),
        )
        .await;
        assert!(
            matches!(evs.as_slice(), [StreamResponse::Message(_)]),
            "{binding:?}: {evs:?}"
        );

        let t = task(
            c.send_message(&tck_msg("tck-input-required"))
                .await
                .unwrap(),
        );
        assert_eq!(t.status.state, TaskState::InputRequired);
        // The follow-up's own prefix decides the next turn.
        let mut next = tck_msg("tck-complete-task");
        next.message.task_id = Some(t.id.clone());
        let t = task(c.send_message(&next).await.unwrap());
        assert_eq!(t.status.state, TaskState::Completed);
        assert_eq!(
            t.status.message.as_ref().unwrap().parts[0].as_text(),
            Some(samples::TCK_DONE)
        );

        let t = task(c.send_message(&tck_msg("tck-reject-task")).await.unwrap());
        assert_eq!(t.status.state, TaskState::Rejected);

        // A streaming scenario: working, the artifact, completed.
        let evs = collect(c.send_streaming(&tck_msg("tck-stream-001")).await.unwrap()).await;
        let art = evs.iter().find_map(|e| match e {
            StreamResponse::ArtifactUpdate(a) => a.artifact.parts[0].as_text().map(str::to_owned),
            _ => None,
        });
        assert_eq!(art.as_deref(), Some("Stream hello from TCK"), "{evs:?}");
        assert_eq!(evs.last().and_then(state), Some(TaskState::Completed));
    }
    wait_idle(&server).await;
}
