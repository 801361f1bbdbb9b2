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
use agentnet_did::{Resolver, SecretKey};
use agentnet_discovery::advert::{Limits, Validator};
use agentnet_discovery::net::{self, TransportKind};
use agentnet_discovery::store::{Limits as StoreLimits, Store, StoreError};
use libp2p::multiaddr::Protocol;
use libp2p::Multiaddr;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::hosted::a2a_auth::DidAuthenticator;
use crate::admin::{AdminState, Guard};
use crate::data_dir::token::{Token, TokenError};
use crate::data_dir::{AgentKeys, NodeFileError};

use crate::config::{self, ConfigError, FileConfig};
pub use crate::data_dir::{NodeFile, NODE_FILE};
use crate::hosted::{self, Hosted};
use crate::http::{self, WellKnown};
use crate::identity::Identity;
use crate::network::publisher::{self, Publisher};
use crate::http::server::{self, Limits as HttpLimits};
use crate::hosted::tasks::TaskDb;

pub use crate::db::STORE_DIR;
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

/// Check the options, start everything and write `node.json`. Nothing is printed: the caller
/// reports what [`Running`] holds (`agentnet up` prints its banner).
pub async fn start(opts: Options) -> Result<Running, Error> {
    // Every check of what the user gave, before anything starts.
    config::check_admin(opts.admin)?;
    let public_url = opts
        .public_url
        .as_deref()
        .map(config::check_public_url)
        .transpose()?;
    opts.hosted.check()?;
    let trusted_proxies = opts.hosted.http.trusted_proxies()?;
    std::fs::create_dir_all(&opts.data_dir).map_err(|source| Error::NodeFile {
        path: opts.data_dir.clone(),
        source,
    })?;
    let key_path = crate::data_dir::key_file(&opts.data_dir);
    let (key, created) = SecretKey::load_or_create(&key_path).map_err(|source| Error::Key {
        path: key_path.clone(),
        source,
    })?;
    let did = key.did_key();

    let store_path = opts.data_dir.join(STORE_DIR);
    let store_limits = opts.store_limits.clone();
    let opened = tokio::task::spawn_blocking(move || crate::db::open(&store_path, store_limits))
        .await
        .map_err(|source| Error::Task {
            what: "opening the store",
            source,
        })?;
    let store = match opened {
        Ok(store) => store,
        // Another node holds the store: name it when its node.json says.
        Err(e @ StoreError::Locked { .. }) => {
            return Err(match crate::data_dir::NodeFile::read(&opts.data_dir) {
                Ok(running) => Error::AlreadyRunning {
                    pid: running.pid,
                    dir: opts.data_dir.clone(),
                },
                Err(_) => e.into(),
            })
        }
        Err(e) => return Err(e.into()),
    };
    let retention = opts
        .hosted
        .tasks
        .retention(opts.store_limits.min_free_bytes);
    let task_db = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            let db = TaskDb::open(&store, retention)?;
            if db.quarantined() > 0 {
                tracing::warn!(
                    quarantined = db.quarantined(),
                    "unreadable task records were quarantined (see earlier warnings)"
                );
            }
            Ok::<_, agentnet_a2a::store::StoreError>(db)
        })
        .await
        .map_err(|source| Error::Task {
            what: "opening the task store",
            source,
        })??
    };
    let mut resolver_opts = opts.resolver.clone();
    if opts.local {
        resolver_opts.http.allow_loopback = true;
        resolver_opts.http.allow_http_loopback = true;
    }
    let resolver = Resolver::new(resolver_opts).map_err(Error::Resolver)?;
    let limits = Limits::default();
    let max_ttl = limits.max_ttl;
    let validator = Validator::new(resolver.clone(), limits);

    // What can still fail is done before any task starts: the listeners are bound (not served
    // yet), the hosted agents built. From the network on, `stop` ends every task if a later
    // step fails (its drop guard) or when the `Running` is dropped.
    let (listener, http_addr) = bind(opts.http).await?;
    let (admin_listener, admin_addr) = bind(opts.admin).await?;
    let token = Token::create(&opts.data_dir)?;
    let well_known = WellKnown::new(&key)?;

    // The hosted agents, on the public listener.
    let public_base = public_url.unwrap_or_else(|| format!("http://{http_addr}"));
    let auth_cfg = opts.hosted.auth.verifier(public_base.clone());
    let mcp_resolver = resolver.clone();
    let authority = crate::hosted::authority::Shared::new(resolver.clone());
    let mcp_resolver_audit = resolver.clone();
    let authenticator = Arc::new(DidAuthenticator::new(resolver, auth_cfg));
    // The audit log of the receipts this node's callers (CLI, MCP, proxy agents) get.
    let audit_log = crate::audit::AuditLog::open(
        &store,
        opts.hosted.audit.limits(),
        Some(SecretKey::from_seed(&key.seed())),
    )
    .map_err(|e| Error::Audit(e.to_string()))?;
    let audit = crate::audit::Recorder::Local(audit_log.clone(), mcp_resolver.clone());
    // The operator's card pins: discovery shows agents against them, proxies check their
    // upstreams' cards.
    let pins = Arc::new(crate::trust::pins::Pins::open(&store)?);
    let hosted = hosted::build(
        &opts.hosted.agent,
        &public_base,
        &opts.data_dir,
        &task_db,
        authenticator,
        &authority,
        hosted::Shared {
            audit: Some(audit.clone()),
            pins: Some(pins.clone()),
        },
    )?;
    // Before anything is served: tasks the last run left working fail, signed by their agent.
    let failed = {
        let db = task_db.clone();
        let sealers: Vec<_> = hosted
            .iter()
            .map(|h| (h.id.clone(), h.sealer.clone()))
            .collect();
        tokio::task::spawn_blocking(move || hosted::recover(&db, &sealers))
            .await
            .map_err(|source| Error::Task {
                what: "failing the tasks left working",
                source,
            })??
    };
    if failed > 0 {
        tracing::warn!(failed, "tasks left working by the last run marked failed");
    }
    let mut cfg = net::Config {
        bootstrap: opts.bootstrap.clone(),
        mdns: opts.mdns,
        transport: TransportKind::Network,
        max_process_memory: opts.max_memory,
        ..Default::default()
    };
    if !opts.listen.is_empty() {
        cfg.listen = opts.listen.clone();
    }
    // `--local`: the node's peers on this machine's loopback are expected (a testnet), not
    // one operator's Sybils. Gossipsub's peer score counts peers that share an address
    // (colocation: more than 10 and each costs the square of the surplus), so past a dozen
    // loopback peers it stopped gossiping to any of them (`testnet --nodes 20` found its
    // agents through the DHT only and never saw an endorsement). Loopback only: peers on
    // private addresses, which `--local` also allows for agents, are still counted.
    if opts.local {
        cfg.colocation_whitelist = vec![
            std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::Ipv6Addr::LOCALHOST.into(),
        ];
    }
    let expect_listen = !cfg.listen.is_empty();
    let stop = CancellationToken::new();
    let stop_on_error = stop.clone().drop_guard();
    let tracker = TaskTracker::new();
    let net_stop = stop.child_token();
    let (client, net_task) =
        net::spawn(&key, cfg, store.clone(), validator, net_stop.clone()).await?;
    let peer_id = client.peer_id();

    let publisher = Arc::new(
        Publisher::new(client.clone(), store.clone(), max_ttl)
            .keeping_in(store.family(publisher::CF_PUBLISHED)?),
    );
    let publisher_stop = stop.child_token();
    let publisher_task = {
        let p = publisher.clone();
        let stop = publisher_stop.clone();
        tracker.spawn(async move { p.run(stop).await })
    };

    for h in hosted.iter().filter(|h| h.publish) {
        let id = Identity::did_key(SecretKey::from_seed(&h.key.seed()));
        if let Err(error) = publisher.publish(&h.card, id, h.ttl.min(max_ttl)).await {
            tracing::warn!(agent = %h.id, %error, "publishing a hosted agent");
        }
    }
    // What `agentnet publish` asked for, again, with fresh seqs, until `agentnet unpublish`.
    // An entry that cannot be published (its key gone, its card refused) is logged and kept.
    let saved = {
        let p = publisher.clone();
        tokio::task::spawn_blocking(move || p.saved())
            .await
            .map_err(|source| Error::Task {
                what: "reading the kept publications",
                source,
            })?
    };
    match saved {
        Ok(saved) => {
            let agent_keys = AgentKeys::new(&opts.data_dir);
            for s in saved {
                let id = if s.did == did.as_str() {
                    Ok(Identity::did_key(SecretKey::from_seed(&key.seed())))
                } else {
                    let keys = agent_keys.clone();
                    let d = s.did.clone();
                    match tokio::task::spawn_blocking(move || keys.load_identity(&d)).await {
                        Ok(r) => r.map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                };
                let id = match id {
                    Ok(id) => id,
                    Err(error) => {
                        tracing::warn!(%error, did = %s.did, "publishing a kept publication again");
                        continue;
                    }
                };
                if let Err(error) = publisher.publish(&s.card, id, s.ttl.min(max_ttl)).await {
                    tracing::warn!(%error, did = %s.did, "publishing a kept publication again");
                }
            }
        }
        Err(error) => tracing::warn!(%error, "reading the kept publications"),
    }
    let sweep_stop = stop.child_token();
    let sweep_task = {
        let db = task_db.clone();
        let stop = sweep_stop.clone();
        tracker.spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(TASK_SWEEP) => {}
                }
                let db = db.clone();
                let go_on = stop.clone();
                match tokio::task::spawn_blocking(move || {
                    db.sweep_due(
                        chrono::Utc::now(),
                        TASK_SWEEP_BATCH,
                        TASK_SWEEP_PAUSE,
                        || !go_on.is_cancelled(),
                    )
                })
                .await
                {
                    Ok(Ok(0)) => {}
                    Ok(Ok(n)) => tracing::debug!(n, "swept expired A2A tasks"),
                    Ok(Err(error)) => tracing::warn!(%error, "sweeping A2A tasks"),
                    Err(error) => tracing::warn!(%error, "sweeping A2A tasks"),
                }
            }
        })
    };
    let flag_rules = match &opts.hosted.trust.flag_rules {
        Some(path) => crate::trust::flags::Rules::with_file(path)
            .map_err(|e| Error::Trust(format!("flag_rules: {e}")))?,
        None => crate::trust::flags::Rules::default(),
    };
    let flag_rules = match &opts.hosted.trust.classifier {
        Some(c) => flag_rules.with_classifier(
            crate::trust::flags::classifier::Classifier::new(c.clone())
                .map_err(|e| Error::Trust(format!("classifier: {e}")))?,
        ),
        None => flag_rules,
    };
    // On a local network the agents are on loopback and private addresses by design.
    let flag_rules = Arc::new(if opts.local {
        flag_rules.on_local_network()
    } else {
        flag_rules
    });
    let policy = Arc::new(opts.hosted.trust.policy().map_err(Error::Trust)?);
    let (mut roots, depth) = opts.hosted.trust.endorsers().map_err(Error::Trust)?;
    roots.push(did.to_string());
    let endorsements = Arc::new(crate::trust::endorsements::Endorsements::open(
        &store, roots, depth,
    )?);
    client.check_endorsements(Arc::new(crate::trust::endorsements::Gossip(endorsements.clone())))?;
    // The node's own endorsements, gossiped again now and then (a node that joined since has
    // not heard them), and the expired ones swept.
    {
        let (e, c, own) = (endorsements.clone(), client.clone(), did.to_string());
        let stop = publisher_stop.child_token();
        tracker.spawn(async move {
            loop {
                let (e2, own2) = (e.clone(), own.clone());
                let now = crate::trust::endorsements::unix_now();
                let kept = tokio::task::spawn_blocking(move || {
                    let _ = e2.sweep(now);
                    e2.issued_by(&own2, now)
                })
                .await;
                if let Ok(Ok(kept)) = kept {
                    for k in kept {
                        if let Err(error) = c.publish_endorsement(k.jws.into_bytes()).await {
                            tracing::debug!(%error, "re-announcing an endorsement");
                        }
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(ENDORSE_REANNOUNCE) => {}
                }
            }
        });
    }
    let admin = AdminState {
        client: client.clone(),
        publisher,
        node_seed: Arc::new(key.seed()),
        agent_keys: AgentKeys::new(&opts.data_dir),
        pins: Some(pins),
        flags: flag_rules,
        trust: policy,
        endorsements: Some(endorsements),
    };
    let http_stop = stop.child_token();
    let http_task = tracker.spawn(server::serve(
        listener,
        http::router(well_known)
            .merge(hosted::router(&hosted, &http_stop))
            .merge(crate::ard::router(
                client.store().clone(),
                &public_base,
                &key,
                &hosted,
            )),
        opts.http_limits,
        trusted_proxies,
        http_stop.clone(),
    ));
    // `/mcp` beside the admin API, each behind its own guard (`admin::Guard`, `mcp::http`);
    // `/mcp` signs A2A requests as the node's did:key, nothing else, and presents the
    // delegation the config names.
    let mcp_delegation = match &opts.hosted.mcp.delegation {
        Some(path) => {
            let holder = Identity::did_key(SecretKey::from_seed(&key.seed()));
            let bad = |e: anyhow::Error| Error::McpDelegation(format!("{e:#}"));
            let chain = crate::call::read_chain(path).map_err(bad)?;
            let what = path.display().to_string();
            let d = crate::call::Delegation::held(chain, holder, true, &what).map_err(bad)?;
            Some(Arc::new(d))
        }
        None => None,
    };
    let mcp = crate::mcp::Server::new(
        Arc::new(admin.clone()),
        crate::mcp::Config {
            resolver: mcp_resolver,
            signer: Some(Arc::new(crate::call::DidSigner::new(Identity::did_key(
                SecretKey::from_seed(&key.seed()),
            )))),
            allow_private: opts.hosted.mcp.allow_private.unwrap_or(opts.local),
            delegation: mcp_delegation,
        },
    )
    .recording(audit.clone(), Some(did.to_string()));
    let status = crate::admin::status_page::Status::new(
        admin.clone(),
        task_db.clone(),
        did.as_str(),
        &public_base,
        &hosted,
    );
    // The page (no token, no data) beside the guarded admin routes, `/admin/v1/status` among
    // them; `/mcp` guards itself.
    let admin_router = crate::admin::status_page::page()
        .merge(crate::admin::router_with(
            admin.clone(),
            Guard::new(token.clone(), admin_addr),
            crate::admin::status_page::api(status, http_stop.child_token())
                .merge(crate::audit::router(audit_log, mcp_resolver_audit)),
        ))
        .merge(crate::mcp::http::router(
            mcp,
            admin_addr,
            token,
            http_stop.child_token(),
        ));
    let admin_task = tracker.spawn(server::serve(
        admin_listener,
        admin_router,
        opts.admin_limits,
        // Loopback only, for the operator's commands: a proxy is never in front of it, and
        // the loopback checks of `/mcp` and the status page read the TCP peer.
        server::TrustedProxies::default(),
        http_stop.clone(),
    ));

    // The swarm reports its addresses once it has polled its listeners.
    let deadline = tokio::time::Instant::now() + LISTEN_WAIT;
    let listen = loop {
        let addrs = client.listen_addrs().await?;
        if !addrs.is_empty() || !expect_listen || tokio::time::Instant::now() >= deadline {
            break addrs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let listen: Vec<String> = listen
        .iter()
        .map(|a| with_peer(a, peer_id).to_string())
        .collect();

    let pid = std::process::id();
    let info = NodeFile {
        pid,
        http: http_addr,
        admin: admin_addr,
        peer_id: peer_id.to_string(),
        did: did.to_string(),
        listen,
        local: opts.local,
    };
    info.write(&opts.data_dir)?;

    tracing::info!(%did, %peer_id, %http_addr, %admin_addr, "node started");

    tracker.close();
    // Started: from here `Running` owns the tasks, and its drop cancels `stop`.
    stop_on_error.disarm();
    Ok(Running {
        data_dir: opts.data_dir,
        pid,
        stop,
        tracker,
        tasks: Some(Tasks {
            http_stop,
            http: http_task,
            admin: admin_task,
            publisher_stop,
            publisher: publisher_task,
            net_stop,
            net: net_task,
            sweep_stop,
            sweep: sweep_task,
        }),
        store,
        hosted,
        task_db,
        admin,
        public_url: public_base,
        created_key: created.then_some(key_path),
        info,
    })
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
