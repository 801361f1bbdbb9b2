//! The serving side's shares against the real binary, over real HTTP on loopback: many client
//! addresses (127.0.0.2 to 127.0.0.17, all bindable on Linux) together must not take every
//! connection from a new one, and one owner must not hold every SSE stream of an agent. Behind
//! a trusted reverse proxy (`[http] trusted_proxies`) each forwarded client has its own share,
//! and nobody else's forwarding headers are believed. The IPv6 /64 rule is unit-tested
//! (`node/src/http/server.rs`, `a2a/tests/bounds.rs`): loopback has one IPv6 address; so is the
//! parsing of the forwarding headers (`node/src/http/server/forwarded.rs`).

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use common::{agentnet, p, stderr, stdout, UpNode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Generous functional deadline: only a node that never answers trips it.
const DEADLINE: Duration = Duration::from_secs(30);

fn loopback(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, i))
}

/// Address `i` of the loopback /24 number `block` (127.`block`.0.0/24; all of 127/8 is
/// bindable on Linux).
fn in_block(block: u8, i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, block, 0, i))
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

/// How many of `held` the node keeps open: those it refused were sent a 503 and closed.
fn still_open(held: &[TcpStream]) -> usize {
    let mut buf = [0u8; 64];
    held.iter()
        .filter(|s| {
            matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        })
        .count()
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
    let node = UpNode::alone(dir.path());
    let to = http_addr(&node);
    // Each held connection sends nothing: the node keeps it until its 10 s header timeout,
    // far longer than this takes.
    // One address in each of 16 blocks (127.2.0.1 to 127.17.0.1), so that only the reserve
    // stands in their way (one block's crowd is the next test).
    let mut held = Vec::new();
    for i in 2..=17 {
        for _ in 0..32 {
            held.push(connect_from(in_block(i, 1), to).await.unwrap());
        }
    }
    for n in 0..10 {
        let r = get_once(to, "/.well-known/did.json").await;
        assert!(r.starts_with("HTTP/1.1 200"), "try {n}: {r}");
    }
    // The attack really held what it may: the 384 unreserved slots, and 4 each of the
    // reserve for the sources that came late; the rest were refused.
    let open = still_open(&held);
    assert!(
        (384..512).contains(&open),
        "{open} of the attacker's 512 connections open"
    );
    drop(held);
    drop(node);
}

/// 48 addresses of one /24 (127.1.0.2 to 127.1.0.49), each opening 32 connections that send
/// half a request head and stop, took all 512 slots of the public listener: an honest client
/// from another network got 503 (about a quarter of honest requests failed while such a crowd
/// kept reconnecting). Now the crowd holds one block's share (64 connections), whatever the
/// number of its addresses, and the honest client is served every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_of_addresses_from_one_network_holds_one_blocks_share() {
    let dir = tempfile::tempdir().unwrap();
    let node = UpNode::alone(dir.path());
    let to = http_addr(&node);
    // Address after address, each up to its per-source cap: the order that filled the
    // listener (12 addresses full, then 4 each of the reserve for 32 more).
    let mut held = Vec::new();
    for i in 2..=49 {
        for _ in 0..32 {
            let Ok(mut s) = connect_from(in_block(1, i), to).await else {
                continue;
            };
            // Half a request head: the node waits up to its 10 s header timeout for the
            // rest, far longer than this test takes.
            let _ = s
                .write_all(b"GET /.well-known/did.json HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .await;
            held.push(s);
        }
    }
    // The honest client: another network (127.0.0.1, the 127.0.0.0/24 block).
    for n in 0..20 {
        let r = get_once(to, "/.well-known/did.json").await;
        assert!(r.starts_with("HTTP/1.1 200"), "try {n}: {r}");
    }
    // The crowd holds what one block may: 64 connections of its 1 536.
    let open = still_open(&held);
    assert_eq!(
        open,
        64,
        "{open} of the crowd's {} connections open",
        held.len()
    );
    drop(held);
    drop(node);
}

/// A crowd spread over ten /24s (127.20.0.0/24 to 127.29.0.0/24), 32 addresses each, each
/// opening connections that send half a request head and stop: the blocks' shares bound each
/// network, but ten networks together filled all 512 slots, and the listener then refused
/// everyone (an honest client from another network got 503) until the crowd's connections
/// timed out. Now a new source gets the slot of one of the crowd's idle connections, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_spread_over_many_networks_cannot_keep_a_new_source_out() {
    let dir = tempfile::tempdir().unwrap();
    let node = UpNode::alone(dir.path());
    let to = http_addr(&node);
    let mut held = Vec::new();
    for block in 20..30 {
        for i in 2..=33 {
            for _ in 0..2 {
                let Ok(mut s) = connect_from(in_block(block, i), to).await else {
                    continue;
                };
                let _ = s
                    .write_all(b"GET /.well-known/did.json HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                    .await;
                held.push(s);
            }
        }
    }
    // Let the node refuse what it refuses (a 503 and a close) before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let open = still_open(&held);
    assert_eq!(open, 512, "the crowd holds every slot of the listener");
    // The honest client: 127.0.0.1, a network holding nothing.
    for n in 0..20 {
        let r = get_once(to, "/.well-known/did.json").await;
        assert!(r.starts_with("HTTP/1.1 200"), "try {n}: {r}");
    }
    // Each honest connection took the slot of one of the crowd's, and the crowd did not
    // take them back (its connections are still open, and nobody reconnected).
    let open = still_open(&held);
    assert!(
        (512 - 20..512).contains(&open),
        "{open} of the crowd's connections open"
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
    common::client_from(&loopback(i).to_string())
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
    UpNode::with_config(dir, config)
}

/// An open echo agent whose tasks a network block may create three of (`max_per_source`):
/// the per-source share the proxy tests fill.
const SHARED: &str = r#"
[node]
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]

[tasks]
max_per_source = 3

[[agent]]
id = "open-echo"
kind = "echo"
policy = "open"
publish = false
"#;

/// A `SendMessage` to `agent` from 127.0.0.`from` carrying `headers`: `Ok` if a task was
/// created, else the refusal (its status and body).
async fn send_from(from: u8, agent: &str, headers: &[(&str, &str)]) -> Result<(), String> {
    let body = json!({
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}
    });
    let mut r = client_from(from)
        .post(format!("{agent}/message:send"))
        .header("content-type", "application/a2a+json")
        .header("A2A-Version", "1.0")
        .body(body.to_string());
    for (name, value) in headers {
        r = r.header(*name, *value);
    }
    let r = r.send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap_or_default();
    if status == 200 {
        Ok(())
    } else {
        Err(format!("{status}: {text}"))
    }
}

/// Whether `r` is the refusal of a network block's full share.
fn is_share_refusal(r: &Result<(), String>) -> bool {
    matches!(r, Err(e) if e.contains("max_per_source"))
}

/// Behind a reverse proxy every caller was the proxy's one source: one client's three tasks
/// refused everyone's. With `trusted_proxies`, each client the proxy forwards for has its own
/// share, found from the right of the chain, so a client that writes a chain of its own
/// (`X-Forwarded-For: <fake>, <real>` after the proxy appended its address) is its real
/// address, never the one it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_share() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{SHARED}\n[http]\ntrusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\"]\n");
    let node = start_with_config(dir.path(), &config);
    let agent = format!("http://{}/a2a/open-echo", http_addr(&node));
    let xff = |v: &'static str| [("x-forwarded-for", v)];
    // One client behind the proxy (127.0.0.1) uses up its share.
    for n in 0..3 {
        let r = send_from(1, &agent, &xff("198.51.100.1")).await;
        assert_eq!(r, Ok(()), "task {n} of 198.51.100.1");
    }
    let r = send_from(1, &agent, &xff("198.51.100.1")).await;
    assert!(is_share_refusal(&r), "a fourth task of 198.51.100.1: {r:?}");
    // Another client behind the same proxy still has its own, also through a second trusted
    // proxy (10.0.0.0/8) that the chain names.
    for v in ["198.51.100.2", "198.51.100.2", "198.51.100.2, 10.9.8.7"] {
        let r = send_from(1, &agent, &xff(v)).await;
        assert_eq!(r, Ok(()), "198.51.100.2 by {v:?}");
    }
    // A spoofed chain: the client 198.51.100.4 writes the used-up 198.51.100.1 on the left;
    // the proxy appended the address it saw. The rightmost untrusted address is the source.
    for n in 0..3 {
        let r = send_from(1, &agent, &xff("198.51.100.1, 198.51.100.4")).await;
        assert_eq!(r, Ok(()), "task {n} of 198.51.100.4 under a spoofed chain");
    }
    // And writing a fresh address on the left does not buy 198.51.100.4 a new share.
    for fake in [
        "203.0.113.9, 198.51.100.4",
        "203.0.113.10,198.51.100.4, 10.1.1.1",
    ] {
        let r = send_from(1, &agent, &xff(fake)).await;
        assert!(is_share_refusal(&r), "{fake:?}: {r:?}");
    }
    // Forwarded is not the header these proxies write: it is not read.
    let r = send_from(
        1,
        &agent,
        &[
            ("forwarded", "for=203.0.113.11"),
            ("x-forwarded-for", "198.51.100.1"),
        ],
    )
    .await;
    assert!(
        is_share_refusal(&r),
        "Forwarded beside a used-up X-Forwarded-For: {r:?}"
    );
    drop(node);

    // A site whose proxy writes RFC 7239 `Forwarded` says so; then that one is read, and
    // X-Forwarded-For, passed through from the client, is not.
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{SHARED}\n[http]\ntrusted_proxies = [\"127.0.0.1\"]\nforwarded_header = \"forwarded\"\n"
    );
    let node = start_with_config(dir.path(), &config);
    let agent = format!("http://{}/a2a/open-echo", http_addr(&node));
    let forwarded = |v: &'static str| [("forwarded", v)];
    for n in 0..3 {
        let r = send_from(1, &agent, &forwarded("for=198.51.100.1;proto=https")).await;
        assert_eq!(r, Ok(()), "task {n} of 198.51.100.1");
    }
    let r = send_from(1, &agent, &forwarded("for=198.51.100.1")).await;
    assert!(is_share_refusal(&r), "{r:?}");
    let r = send_from(1, &agent, &forwarded("for=\"[2001:db8::7]:4711\"")).await;
    assert_eq!(r, Ok(()), "another client, IPv6 in brackets with a port");
    let r = send_from(1, &agent, &forwarded("for=203.0.113.9, for=198.51.100.1")).await;
    assert!(is_share_refusal(&r), "spoofed on the left: {r:?}");
    drop(node);
}

/// Forwarding headers are believed from trusted proxies only. A client that connects itself,
/// to a node with no trusted proxy or from an address not in the list, and writes a new
/// `X-Forwarded-For` or `Forwarded` address into each request is still one source: its share
/// runs out as if it had written nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_is_not_a_trusted_proxy_cannot_choose_its_source() {
    for trusted in ["", "\n[http]\ntrusted_proxies = [\"127.0.0.1\"]\n"] {
        let dir = tempfile::tempdir().unwrap();
        let node = start_with_config(dir.path(), &format!("{SHARED}{trusted}"));
        let agent = format!("http://{}/a2a/open-echo", http_addr(&node));
        let mut refused = 0;
        for n in 0..8u8 {
            let fake = format!("198.51.100.{n}");
            let fwd = format!("for={fake}");
            let headers = [
                ("x-forwarded-for", fake.as_str()),
                ("forwarded", fwd.as_str()),
            ];
            let r = send_from(2, &agent, &headers).await;
            if n < 3 {
                assert_eq!(r, Ok(()), "{trusted:?}: task {n}");
            } else {
                assert!(
                    is_share_refusal(&r),
                    "{trusted:?}: task {n} as {fake}: {r:?}"
                );
                refused += 1;
            }
        }
        assert_eq!(refused, 5);
        drop(node);
    }
}

/// A bad `[http] trusted_proxies` entry is refused by `config check` and by `up`, naming the
/// entry; a good list is shown as the node reads it.
#[test]
fn config_check_refuses_a_bad_trusted_proxy_and_shows_the_list() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("node.toml");
    let many: Vec<String> = (0..65).map(|i| format!("\"10.0.0.{i}\"")).collect();
    let many = format!("[http]\ntrusted_proxies = [{}]\n", many.join(", "));
    let cases = [
        (
            "[http]\ntrusted_proxies = [\"proxy.example\"]\n",
            "\"proxy.example\"",
        ),
        (
            "[http]\ntrusted_proxies = [\"127.0.0.1\", \"10.0.0.0/33\"]\n",
            "\"10.0.0.0/33\"",
        ),
        ("[http]\ntrusted_proxies = [\"10.1.2.3/8\"]\n", "10.0.0.0/8"),
        (
            "[http]\ntrusted_proxies = [\"2001:db8::/200\"]\n",
            "\"2001:db8::/200\"",
        ),
        (
            "[http]\ntrusted_proxies = [\"127.0.0.1:8080\"]\n",
            "\"127.0.0.1:8080\"",
        ),
        (many.as_str(), "at most 64"),
        ("[http]\nforwarded_header = \"x-real-ip\"\n", "x-real-ip"),
    ];
    for (bad, says) in cases {
        common::assert_config_refused(&config, bad, says);
    }
    // `up` refuses it before it starts anything.
    std::fs::write(&config, cases[1].0).unwrap();
    let dir = tmp.path().join("d");
    let o = agentnet(&[
        "up",
        "--config",
        p(&config),
        "--data-dir",
        p(&dir),
        "--http",
        "127.0.0.1:0",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("trusted_proxies: \"10.0.0.0/33\""),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("node.json").exists());

    std::fs::write(
        &config,
        "[http]\ntrusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\", \"2001:DB8::/32\", \"::ffff:192.0.2.7\"]\n",
    )
    .unwrap();
    let o = agentnet(&[
        "config",
        "check",
        "--config",
        p(&config),
        "--data-dir",
        p(&dir),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(
            "[http]\ntrusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.7\"]\nforwarded_header = \"x-forwarded-for\""
        ),
        "{out}"
    );
    // Without the section, the default is shown: nobody trusted.
    std::fs::write(&config, "").unwrap();
    let out = stdout(&agentnet(&[
        "config",
        "check",
        "--config",
        p(&config),
        "--data-dir",
        p(&dir),
    ]));
    assert!(out.contains("[http]\ntrusted_proxies = []\n"), "{out}");
}
