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
//! - **Per-client-IP cap** ([`Limits::max_per_ip`]): the same, per remote address, so one
//!   client cannot take every slot. Loopback counts like any other address.
//! - **Graceful shutdown**: on cancel the server stops accepting, asks every connection to
//!   finish its in-flight request and close, and returns when all have closed (the caller
//!   bounds the wait).
//!
//! Hand-written rather than `hyper_util::server::graceful`/`conn::auto`: those need hyper-util
//! features nothing else in the workspace enables (rebuilding reqwest and the did crate), and the
//! accept loop with its caps is needed anyway.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// What one listener lets its clients cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The request head must arrive within this.
    pub header_read_timeout: Duration,
    /// The handler (body read included) must answer within this.
    pub request_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections from one IP address at most.
    pub max_per_ip: usize,
}

impl Limits {
    /// The public listener (well-known files, later A2A). 10 s is plenty for a request head
    /// from any real client and short enough that a slow-loris attacker must keep opening
    /// connections; 512 connections keep the node well under the common 1024 descriptor soft
    /// limit next to libp2p and RocksDB; 32 per address leaves room for a NAT of several
    /// clients while one address alone cannot take more than 1/16 of the slots.
    pub const PUBLIC: Limits = Limits {
        header_read_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(30),
        max_connections: 512,
        max_per_ip: 32,
    };

    /// The admin listener: loopback and authenticated, used by one CLI call at a time. The
    /// request timeout is above the CLI's 60 s, since a discovery may wait for DHT queries.
    pub const ADMIN: Limits = Limits {
        header_read_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(90),
        max_connections: 64,
        max_per_ip: 64,
    };
}

/// The fixed answer at a cap, written without blocking before the connection is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: 20\r\nConnection: close\r\n\r\nserver at capacity\r\n";

/// Open connections per remote address; an entry lives while it has a connection, so the map
/// never holds more than [`Limits::max_connections`] entries.
#[derive(Debug, Default)]
struct PerIp(Mutex<HashMap<IpAddr, usize>>);

/// One connection counted in [`PerIp`]; uncounted on drop.
struct IpSlot {
    map: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<IpSlot> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(ip).or_default();
        if *n >= max {
            if *n == 0 {
                m.remove(&ip);
            }
            return None;
        }
        *n += 1;
        Some(IpSlot {
            map: self.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut m = self.map.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// Serve `router` on the already bound `listener` until `shutdown`; in-flight requests finish,
/// then every connection closes. Each request carries [`ConnectInfo<SocketAddr>`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    // At least one slot; at most what `acquire_many` can count.
    let max = limits.max_connections.clamp(1, u32::MAX as usize);
    let slots = Arc::new(Semaphore::new(max));
    let per_ip = Arc::new(PerIp::default());
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%remote, max, "HTTP connection cap reached; refusing");
            refuse(stream);
            continue;
        };
        let Some(ip_slot) = per_ip.take(remote.ip(), limits.max_per_ip) else {
            tracing::debug!(%remote, "per-address HTTP connection cap reached; refusing");
            refuse(stream);
            continue;
        };
        let router = router.clone();
        let stop = conns_stop.clone();
        tokio::spawn(async move {
            connection(stream, remote, router, limits, stop).await;
            drop(ip_slot);
            drop(slot);
        });
    }
    drop(listener);
    // Every connection finishes its request and closes; each returns its slot.
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

async fn connection(
    stream: TcpStream,
    remote: SocketAddr,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let router = router.clone();
        async move {
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo(remote));
            let resp = match tokio::time::timeout(limits.request_timeout, router.oneshot(req)).await
            {
                Ok(Ok(resp)) => resp,
                Ok(Err(never)) => match never {},
                Err(_) => {
                    tracing::debug!(%remote, "HTTP request timed out");
                    timeout_response()
                }
            };
            Ok::<_, Infallible>(resp)
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
    };
    if let Err(error) = result {
        // Timeouts and clients going away are normal on an open network.
        tracing::debug!(%remote, %error, "HTTP connection closed");
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

    #[test]
    fn per_ip_slots_are_counted_and_returned() {
        let m = Arc::new(PerIp::default());
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let a = m.take(ip, 2).unwrap();
        let b = m.take(ip, 2).unwrap();
        assert!(m.take(ip, 2).is_none());
        let other = m.take("192.0.2.2".parse().unwrap(), 2).unwrap();
        drop(a);
        let c = m.take(ip, 2).unwrap();
        drop((b, c, other));
        assert!(
            m.0.lock().unwrap().is_empty(),
            "entries are removed at zero"
        );
        assert!(m.take(ip, 0).is_none());
        assert!(m.0.lock().unwrap().is_empty());
    }
}
