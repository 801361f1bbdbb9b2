//! The arguments several commands share, and what they resolve to: the running node a command
//! talks to ([`NodeArg`], [`admin_client`]), the data directory ([`DataDirArg`]), how DIDs are
//! resolved ([`NetArgs`], [`resolver_options`]) and where agents may be reached ([`Reach`]).

use std::path::{Path, PathBuf};

use agentnet_did::resolver::Options as ResolverOptions;
use agentnet_did::web::HttpOptions;
use clap::Args;

use super::input::read_bounded;
use crate::{admin, daemon, data_dir};

/// Which running node a command talks to.
#[derive(Debug, Args)]
pub(super) struct NodeArg {
    /// The node's admin API URL (e.g. http://127.0.0.1:7879); default: the one recorded in
    /// <data-dir>/node.json. The token always comes from <data-dir>/admin.token.
    #[arg(long, value_name = "URL")]
    pub(super) node: Option<String>,
    /// The node's data directory.
    #[arg(long, env = "AGENTNET_DATA_DIR")]
    pub(super) data_dir: Option<PathBuf>,
}

/// Where the commands that call agents find them and what they may reach.
#[derive(Debug, Args)]
pub(super) struct Reach {
    /// Allow agent interfaces and MCP endpoints on loopback and private addresses, and plain
    /// http (testnets; `--local` implies it).
    #[arg(long)]
    pub(super) allow_private: bool,
    #[command(flatten)]
    pub(super) node: NodeArg,
    #[command(flatten)]
    pub(super) net: NetArgs,
}

#[derive(Debug, Args)]
pub(super) struct DataDirArg {
    /// The node's data directory.
    #[arg(long, env = "AGENTNET_DATA_DIR")]
    pub(super) data_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(super) struct NetArgs {
    /// A network on this machine or a LAN: agents and MCP endpoints on loopback and private
    /// addresses over plain http, did:web/did:wba on loopback over plain http. `agentnet up
    /// --local` records it in <data-dir>/node.json, and the commands run on that data directory
    /// follow it without the flag.
    #[arg(
        long,
        env = "AGENTNET_LOCAL",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub(super) local: bool,
    /// Allow did:web/did:wba on loopback hosts over plain http (local testnets, tests).
    #[arg(long)]
    pub(super) allow_http_loopback: bool,
    /// Trust this extra root certificate (PEM) for did:web/did:wba.
    #[arg(long)]
    pub(super) ca_cert: Option<PathBuf>,
    /// HTTP timeout in seconds.
    #[arg(long, default_value_t = 10)]
    pub(super) timeout: u64,
}

/// Time the admin commands give the node: a discovery may wait for DHT queries.
pub(super) const ADMIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The client of the admin API of the node `node` names.
pub(super) fn admin_client(node: &NodeArg) -> anyhow::Result<admin::Client> {
    let dir = data_dir::resolve(node.data_dir.as_deref())?;
    Ok(match &node.node {
        Some(url) => {
            let token =
                crate::data_dir::token::Token::read(&dir).map_err(admin::ClientError::Token)?;
            admin::Client::new(url, token, ADMIN_TIMEOUT)?
        }
        None => admin::Client::from_data_dir(&dir, ADMIN_TIMEOUT)?,
    })
}

/// Whether a command runs on a local network: `--local` (or `$AGENTNET_LOCAL`), or the node
/// running on `dir` was started with it (`local` in its `node.json`).
pub(super) fn is_local(net: &NetArgs, dir: &Path) -> bool {
    net.local || daemon::NodeFile::read(dir).is_ok_and(|f| f.local)
}

/// The resolver options of `net`; `local` ([`is_local`]) allows did:web/did:wba on loopback
/// over plain http, as `--allow-http-loopback` does.
pub(super) fn resolver_options(net: &NetArgs, local: bool) -> anyhow::Result<ResolverOptions> {
    let loopback = net.allow_http_loopback || local;
    let mut http = HttpOptions {
        timeout: std::time::Duration::from_secs(net.timeout.max(1)),
        allow_http_loopback: loopback,
        allow_loopback: loopback,
        ..Default::default()
    };
    if let Some(ca) = &net.ca_cert {
        http.extra_root_pems.push(read_bounded(ca)?);
        // A private CA is how local testnets serve did:web: let them be on loopback.
        http.allow_loopback = true;
    }
    Ok(ResolverOptions {
        http,
        ..Default::default()
    })
}
