//! `agentnet up`: the node daemon. It owns the node key, the RocksDB store, the libp2p network,
//! the publisher and the two HTTP listeners, and tears them down in a fixed order.
//!
//! The two listeners (DESIGN.md section 3): the public one (`--http`) serves the well-known
//! files; the admin API has its own (`--admin`), which must be a loopback address and by default
//! takes a free port on 127.0.0.1. `node.json` names both, and `admin.token` holds the admin
//! credential, written anew at every start ([`crate::data_dir::token`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentnet_did::resolver::Options as ResolverOptions;
use agentnet_discovery::net;
use agentnet_discovery::store::{Limits as StoreLimits, Store};
use libp2p::multiaddr::Protocol;
use libp2p::Multiaddr;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::AdminState;
use crate::config::{ConfigError, FileConfig};
use crate::data_dir::token::TokenError;
use crate::data_dir::NodeFileError;
pub use crate::data_dir::{NodeFile, NODE_FILE};
pub use crate::db::STORE_DIR;
use crate::hosted::tasks::TaskDb;
use crate::hosted::{self, Hosted};
use crate::http::server::Limits as HttpLimits;
pub use start::start;

mod start;
/// `agentnet up --max-memory-mib`: new peer connections are refused above 2 GiB resident. An
/// idle node is about 25 MiB, a connection about 115 KiB (`conncost`, docs/BENCHMARKS.md):
/// the bound is for what no other limit foresaw, not for normal operation.
pub const DEFAULT_MAX_MEMORY_MIB: u64 = 2048;
/// How long the HTTP server may take to finish in-flight requests at shutdown.
const HTTP_DRAIN: Duration = Duration::from_secs(5);
/// How long the network task may take to stop.
const NET_STOP: Duration = Duration::from_secs(5);
/// How long to wait for the swarm to report its listen addresses at start.
const LISTEN_WAIT: Duration = Duration::from_secs(10);

/// What `agentnet up` was asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The data directory.
    pub data_dir: PathBuf,
    /// libp2p listen addresses; empty: [`net::Config`]'s defaults.
    pub listen: Vec<Multiaddr>,
    /// Peers to dial at start.
    pub bootstrap: Vec<Multiaddr>,
    /// Where the public HTTP listener (well-known files) binds.
    pub http: SocketAddr,
    /// Where the admin listener binds; must be a loopback address.
    pub admin: SocketAddr,
    /// Bounds of the public listener.
    pub http_limits: HttpLimits,
    /// Bounds of the admin listener.
    pub admin_limits: HttpLimits,
    /// What the advert store accepts from other nodes (byte caps, free-disk watermark).
    pub store_limits: StoreLimits,
    /// `net::Config::max_process_memory`: new peer connections are refused while the process's
    /// resident memory is above it.
    pub max_memory: Option<usize>,
    /// mDNS on the LAN.
    pub mdns: bool,
    /// How clients reach the public listener (`http://host:port`, no path); default
    /// `http://<bound address>`. Hosted agents' card URLs and DID signature checks use it.
    pub public_url: Option<String>,
    /// The hosted agents, task retention and verifier bounds (`agentnet up --config`).
    pub hosted: FileConfig,
    /// How the node resolves did:web and did:wba (advert validation and the hosted agents'
    /// callers); default: public HTTPS only. Tests and local testnets allow loopback here.
    pub resolver: ResolverOptions,
    /// A local network (`agentnet up --local`): did:web/did:wba resolve on loopback over plain
    /// http, `/mcp` calls agents on loopback and private addresses (unless `[mcp]
    /// allow_private = false`), and `node.json` says so for the commands run on the data
    /// directory.
    pub local: bool,
}

impl Options {
    /// Options for a local node in `data_dir` (tests, embedding): loopback listeners on free
    /// ports (HTTP, admin, libp2p TCP), no mDNS, no hosted agents.
    pub fn local(data_dir: PathBuf) -> Options {
        Options {
            data_dir,
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().expect("a literal multiaddr")],
            bootstrap: vec![],
            http: "127.0.0.1:0".parse().expect("a literal address"),
            admin: "127.0.0.1:0".parse().expect("a literal address"),
            http_limits: HttpLimits::PUBLIC,
            admin_limits: HttpLimits::ADMIN,
            store_limits: StoreLimits::default(),
            // Tests run several nodes in one process: a process-wide bound would be shared.
            max_memory: None,
            mdns: false,
            public_url: None,
            hosted: FileConfig::default(),
            resolver: ResolverOptions::default(),
            local: false,
        }
    }
}

/// Why the daemon could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `[mcp] delegation` could not be read, or is not held by the node's DID.
    #[error("[mcp] delegation: {0}")]
    McpDelegation(String),
    /// `[trust]` could not be read (its flag rules, its policy).
    #[error("[trust] {0}; fix it or remove the setting (`agentnet config check` checks it)")]
    Trust(String),
    /// The node key could not be loaded or created.
    #[error("node key {}: {source}", path.display())]
    Key {
        /// The key file.
        path: PathBuf,
        /// Why.
        source: agentnet_did::key::KeyError,
    },
    /// Another node holds the data directory (RocksDB's lock), the pid from its `node.json`.
    #[error(
        "a node, pid {pid}, is already running on {}; stop it, or give this one another --data-dir",
        dir.display()
    )]
    AlreadyRunning {
        /// The running node's process id.
        pid: u32,
        /// The data directory.
        dir: PathBuf,
    },
    /// The store could not be opened.
    #[error("opening the store: {0}")]
    Store(#[from] agentnet_discovery::store::StoreError),
    /// A blocking task failed (panicked).
    #[error("{what}: {source}")]
    Task {
        /// What it was doing.
        what: &'static str,
        /// Why.
        source: tokio::task::JoinError,
    },
    /// The audit log could not be opened.
    #[error("audit log: {0}")]
    Audit(String),
    /// The DID resolver could not be built.
    #[error("DID resolver: {0}")]
    Resolver(#[source] agentnet_did::web::BuildError),
    /// The network did not start.
    #[error(transparent)]
    Net(#[from] net::Error),
    /// The admin token could not be written.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The HTTP address could not be bound.
    #[error("binding an HTTP listener to {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP server failed.
    #[error("HTTP server: {0}")]
    Http(std::io::Error),
    /// The node's own card could not be signed.
    #[error("signing the node's card: {0}")]
    Card(#[from] agentnet_did::card::CardSignatureError),
    /// `node.json` could not be read or written.
    #[error("{}: {source}", path.display())]
    NodeFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Installing the signal handlers failed.
    #[error("installing signal handlers: {0}")]
    Signal(std::io::Error),
    /// The task store could not be opened or recovered.
    #[error("A2A task store: {0}")]
    Tasks(#[from] agentnet_a2a::store::StoreError),
    /// The configuration cannot be used (the file, a flag, a hosted agent).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A hosted agent could not be built (its key, its card, its working directory).
    #[error(transparent)]
    Agent(#[from] hosted::AgentError),
}

impl From<NodeFileError> for Error {
    fn from(e: NodeFileError) -> Self {
        Error::NodeFile {
            path: e.path,
            source: e.source,
        }
    }
}

/// How often expired tasks are swept: often, so that each sweep is short.
const TASK_SWEEP: Duration = Duration::from_secs(10);
/// Tasks deleted under one hold of the store's count lock; a sweep takes as many batches as it
/// needs to delete every expired task ([`TaskDb::sweep_due`]).
const TASK_SWEEP_BATCH: usize = 128;
/// The pause between two batches, for the writers waiting on the lock.
const TASK_SWEEP_PAUSE: Duration = Duration::from_millis(10);
/// How often the node gossips its own endorsements again.
const ENDORSE_REANNOUNCE: Duration = Duration::from_secs(600);

/// `addr` with `/p2p/<peer>` appended, unless it already names a peer.
fn with_peer(addr: &Multiaddr, peer: libp2p::PeerId) -> Multiaddr {
    if addr.iter().any(|p| matches!(p, Protocol::P2p(_))) {
        addr.clone()
    } else {
        addr.clone().with(Protocol::P2p(peer))
    }
}

/// Wait for Ctrl-C or SIGTERM.
pub(crate) async fn terminated() -> Result<(), Error> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(Error::Signal)?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.map_err(Error::Signal),
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.map_err(Error::Signal)
    }
}

/// Bind `addr`; the bound address (the port, if `addr` asked for port 0).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), Error> {
    let err = |source| Error::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    Ok((listener, bound))
}

/// Run the node until Ctrl-C or SIGTERM.
pub async fn run(opts: Options) -> Result<(), Error> {
    start(opts).await?.wait().await
}

/// A started node. It owns every task it started (a [`TaskTracker`], one [`CancellationToken`]
/// with a child per task): [`Running::shutdown`] stops them in a fixed order; dropping it
/// without one cancels them all, so that nothing outlives it.
pub struct Running {
    data_dir: PathBuf,
    pid: u32,
    /// The parent of every task's token.
    stop: CancellationToken,
    tracker: TaskTracker,
    /// Taken by [`Running::shutdown`].
    tasks: Option<Tasks>,
    store: Store,
    hosted: Vec<Hosted>,
    task_db: Arc<TaskDb>,
    admin: AdminState,
    public_url: String,
    created_key: Option<PathBuf>,
    /// What node.json says.
    pub info: NodeFile,
}

/// The node's tasks, each with the token that stops it (a child of [`Running`]'s).
struct Tasks {
    http_stop: CancellationToken,
    http: JoinHandle<std::io::Result<()>>,
    admin: JoinHandle<std::io::Result<()>>,
    publisher_stop: CancellationToken,
    publisher: JoinHandle<()>,
    net_stop: CancellationToken,
    net: JoinHandle<()>,
    sweep_stop: CancellationToken,
    sweep: JoinHandle<()>,
}

impl Drop for Running {
    /// Without a [`Running::shutdown`]: every task is told to stop (the HTTP servers, the
    /// publisher, the sweep, the network); nothing waits for them.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").field("info", &self.info).finish()
    }
}

impl Running {
    /// The hosted agents.
    pub fn hosted(&self) -> &[Hosted] {
        &self.hosted
    }

    /// What the admin API (and `/mcp`) work with: the in-process [`crate::network::directory::Directory`].
    pub fn admin_state(&self) -> &AdminState {
        &self.admin
    }

    /// The task store.
    pub fn task_db(&self) -> &Arc<TaskDb> {
        &self.task_db
    }

    /// How clients reach the public listener (`--public-url`, else `http://<bound address>`).
    pub fn public_url(&self) -> &str {
        &self.public_url
    }

    /// The data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// The node key file, if this start created it.
    pub fn created_key(&self) -> Option<&std::path::Path> {
        self.created_key.as_deref()
    }

    /// Serve until Ctrl-C or SIGTERM (or an HTTP listener fails), then shut down.
    pub async fn wait(self) -> Result<(), Error> {
        let stop = self.stop_requested().await;
        self.shutdown().await;
        stop
    }

    /// Resolves when the node should stop: SIGINT or SIGTERM (`Ok`), or an HTTP listener that
    /// stopped by itself or a failed signal handler (`Err`, logged). Stops nothing: then
    /// [`Running::shutdown`].
    pub async fn stop_requested(&self) -> Result<(), Error> {
        // A failed signal handler must not take the node down with it silently: stop cleanly.
        let stop = tokio::select! {
            r = terminated() => r,
            r = self.http_task_failed() => r,
        };
        if let Err(error) = &stop {
            tracing::error!(%error, "stopping");
        }
        stop
    }

    /// Resolves if an HTTP listener stops by itself (they only should at shutdown).
    async fn http_task_failed(&self) -> Result<(), Error> {
        let Some(t) = &self.tasks else {
            return Ok(());
        };
        // Poll the tasks' completion without consuming the handles.
        loop {
            if t.http.is_finished() || t.admin.is_finished() {
                return Err(Error::Http(std::io::Error::other(
                    "the HTTP server stopped unexpectedly",
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Tear down in a fixed order.
    pub async fn shutdown(mut self) {
        let Some(t) = self.tasks.take() else {
            return;
        };
        // 1. Stop taking requests: the HTTP server first, so that nothing new reaches the
        //    publisher or the network while they stop. In-flight requests get HTTP_DRAIN.
        t.http_stop.cancel();
        let both = async { tokio::join!(t.http, t.admin) };
        match tokio::time::timeout(HTTP_DRAIN, both).await {
            Ok((a, b)) => {
                for r in [a, b] {
                    match r {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => tracing::warn!(%error, "HTTP server"),
                        Err(error) => tracing::warn!(%error, "HTTP server task"),
                    }
                }
            }
            Err(_) => tracing::warn!("HTTP server did not drain in time"),
        }
        // Running turns stop; their tasks stay as stored (marked failed at the next start).
        for h in &self.hosted {
            h.server.engine().shutdown();
        }
        t.sweep_stop.cancel();
        let _ = t.sweep.await;
        // 2. Stop re-announcing: it uses the network.
        t.publisher_stop.cancel();
        let _ = t.publisher.await;
        // 3. Stop the network: the swarm task owns the connections and the last handles on the
        //    store besides ours.
        t.net_stop.cancel();
        if tokio::time::timeout(NET_STOP, t.net).await.is_err() {
            tracing::warn!("network task did not stop in time");
        }
        // Every task of the tracker has ended (or, past its timeout, been told to).
        self.stop.cancel();
        let _ = tokio::time::timeout(NET_STOP, self.tracker.wait()).await;
        // 4. The store: flush memtables and sync the WAL; RocksDB closes when the last handle
        //    (dropped with the tasks above and with us) goes.
        let store = self.store.clone();
        if let Ok(Err(error)) = tokio::task::spawn_blocking(move || store.flush()).await {
            tracing::warn!(%error, "flushing the store");
        }
        // 5. Tell the other commands the node is gone.
        NodeFile::remove_if_ours(&self.data_dir, self.pid);
        tracing::info!("node stopped");
    }
}
