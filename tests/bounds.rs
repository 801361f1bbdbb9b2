//! The serving side's shares against the real binary, over real HTTP on loopback: many client
//! addresses (127.0.0.2 to 127.0.0.17, all bindable on Linux) together must not take every
//! connection from a new one, and one owner must not hold every SSE stream of an agent. The
//! IPv6 /64 rule is unit-tested (`node/src/server.rs`, `a2a/tests/bounds.rs`): loopback has one
//! IPv6 address.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use common::{p, UpNode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Generous functional deadline: only a node that never answers trips it.
const DEADLINE: Duration = Duration::from_secs(30);

fn loopback(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, i))
}

/// A connection to `to` from the loopback address `from`.
async fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::new(from, 0))?;
    s.connect(to).await
}

/// One `GET path` on a fresh connection from 127.0.0.1: all the node sent before closing.
async fn get_once(to: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(to).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\r\n");
    let _ = s.write_all(req.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, s.read_to_end(&mut out))
        .await
        .expect("an answer in time");
    String::from_utf8_lossy(&out).into_owned()
}

fn http_addr(node: &UpNode) -> SocketAddr {
    node.info["http"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .expect("node.json names the HTTP address")
}

/// 16 addresses of 32 idle connections each took all 512 slots of the public listener: an
/// honest client got 503 on 35 of 36 tries. The last slots are kept for sources holding few.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_addresses_cannot_take_every_connection_from_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let node = UpNode::spawn(
        dir.path(),
        &[
            "--listen",
            "/ip4/127.0.0.1/tcp/0",
            "--http",
            "127.0.0.1:0",
            "--no-mdns",
        ],
    );
    let to = http_addr(&node);
    // Each held connection sends nothing: the node keeps it until its 10 s header timeout,
    // far longer than this takes.
    let mut held = Vec::new();
    for i in 2..=17 {
        for _ in 0..32 {
            held.push(connect_from(loopback(i), to).await.unwrap());
        }
    }
    for n in 0..10 {
        let r = get_once(to, "/.well-known/did.json").await;
        assert!(r.starts_with("HTTP/1.1 200"), "try {n}: {r}");
    }
    // The attack really held what it may: the 384 unreserved slots, and 4 each of the
    // reserve for the sources that came late; the rest were refused.
    let mut open = 0;
    for s in &held {
        let mut buf = [0u8; 64];
        if matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
            open += 1;
        }
    }
    assert!(
        (384..512).contains(&open),
        "{open} of the attacker's 512 connections open"
    );
    drop(held);
    drop(node);
}

const STREAMS_CONFIG: &str = r#"
[node]
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]

[[agent]]
id = "open-ask"
kind = "ask"
policy = "open"
work_ms = 600000
publish = false
"#;

/// An unsigned client at 127.0.0.`i`: one anonymous owner, owned by its address.
fn client_from(i: u8) -> reqwest::Client {
    agentnet_did::http::client_builder()
        .local_address(loopback(i))
        .build()
        .unwrap()
}

/// A new task at the open agent, answered at once (its turn works for ten minutes).
async fn new_task(c: &reqwest::Client, agent: &str) -> String {
    let body = json!({
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
        "configuration": {"returnImmediately": true}
    });
    let r = c
        .post(format!("{agent}/message:send"))
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    v["task"]["id"].as_str().expect("a task id").to_string()
}

async fn subscribe(c: &reqwest::Client, agent: &str, id: &str) -> reqwest::Response {
    c.post(format!("{agent}/tasks/{id}:subscribe"))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap()
}

/// 2 DIDs from 9 addresses held all 256 SSE streams of an agent. An owner (here the
/// anonymous owner of one address) holds 16 at most; another still gets its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_cannot_hold_every_stream_of_an_agent() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_with_config(dir.path(), STREAMS_CONFIG);
    let agent = format!("http://{}/a2a/open-ask", http_addr(&node));
    let me = client_from(2);
    let tasks = [
        new_task(&me, &agent).await,
        new_task(&me, &agent).await,
        new_task(&me, &agent).await,
    ];
    // 8 streams per task (the per-task share), on two tasks.
    let mut streams = Vec::new();
    for id in &tasks[..2] {
        for _ in 0..8 {
            let r = subscribe(&me, &agent, id).await;
            assert_eq!(r.status(), 200, "stream {}", streams.len());
            streams.push(r);
        }
    }
    let r = subscribe(&me, &agent, &tasks[2]).await;
    assert_eq!(r.status(), 429, "a 17th stream of one owner");
    // Another address is another anonymous owner and source.
    let other = client_from(3);
    let id = new_task(&other, &agent).await;
    let r = subscribe(&other, &agent, &id).await;
    assert_eq!(r.status(), 200);
    drop((r, streams));
    drop(node);
}

/// `agentnet up --config <dir>/node.toml --http 127.0.0.1:0`.
fn start_with_config(dir: &Path, config: &str) -> UpNode {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("node.toml");
    std::fs::write(&path, config).unwrap();
    UpNode::spawn(dir, &["--config", p(&path), "--http", "127.0.0.1:0"])
}
