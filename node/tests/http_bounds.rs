//! The HTTP server's bounds ([`agentnet_node::http::server`]) against clients that play the attacker,
//! over real TCP on 127.0.0.1: half-sent requests, more connections than the caps, shutdown
//! with requests in flight.

use std::net::SocketAddr;
use std::time::Duration;

use agentnet_node::http::server::{self, Limits};
use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Generous functional deadline: only a server that never closes trips it.
const DEADLINE: Duration = Duration::from_secs(30);

/// Raise the soft descriptor limit to the hard one: 2000 connections are 4000 descriptors here
/// (both ends live in this process).
fn raise_fd_limit(need: u64) {
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        if l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &l), 0);
        }
        assert!(
            l.rlim_cur >= need,
            "this test needs {need} descriptors; the hard limit is {}",
            l.rlim_max
        );
    }
}

struct Server {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(limits: Limits) -> Server {
    let router = Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "slow"
            }),
        )
        .route(
            "/forever",
            get(|| async {
                std::future::pending::<()>().await;
                "never"
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(server::serve(
        listener,
        router,
        limits,
        server::TrustedProxies::default(),
        stop.clone(),
    ));
    Server { addr, stop, task }
}

/// One complete request on a fresh connection: everything the server sent before closing
/// (empty if it closed at once).
async fn get_once(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    // A refused connection may be closed before the request is written.
    let _ = s.write_all(req.as_bytes()).await;
    let out = tokio::time::timeout(DEADLINE, closed(s))
        .await
        .expect("an answer in time");
    String::from_utf8_lossy(&out).into_owned()
}

/// Wait until the server closes `s` (EOF or reset); what it sent before.
async fn closed(mut s: TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

fn limits(header: Duration, max: usize, per_source: usize) -> Limits {
    Limits {
        header_read_timeout: header,
        request_timeout: Duration::from_secs(2),
        max_connections: max,
        max_per_source: per_source,
        // No block share here: the tests below that need one set it.
        max_per_block: usize::MAX,
        reserved: 0,
        max_per_source_in_reserve: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_half_sent_requests_are_closed_and_others_still_served() {
    const N: usize = 2000;
    raise_fd_limit(2 * N as u64 + 200);
    let srv = start(limits(Duration::from_secs(1), 4096, 4096)).await;

    // Slow-loris: half a request head each, never finished.
    let mut loris = Vec::with_capacity(N);
    for i in 0..N {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let partial = if i % 2 == 0 {
            "GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        } else {
            "GET /o"
        };
        s.write_all(partial.as_bytes()).await.unwrap();
        loris.push(s);
    }
    // Served meanwhile.
    let r = get_once(srv.addr, "/ok").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");

    // Every one of them is closed by the server, none answered.
    let mut waits = JoinSet::new();
    for s in loris {
        waits.spawn(closed(s));
    }
    let all = tokio::time::timeout(DEADLINE, async {
        let mut n = 0;
        while let Some(sent) = waits.join_next().await {
            let sent = sent.unwrap();
            assert!(
                sent.is_empty() || sent.starts_with(b"HTTP/1.1 408"),
                "{}",
                String::from_utf8_lossy(&sent)
            );
            n += 1;
        }
        n
    })
    .await
    .expect("the server closes every half-sent request");
    assert_eq!(all, N);

    // And served after.
    let r = get_once(srv.addr, "/ok").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    srv.stop.cancel();
    srv.task.await.unwrap().unwrap();
}

/// A connection past a cap is closed, with at most the fixed 503 sent.
async fn refused_at_the_cap(s: TcpStream) {
    let sent = tokio::time::timeout(DEADLINE, closed(s)).await.unwrap();
    assert!(
        sent.is_empty() || sent.starts_with(b"HTTP/1.1 503"),
        "{}",
        String::from_utf8_lossy(&sent)
    );
}

/// `/ok` is served again (the slots came back) within [`DEADLINE`].
async fn served_again(addr: SocketAddr) {
    let ok = tokio::time::timeout(DEADLINE, async {
        loop {
            let r = get_once(addr, "/ok").await;
            if r.starts_with("HTTP/1.1 200") {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("served once the held connections closed");
    assert!(ok.ends_with("ok"), "{ok}");
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_after_the_header_timeout() {
    let srv = start(limits(Duration::from_millis(500), 16, 16)).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // Then nothing: the connection does not stay open forever.
    let rest = tokio::time::timeout(DEADLINE, closed(s)).await.unwrap();
    assert!(rest.is_empty() || rest.ends_with(b"ok"), "{rest:?}");
    srv.stop.cancel();
}

#[tokio::test]
async fn a_handler_that_never_answers_times_out() {
    let srv = start(limits(Duration::from_secs(5), 16, 16)).await;
    let r = get_once(srv.addr, "/forever").await;
    assert!(r.starts_with("HTTP/1.1 408"), "{r}");
    srv.stop.cancel();
}

#[tokio::test]
async fn connections_beyond_the_cap_are_refused_and_the_slots_come_back() {
    // Long header timeout: the idle connections hold their slots until the test drops them.
    let srv = start(limits(Duration::from_secs(60), 8, 100)).await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(TcpStream::connect(srv.addr).await.unwrap());
    }
    // Give the server time to accept them all: it takes slots in accept order.
    let r = get_once(srv.addr, "/ok").await;
    assert!(r.is_empty() || r.starts_with("HTTP/1.1 503"), "{r}");
    for _ in 0..20 {
        let s = TcpStream::connect(srv.addr).await.unwrap();
        refused_at_the_cap(s).await;
    }
    drop(held);
    // The slots come back when those connections close.
    served_again(srv.addr).await;
    srv.stop.cancel();
}

#[tokio::test]
async fn one_address_cannot_take_every_slot() {
    let srv = start(limits(Duration::from_secs(60), 100, 4)).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(srv.addr).await.unwrap());
    }
    let s = TcpStream::connect(srv.addr).await.unwrap();
    refused_at_the_cap(s).await;
    drop(held);
    served_again(srv.addr).await;
    srv.stop.cancel();
}

/// A connection to `to` from the loopback address 127.0.0.`i` (all of 127/8 is bindable on
/// Linux).
async fn connect_from(i: u8, to: SocketAddr) -> TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from(([127, 0, 0, i], 0))).unwrap();
    s.connect(to).await.unwrap()
}

/// Sixteen addresses each at their per-source cap would hold every slot; the reserve keeps
/// the last ones for sources that hold few, so a new client is still served.
#[tokio::test]
async fn many_addresses_together_cannot_take_every_slot() {
    let srv = start(Limits {
        reserved: 32,
        max_per_source_in_reserve: 2,
        ..limits(Duration::from_secs(60), 64, 8)
    })
    .await;
    let mut held = Vec::new();
    for i in 2..=17 {
        for _ in 0..8 {
            held.push(connect_from(i, srv.addr).await);
        }
    }
    for _ in 0..3 {
        let r = get_once(srv.addr, "/ok").await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    // 32 unreserved slots (4 addresses full), then 2 each for the other 12: 8 reserved left.
    let mut open = 0;
    for s in &held {
        let mut buf = [0u8; 64];
        if matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
            open += 1;
        }
    }
    assert_eq!(open, 32 + 12 * 2);
    drop(held);
    srv.stop.cancel();
}

#[tokio::test]
async fn shutdown_finishes_requests_in_flight_and_closes_idle_connections() {
    let srv = start(limits(Duration::from_secs(60), 16, 16)).await;
    let idle = TcpStream::connect(srv.addr).await.unwrap();
    let addr = srv.addr;
    let in_flight = tokio::spawn(async move { get_once(addr, "/slow").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    srv.stop.cancel();
    let r = in_flight.await.unwrap();
    assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("slow"), "{r}");
    tokio::time::timeout(DEADLINE, srv.task)
        .await
        .expect("serve returns once every connection closed")
        .unwrap()
        .unwrap();
    let sent = tokio::time::timeout(DEADLINE, closed(idle)).await.unwrap();
    assert!(sent.is_empty());
    // Nothing listens any more.
    assert!(TcpStream::connect(addr).await.is_err());
}
