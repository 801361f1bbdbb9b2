//! `agentnet mcp`: the MCP server on standard input and output.
//!
//! Standard output carries protocol messages only: the node started here is quiet, and logs go
//! to standard error (`cli::main` sends `tracing` there). The node: the one running on the data
//! directory if its admin API answers (`node.json`, `admin.token`), else one started in this
//! process on that directory, stopped when standard input ends.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentnet_did::{Resolver, SecretKey};
use anyhow::Context as _;
use rmcp::ServiceExt as _;

use super::{Config, Server};
use crate::admin;
use crate::call::DidSigner;
use crate::daemon;
use crate::data_dir::{self, AgentKeys};
use crate::directory::Directory;
use crate::identity::Identity;

/// How long the admin API of a running node may take per request (a discovery may wait for
/// the network).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(60);

/// What `agentnet mcp` was asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The data directory.
    pub data_dir: PathBuf,
    /// Sign A2A requests as this identity (its key in `<data-dir>/agents/`); default the
    /// node's did:key.
    pub as_did: Option<String>,
    /// Allow agents on loopback and private addresses over plain http (testnets).
    pub allow_private: bool,
    /// Resolver options (did:web on loopback for testnets).
    pub resolver: agentnet_did::resolver::Options,
    /// Peers the node started here dials (none if a node already runs).
    pub bootstrap: Vec<libp2p::Multiaddr>,
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

/// Serve MCP on stdio until standard input ends.
pub async fn run(opts: Options) -> anyhow::Result<()> {
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
            o.bootstrap = opts.bootstrap.clone();
            o.mdns = true;
            o.max_memory = Some(daemon::DEFAULT_MAX_MEMORY_MIB as usize * 1024 * 1024);
            let node = daemon::start(o).await?;
            tracing::info!(admin = %node.info.admin, "started a node in this process");
            (Arc::new(node.admin_state().clone()), Some(node))
        }
    };
    let result = serve(directory, &opts).await;
    // The node started here stops whatever happened, so that node.json does not outlive it.
    if let Some(node) = node {
        node.shutdown().await;
    }
    result
}

async fn serve(directory: Arc<dyn Directory>, opts: &Options) -> anyhow::Result<()> {
    let dir = &opts.data_dir;
    let id = match &opts.as_did {
        Some(did) => AgentKeys::new(dir)
            .load_identity(did)
            .with_context(|| format!("--as {did}"))?,
        None => Identity::did_key(
            SecretKey::load(&data_dir::key_file(dir)).context("loading the node key")?,
        ),
    };
    let cfg = Config {
        resolver: Resolver::new(opts.resolver.clone()).map_err(anyhow::Error::msg)?,
        signer: Some(Arc::new(DidSigner::new(id))),
        allow_private: opts.allow_private,
    };
    let service = Server::new(directory, cfg)
        .serve(rmcp::transport::stdio())
        .await?;
    service.waiting().await?;
    Ok(())
}
