//! Attacker tests: every bound an outsider can push against, on a real loopback server, each
//! checked at the bound and (where it frees up) again after.

mod common;

use std::sync::Arc;
use std::time::Duration;

use agentnet_a2a::auth::{Caller, Owner, Policy, Source};
use agentnet_a2a::client::{self, Binding, ClientError, ClientLimits, Endpoint};
use agentnet_a2a::engine::Limits;
use agentnet_a2a::samples;
use agentnet_a2a::server::{Config, Server};
use agentnet_a2a::store::MemoryStore;
use agentnet_a2a::types::{GetTaskRequest, SendMessageResponse, SubscribeToTaskRequest, TaskState};
use agentnet_a2a::ProtocolError;
use common::*;
use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn id_of(r: SendMessageResponse) -> String {
    match r {
        SendMessageResponse::Task(t) => t.id,
        other => panic!("{other:?}"),
    }
}

fn sub(id: &str) -> SubscribeToTaskRequest {
    SubscribeToTaskRequest {
        id: id.into(),
        tenant: None,
    }
}

fn busy(e: &ClientError) -> bool {
    e.remote()
        .is_some_and(|r| r.reason.as_deref() == Some("RESOURCE_EXHAUSTED"))
}

#[tokio::test]
async fn oversized_bodies_are_refused() {
    let mut limits = Limits::default();
    limits.max_body_bytes = 4096;
    let h = start_with(Policy::Open, limits, Duration::from_millis(10)).await;
    let big = json!({"message": {"messageId": "m", "role": "ROLE_USER",
        "parts": [{"text": "x".repeat(5000)}]}});
    let (status, r) = h
        .rest(Method::POST, "/echo/message:send", None, Some(big.clone()))
        .await;
    assert_eq!(status, 413);
    assert_eq!(r["error"]["code"], 413);
    let (status, r) = h.rpc("echo", None, "SendMessage", big).await;
    assert_eq!(status, 413);
    assert_eq!(r["error"]["code"], -32600);
    // Just under the limit is served.
    let ok = json!({"message": {"messageId": "m", "role": "ROLE_USER",
        "parts": [{"text": "x".repeat(3500)}]}});
    let (status, _) = h
        .rest(Method::POST, "/echo/message:send", None, Some(ok))
        .await;
    assert_eq!(status, 200);

    // A chunked body without Content-Length is cut at the limit too.
    let addr = h.base.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
    s.write_all(head.as_bytes()).await.unwrap();
    for _ in 0..10 {
        let chunk = "y".repeat(1000);
        if s.write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes())
            .await
            .is_err()
        {
            break;
        }
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let mut resp = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut resp))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&resp[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
}

#[tokio::test]
async fn running_tasks_are_bounded_per_owner_and_in_all() {
    let mut limits = Limits::default();
    limits.max_running_per_owner = 2;
    limits.max_running = 3;
    let h = start_with(Policy::Did, limits, Duration::from_millis(800)).await;
    for binding in BINDINGS {
        let alice = h.client("ask-name", binding, Some("did:example:alice"));
        let bob = h.client("ask-name", binding, Some("did:example:bob"));
        let carol = h.client("ask-name", binding, Some("did:example:carol"));
        for _ in 0..2 {
            alice.send_message(&immediately(msg("x"))).await.unwrap();
        }
        let e = alice
            .send_message(&immediately(msg("x")))
            .await
            .unwrap_err();
        assert!(busy(&e), "{binding:?}: {e}");
        if binding == Binding::HttpJson {
            assert_eq!(e.remote().unwrap().status, 429);
        }
        // Another owner still gets the last slot; then the agent is full for everyone.
        bob.send_message(&immediately(msg("x"))).await.unwrap();
        assert!(busy(
            &carol
                .send_message(&immediately(msg("x")))
                .await
                .unwrap_err()
        ));
        // Slots free up when the turns end.
        wait_idle(&h.ask).await;
        carol.send_message(&immediately(msg("x"))).await.unwrap();
        wait_idle(&h.ask).await;
    }
}

#[tokio::test]
async fn subscribers_are_bounded_per_task_and_in_all() {
    let mut limits = Limits::default();
    limits.max_subscribers_per_task = 1;
    limits.max_subscribers = 2;
    limits.keep_alive = Duration::from_millis(100);
    let h = start_with(Policy::Did, limits, Duration::from_secs(10)).await;
    let me = h.client("ask-name", Binding::HttpJson, Some("did:example:me"));
    // Three tasks working for a long time: their streams stay open.
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(id_of(
            me.send_message(&immediately(msg("x"))).await.unwrap(),
        ));
    }
    let mut s1 = me.subscribe(&sub(&ids[0])).await.unwrap();
    assert!(s1.next().await.unwrap().is_ok());
    let e = me.subscribe(&sub(&ids[0])).await.unwrap_err();
    assert!(busy(&e), "second stream on one task: {e}");
    let s2 = me.subscribe(&sub(&ids[1])).await.unwrap();
    let e = me.subscribe(&sub(&ids[2])).await.unwrap_err();
    assert!(busy(&e), "third stream in all: {e}");
    // Closing a stream frees its slot (the server notices at the next keep-alive).
    drop(s1);
    let mut again = None;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Ok(s) = me.subscribe(&sub(&ids[0])).await {
            again = Some(s);
            break;
        }
    }
    assert!(
        again.is_some(),
        "slot not released after the client went away"
    );
    drop(s2);
}

/// A caller `did` from `ip` (its source is the address's network block).
fn from(did: &str, ip: &str) -> Caller {
    Caller::new(
        Owner::Caller(did.into()),
        Source::of(ip.parse().expect("a test address")),
    )
}

fn refused_busy(r: Result<impl std::fmt::Debug, ProtocolError>, what: &str) {
    match r {
        Err(ProtocolError::Busy(_)) => {}
        other => panic!("{what}: not refused as busy: {other:?}"),
    }
}

/// DIDs are free: many owners from one network block (an IPv4 address, an IPv6 /64) share one
/// per-source share of the running turns, so they cannot take the whole total.
#[tokio::test]
async fn running_turns_are_bounded_per_source_whatever_the_owners() {
    let mut limits = Limits::default();
    limits.max_running_per_owner = 2;
    limits.max_running_per_source = 3;
    limits.max_running = 100;
    let h = start_with(Policy::Did, limits, Duration::from_secs(60)).await;
    let e = h.ask.engine();
    // Three turns from one IPv4 address and three from addresses of one IPv6 /64, each with a
    // fresh DID: the per-owner share never applies.
    for (n, ip) in [
        "192.0.2.1",
        "192.0.2.1",
        "192.0.2.1",
        "2001:db8:0:1::1",
        "2001:db8:0:1::2",
        "2001:db8:0:1:ffff::3",
    ]
    .iter()
    .enumerate()
    {
        let did = format!("did:example:fresh-{n}");
        e.send_message(&from(&did, ip), immediately(msg("x")))
            .await
            .unwrap();
    }
    refused_busy(
        e.send_message(
            &from("did:example:one-more", "192.0.2.1"),
            immediately(msg("x")),
        )
        .await,
        "a fourth turn from one IPv4 address",
    );
    refused_busy(
        e.send_message(
            &from("did:example:v6-more", "2001:db8:0:1:abcd::4"),
            immediately(msg("x")),
        )
        .await,
        "a fourth turn from one IPv6 /64",
    );
    // Other blocks still get theirs.
    e.send_message(
        &from("did:example:other", "192.0.2.2"),
        immediately(msg("x")),
    )
    .await
    .unwrap();
    e.send_message(
        &from("did:example:other6", "2001:db8:0:2::1"),
        immediately(msg("x")),
    )
    .await
    .unwrap();
    assert_eq!(e.running(), 3 + 3 + 2);
}

/// 2 DIDs from 9 addresses held all 256 streams of an agent: streams have a per-owner and a
/// per-source share as well as a total.
#[tokio::test]
async fn streams_are_bounded_per_owner_and_per_source() {
    let mut limits = Limits::default();
    limits.max_subscribers_per_owner = 2;
    limits.max_subscribers_per_source = 3;
    limits.max_subscribers = 100;
    let h = start_with(Policy::Did, limits, Duration::from_secs(60)).await;
    let e = h.ask.engine();
    let task = |c: Caller| {
        let e = e.clone();
        async move {
            let id = id_of(e.send_message(&c, immediately(msg("x"))).await.unwrap());
            (c, id)
        }
    };
    let mut held = Vec::new();
    // One owner: two streams, then refused, on one task or another, from any address.
    let (alice, a1) = task(from("did:example:alice", "192.0.2.1")).await;
    let (_, a2) = task(alice.clone()).await;
    let (_, a3) = task(alice.clone()).await;
    held.push(e.subscribe(&alice, sub(&a1)).await.unwrap());
    held.push(e.subscribe(&alice, sub(&a2)).await.unwrap());
    refused_busy(e.subscribe(&alice, sub(&a3)).await, "alice's third stream");
    let alice_elsewhere = from("did:example:alice", "198.51.100.1");
    refused_busy(
        e.subscribe(&alice_elsewhere, sub(&a3)).await,
        "alice's third stream from another address",
    );
    refused_busy(
        e.send_streaming(&alice_elsewhere, msg("x")).await,
        "alice's third stream as a streaming send",
    );
    // Fresh DIDs from alice's address: one more stream, then the address is full.
    let (bob, b1) = task(from("did:example:bob", "192.0.2.1")).await;
    held.push(e.subscribe(&bob, sub(&b1)).await.unwrap());
    let (carol, c1) = task(from("did:example:carol", "192.0.2.1")).await;
    refused_busy(
        e.subscribe(&carol, sub(&c1)).await,
        "a fourth stream from one address",
    );
    refused_busy(
        e.send_streaming(&carol, msg("x")).await,
        "a fourth stream from one address as a streaming send",
    );
    // One IPv6 /64 is one source, whatever the addresses in it.
    for (n, ip) in ["2001:db8:0:1::1", "2001:db8:0:1::2", "2001:db8:0:1:ab::3"]
        .iter()
        .enumerate()
    {
        let (c, id) = task(from(&format!("did:example:v6-{n}"), ip)).await;
        held.push(e.subscribe(&c, sub(&id)).await.unwrap());
    }
    let (c, id) = task(from("did:example:v6-more", "2001:db8:0:1:cd::4")).await;
    refused_busy(
        e.subscribe(&c, sub(&id)).await,
        "a fourth stream from one /64",
    );
    // Another block is served; a closed stream gives its slot back.
    let (dave, d1) = task(from("did:example:dave", "192.0.2.2")).await;
    held.push(e.subscribe(&dave, sub(&d1)).await.unwrap());
    held.remove(0);
    held.push(e.subscribe(&alice, sub(&a3)).await.unwrap());
}

/// A task that produces nothing for a long time does not hold its streams for that long.
#[tokio::test]
async fn an_idle_stream_ends() {
    let mut limits = Limits::default();
    limits.max_stream_idle = Duration::from_millis(300);
    limits.keep_alive = Duration::from_millis(100);
    // The turn works for ten minutes; the stream must end long before.
    let h = start_with(Policy::Did, limits, Duration::from_secs(600)).await;
    let e = h.ask.engine();
    let me = from("did:example:me", "192.0.2.1");
    let id = id_of(e.send_message(&me, immediately(msg("x"))).await.unwrap());
    let mut s = e.subscribe(&me, sub(&id)).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        let mut n = 0;
        while s.next().await.is_some() {
            n += 1;
            assert!(n < 10, "more events than the turn sends");
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream of an idle task never ended");
    // Over HTTP too: the keep-alive comments do not keep it open.
    let me = h.client("ask-name", Binding::HttpJson, Some("did:example:me"));
    let id = id_of(me.send_message(&immediately(msg("x"))).await.unwrap());
    let mut s = me.subscribe(&sub(&id)).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = s.next().await {
            ev.unwrap();
        }
    })
    .await;
    assert!(ended.is_ok(), "the HTTP stream of an idle task never ended");
    assert_eq!(h.ask.engine().running(), 2, "the turns themselves go on");
}

/// A `SubscribeToTask` stays open through `INPUT_REQUIRED` until the task ends (issue 17), so
/// a stranger can hold streams on tasks that wait for an answer that never comes: they take
/// the same slots (per source here, whatever the DIDs), end when idle, and give their slots
/// back.
#[tokio::test]
async fn streams_on_tasks_waiting_for_input_are_bounded_and_end_when_idle() {
    let mut limits = Limits::default();
    limits.max_subscribers_per_source = 2;
    limits.max_stream_idle = Duration::from_millis(300);
    let h = start_with(Policy::Did, limits, Duration::from_millis(10)).await;
    let e = h.ask.engine();
    let mut asked = Vec::new();
    for n in 0..3 {
        let c = from(&format!("did:example:s{n}"), "192.0.2.9");
        let id = id_of(e.send_message(&c, msg("x")).await.unwrap());
        let t = e
            .get_task(
                &c,
                GetTaskRequest {
                    id: id.clone(),
                    history_length: None,
                    tenant: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(t.status.state, TaskState::InputRequired);
        asked.push((c, id));
    }
    let mut held = Vec::new();
    for (c, id) in &asked[..2] {
        let mut s = e.subscribe(c, sub(id)).await.unwrap();
        assert!(s.next().await.is_some(), "the task first");
        held.push(s);
    }
    refused_busy(
        e.subscribe(&asked[2].0, sub(&asked[2].1)).await,
        "a third stream from one address on tasks waiting for input",
    );
    // Nothing happens on the tasks: each held stream ends at the idle bound.
    for s in &mut held {
        let end = tokio::time::timeout(Duration::from_secs(30), s.next()).await;
        assert!(
            matches!(end, Ok(None)),
            "a stream on a waiting task did not end"
        );
    }
    drop(held);
    let mut s = e.subscribe(&asked[2].0, sub(&asked[2].1)).await.unwrap();
    assert!(s.next().await.is_some());
}

/// A stream that keeps receiving events does not live for ever: it ends after
/// `max_stream_lifetime` whatever the idle timer says.
#[tokio::test]
async fn a_stream_ends_at_its_lifetime() {
    let mut limits = Limits::default();
    limits.max_stream_lifetime = Duration::from_millis(300);
    let h = start_with(Policy::Did, limits, Duration::from_millis(10)).await;
    let me = h.client("ask-name", Binding::JsonRpc, Some("did:example:me"));
    let id = id_of(me.send_message(&msg("hi")).await.unwrap());
    let mut s = me.subscribe(&sub(&id)).await.unwrap();
    // The task, then the end, with the task still waiting (the idle bound is 10 min).
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        let mut n = 0;
        while let Some(ev) = s.next().await {
            ev.unwrap();
            n += 1;
            assert!(n < 10, "more events than the task has");
        }
        n
    })
    .await;
    assert_eq!(
        ended.ok(),
        Some(1),
        "the stream did not end at its lifetime"
    );
}

#[tokio::test]
async fn pages_history_and_ids_are_bounded() {
    let mut limits = Limits::default();
    limits.max_history_returned = 2;
    limits.max_history_stored = 3;
    let h = start_with(Policy::Did, limits, Duration::from_millis(10)).await;
    for binding in BINDINGS {
        let me = h.client("ask-name", binding, Some("did:example:me"));
        let id = id_of(me.send_message(&msg("first")).await.unwrap());
        let t = me.send_message(&reply(&id, "Ada")).await.unwrap();
        let SendMessageResponse::Task(t) = t else {
            panic!()
        };
        assert_eq!(t.status.state, TaskState::Completed);
        // Whatever historyLength asks, at most max_history_returned come back.
        let g = me
            .get_task(&GetTaskRequest {
                id: id.clone(),
                history_length: Some(1000),
                tenant: None,
            })
            .await
            .unwrap();
        assert_eq!(g.history.unwrap().len(), 2);
        // Negative historyLength is refused.
        let e = me
            .get_task(&GetTaskRequest {
                id: id.clone(),
                history_length: Some(-1),
                tenant: None,
            })
            .await
            .unwrap_err();
        assert_eq!(e.remote().unwrap().code, -32602);
    }
    // Stored history is bounded: read it with a server that returns everything stored.
    let mut limits = Limits::default();
    limits.max_history_stored = 3;
    let h = start_with(Policy::Did, limits, Duration::from_millis(10)).await;
    let me = h.client("ask-name", Binding::JsonRpc, Some("did:example:me"));
    let id = id_of(me.send_message(&msg("first")).await.unwrap());
    me.send_message(&reply(&id, "Ada")).await.unwrap();
    let g = me
        .get_task(&GetTaskRequest {
            id,
            history_length: None,
            tenant: None,
        })
        .await
        .unwrap();
    assert_eq!(g.history.unwrap().len(), 3);

    // Page size over the maximum, or negative, is refused on both bindings.
    let (_, r) = h
        .rpc(
            "echo",
            Some("did:example:me"),
            "ListTasks",
            json!({"pageSize": 101}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602);
    let (status, _) = h
        .rest(
            Method::GET,
            "/echo/tasks?pageSize=-1",
            Some("did:example:me"),
            None,
        )
        .await;
    assert_eq!(status, 400);
    let (status, _) = h
        .rest(
            Method::GET,
            "/echo/tasks?pageToken=garbage!",
            Some("did:example:me"),
            None,
        )
        .await;
    assert_eq!(status, 400);
    let (status, r) = h
        .rest(
            Method::GET,
            "/echo/tasks?pageSize=100",
            Some("did:example:me"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(r["pageSize"], 100);

    // Ids over 256 bytes: refused as parameters, not found as lookups.
    let long = "t".repeat(300);
    let (_, r) = h
        .rpc(
            "echo",
            Some("did:example:me"),
            "SendMessage",
            json!({"message": {"messageId": long, "role": "ROLE_USER", "parts": [{"text": "x"}]}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602);
    let (status, _) = h
        .rest(
            Method::GET,
            &format!("/echo/tasks/{long}"),
            Some("did:example:me"),
            None,
        )
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_full_store_refuses_new_tasks() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = Server::new(
        Config::new(samples::card("echo", "echo", &base)).policy(Policy::Open),
        Arc::new(samples::Echo),
        Arc::new(MemoryStore::new(2)),
        Arc::new(TestAuth),
    );
    tokio::spawn(async move { axum::serve(listener, server.router()).await });
    let c = client::Client::new(
        agentnet_did::http::client(),
        Endpoint {
            url: url::Url::parse(&base).unwrap(),
            binding: Binding::HttpJson,
        },
        None,
    );
    c.send_message(&msg("1")).await.unwrap();
    c.send_message(&msg("2")).await.unwrap();
    let e = c.send_message(&msg("3")).await.unwrap_err();
    assert!(busy(&e), "{e}");
    assert_eq!(e.remote().unwrap().status, 429);
}

#[tokio::test]
async fn sse_keep_alives_flow_while_a_turn_works() {
    let mut limits = Limits::default();
    limits.keep_alive = Duration::from_millis(100);
    let h = start_with(Policy::Open, limits, Duration::from_millis(1000)).await;
    let mut r = h
        .http
        .post(h.url("/ask-name/message:stream"))
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0")
        .body(
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let mut all = Vec::new();
    while let Some(c) = r.chunk().await.unwrap() {
        all.extend_from_slice(&c);
    }
    let text = String::from_utf8(all).unwrap();
    let comments = text.lines().filter(|l| l.starts_with(':')).count();
    assert!(
        comments >= 3,
        "keep-alive comments during a 1 s turn: {comments}\n{text}"
    );
    assert!(text.contains("TASK_STATE_INPUT_REQUIRED"));
}

/// A hostile A2A server: endless lines, huge bodies. The client's bounds hold.
#[tokio::test]
async fn client_bounds_hold_against_a_hostile_server() {
    use axum::routing::{get, post};
    let app = axum::Router::new()
        .route(
            "/message:stream",
            post(|| async {
                (
                    [("content-type", "text/event-stream")],
                    format!("data: {}", "z".repeat(300_000)),
                )
            }),
        )
        .route(
            "/tasks/{id}",
            get(|| async { ([("content-type", "application/json")], "[".repeat(300_000)) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut limits = ClientLimits::default();
    limits.max_sse_line = 100_000;
    limits.max_response_bytes = 100_000;
    let c = client::Client::new(
        agentnet_did::http::client(),
        Endpoint {
            url: url::Url::parse(&base).unwrap(),
            binding: Binding::HttpJson,
        },
        None,
    )
    .with_limits(limits);
    let mut s = c.send_streaming(&msg("x")).await.unwrap();
    let e = s.next().await.unwrap().unwrap_err();
    assert!(matches!(e, ClientError::Stream { .. }), "{e}");
    assert!(s.next().await.is_none());
    let e = c
        .get_task(&GetTaskRequest {
            id: "t".into(),
            history_length: None,
            tenant: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::TooLarge { .. }), "{e}");
}
