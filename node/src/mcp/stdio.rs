//! `agentnet mcp`: the MCP server on standard input and output.
//!
//! Standard output carries protocol messages only: logs go to standard error (`cli::main` sends
//! `tracing` there). It reads the node through the [`Directory`] it is handed: the command line
//! finds the node running on the data directory (its admin API, `node.json`, `admin.token`), or
//! starts one in its process, quiet, and stops it when this returns.

use std::path::PathBuf;
use std::sync::Arc;

use agentnet_did::{Resolver, SecretKey};
use anyhow::Context as _;
use rmcp::ServiceExt as _;

use super::{Config, Server};
use crate::audit::{ReceiptSink, Recorder};
use crate::call::DidSigner;
use crate::data_dir::{self, AgentKeys};
use crate::identity::Identity;
use crate::network::directory::Directory;

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
    /// The delegation chain to present (`--delegation FILE`, read and checked by the CLI).
    pub delegation: Option<Arc<crate::call::Delegation>>,
}

/// Serve MCP on stdio, reading the node through `directory`, until standard input ends. The
/// receipts of the tasks it calls go to `receipts` (the node's audit log, through its admin
/// API); with none (no node running) they are verified, not logged.
pub async fn run(
    directory: Arc<dyn Directory>,
    receipts: Option<Arc<dyn ReceiptSink>>,
    opts: &Options,
) -> anyhow::Result<()> {
    let dir = &opts.data_dir;
    let id = match &opts.as_did {
        Some(did) => AgentKeys::new(dir)
            .load_identity(did)
            .with_context(|| format!("--as {did}"))?,
        None => Identity::did_key(
            SecretKey::load(&data_dir::key_file(dir)).context("loading the node key")?,
        ),
    };
    let resolver = Resolver::new(opts.resolver.clone()).map_err(anyhow::Error::msg)?;
    let me = id.did().to_string();
    let cfg = Config {
        resolver: resolver.clone(),
        signer: Some(Arc::new(DidSigner::new(id))),
        allow_private: opts.allow_private,
        delegation: opts.delegation.clone(),
    };
    let recorder = match receipts {
        Some(sink) => Recorder::Remote(sink, resolver),
        None => Recorder::Nowhere(
            resolver,
            format!(
                "no node is running on {} (start `agentnet up` to keep an audit log)",
                dir.display()
            ),
        ),
    };
    let service = Server::new(directory, cfg)
        .recording(recorder, Some(me))
        .serve(rmcp::transport::stdio())
        .await?;
    service.waiting().await?;
    Ok(())
}
