//! The node's own commands: `init`, `up` (and its banner), `mcp`.

use super::{
    admin, config, daemon, data_dir, is_local, json, resolver_options, Arc, Directory, ExitCode,
    FileConfig, McpArgs, Path, SecretKey, StoreLimits, UpArgs, ADMIN_TIMEOUT,
};

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
