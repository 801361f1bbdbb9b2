//! Links with latency and bandwidth for the memory transport: what a simulation puts between its
//! nodes so that they are not all zero milliseconds apart.
//!
//! A node's dials over [`TransportKind::Memory`](super::TransportKind::Memory) go through the
//! [`LinkModel`] of its [`Config::links`](super::Config::links), asked with the port it dials
//! (`/memory/<port>`). The dialing end carries the whole link: it delays what it sends and what
//! it receives by the one-way latency, and paces each direction at the bandwidth (a chunk leaves
//! when the chunks before it have, plus its size over the bandwidth). The listening end is plain,
//! so the model is asked once per connection, by the node that knows both ends.
//!
//! A model that answers `None` makes the dial fail and, asked again for each chunk of a live
//! connection, closes that connection: this is how a partition cuts the network, and a model
//! that answers again heals it (the nodes dial again; nothing reconnects by itself).
//!
//! Written here, not taken from a crate: libp2p has no delaying transport (its tests use none)
//! and a simulator's links are a few lines of timed copying between two pipes.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use libp2p::core::ConnectedPoint;
use libp2p::multiaddr::Protocol;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt as _, TokioAsyncWriteCompatExt as _};

/// One direction of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// One-way delay.
    pub latency: Duration,
    /// Bytes per second, or unlimited.
    pub bytes_per_sec: Option<u64>,
}

/// The links of one node, by the memory port it dials. `None`: unreachable (a partition).
pub trait LinkModel: Send + Sync + fmt::Debug {
    /// The link to the node listening on `/memory/<to>`.
    fn link(&self, to: u64) -> Option<Link>;
}

/// A node's link model, shared with the connections it dialed.
pub type Links = Arc<dyn LinkModel>;

/// Bytes one chunk of a pump carries at most (a read's buffer).
const CHUNK: usize = 16 * 1024;
/// Chunks in flight per direction: at most 4 MiB held per direction of a connection.
const IN_FLIGHT: usize = 256;
/// The pipe between the connection's user and the pumps.
const PIPE: usize = 64 * 1024;

/// libp2p's memory transport with these links, upgraded as the node's is (Noise, Yamux): for
/// the node itself and for anything a simulation sets beside it (a bare gossipsub network
/// measured over the same links).
pub fn memory_transport(
    key: &libp2p::identity::Keypair,
    links: Option<Links>,
) -> Result<
    libp2p::core::transport::Boxed<(libp2p::PeerId, libp2p::core::muxing::StreamMuxerBox)>,
    libp2p::noise::Error,
> {
    use libp2p::core::upgrade::Version;
    use libp2p::Transport as _;
    Ok(libp2p::core::transport::MemoryTransport::default()
        .and_then(move |chan, endpoint| wrap(links.clone(), chan, endpoint))
        .upgrade(Version::V1)
        .authenticate(libp2p::noise::Config::new(key)?)
        .multiplex(libp2p::yamux::Config::default())
        .boxed())
}

/// The stream a dialed connection gets: either end of [`delayed`] or the plain channel.
pub(super) type Stream<T> = futures::future::Either<Compat<DuplexStream>, T>;

/// For `Transport::and_then`: wraps a dialed memory connection in its link; a listener's stays
/// plain.
async fn wrap<T>(links: Option<Links>, inner: T, endpoint: ConnectedPoint) -> io::Result<Stream<T>>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (Some(links), ConnectedPoint::Dialer { address, .. }) = (links, endpoint) else {
        return Ok(futures::future::Either::Right(inner));
    };
    let Some(to) = address.iter().find_map(|p| match p {
        Protocol::Memory(port) => Some(port),
        _ => None,
    }) else {
        return Ok(futures::future::Either::Right(inner));
    };
    if links.link(to).is_none() {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("/memory/{to} is cut off (partition)"),
        ));
    }
    Ok(futures::future::Either::Left(delayed(inner, links, to)))
}

/// `inner` behind a pair of pumps that delay and pace each direction by `links.link(to)`.
fn delayed<T>(inner: T, links: Links, to: u64) -> Compat<DuplexStream>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (ours, theirs) = tokio::io::duplex(PIPE);
    let (inner_r, inner_w) = inner.split();
    let (theirs_r, theirs_w) = tokio::io::split(theirs);
    tokio::spawn(pump(theirs_r.compat(), inner_w, links.clone(), to));
    tokio::spawn(pump(inner_r, theirs_w.compat_write(), links, to));
    ours.compat()
}

/// Copies `r` to `w`, each chunk written when the link has carried it. Ends (closing `w`) at
/// the end of `r`, on an error either side, or when the link is cut.
async fn pump<R, W>(mut r: R, mut w: W, links: Links, to: u64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(IN_FLIGHT);
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        let mut free_at = tokio::time::Instant::now();
        loop {
            let n = match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let Some(link) = links.link(to) else { break };
            let now = tokio::time::Instant::now();
            let send = link.bytes_per_sec.map_or(Duration::ZERO, |bps| {
                Duration::from_secs_f64(n as f64 / bps.max(1) as f64)
            });
            free_at = free_at.max(now) + send;
            if tx
                .send((free_at + link.latency, buf[..n].to_vec()))
                .await
                .is_err()
            {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if w.write_all(&chunk).await.is_err() || w.flush().await.is_err() {
                return;
            }
        }
        let _ = w.close().await;
    };
    futures::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Debug)]
    struct Fixed(Link, AtomicBool);

    impl LinkModel for Fixed {
        fn link(&self, _to: u64) -> Option<Link> {
            (!self.1.load(Ordering::Relaxed)).then_some(self.0)
        }
    }

    fn pair() -> (Compat<DuplexStream>, Compat<DuplexStream>) {
        let (a, b) = tokio::io::duplex(PIPE);
        (a.compat(), b.compat())
    }

    #[tokio::test(start_paused = true)]
    async fn each_direction_waits_the_latency_and_the_bandwidth() {
        let model = Arc::new(Fixed(
            Link {
                latency: Duration::from_millis(100),
                bytes_per_sec: Some(10_000),
            },
            AtomicBool::new(false),
        ));
        let (near, mut far) = pair();
        let mut ours = delayed(near, model, 1);
        let t0 = tokio::time::Instant::now();
        ours.write_all(&[7u8; 1000]).await.unwrap();
        ours.flush().await.unwrap();
        let mut got = vec![0u8; 1000];
        far.read_exact(&mut got).await.unwrap();
        // 1000 bytes at 10 kB/s: 100 ms on the wire, then 100 ms of latency.
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < Duration::from_millis(210), "{took:?}");
        assert_eq!(got, vec![7u8; 1000]);

        let t1 = tokio::time::Instant::now();
        far.write_all(b"back").await.unwrap();
        far.flush().await.unwrap();
        let mut back = [0u8; 4];
        ours.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"back");
        let took = t1.elapsed();
        assert!(took >= Duration::from_millis(100), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_link_closes_the_connection() {
        let model = Arc::new(Fixed(
            Link {
                latency: Duration::from_millis(10),
                bytes_per_sec: None,
            },
            AtomicBool::new(false),
        ));
        let (near, mut far) = pair();
        let mut ours = delayed(near, model.clone(), 1);
        model.1.store(true, Ordering::Relaxed);
        ours.write_all(b"lost").await.unwrap();
        ours.flush().await.unwrap();
        let mut rest = Vec::new();
        // The far end sees the connection end, and none of the bytes sent after the cut.
        far.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "{rest:?}");
    }
}
