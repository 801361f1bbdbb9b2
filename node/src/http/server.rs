//! The HTTP server both listeners run: hyper's HTTP/1.1 connection driver with a timer, so that
//! every cost a client can cause is bounded (DESIGN.md section 5).
//!
//! `axum::serve` leaves hyper's timer off: a client that sends half a request line and stops
//! keeps its connection, its task and its file descriptor forever, and nothing caps how many
//! such connections there are. Here:
//!
//! - **Header read timeout** ([`Limits::header_read_timeout`]): the request head (request line
//!   and headers) must arrive within it, counted from when the server starts waiting for it:
//!   the accept for a new connection, the end of the previous response on a kept-alive one. So
//!   an idle kept-alive connection is closed after it too.
//! - **Request timeout** ([`Limits::request_timeout`]): the handler, body read included, must
//!   answer within it, else `408 Request Timeout` and the connection closes.
//! - **Connection cap** ([`Limits::max_connections`]): a semaphore around accept. At the cap
//!   the server still accepts (so the kernel backlog does not fill up with connections nobody
//!   will read), writes a fixed `503 Service Unavailable` with `Retry-After: 1` if the socket
//!   takes it without blocking, and closes. Connections already served are not disturbed.
//! - **Per-source cap** ([`Limits::max_per_source`]): the same, per source: the client's
//!   network block ([`Source`]: an IPv4 address, an IPv6 /64, whose 2^64 addresses cost one
//!   subscriber line nothing), so one client cannot take every slot. Loopback counts like any
//!   other address.
//! - **Per-block cap** ([`Limits::max_per_block`]): addresses are cheap inside one network
//!   (a /24 of IPv4, a /48 of IPv6: one hosting account, one customer's allocation), so the
//!   sources of one [`Block`] together hold at most `max_per_block`, and each of them at most
//!   its part of that: `max_per_block / sources of the block holding connections`, never more
//!   than `max_per_source`. The more addresses a crowd brings from one block, the fewer each
//!   may hold, and the crowd holds no more than the block's share (48 addresses of one /24
//!   holding slow connections took every slot; now they take 64).
//! - **Reserve** ([`Limits::reserved`]): many sources together could still take every slot
//!   (16 addresses of 32 connections are 512). The last `reserved` slots go only to sources
//!   holding fewer than [`Limits::max_per_source_in_reserve`] connections, so that a new
//!   source still gets in while the listener is nearly full; the rule is `Shares`, a plain struct.
//! - **Making room** (`held`): a crowd spread over enough blocks still fills every slot (eight
//!   /24s of slow connections fill 512). Then a new source holding few gets the slot of an idle
//!   connection (no request in flight) of the block holding the most, if that block holds at
//!   least two more than the newcomer's; a request being served or a response streaming is
//!   never cut, nor a trusted proxy's connection.
//! - **Trusted proxies** ([`TrustedProxies`], `[http] trusted_proxies`): a request whose TCP
//!   peer is a trusted reverse proxy is from the client its forwarding header names, resolved
//!   once here ([`forwarded`]) and handed to the routers as their [`ConnectInfo`], so that every
//!   per-source bound behind counts the client, not the proxy. A trusted proxy's connections
//!   are not held to the per-source cap or the reserve (it carries many clients' connections;
//!   those are the proxy's to bound per client), only to the connection cap. No other peer's
//!   forwarding headers are read.
//! - **Graceful shutdown**: on cancel the server stops accepting, asks every connection to
//!   finish its in-flight request and close, and returns when all have closed (the caller
//!   bounds the wait).
//!
//! Hand-written rather than `hyper_util::server::graceful`/`conn::auto`: those need hyper-util
//! features nothing else in the workspace enables (rebuilding reqwest and the did crate), and the
//! accept loop with its caps is needed anyway.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use agentnet_a2a::auth::Source;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use axum::Router;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

pub mod forwarded;
mod held;

pub use forwarded::TrustedProxies;

use held::{Held, InFlight};

/// What one listener lets its clients cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The request head must arrive within this.
    pub header_read_timeout: Duration,
    /// The handler (body read included) must answer within this.
    pub request_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections from one source (an IPv4 address, an IPv6 /64) at most.
    pub max_per_source: usize,
    /// Open connections from one [`Block`] (an IPv4 /24, an IPv6 /48) at most, all its
    /// sources together; each source of a block holds at most this divided by the block's
    /// sources holding connections.
    pub max_per_block: usize,
    /// The last this many of `max_connections` go only to sources holding fewer than
    /// `max_per_source_in_reserve`: a full listener still lets a new source in.
    pub reserved: usize,
    /// What a source may hold and still take a reserved slot.
    pub max_per_source_in_reserve: usize,
}

impl Limits {
    /// The public listener (well-known files, later A2A). 10 s is plenty for a request head
    /// from any real client and short enough that a slow-loris attacker must keep opening
    /// connections; 512 connections keep the node well under the common 1024 descriptor soft
    /// limit next to libp2p and RocksDB; 32 per source leaves room for a NAT of several
    /// clients while one source alone cannot take more than 1/16 of the slots, and a block
    /// (/24, /48) twice that: a crowd of addresses from one network takes 1/8. The last 128
    /// slots go to sources holding fewer than 4: sources holding their full 32 fill 384 slots
    /// at most, and it takes 32 more sources, from 6 blocks at least, to fill the reserve.
    pub const PUBLIC: Limits = Limits {
        header_read_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(30),
        max_connections: 512,
        max_per_source: 32,
        max_per_block: 64,
        reserved: 128,
        max_per_source_in_reserve: 4,
    };

    /// The admin listener: loopback and authenticated, used by one CLI call at a time. The
    /// request timeout is above the CLI's 60 s, since a discovery may wait for DHT queries.
    pub const ADMIN: Limits = Limits {
        header_read_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(90),
        max_connections: 64,
        max_per_source: 64,
        max_per_block: 64,
        reserved: 0,
        max_per_source_in_reserve: 0,
    };
}

/// The fixed answer at a cap, written without blocking before the connection is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: 20\r\nConnection: close\r\n\r\nserver at capacity\r\n";

/// Why [`Shares::take`] refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The source holds [`Limits::max_per_source`], or its part of its block's share.
    Source,
    /// The source's block holds [`Limits::max_per_block`].
    Block,
    /// Only reserved slots are left and the source holds too many for one.
    Reserve,
    /// Every slot is taken.
    Full,
}

/// The network a source belongs to, whose addresses one party gets for little more than one:
/// an IPv4 /24, an IPv6 /48 (the allocation RIRs' policies give a customer site).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Block {
    /// The first 24 bits of an IPv4 address.
    V4(u32),
    /// The first 48 bits of an IPv6 address.
    V6(u64),
    /// [`Source::Local`] (and any source of a kind added later): its own block.
    Local,
}

impl Block {
    /// The block `source` is in.
    pub fn of(source: Source) -> Block {
        match source {
            Source::V4(a) => Block::V4(u32::from(a) >> 8),
            Source::V6(prefix64) => Block::V6(prefix64 >> 16),
            // `Source` is non_exhaustive: what it may add later is its own block, as Local is.
            _ => Block::Local,
        }
    }
}

/// What one block holds: connections, and sources holding at least one.
#[derive(Debug, Default, Clone, Copy)]
struct BlockHeld {
    connections: usize,
    sources: usize,
}

/// The connections a listener holds, per source, per block and in all: the sharing rule,
/// without sockets. An entry lives while its source (block) holds a connection, so neither map
/// ever holds more than [`Limits::max_connections`] entries.
#[derive(Debug)]
struct Shares {
    limits: Limits,
    by_source: HashMap<Source, usize>,
    by_block: HashMap<Block, BlockHeld>,
    total: usize,
}

impl Shares {
    fn new(limits: Limits) -> Self {
        Shares {
            limits,
            by_source: HashMap::new(),
            by_block: HashMap::new(),
            total: 0,
        }
    }

    /// Count one more connection of `source`, or say why not. A `proxy`'s connection (a
    /// trusted reverse proxy's) is held to the connection cap only.
    fn take(&mut self, source: Source, proxy: bool) -> Result<(), Refusal> {
        self.check(source, proxy, self.total)?;
        let held = self.held(source);
        *self.by_source.entry(source).or_default() += 1;
        let b = self.by_block.entry(Block::of(source)).or_default();
        b.connections += 1;
        b.sources += usize::from(held == 0);
        self.total += 1;
        Ok(())
    }

    /// Connections `source` holds.
    fn held(&self, source: Source) -> usize {
        self.by_source.get(&source).copied().unwrap_or(0)
    }

    /// Connections the sources of `block` hold together.
    fn in_block(&self, block: Block) -> usize {
        self.by_block.get(&block).map_or(0, |b| b.connections)
    }

    /// Whether one more connection of `source` would be counted if the listener held `total`.
    fn check(&self, source: Source, proxy: bool, total: usize) -> Result<(), Refusal> {
        let l = &self.limits;
        let held = self.held(source);
        let in_block = self
            .by_block
            .get(&Block::of(source))
            .copied()
            .unwrap_or_default();
        if total >= l.max_connections {
            return Err(Refusal::Full);
        }
        if !proxy {
            // The block's sources once this one holds a connection too.
            let sources = in_block.sources + usize::from(held == 0);
            let part = (l.max_per_block / sources.max(1)).max(1);
            if held >= l.max_per_source.min(part) {
                return Err(Refusal::Source);
            }
            if in_block.connections >= l.max_per_block {
                return Err(Refusal::Block);
            }
        }
        // A proxy's connections are counted too, so that the reserve below sees how full the
        // listener is.
        let unreserved = l.max_connections.saturating_sub(l.reserved);
        if !proxy && total >= unreserved && held >= l.max_per_source_in_reserve {
            return Err(Refusal::Reserve);
        }
        Ok(())
    }

    /// Count one connection of `source` less.
    fn give_back(&mut self, source: Source) {
        let Some(n) = self.by_source.get_mut(&source) else {
            return;
        };
        *n = n.saturating_sub(1);
        let gone = *n == 0;
        if gone {
            self.by_source.remove(&source);
        }
        self.total = self.total.saturating_sub(1);
        let block = Block::of(source);
        if let Some(b) = self.by_block.get_mut(&block) {
            b.connections = b.connections.saturating_sub(1);
            b.sources = b.sources.saturating_sub(usize::from(gone));
            if b.connections == 0 {
                self.by_block.remove(&block);
            }
        }
    }
}

fn lock(held: &Mutex<Held>) -> std::sync::MutexGuard<'_, Held> {
    held.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serve `router` on the already bound `listener` until `shutdown`; in-flight requests finish,
/// then every connection closes. Each request carries [`ConnectInfo<SocketAddr>`]: its TCP
/// peer, or the client a trusted proxy of `proxies` forwarded it for.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    proxies: TrustedProxies,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    // At least one slot; at most what `acquire_many` can count.
    let max = limits.max_connections.clamp(1, u32::MAX as usize);
    let slots = Arc::new(Semaphore::new(max));
    let held = Arc::new(Mutex::new(Held::new(limits)));
    // Connections stop through this child token, so that the caller's token is only read.
    let conns_stop = shutdown.child_token();
    loop {
        let (stream, remote) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(error) => {
                    // Out of descriptors or a connection reset before accept: the listener
                    // itself is fine. Pause so that a full descriptor table does not spin.
                    tracing::warn!(%error, "accepting an HTTP connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let source = Source::of(remote.ip());
        let proxy = proxies.trusts(remote.ip());
        // No free slot: the listener may still make room for a source holding few.
        let slot = slots.clone().try_acquire_owned().ok();
        let admitted = match Held::admit(&held, source, proxy, slot) {
            Ok(admitted) => admitted,
            Err(why) => {
                tracing::debug!(%remote, %source, ?why, "HTTP connection cap or share used up; refusing");
                refuse(stream);
                continue;
            }
        };
        let router = router.clone();
        let stop = conns_stop.clone();
        let proxies = proxies.clone();
        tokio::spawn(async move {
            let (busy, evict) = (admitted.busy.clone(), admitted.evict.clone());
            connection(stream, remote, router, limits, proxies, stop, busy, evict).await;
            drop(admitted);
        });
    }
    drop(listener);
    // Every connection finishes its request and closes; each returns its slot (an evicted
    // one's went to the connection that took its place).
    conns_stop.cancel();
    let _all = slots
        .acquire_many(u32::try_from(max).unwrap_or(u32::MAX))
        .await;
    Ok(())
}

/// Answer `503` if the socket takes it at once, and close.
fn refuse(stream: TcpStream) {
    let _ = stream.try_write(BUSY);
}

/// Serve one connection until it closes, `stop` asks it to finish (shutdown), or `evict`
/// closes it to make room (only while no request is in flight on it: `busy` counts them).
#[allow(clippy::too_many_arguments)]
async fn connection(
    stream: TcpStream,
    remote: SocketAddr,
    router: Router,
    limits: Limits,
    proxies: TrustedProxies,
    stop: CancellationToken,
    busy: Arc<AtomicUsize>,
    evict: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let router = router.clone();
        // Per request: a proxy's kept-alive connection carries many clients' requests.
        let client = proxies.client(remote, req.headers());
        // From the head to the end of the response body: not idle, not evicted.
        let in_flight = InFlight::start(&busy);
        async move {
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo(client));
            let resp = match tokio::time::timeout(limits.request_timeout, router.oneshot(req)).await
            {
                Ok(Ok(resp)) => resp,
                Ok(Err(never)) => match never {},
                Err(_) => {
                    tracing::debug!(%remote, "HTTP request timed out");
                    timeout_response()
                }
            };
            Ok::<_, Infallible>(resp.map(|body| {
                Body::new(Counted {
                    body,
                    _in_flight: in_flight,
                })
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        // Idle when evicted: dropping the connection closes it.
        _ = evict.cancelled() => {
            tracing::debug!(%remote, "idle HTTP connection closed to make room for a new source");
            return;
        }
    };
    if let Err(error) = result {
        // Timeouts and clients going away are normal on an open network.
        tracing::debug!(%remote, %error, "HTTP connection closed");
    }
}

/// A response body that holds its request's [`InFlight`] until it is sent (or dropped).
struct Counted {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Counted {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

fn timeout_response() -> Response<Body> {
    let mut r = Response::new(Body::from("request timed out\n"));
    *r.status_mut() = StatusCode::REQUEST_TIMEOUT;
    r.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(ip: &str) -> Source {
        Source::of(ip.parse().unwrap())
    }

    fn shares(max: usize, per_source: usize, reserved: usize, few: usize) -> Shares {
        Shares::new(Limits {
            max_connections: max,
            max_per_source: per_source,
            reserved,
            max_per_source_in_reserve: few,
            ..Limits::PUBLIC
        })
    }

    #[test]
    fn slots_are_counted_per_source_and_given_back() {
        let mut m = shares(100, 2, 0, 0);
        let ip = src("192.0.2.1");
        m.take(ip, false).unwrap();
        m.take(ip, false).unwrap();
        assert_eq!(m.take(ip, false), Err(Refusal::Source));
        m.take(src("192.0.2.2"), false).unwrap();
        m.give_back(ip);
        m.take(ip, false).unwrap();
        for s in [ip, ip, src("192.0.2.2")] {
            m.give_back(s);
        }
        assert!(m.by_source.is_empty(), "entries are removed at zero");
        assert_eq!(m.total, 0);
        // Giving back what was never taken changes nothing.
        m.give_back(ip);
        assert_eq!(m.total, 0);
        let mut none = shares(100, 0, 0, 0);
        assert_eq!(none.take(ip, false), Err(Refusal::Source));
        assert!(none.by_source.is_empty());
    }

    #[test]
    fn an_ipv6_slash_64_is_one_source() {
        let mut m = shares(100, 3, 0, 0);
        for a in [
            "2001:db8:1:2::1",
            "2001:db8:1:2::2",
            "2001:db8:1:2:ffff:ffff:ffff:ffff",
        ] {
            m.take(src(a), false).unwrap();
        }
        assert_eq!(
            m.take(src("2001:db8:1:2:abcd::9"), false),
            Err(Refusal::Source)
        );
        m.take(src("2001:db8:1:3::1"), false).unwrap();
    }

    /// 16 sources of 32 connections each took all 512 slots; with the reserve, the sources
    /// that hold many stop at the high-water mark and a new source still gets in.
    #[test]
    fn many_sources_together_leave_the_reserve_to_new_ones() {
        let l = Limits::PUBLIC;
        let mut m = Shares::new(l);
        // One address in each of 16 blocks: the block share does not bind here.
        let attackers: Vec<Source> = (2..=17).map(|i| src(&format!("127.{i}.0.1"))).collect();
        let mut held = 0;
        for a in &attackers {
            for _ in 0..l.max_per_source {
                if m.take(*a, false).is_ok() {
                    held += 1;
                }
            }
        }
        // 12 sources full (384), then 4 each for the last 4.
        assert_eq!(held, 384 + 4 * 4);
        assert!(held < l.max_connections);
        assert_eq!(m.take(attackers[0], false), Err(Refusal::Source));
        assert_eq!(m.take(attackers[15], false), Err(Refusal::Reserve));
        // An honest new source gets in, more than once.
        let honest = src("192.0.2.1");
        for _ in 0..l.max_per_source_in_reserve {
            m.take(honest, false).unwrap();
        }
        assert_eq!(m.take(honest, false), Err(Refusal::Reserve));
        // Filling the reserve takes many more sources; then it is full for everyone.
        let mut i = 0u32;
        while m.total < l.max_connections {
            let s = Source::of(std::net::Ipv4Addr::from(0x0a00_0000 + (i << 8)).into());
            m.take(s, false).unwrap();
            i += 1;
            assert!(i < 10_000);
        }
        assert_eq!(m.take(src("198.51.100.1"), false), Err(Refusal::Full));
        // Below the mark again, a source takes up to its full share.
        for a in &attackers[..5] {
            for _ in 0..l.max_per_source {
                m.give_back(*a);
            }
        }
        assert_eq!(m.total, l.max_connections - 5 * 32);
        for _ in 0..l.max_per_source {
            m.take(attackers[0], false).unwrap();
        }
    }

    /// 48 addresses of one /24 each opening 32 connections took every slot. Now each holds
    /// its part of the block's share, which shrinks as the block's addresses grow, and the
    /// crowd together holds the block's share; other blocks are untouched.
    #[test]
    fn a_crowd_of_addresses_from_one_block_holds_one_block_share() {
        let l = Limits::PUBLIC;
        let mut m = Shares::new(l);
        let crowd: Vec<Source> = (2..=49).map(|i| src(&format!("198.51.100.{i}"))).collect();
        let mut held = vec![0usize; crowd.len()];
        // Each address in turn, then round after round, as a patient attacker would.
        for _ in 0..l.max_per_source {
            for (a, h) in crowd.iter().zip(held.iter_mut()) {
                if m.take(*a, false).is_ok() {
                    *h += 1;
                }
            }
        }
        // Each address's part fell to 64 / 48 = 1 as the crowd grew.
        assert!(held.iter().all(|h| *h == 1), "{held:?}");
        assert_eq!(m.take(crowd[0], false), Err(Refusal::Source));
        // New addresses of the block each get one, until the block holds its share.
        let late: Vec<Source> = (200..216)
            .map(|i| src(&format!("198.51.100.{i}")))
            .collect();
        for a in &late {
            m.take(*a, false).unwrap();
        }
        assert_eq!(
            m.by_block[&Block::of(crowd[0])].connections,
            l.max_per_block
        );
        assert_eq!(m.take(src("198.51.100.250"), false), Err(Refusal::Block));
        // Another block is served up to its full share.
        for _ in 0..l.max_per_source {
            m.take(src("198.51.101.7"), false).unwrap();
        }
        // One address alone in its block still takes its whole per-source share, and a
        // second address of that block brings the part down to half the block share.
        let one = src("203.0.113.1");
        for _ in 0..l.max_per_source {
            m.take(one, false).unwrap();
        }
        assert_eq!(m.take(one, false), Err(Refusal::Source));
        let two = src("203.0.113.2");
        for _ in 0..l.max_per_block / 2 {
            m.take(two, false).unwrap();
        }
        assert_eq!(m.take(two, false), Err(Refusal::Source));
        assert_eq!(m.take(src("203.0.113.3"), false), Err(Refusal::Block));
        // Everything given back leaves no entry behind.
        for (a, h) in crowd.iter().zip(&held) {
            for _ in 0..*h {
                m.give_back(*a);
            }
        }
        for a in &late {
            m.give_back(*a);
        }
        for (s, n) in [(src("198.51.101.7"), 32), (one, 32), (two, 32)] {
            for _ in 0..n {
                m.give_back(s);
            }
        }
        assert_eq!(m.total, 0);
        assert!(m.by_source.is_empty() && m.by_block.is_empty());
    }

    #[test]
    fn an_ipv6_slash_48_is_one_block() {
        let mut m = shares(1000, 32, 0, 0);
        // 64 /64s of one /48 (a customer's allocation): one block share between them.
        let mut held = 0;
        for i in 0..64u16 {
            let s = src(&format!("2001:db8:1:{i:x}::1"));
            while m.take(s, false).is_ok() {
                held += 1;
            }
        }
        assert_eq!(held, Limits::PUBLIC.max_per_block);
        m.take(src("2001:db8:2::1"), false).unwrap();
    }

    /// A trusted proxy carries many clients' connections: it is held to the connection cap
    /// only, not to a source's share or the reserve; other sources still are.
    #[test]
    fn a_trusted_proxy_is_held_to_the_connection_cap_only() {
        let mut m = shares(10, 2, 4, 1);
        let proxy = src("127.0.0.1");
        for _ in 0..8 {
            m.take(proxy, true).unwrap();
        }
        // The reserve is reached: a source holding one is refused, a new one gets in.
        let other = src("192.0.2.1");
        m.take(other, false).unwrap();
        assert_eq!(m.take(other, false), Err(Refusal::Reserve));
        m.take(proxy, true).unwrap();
        assert_eq!(m.take(proxy, true), Err(Refusal::Full));
        assert_eq!(m.take(src("192.0.2.2"), false), Err(Refusal::Full));
        for _ in 0..9 {
            m.give_back(proxy);
        }
        m.give_back(other);
        assert_eq!(m.total, 0);
        assert!(m.by_source.is_empty() && m.by_block.is_empty());
    }
}
