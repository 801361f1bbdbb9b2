//! The node's own commands: `init`, `up` (and its banner), `mcp`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agentnet_did::SecretKey;
use agentnet_discovery::store::Limits as StoreLimits;
use clap::Args;
use serde_json::json;

use super::args::{is_local, resolver_options, DataDirArg, NetArgs, ADMIN_TIMEOUT};
use crate::config::{self, FileConfig};
use crate::network::directory::Directory;
use crate::{admin, daemon, data_dir};

#[derive(Debug, Args)]
pub(super) struct UpArgs {
    #[command(flatten)]
    pub(super) dir: DataDirArg,
    /// libp2p listen address (repeatable); default: TCP and QUIC on all interfaces, random ports.
    #[arg(long, value_name = "MULTIADDR")]
    pub(super) listen: Vec<String>,
    /// Peer to dial at start, e.g. /ip4/203.0.113.7/tcp/4001/p2p/12D3Koo… (repeatable).
    #[arg(long, value_name = "MULTIADDR")]
    pub(super) bootstrap: Vec<String>,
    /// The node's configuration file (TOML): `[node]` settings (each flag here overrides its
    /// value), `[tasks]` retention, `[auth]` verifier bounds, and the hosted A2A agents
    /// (`[[agent]]`: echo, ask, tck, command, proxy). See docs/A2A.md.
    #[arg(long, value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// Address of the public HTTP listener (well-known files, hosted agents); port 0 picks a
    /// free one. Default 127.0.0.1:7878.
    #[arg(long, value_name = "ADDR")]
    pub(super) http: Option<String>,
    /// How clients reach the public listener, http(s)://host[:port] (behind a proxy, or when
    /// listening on 0.0.0.0); default http://<bound address>.
    #[arg(long, value_name = "URL")]
    pub(super) public_url: Option<String>,
    /// Address of the admin API listener: a loopback address only; port 0 (the default) picks a
    /// free one. The commands find it in <data-dir>/node.json and authenticate with the token
    /// in <data-dir>/admin.token, written anew at every start. Default 127.0.0.1:0.
    #[arg(long, value_name = "ADDR")]
    pub(super) admin: Option<String>,
    /// Do not look for peers on the LAN with mDNS.
    #[arg(long)]
    pub(super) no_mdns: bool,
    /// Most MiB of other nodes' adverts (with their index and replay records) the store keeps;
    /// past it, new agents from others are refused until expired ones are swept.
    #[arg(long, value_name = "MIB", default_value_t = StoreLimits::default().max_total_bytes >> 20)]
    pub(super) store_max_mib: u64,
    /// Most MiB of adverts naming one publishing peer.
    #[arg(long, value_name = "MIB", default_value_t = StoreLimits::default().max_peer_bytes >> 20)]
    pub(super) store_peer_mib: u64,
    /// Refuse other nodes' adverts while the store's disk has less than this many MiB free
    /// (the node's own publishing goes on).
    #[arg(long, value_name = "MIB", default_value_t = StoreLimits::default().min_free_bytes >> 20)]
    pub(super) store_min_free_mib: u64,
    /// Refuse new peer connections while the node's resident memory is above this many MiB
    /// (connections already open stay); 0: no such bound.
    #[arg(long, value_name = "MIB", default_value_t = daemon::DEFAULT_MAX_MEMORY_MIB)]
    pub(super) max_memory_mib: u64,
    /// How the node resolves did:web/did:wba callers (and the agents it calls): a local
    /// testnet's documents on loopback need `--allow-http-loopback` or `--ca-cert`.
    #[command(flatten)]
    pub(super) net: NetArgs,
    /// Print the start banner as one JSON line.
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Debug, Args)]
pub(super) struct McpArgs {
    #[command(flatten)]
    pub(super) dir: DataDirArg,
    /// Sign the A2A requests of send_message, get_task and cancel_task as this identity (its
    /// key in <data-dir>/agents/); default: the node's did:key.
    #[arg(long = "as", value_name = "DID")]
    pub(super) as_did: Option<String>,
    /// Allow agent interfaces on loopback and private addresses, and plain http (testnets).
    #[arg(long)]
    pub(super) allow_private: bool,
    /// Peers to dial if a node is started here (no node runs on the data directory).
    #[arg(long, value_name = "MULTIADDR")]
    pub(super) bootstrap: Vec<String>,
    /// Present this delegation chain on every A2A message and tool call the tools make, handed
    /// off to each agent called when the chain allows (see `agentnet delegate`).
    #[arg(long, value_name = "FILE")]
    pub(super) delegation: Option<PathBuf>,
    #[command(flatten)]
    pub(super) net: NetArgs,
}

/// `n` MiB in bytes, refused when it overflows.
fn mib(flag: &str, n: u64) -> anyhow::Result<u64> {
    n.checked_mul(1 << 20)
        .ok_or_else(|| anyhow::anyhow!("--{flag} {n}: too large"))
}

pub(super) async fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    let cfg = match &args.config {
        Some(p) => FileConfig::read(p)?,
        None => Default::default(),
    };
    let node = cfg.node(&super::status::overrides(&args))?;
    let opts = daemon::Options {
        data_dir: data_dir::resolve(node.data_dir.as_deref())?,
        listen: node.listen,
        bootstrap: node.bootstrap,
        http: node.http,
        admin: node.admin,
        public_url: node.public_url,
        http_limits: crate::http::server::Limits::PUBLIC,
        admin_limits: crate::http::server::Limits::ADMIN,
        store_limits: StoreLimits {
            max_total_bytes: mib("store-max-mib", args.store_max_mib)?,
            max_peer_bytes: mib("store-peer-mib", args.store_peer_mib)?,
            min_free_bytes: mib("store-min-free-mib", args.store_min_free_mib)?,
            ..StoreLimits::default()
        },
        max_memory: match args.max_memory_mib {
            0 => None,
            n => Some(usize::try_from(mib("max-memory-mib", n)?)?),
        },
        mdns: node.mdns,
        hosted: cfg,
        resolver: resolver_options(&args.net, node.local)?,
        local: node.local,
    };
    let running = daemon::start(opts).await?;
    banner(&running, args.json)?;
    let stop = running.stop_requested().await;
    // Through `notice`: with `--log-format json` every line of standard error parses.
    super::status::notice("INFO", "stopping...");
    running.shutdown().await;
    super::status::notice("INFO", "stopped");
    stop?;
    Ok(ExitCode::SUCCESS)
}

/// What `agentnet up` prints once the node runs: one JSON line (`node.json`'s contents), or
/// where everything listens.
fn banner(node: &daemon::Running, json_out: bool) -> anyhow::Result<()> {
    if let Some(path) = node.created_key() {
        let line = format!("created a new node key at {}", path.display());
        super::status::notice("INFO", &line);
    }
    let info = &node.info;
    if json_out {
        out!("{}", serde_json::to_string(info)?)?;
        return Ok(());
    }
    out!("did: {}", info.did)?;
    out!("peer id: {}", info.peer_id)?;
    out!(
        "listening on http://{} (well-known files, hosted agents)",
        info.http
    )?;
    for h in node.hosted() {
        out!(
            "hosting {} ({}) at {}",
            h.id,
            h.key.did_key(),
            crate::hosted::agent_url(node.public_url(), &h.id)
        )?;
    }
    out!(
        "admin API on http://{} (token in {})",
        info.admin,
        crate::data_dir::token::token_file(node.data_dir()).display()
    )?;
    out!(
        "status page: http://{}{} (log in with that token)",
        info.admin,
        crate::admin::status_page::PATH
    )?;
    for a in &info.listen {
        out!("listening on {a}")?;
    }
    Ok(())
}

/// `agentnet mcp`: MCP on stdio, reading the node running on the data directory if its admin
/// API answers, else one started here (quiet, stopped when standard input ends, so that
/// `node.json` does not outlive it).
pub(super) async fn mcp_stdio(args: McpArgs) -> anyhow::Result<ExitCode> {
    let data_dir = data_dir::resolve(args.dir.data_dir.as_deref())?;
    let local = is_local(&args.net, &data_dir);
    // Read before anything starts, so that a chain that does not hold fails at once.
    let delegation = match &args.delegation {
        None => None,
        Some(file) => {
            let holder = super::delegate::identity_of(&data_dir, args.as_did.as_deref(), "--as")?;
            super::delegate::delegation_for(Some(file), Some(holder), false)?
        }
    };
    let opts = crate::mcp::stdio::Options {
        delegation,
        data_dir,
        as_did: args.as_did,
        allow_private: args.allow_private || local,
        resolver: resolver_options(&args.net, local)?,
    };
    let bootstrap = config::parse_multiaddrs("bootstrap", &args.bootstrap)?;
    let dir = &opts.data_dir;
    let (directory, node): (Arc<dyn Directory>, Option<daemon::Running>) = match running(dir).await
    {
        Some(c) => {
            tracing::info!(node = %c.base(), "using the running node");
            (Arc::new(c), None)
        }
        None => {
            let mut o = daemon::Options::local(dir.clone());
            o.listen = vec![];
            o.bootstrap = bootstrap;
            o.mdns = true;
            o.local = local;
            o.max_memory = Some(daemon::DEFAULT_MAX_MEMORY_MIB as usize * 1024 * 1024);
            let node = daemon::start(o).await?;
            tracing::info!(admin = %node.info.admin, "started a node in this process");
            (Arc::new(node.admin_state().clone()), Some(node))
        }
    };
    // Receipts go to the node's audit log through its admin API (verified only, none running).
    let receipts = crate::admin::Client::from_data_dir(dir, std::time::Duration::from_secs(30))
        .ok()
        .map(|c| Arc::new(c) as Arc<dyn crate::audit::ReceiptSink>);
    let result = crate::mcp::stdio::run(directory, receipts, &opts).await;
    // The node started here stops whatever happened, so that node.json does not outlive it.
    if let Some(node) = node {
        node.shutdown().await;
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

/// The running node's admin API, if one answers on `dir`.
async fn running(dir: &Path) -> Option<admin::Client> {
    let c = admin::Client::from_data_dir(dir, ADMIN_TIMEOUT).ok()?;
    match c.peers().await {
        Ok(_) => Some(c),
        Err(error) => {
            tracing::info!(%error, "no usable running node; starting one in this process");
            None
        }
    }
}

pub(super) fn init(dir: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(dir)?;
    let path = data_dir::key_file(&dir);
    let (key, created) = SecretKey::load_or_create(&path)?;
    let did = key.did_key();
    let peer_id = agentnet_discovery::net::peer_id_of(&key)?;
    // The address is the node's to choose (`--listen`); the PeerId is fixed by the key.
    let bootstrap = format!("/ip4/<address>/tcp/<port>/p2p/{peer_id}");
    if json {
        out!(
            "{}",
            json!({
                "did": did.as_str(),
                "peerId": peer_id.to_string(),
                "bootstrap": bootstrap,
                "keyFile": path,
                "created": created,
            })
        )?;
    } else {
        if created {
            say!("created a new node key at {}", path.display());
        } else {
            say!("using the node key at {}", path.display());
        }
        say!("peer id: {peer_id}");
        say!(
            "other nodes bootstrap from {bootstrap}, where `agentnet up --listen \
             /ip4/<address>/tcp/<port>` listens (`agentnet up` prints the full address)"
        );
        out!("{did}")?;
    }
    Ok(ExitCode::SUCCESS)
}
