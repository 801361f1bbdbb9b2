//! [`start`]: the daemon's start, as a list of named steps. Every check of what the user gave
//! (the options, the configuration's sections, the flag rules and classifier, the trust policy
//! and endorsers, the MCP delegation file) is done before the store opens; from the network
//! on, a failed step stops every task started before it (the drop guard of `stop`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentnet_did::{Resolver, SecretKey};
use agentnet_discovery::advert::{Limits, Validator};
use agentnet_discovery::net::{self, TransportKind};
use agentnet_discovery::store::{Store, StoreError};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{
    bind, with_peer, Error, Options, Running, Tasks, ENDORSE_REANNOUNCE, LISTEN_WAIT, TASK_SWEEP,
    TASK_SWEEP_BATCH, TASK_SWEEP_PAUSE,
};
use crate::admin::{AdminState, Guard};
use crate::audit::{AuditLog, Recorder};
use crate::call::Delegation;
use crate::config;
use crate::data_dir::token::Token;
use crate::data_dir::{AgentKeys, NodeFile};
use crate::hosted::a2a_auth::DidAuthenticator;
use crate::hosted::tasks::TaskDb;
use crate::hosted::{self, Hosted};
use crate::http::server::{self, TrustedProxies};
use crate::http::{self as public, WellKnown};
use crate::identity::Identity;
use crate::network::publisher::{self, Publisher};
use crate::trust::endorsements::{self, Endorsements};
use crate::trust::flags::{self, classifier::Classifier};
use crate::trust::Policy;

/// Check the options, start everything and write `node.json`. Nothing is printed: the caller
/// reports what [`Running`] holds (`agentnet up` prints its banner).
pub async fn start(opts: Options) -> Result<Running, Error> {
    let checked = check(&opts)?;
    let key = NodeKey::load(&opts)?;
    let trust = TrustSettings::read(&opts, &key.key)?;
    let store = open_store(&opts).await?;
    let task_db = open_tasks(&opts, &store).await?;
    let resolver = resolver(&opts)?;
    let validator = Validator::new(resolver.clone(), Limits::default());

    // What can still fail is done before any task starts: the listeners are bound (not served
    // yet), the hosted agents built and their tasks recovered.
    let (listener, http_addr) = bind(opts.http).await?;
    let (admin_listener, admin_addr) = bind(opts.admin).await?;
    let token = Token::create(&opts.data_dir)?;
    let well_known = WellKnown::new(&key.key)?;
    let public_base = checked
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{http_addr}"));
    let audit_log = open_audit(&opts, &store, &key.key).await?;
    let audit = Recorder::Local(audit_log.clone(), resolver.clone());
    // The operator's card pins: discovery shows agents against them, proxies check their
    // upstreams' cards.
    let pins = Arc::new(crate::trust::pins::Pins::open(&store)?);
    let hosted = build_hosted(&opts, &public_base, &task_db, &resolver, &audit, &pins)?;
    recover_tasks(&task_db, &hosted).await?;

    // From here tasks run: `stop_on_error` stops them if a later step fails.
    let stop = CancellationToken::new();
    let stop_on_error = stop.clone().drop_guard();
    let tracker = TaskTracker::new();
    let net_stop = stop.child_token();
    let (client, net_task) = start_network(&opts, &key.key, &store, validator, &net_stop).await?;
    let publisher_stop = stop.child_token();
    let (publisher, publisher_task) = start_publisher(
        &opts,
        &key.key,
        &client,
        &store,
        &hosted,
        &tracker,
        &publisher_stop,
    )
    .await?;
    let sweep_stop = stop.child_token();
    let sweep_task = spawn_sweep(&task_db, &tracker, &sweep_stop);
    let endorsements = start_endorsements(
        &store,
        trust.endorsers,
        &key.key,
        &client,
        &tracker,
        &publisher_stop,
    )?;
    let admin = AdminState {
        client: client.clone(),
        publisher,
        node_seed: Arc::new(key.key.seed()),
        agent_keys: AgentKeys::new(&opts.data_dir),
        pins: Some(pins),
        flags: trust.flags,
        trust: trust.policy,
        endorsements: Some(endorsements),
        shown: Default::default(),
    };

    let http_stop = stop.child_token();
    let http_task = tracker.spawn(server::serve(
        listener,
        public::router(well_known)
            .merge(hosted::router(&hosted, &http_stop))
            .merge(crate::ard::router(
                client.store().clone(),
                &public_base,
                &key.key,
                &hosted,
            )),
        opts.http_limits,
        checked.trusted_proxies,
        http_stop.clone(),
    ));
    let admin_task = serve_admin(
        &opts,
        AdminParts {
            admin: admin.clone(),
            listener: admin_listener,
            addr: admin_addr,
            token,
            key: &key.key,
            resolver,
            audit,
            audit_log,
            mcp_delegation: trust.mcp_delegation,
            task_db: &task_db,
            public_base: &public_base,
            hosted: &hosted,
        },
        &tracker,
        &http_stop,
    );

    let listen = listen_addrs(&opts, &client).await?;
    let info = NodeFile {
        pid: std::process::id(),
        http: http_addr,
        admin: admin_addr,
        peer_id: client.peer_id().to_string(),
        did: key.key.did_key().to_string(),
        listen,
        local: opts.local,
    };
    info.write(&opts.data_dir)?;
    tracing::info!(did = %info.did, peer_id = %info.peer_id, %http_addr, %admin_addr, "node started");

    tracker.close();
    // Started: from here `Running` owns the tasks, and its drop cancels `stop`.
    stop_on_error.disarm();
    Ok(Running {
        data_dir: opts.data_dir,
        pid: info.pid,
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
        created_key: key.created.then_some(key.path),
        info,
    })
}

/// What the options' checks give back.
struct Checked {
    /// `--public-url`, normalized.
    public_url: Option<String>,
    /// `[http] trusted_proxies`.
    trusted_proxies: TrustedProxies,
}

/// Step 1: every check of the options and the configuration's sections.
fn check(opts: &Options) -> Result<Checked, Error> {
    config::check_admin(opts.admin)?;
    let public_url = opts
        .public_url
        .as_deref()
        .map(config::check_public_url)
        .transpose()?;
    opts.hosted.check()?;
    let trusted_proxies = opts.hosted.http.trusted_proxies()?;
    Ok(Checked {
        public_url,
        trusted_proxies,
    })
}

/// The node key, loaded or created in the data directory (created too).
struct NodeKey {
    key: SecretKey,
    path: PathBuf,
    created: bool,
}

impl NodeKey {
    /// Step 2: the data directory and the node key.
    fn load(opts: &Options) -> Result<NodeKey, Error> {
        std::fs::create_dir_all(&opts.data_dir).map_err(|source| Error::NodeFile {
            path: opts.data_dir.clone(),
            source,
        })?;
        let path = crate::data_dir::key_file(&opts.data_dir);
        let (key, created) = SecretKey::load_or_create(&path).map_err(|source| Error::Key {
            path: path.clone(),
            source,
        })?;
        Ok(NodeKey { key, path, created })
    }
}

/// What `[trust]` and `[mcp] delegation` name, read and checked.
struct TrustSettings {
    flags: Arc<flags::Rules>,
    policy: Arc<Policy>,
    /// The endorsers the operator trusts (the node's own DID among them) and how deep.
    endorsers: (Vec<String>, u8),
    mcp_delegation: Option<Arc<Delegation>>,
}

impl TrustSettings {
    /// Step 3: the files and settings the configuration names, before anything opens.
    fn read(opts: &Options, key: &SecretKey) -> Result<TrustSettings, Error> {
        let trust = &opts.hosted.trust;
        let rules = match &trust.flag_rules {
            Some(path) => flags::Rules::with_file(path)
                .map_err(|e| Error::Trust(format!("flag_rules: {e}")))?,
            None => flags::Rules::default(),
        };
        let rules = match &trust.classifier {
            Some(c) => rules.with_classifier(
                Classifier::new(c.clone()).map_err(|e| Error::Trust(format!("classifier: {e}")))?,
            ),
            None => rules,
        };
        // On a local network the agents are on loopback and private addresses by design.
        let rules = if opts.local {
            rules.on_local_network()
        } else {
            rules
        };
        let policy = trust.policy().map_err(Error::Trust)?;
        let (mut roots, depth) = trust.endorsers().map_err(Error::Trust)?;
        roots.push(key.did_key().to_string());
        // `/mcp` signs A2A requests as the node's did:key and presents the delegation the
        // configuration names, which the node's DID must hold.
        let mcp_delegation = match &opts.hosted.mcp.delegation {
            Some(path) => {
                let holder = Identity::did_key(SecretKey::from_seed(&key.seed()));
                let bad = |e: anyhow::Error| Error::McpDelegation(format!("{e:#}"));
                let chain = crate::call::read_chain(path).map_err(bad)?;
                let what = path.display().to_string();
                Some(Arc::new(
                    Delegation::held(chain, holder, true, &what).map_err(bad)?,
                ))
            }
            None => None,
        };
        Ok(TrustSettings {
            flags: Arc::new(rules),
            policy: Arc::new(policy),
            endorsers: (roots, depth),
            mcp_delegation,
        })
    }
}

/// Step 4: the node's database; a store another node holds names that node.
async fn open_store(opts: &Options) -> Result<Store, Error> {
    let path = opts.data_dir.join(crate::db::STORE_DIR);
    let limits = opts.store_limits.clone();
    let opened = tokio::task::spawn_blocking(move || crate::db::open(&path, limits))
        .await
        .map_err(|source| Error::Task {
            what: "opening the store",
            source,
        })?;
    match opened {
        Ok(store) => Ok(store),
        // Another node holds the store: name it when its node.json says.
        Err(e @ StoreError::Locked { .. }) => Err(match NodeFile::read(&opts.data_dir) {
            Ok(running) => Error::AlreadyRunning {
                pid: running.pid,
                dir: opts.data_dir.clone(),
            },
            Err(_) => e.into(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// The audit log, signed by the node's key. Blocking (RocksDB; a log of the one-family layout is
/// moved at open), so off the async workers.
async fn open_audit(
    opts: &Options,
    store: &Store,
    key: &SecretKey,
) -> Result<Arc<AuditLog>, Error> {
    let (store, limits, key) = (
        store.clone(),
        opts.hosted.audit.limits(),
        SecretKey::from_seed(&key.seed()),
    );
    tokio::task::spawn_blocking(move || AuditLog::open(&store, limits, Some(key)))
        .await
        .map_err(|source| Error::Task {
            what: "opening the audit log",
            source,
        })?
        .map_err(|e| Error::Audit(e.to_string()))
}

/// Step 5: the hosted agents' task store, its unreadable records quarantined.
async fn open_tasks(opts: &Options, store: &Store) -> Result<Arc<TaskDb>, Error> {
    let retention = opts
        .hosted
        .tasks
        .retention(opts.store_limits.min_free_bytes);
    let store = store.clone();
    let db = tokio::task::spawn_blocking(move || TaskDb::open(&store, retention))
        .await
        .map_err(|source| Error::Task {
            what: "opening the task store",
            source,
        })??;
    if db.quarantined() > 0 {
        tracing::warn!(
            quarantined = db.quarantined(),
            "unreadable task records were quarantined (see earlier warnings)"
        );
    }
    Ok(db)
}

/// Step 6: the DID resolver (loopback and plain http on a `--local` node).
fn resolver(opts: &Options) -> Result<Resolver, Error> {
    let mut resolver_opts = opts.resolver.clone();
    if opts.local {
        resolver_opts.http.allow_loopback = true;
        resolver_opts.http.allow_http_loopback = true;
    }
    Resolver::new(resolver_opts).map_err(Error::Resolver)
}

/// Step 7: the hosted agents of the configuration, on the public listener.
fn build_hosted(
    opts: &Options,
    public_base: &str,
    task_db: &Arc<TaskDb>,
    resolver: &Resolver,
    audit: &Recorder,
    pins: &Arc<crate::trust::pins::Pins>,
) -> Result<Vec<Hosted>, Error> {
    let auth_cfg = opts.hosted.auth.verifier(public_base.to_string());
    let authenticator = Arc::new(DidAuthenticator::new(resolver.clone(), auth_cfg));
    let authority = hosted::authority::Shared::new(resolver.clone());
    Ok(hosted::build(
        &opts.hosted.agent,
        public_base,
        &opts.data_dir,
        task_db,
        authenticator,
        &authority,
        hosted::Shared {
            audit: Some(audit.clone()),
            pins: Some(pins.clone()),
        },
    )?)
}

/// Step 8, before anything is served: tasks the last run left working fail, signed by their
/// agent.
async fn recover_tasks(task_db: &Arc<TaskDb>, hosted: &[Hosted]) -> Result<(), Error> {
    let db = task_db.clone();
    let sealers: Vec<_> = hosted
        .iter()
        .map(|h| (h.id.clone(), h.sealer.clone()))
        .collect();
    let failed = tokio::task::spawn_blocking(move || hosted::recover(&db, &sealers))
        .await
        .map_err(|source| Error::Task {
            what: "failing the tasks left working",
            source,
        })??;
    if failed > 0 {
        tracing::warn!(failed, "tasks left working by the last run marked failed");
    }
    Ok(())
}

/// Step 9: the libp2p swarm, in its own task.
async fn start_network(
    opts: &Options,
    key: &SecretKey,
    store: &Store,
    validator: Validator,
    stop: &CancellationToken,
) -> Result<(net::Client, JoinHandle<()>), Error> {
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
    Ok(net::spawn(key, cfg, store.clone(), validator, stop.clone()).await?)
}

/// Step 10: the publisher, re-announcing in its own task; the hosted agents published, and
/// what `agentnet publish` asked for published again with fresh seqs (an entry that cannot be
/// published, its key gone or its card refused, is logged and kept).
async fn start_publisher(
    opts: &Options,
    key: &SecretKey,
    client: &net::Client,
    store: &Store,
    hosted: &[Hosted],
    tracker: &TaskTracker,
    stop: &CancellationToken,
) -> Result<(Arc<Publisher>, JoinHandle<()>), Error> {
    let max_ttl = Limits::default().max_ttl;
    let publisher = Arc::new(
        Publisher::new(client.clone(), store.clone(), max_ttl)
            .keeping_in(store.family(publisher::CF_PUBLISHED)?),
    );
    let task = {
        let (p, stop) = (publisher.clone(), stop.clone());
        tracker.spawn(async move { p.run(stop).await })
    };
    for h in hosted.iter().filter(|h| h.publish) {
        let id = Identity::did_key(SecretKey::from_seed(&h.key.seed()));
        if let Err(error) = publisher.publish(&h.card, id, h.ttl.min(max_ttl)).await {
            tracing::warn!(agent = %h.id, %error, "publishing a hosted agent");
        }
    }
    let saved = {
        let p = publisher.clone();
        tokio::task::spawn_blocking(move || p.saved())
            .await
            .map_err(|source| Error::Task {
                what: "reading the kept publications",
                source,
            })?
    };
    let saved = match saved {
        Ok(saved) => saved,
        Err(error) => {
            tracing::warn!(%error, "reading the kept publications");
            Vec::new()
        }
    };
    let agent_keys = AgentKeys::new(&opts.data_dir);
    let own = key.did_key().to_string();
    for s in saved {
        let id = if s.did == own {
            Ok(Identity::did_key(SecretKey::from_seed(&key.seed())))
        } else {
            let (keys, d) = (agent_keys.clone(), s.did.clone());
            match tokio::task::spawn_blocking(move || keys.load_identity(&d)).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        };
        let published = match id {
            Ok(id) => publisher
                .publish(&s.card, id, s.ttl.min(max_ttl))
                .await
                .map_err(|e| e.to_string()),
            Err(error) => Err(error),
        };
        if let Err(error) = published {
            tracing::warn!(%error, did = %s.did, "publishing a kept publication again");
        }
    }
    Ok((publisher, task))
}

/// Step 11: the retention sweep of expired tasks, every [`TASK_SWEEP`], in batches.
fn spawn_sweep(
    task_db: &Arc<TaskDb>,
    tracker: &TaskTracker,
    stop: &CancellationToken,
) -> JoinHandle<()> {
    let (db, stop) = (task_db.clone(), stop.clone());
    tracker.spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(TASK_SWEEP) => {}
            }
            let (db, go_on) = (db.clone(), stop.clone());
            let swept = tokio::task::spawn_blocking(move || {
                db.sweep_due(
                    chrono::Utc::now(),
                    TASK_SWEEP_BATCH,
                    TASK_SWEEP_PAUSE,
                    || !go_on.is_cancelled(),
                )
            })
            .await;
            match swept {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::debug!(n, "swept expired A2A tasks"),
                Ok(Err(error)) => tracing::warn!(%error, "sweeping A2A tasks"),
                Err(error) => tracing::warn!(%error, "sweeping A2A tasks"),
            }
        }
    })
}

/// Step 12: the endorsements store, checked by the network before it forwards a statement;
/// the node's own endorsements gossiped again now and then (a node that joined since has not
/// heard them), and the expired ones swept.
fn start_endorsements(
    store: &Store,
    (roots, depth): (Vec<String>, u8),
    key: &SecretKey,
    client: &net::Client,
    tracker: &TaskTracker,
    stop: &CancellationToken,
) -> Result<Arc<Endorsements>, Error> {
    let store_of = Arc::new(Endorsements::open(store, roots, depth)?);
    client.check_endorsements(Arc::new(endorsements::Gossip(store_of.clone())))?;
    let (e, c, own) = (store_of.clone(), client.clone(), key.did_key().to_string());
    let stop = stop.child_token();
    tracker.spawn(async move {
        loop {
            let (e2, own2) = (e.clone(), own.clone());
            let now = endorsements::unix_now();
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
    Ok(store_of)
}

/// What the admin listener serves.
struct AdminParts<'a> {
    admin: AdminState,
    listener: TcpListener,
    addr: std::net::SocketAddr,
    token: Token,
    key: &'a SecretKey,
    resolver: Resolver,
    audit: Recorder,
    audit_log: Arc<AuditLog>,
    mcp_delegation: Option<Arc<Delegation>>,
    task_db: &'a Arc<TaskDb>,
    public_base: &'a str,
    hosted: &'a [Hosted],
}

/// Step 13: the admin listener: the status page (no token, no data) beside the guarded admin
/// routes, `/admin/v1/status` and the audit log's among them; `/mcp`, which guards itself and
/// signs A2A requests as the node's did:key.
fn serve_admin(
    opts: &Options,
    p: AdminParts<'_>,
    tracker: &TaskTracker,
    http_stop: &CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    let mcp = crate::mcp::Server::new(
        Arc::new(p.admin.clone()),
        crate::mcp::Config {
            resolver: p.resolver.clone(),
            signer: Some(Arc::new(crate::call::DidSigner::new(Identity::did_key(
                SecretKey::from_seed(&p.key.seed()),
            )))),
            allow_private: opts.hosted.mcp.allow_private.unwrap_or(opts.local),
            delegation: p.mcp_delegation,
        },
    )
    .recording(p.audit, Some(p.key.did_key().to_string()));
    let status = crate::admin::status_page::Status::new(
        p.admin.clone(),
        p.task_db.clone(),
        p.key.did_key().as_str(),
        p.public_base,
        p.hosted,
    );
    let router = crate::admin::status_page::page()
        .merge(crate::admin::router_with(
            p.admin,
            Guard::new(p.token.clone(), p.addr),
            crate::admin::status_page::api(status, http_stop.child_token())
                .merge(crate::audit::router(p.audit_log, p.resolver)),
        ))
        .merge(crate::mcp::http::router(
            mcp,
            p.addr,
            p.token,
            http_stop.child_token(),
        ));
    tracker.spawn(server::serve(
        p.listener,
        router,
        opts.admin_limits,
        // Loopback only, for the operator's commands: a proxy is never in front of it, and
        // the loopback checks of `/mcp` and the status page read the TCP peer.
        TrustedProxies::default(),
        http_stop.clone(),
    ))
}

/// Step 14: the swarm's addresses, once it has polled its listeners (at most [`LISTEN_WAIT`]).
async fn listen_addrs(opts: &Options, client: &net::Client) -> Result<Vec<String>, Error> {
    let expect = !opts.listen.is_empty() || !net::Config::default().listen.is_empty();
    let deadline = tokio::time::Instant::now() + LISTEN_WAIT;
    let addrs = loop {
        let addrs = client.listen_addrs().await?;
        if !addrs.is_empty() || !expect || tokio::time::Instant::now() >= deadline {
            break addrs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let peer = client.peer_id();
    Ok(addrs
        .iter()
        .map(|a| with_peer(a, peer).to_string())
        .collect())
}
