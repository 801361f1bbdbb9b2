//! The `agentnet` command line: the only part of the library, with [`testnet`], that prints.
//!
//! - this module: the arguments, [`main`], and what the commands share (input files, the
//!   resolver options, the admin client);
//! - `node`: `init`, `up` (and its banner), `mcp`;
//! - `network`: `publish`, `unpublish`, `discover`, `peers`;
//! - `cards`: `card sign|verify`; `dids`: `resolve`, `identity new|show`, `key new`;
//! - `calls`: `call`, `tools`, `tool`; [`testnet`]: `testnet`;
//! - `status`: `status`, `config check`, and the log format (`--log-format`);
//! - `output`: tables and JSON for the terminal.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agentnet_did::card::{self, KeySource};
use agentnet_did::didkey::{self, KeyFormat};
use agentnet_did::key::Jwk;
use agentnet_did::resolver::Options as ResolverOptions;
use agentnet_did::web::HttpOptions;
use agentnet_did::{json, text, DidUrl, Resolver, SecretKey};
use anyhow::{bail, Context as _};
use clap::parser::ValueSource;
use clap::{Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};

use crate::admin::{self, PublishRequest};
use crate::config::{self, FileConfig, Overrides};
use crate::network::directory::Directory;
use crate::{call, daemon, data_dir, identity};
use agentnet_discovery::store::Limits as StoreLimits;

#[macro_use]
mod output;
mod ard;
mod audit;
mod calls;
mod cards;
mod delegate;
mod dids;
mod endorse;
pub mod netns;
mod network;
mod node;
mod sim_node;
mod status;
pub mod testnet;

use audit::audit_cmd;
use calls::{call_cmd, tool_cmd, tools_cmd};
use cards::{sign_card, verify_card};
use dids::{identity_list, identity_new, identity_show, key_new, resolve};
use network::{discover, peers, publish, trust_accept, unpublish};
use node::{init, mcp_stdio, up};
use output::{
    duration, expires_in, json_line, json_text, print_table, rfc3339, shell_word, unix_time,
};
use status::{config_check, status, LogFormat};

/// Largest card, DID document or JWK file we read.
const MAX_INPUT: u64 = 1024 * 1024;

/// agentnet: a peer node for an open network of AI agents, with DID identities.
#[derive(Debug, Parser)]
#[command(name = "agentnet", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How logs are written on standard error: text (coloured on a terminal only), or json
    /// (one JSON object per line).
    #[arg(
        long,
        global = true,
        value_enum,
        env = "AGENTNET_LOG_FORMAT",
        default_value_t
    )]
    log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the node's key if there is none, and print its DID.
    Init {
        #[command(flatten)]
        dir: DataDirArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Resolve a DID (did:key locally, did:web and did:wba over HTTPS) and print its document.
    Resolve {
        /// The DID.
        did: String,
        /// Print a DID resolution result (didDocument, didResolutionMetadata) as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        net: NetArgs,
        /// Verification method type for did:key documents.
        #[arg(long, value_enum, default_value_t = KeyFormatArg::Multikey)]
        key_format: KeyFormatArg,
        /// Add the X25519 keyAgreement key to did:key documents.
        #[arg(long)]
        key_agreement: bool,
    },
    /// Sign and verify A2A Agent Cards.
    Card {
        #[command(subcommand)]
        command: CardCommand,
    },
    /// Run the node: the libp2p network, the store, the public HTTP listener (well-known files)
    /// and the loopback admin listener the other commands use.
    Up(UpArgs),
    /// Publish an Agent Card through the running node, re-announced (after restarts too) until
    /// `agentnet unpublish`.
    Publish {
        /// The Agent Card JSON file (`-` for standard input); it needs skills with tags.
        #[arg(long)]
        card: PathBuf,
        /// Lifetime of each advertisement, seconds (re-announced at 2/3 of it).
        #[arg(long, default_value_t = admin::DEFAULT_TTL)]
        ttl: u64,
        /// The agent's key (a private Ed25519 JWK file); default: the node's key. It is
        /// installed into <data-dir>/agents/<did>.jwk (mode 0600) for the node to sign with;
        /// the key itself is never sent over HTTP.
        #[arg(long, conflicts_with = "as_did")]
        key: Option<PathBuf>,
        /// Publish as this identity, whose key is in <data-dir>/agents/ (a did:web or did:wba
        /// made by `agentnet identity new`, or a did:key installed by an earlier `--key`).
        #[arg(long = "as", value_name = "DID")]
        as_did: Option<String>,
        #[command(flatten)]
        node: NodeArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop publishing an agent: no more re-announcing, and its advert leaves this node's index
    /// (copies other nodes hold expire at their TTL).
    Unpublish {
        /// The agent's DID.
        #[arg(long)]
        did: String,
        #[command(flatten)]
        node: NodeArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create keys for agents' did:key identities.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Create and list agent identities under a domain (did:web, did:wba).
    Identity {
        #[command(subcommand)]
        command: IdentityCommand,
    },
    /// Call an agent over A2A: find its card (the node's index, then the network), verify it,
    /// send the message signed with your DID, follow the task and print its artifacts.
    Call(CallArgs),
    /// Grant a DID a capability on your behalf (or pass one on, narrower, with --from): writes
    /// a delegation chain that `call`, `tool` and `mcp` present with --delegation FILE.
    Delegate(delegate::DelegateArgs),
    /// The audit log of the receipts of the tasks your calls ran: list, show a task's tree
    /// (`--task ID`), `verify` every signature and link, `export FILE` for others to verify.
    Audit(audit::AuditArgs),
    /// List the tools of the MCP server an agent advertises on its card (verified first;
    /// every request signed with your DID).
    Tools(ToolsArgs),
    /// Call one tool of the MCP server an agent advertises on its card (verified first; every
    /// request signed with your DID).
    Tool(ToolArgs),
    /// Import agents from other catalogs (`import ard https://domain/`).
    Import {
        #[command(subcommand)]
        command: ard::ImportCommand,
    },
    /// Find agents by skill tag: the node's index, then the network.
    Discover {
        /// A skill tag; repeat to require several.
        #[arg(long = "skill", required = true)]
        skills: Vec<String>,
        /// At most this many.
        #[arg(long, default_value_t = admin::DEFAULT_LIMIT)]
        limit: usize,
        #[command(flatten)]
        node: NodeArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve MCP on standard input and output, for an MCP host (desktop assistant, IDE): tools
    /// to discover agents, verify their cards and send them messages. Uses the node running on
    /// the data directory, or starts one in this process (stopped when standard input ends).
    /// Standard output carries only MCP messages; logs go to standard error.
    Mcp(McpArgs),
    /// Show the running node: DID, uptime, addresses, peers, bootstrap dials, hosted and
    /// published agents with their expiry, store use.
    Status {
        #[command(flatten)]
        node: NodeArg,
        /// Print JSON (times also as RFC 3339).
        #[arg(long)]
        json: bool,
    },
    /// Check the node's configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Approve what discovery shows: `trust accept DID` pins an agent's card as it is now.
    Trust {
        #[command(subcommand)]
        command: TrustCommand,
    },
    /// A node of libp2p's gossipsub-interop contract, for Shadow and other harnesses: reads
    /// the harness's params.json, joins, publishes signed advertisements, prints JSON lines
    /// (docs/SIMULATION.md, "Past one machine").
    SimNode(sim_node::SimNodeArgs),
    /// Vouch for an agent's DID, for skills, for a while: signed with the node's key and
    /// gossiped; nodes that trust this node's DID as an endorser rank the agent `endorsed`.
    Endorse(endorse::EndorseArgs),
    /// The endorsements the node made, or (with a DID) those of it the node trusts.
    Endorsements(endorse::EndorsementsArgs),
    /// Show the running node's peers and counters.
    Peers {
        #[command(flatten)]
        node: NodeArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Start several nodes on loopback in this process (or, with --processes, each in a child
    /// process running `agentnet up`), publish sample agents from some and discover them from
    /// the last: the whole network at work, in seconds.
    Testnet {
        /// How many nodes, 2 to 32.
        #[arg(
            long,
            default_value_t = testnet::DEFAULT_NODES,
            value_parser = clap::value_parser!(u8)
                .range(i64::from(testnet::MIN_NODES)..=i64::from(testnet::MAX_NODES)),
        )]
        nodes: u8,
        /// Or: this many nodes, 2 to 32, each a real `agentnet up` process of this binary on
        /// loopback (its config and log in <DIR>/node-<i>.toml and .log); the same run.
        #[arg(
            long,
            value_name = "N",
            conflicts_with = "nodes",
            value_parser = clap::value_parser!(u8)
                .range(i64::from(testnet::MIN_NODES)..=i64::from(testnet::MAX_NODES)),
        )]
        processes: Option<u8>,
        /// With --processes, as root: each node process in a network namespace of its own
        /// (node M at 10.77.0.M on one bridge, made with iproute2's `ip`), removed at the end.
        #[arg(long, requires = "processes")]
        netns: bool,
        /// Keep the nodes' data in <DIR>/node-1 … node-N; default: a temporary directory,
        /// removed at exit.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Print one JSON object at the end; progress goes to standard error.
        #[arg(long)]
        json: bool,
        /// Keep the nodes running until Ctrl-C, to try the other commands against them.
        #[arg(long)]
        keep: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the configuration `up` would run with these flags and this file (TOML, or JSON
    /// with --json), or say on one line why it is invalid (exit 1); starts nothing.
    Check(UpArgs),
}

#[derive(Debug, Args)]
struct UpArgs {
    #[command(flatten)]
    dir: DataDirArg,
    /// libp2p listen address (repeatable); default: TCP and QUIC on all interfaces, random ports.
    #[arg(long, value_name = "MULTIADDR")]
    listen: Vec<String>,
    /// Peer to dial at start, e.g. /ip4/203.0.113.7/tcp/4001/p2p/12D3Koo… (repeatable).
    #[arg(long, value_name = "MULTIADDR")]
    bootstrap: Vec<String>,
    /// The node's configuration file (TOML): `[node]` settings (each flag here overrides its
    /// value), `[tasks]` retention, `[auth]` verifier bounds, and the hosted A2A agents
    /// (`[[agent]]`: echo, ask, tck, command, proxy). See docs/A2A.md.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address of the public HTTP listener (well-known files, hosted agents); port 0 picks a
    /// free one. Default 127.0.0.1:7878.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// How clients reach the public listener, http(s)://host[:port] (behind a proxy, or when
    /// listening on 0.0.0.0); default http://<bound address>.
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// Address of the admin API listener: a loopback address only; port 0 (the default) picks a
    /// free one. The commands find it in <data-dir>/node.json and authenticate with the token
    /// in <data-dir>/admin.token, written anew at every start. Default 127.0.0.1:0.
    #[arg(long, value_name = "ADDR")]
    admin: Option<String>,
    /// Do not look for peers on the LAN with mDNS.
    #[arg(long)]
    no_mdns: bool,
    /// Most MiB of other nodes' adverts (with their index and replay records) the store keeps;
    /// past it, new agents from others are refused until expired ones are swept.
    #[arg(long, value_name = "MIB", default_value_t = StoreLimits::default().max_total_bytes >> 20)]
    store_max_mib: u64,
    /// Most MiB of adverts naming one publishing peer.
    #[arg(long, value_name = "MIB", default_value_t = StoreLimits::default().max_peer_bytes >> 20)]
    store_peer_mib: u64,
    /// Refuse other nodes' adverts while the store's disk has less than this many MiB free
    /// (the node's own publishing goes on).
    #[arg(long, value_name = "MIB", default_value_t = StoreLimits::default().min_free_bytes >> 20)]
    store_min_free_mib: u64,
    /// Refuse new peer connections while the node's resident memory is above this many MiB
    /// (connections already open stay); 0: no such bound.
    #[arg(long, value_name = "MIB", default_value_t = daemon::DEFAULT_MAX_MEMORY_MIB)]
    max_memory_mib: u64,
    /// How the node resolves did:web/did:wba callers (and the agents it calls): a local
    /// testnet's documents on loopback need `--allow-http-loopback` or `--ca-cert`.
    #[command(flatten)]
    net: NetArgs,
    /// Print the start banner as one JSON line.
    #[arg(long)]
    json: bool,
}

/// Which running node a command talks to.
#[derive(Debug, Args)]
struct NodeArg {
    /// The node's admin API URL (e.g. http://127.0.0.1:7879); default: the one recorded in
    /// <data-dir>/node.json. The token always comes from <data-dir>/admin.token.
    #[arg(long, value_name = "URL")]
    node: Option<String>,
    /// The node's data directory.
    #[arg(long, env = "AGENTNET_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum KeyCommand {
    /// Write a new Ed25519 key (a private JWK, mode 0600; an existing file is never
    /// overwritten) and print its did:key: an agent's identity for `publish --key` and
    /// `card sign --key`.
    New {
        /// The key file to create.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum IdentityCommand {
    /// Create a key and the DID document of an identity under a domain; the key goes into
    /// <data-dir>/agents/ (mode 0600), the document beside it, to be served at the URL printed.
    New {
        /// did:web identity: `host[%3Aport][:path:segments]`, e.g. `example.com:agents:x`
        /// (served at https://example.com/agents/x/did.json).
        #[arg(
            long,
            value_name = "ID",
            conflicts_with = "wba",
            required_unless_present = "wba"
        )]
        web: Option<String>,
        /// did:wba identity with the ANP `e1_` key binding: `host[%3Aport]:path[:segments]`,
        /// e.g. `example.com:agents`; the last segment `e1_<key thumbprint>` is added.
        #[arg(long, value_name = "ID")]
        wba: Option<String>,
        /// Also write the DID document here.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        #[command(flatten)]
        dir: DataDirArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the identities under a domain this data directory holds, each with the URL its
    /// document must be served at.
    List {
        #[command(flatten)]
        dir: DataDirArg,
        /// Print JSON, one object per identity.
        #[arg(long)]
        json: bool,
    },
    /// Print the DID document of an identity, and where to serve it.
    Show {
        /// The DID.
        did: String,
        #[command(flatten)]
        dir: DataDirArg,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").args(["did", "skill", "ad"]).required(true).multiple(true)))]
struct CallArgs {
    /// The message.
    text: String,
    /// The agent's DID (looked up in the node's index; with --skill, only this agent).
    #[arg(long)]
    did: Option<String>,
    /// A skill tag the agent must have (repeat to require several); the first agent found
    /// whose card verifies and offers an interface we speak is called.
    #[arg(long = "skill")]
    skill: Vec<String>,
    /// Or: an ANP agent, by the URL of its Agent Description (`ad.json`), or by a DID whose
    /// document (an `AgentDescription` service) or card in the node's index links one; verified
    /// as its DID's (with --did, that one); the call goes to its OpenRPC interface, signed.
    #[arg(long, value_name = "URL|DID", conflicts_with_all = ["skill", "task", "stream"])]
    ad: Option<String>,
    /// Continue this task (waiting for input) instead of starting one.
    #[arg(long, value_name = "ID")]
    task: Option<String>,
    /// Follow the task over SSE instead of polling.
    #[arg(long)]
    stream: bool,
    /// Print the result as one JSON line.
    #[arg(long)]
    json: bool,
    /// Sign requests as this identity (its key in <data-dir>/agents/); default: the node's
    /// did:key.
    #[arg(long = "as", value_name = "DID", conflicts_with = "anonymous")]
    as_did: Option<String>,
    /// Send unsigned requests.
    #[arg(long)]
    anonymous: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Present this delegation chain (written by `agentnet delegate`; its last link must be to
    /// the DID this call signs as) in the message's metadata.
    #[arg(long, value_name = "FILE", conflicts_with = "anonymous")]
    delegation: Option<PathBuf>,
    /// Present the chain as it is: do not hand the agent called a link to act on it onward.
    #[arg(long, requires = "delegation")]
    no_hand_off: bool,
    #[command(flatten)]
    reach: Reach,
}

/// Where the commands that call agents find them and what they may reach.
#[derive(Debug, Args)]
struct Reach {
    /// Allow agent interfaces and MCP endpoints on loopback and private addresses, and plain
    /// http (testnets; `--local` implies it).
    #[arg(long)]
    allow_private: bool,
    #[command(flatten)]
    node: NodeArg,
    #[command(flatten)]
    net: NetArgs,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").args(["did", "skill"]).required(true)))]
struct RemoteMcpArgs {
    /// The agent's DID (its card is looked up in the node's index).
    #[arg(long)]
    did: Option<String>,
    /// Or: the first agent with this skill tag (repeatable: all of them) whose verified card
    /// advertises an MCP endpoint.
    #[arg(long, value_name = "TAG")]
    skill: Vec<String>,
    /// Print the result as one JSON line.
    #[arg(long)]
    json: bool,
    /// Sign requests as this identity (its key in <data-dir>/agents/); default: the node's
    /// did:key.
    #[arg(long = "as", value_name = "DID")]
    as_did: Option<String>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout_secs: u64,
    /// Present this delegation chain in the tool call's `_meta.actorChain` (handed off to the
    /// agent when the chain allows; see `agentnet delegate`).
    #[arg(long, value_name = "FILE")]
    delegation: Option<PathBuf>,
    #[command(flatten)]
    reach: Reach,
}

#[derive(Debug, Args)]
struct ToolsArgs {
    #[command(flatten)]
    remote: RemoteMcpArgs,
    /// Accept the tools as listed now: `tool` calls a tool only while it is the one accepted
    /// (the node pins each tool object when first listed).
    #[arg(long)]
    accept: bool,
}

#[derive(Debug, Args)]
struct ToolArgs {
    /// The tool's name.
    name: String,
    /// Its arguments, a JSON object.
    #[arg(long, default_value = "{}")]
    args: String,
    #[command(flatten)]
    remote: RemoteMcpArgs,
}

#[derive(Debug, Args)]
struct McpArgs {
    #[command(flatten)]
    dir: DataDirArg,
    /// Sign the A2A requests of send_message, get_task and cancel_task as this identity (its
    /// key in <data-dir>/agents/); default: the node's did:key.
    #[arg(long = "as", value_name = "DID")]
    as_did: Option<String>,
    /// Allow agent interfaces on loopback and private addresses, and plain http (testnets).
    #[arg(long)]
    allow_private: bool,
    /// Peers to dial if a node is started here (no node runs on the data directory).
    #[arg(long, value_name = "MULTIADDR")]
    bootstrap: Vec<String>,
    /// Present this delegation chain on every A2A message and tool call the tools make, handed
    /// off to each agent called when the chain allows (see `agentnet delegate`).
    #[arg(long, value_name = "FILE")]
    delegation: Option<PathBuf>,
    #[command(flatten)]
    net: NetArgs,
}

#[derive(Debug, Subcommand)]
enum TrustCommand {
    /// Accept DID's card as the running node has it now: `discover` shows it `pinned`, not
    /// `CHANGED`, until its name, description, skills, interfaces or security change again.
    Accept {
        /// The agent's DID.
        did: String,
        #[command(flatten)]
        node: NodeArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum CardCommand {
    /// Sign a card (JWS, EdDSA, kid = DID URL) and print the signed card.
    Sign {
        /// The Agent Card JSON file (`-` for standard input).
        card: PathBuf,
        #[command(flatten)]
        dir: DataDirArg,
        /// Sign with this key file (a private Ed25519 JWK) instead of the node's key; not with
        /// a --data-dir on the command line (AGENTNET_DATA_DIR is then ignored).
        #[arg(long)]
        key: Option<PathBuf>,
        /// The kid (verification method DID URL); default: the key's did:key.
        #[arg(long)]
        kid: Option<String>,
    },
    /// Verify every signature on a card, resolving each kid's DID.
    Verify {
        /// The signed Agent Card JSON file (`-` for standard input).
        card: PathBuf,
        /// Verify with this public JWK instead of resolving the kid.
        #[arg(long)]
        jwk: Option<PathBuf>,
        #[command(flatten)]
        net: NetArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
struct DataDirArg {
    /// The node's data directory.
    #[arg(long, env = "AGENTNET_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct NetArgs {
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
    local: bool,
    /// Allow did:web/did:wba on loopback hosts over plain http (local testnets, tests).
    #[arg(long)]
    allow_http_loopback: bool,
    /// Trust this extra root certificate (PEM) for did:web/did:wba.
    #[arg(long)]
    ca_cert: Option<PathBuf>,
    /// HTTP timeout in seconds.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KeyFormatArg {
    /// Multikey (did:key v0.7 default).
    Multikey,
    /// Ed25519VerificationKey2020 / X25519KeyAgreementKey2020.
    #[value(name = "2020")]
    Ed2020,
}

/// Run the command line; the process exit code is 0 on success, 1 on failure, 2 on bad usage.
pub fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    refuse_typed_conflicts(&matches);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    status::init_logging(cli.log_format);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            status::notice("ERROR", &format!("starting the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) if output::is_reader_gone(&e) => ExitCode::SUCCESS,
        Err(e) => {
            status::notice("ERROR", &text::sanitize(&one_line(&e)));
            ExitCode::FAILURE
        }
    }
}

/// `error` and its causes on one line, each said once: where an error's message already
/// includes its source's (thiserror's `"…: {0}"` with `#[source]`), `{:#}` would repeat it.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
        if message.is_empty() || line.contains(&message) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&message);
    }
    line
}

/// Conflicts clap's `conflicts_with` cannot express: it counts a value from the environment as
/// given, and `AGENTNET_DATA_DIR` set for the other commands must not stop `card sign --key`.
/// Exits with clap's usage error (code 2) naming both flags.
fn refuse_typed_conflicts(matches: &clap::ArgMatches) {
    let Some(("card", card)) = matches.subcommand() else {
        return;
    };
    let Some(("sign", sign)) = card.subcommand() else {
        return;
    };
    if sign.value_source("key") == Some(ValueSource::CommandLine)
        && sign.value_source("data_dir") == Some(ValueSource::CommandLine)
    {
        let kind = clap::error::ErrorKind::ArgumentConflict;
        let why = "the argument '--key <KEY>' cannot be used with '--data-dir <DATA_DIR>': \
                   give the key file or the data directory whose node key signs, not both";
        // The usage line of `agentnet card sign`, not of `agentnet`.
        let mut cli = Cli::command();
        cli.build();
        match cli
            .find_subcommand_mut("card")
            .and_then(|card| card.find_subcommand_mut("sign"))
        {
            Some(sign) => sign.error(kind, why).exit(),
            None => Cli::command().error(kind, why).exit(),
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Init { dir, json } => init(dir.data_dir.as_deref(), json),
        Command::Resolve {
            did,
            json,
            net,
            key_format,
            key_agreement,
        } => {
            let mut opts = resolver_options(&net, net.local)?;
            opts.did_key = didkey::Options {
                format: match key_format {
                    KeyFormatArg::Multikey => KeyFormat::Multikey,
                    KeyFormatArg::Ed2020 => KeyFormat::Ed25519VerificationKey2020,
                },
                key_agreement,
            };
            resolve(&did, json, opts).await
        }
        Command::Card {
            command:
                CardCommand::Sign {
                    card,
                    dir,
                    key,
                    kid,
                },
        } => sign_card(
            &card,
            dir.data_dir.as_deref(),
            key.as_deref(),
            kid.as_deref(),
        ),
        Command::Card {
            command:
                CardCommand::Verify {
                    card,
                    jwk,
                    net,
                    json,
                },
        } => verify_card(&card, jwk.as_deref(), &net, json).await,
        Command::Up(args) => up(args).await,
        Command::Publish {
            card,
            ttl,
            key,
            as_did,
            node,
            json,
        } => publish(&card, ttl, key.as_deref(), as_did, &node, json).await,
        Command::Unpublish { did, node, json } => unpublish(&did, &node, json).await,
        Command::Key {
            command: KeyCommand::New { file, json },
        } => key_new(&file, json),
        Command::Identity {
            command:
                IdentityCommand::New {
                    web,
                    wba,
                    out,
                    dir,
                    json,
                },
        } => {
            let spec = match (web, wba) {
                (Some(w), _) => identity::DomainSpec::Web(w),
                (None, Some(w)) => identity::DomainSpec::Wba(w),
                (None, None) => bail!("give --web or --wba"),
            };
            identity_new(&spec, out.as_deref(), dir.data_dir.as_deref(), json)
        }
        Command::Identity {
            command: IdentityCommand::Show { did, dir },
        } => identity_show(&did, dir.data_dir.as_deref()),
        Command::Identity {
            command: IdentityCommand::List { dir, json },
        } => identity_list(dir.data_dir.as_deref(), json),
        Command::Call(args) => call_cmd(args).await,
        Command::Delegate(args) => delegate::delegate_cmd(args),
        Command::Audit(args) => audit_cmd(args).await,
        Command::Tools(args) => tools_cmd(args).await,
        Command::Tool(args) => tool_cmd(args).await,
        Command::Import { command } => ard::import(command).await,
        Command::Discover {
            skills,
            limit,
            node,
            json,
        } => discover(&skills, limit, &node, json).await,
        Command::Peers { node, json } => peers(&node, json).await,
        Command::Endorse(args) => endorse::endorse_cmd(args).await,
        Command::SimNode(args) => sim_node::sim_node_cmd(args).await,
        Command::Endorsements(args) => endorse::endorsements_cmd(args).await,
        Command::Trust {
            command: TrustCommand::Accept { did, node, json },
        } => trust_accept(&did, &node, json).await,
        Command::Status { node, json } => status(&node, json).await,
        Command::Config {
            command: ConfigCommand::Check(args),
        } => config_check(&args),
        Command::Mcp(args) => mcp_stdio(args).await,
        Command::Testnet {
            nodes,
            processes,
            netns,
            data_dir,
            json,
            keep,
        } => {
            testnet::run(testnet::Options {
                nodes: processes.unwrap_or(nodes),
                mode: match (processes, netns) {
                    // clap's `requires` lets it through beside --nodes, which --processes
                    // conflicts with.
                    (None, true) => bail!(
                        "--netns runs each node as a process in a namespace of its own: use \
                         --processes N --netns (the nodes of --nodes share this process)"
                    ),
                    (None, false) => testnet::Mode::InProcess,
                    (Some(_), false) => testnet::Mode::Processes,
                    (Some(_), true) => testnet::Mode::Namespaces,
                },
                data_dir,
                json,
                keep,
            })
            .await
        }
    }
}

/// Time the admin commands give the node: a discovery may wait for DHT queries.
const ADMIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

fn admin_client(node: &NodeArg) -> anyhow::Result<admin::Client> {
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
fn is_local(net: &NetArgs, dir: &Path) -> bool {
    net.local || daemon::NodeFile::read(dir).is_ok_and(|f| f.local)
}

/// The resolver options of `net`; `local` ([`is_local`]) allows did:web/did:wba on loopback
/// over plain http, as `--allow-http-loopback` does.
fn resolver_options(net: &NetArgs, local: bool) -> anyhow::Result<ResolverOptions> {
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

/// `error` with what to do when it is an agent interface or MCP endpoint refused for being on
/// plain http or a private address, and the command did not allow those.
fn private_hint(error: anyhow::Error, allowed: bool) -> anyhow::Error {
    // The MCP client's `Error::Call` is transparent: its `source()` skips the `CallError`,
    // so the chain alone never shows it (`tools` and `tool` lost the hint that way).
    let refused = error.chain().any(|c| {
        matches!(c.downcast_ref(), Some(call::CallError::Address { .. }))
            || matches!(
                c.downcast_ref(),
                Some(crate::call::mcp::Error::Call(
                    call::CallError::Address { .. }
                ))
            )
    });
    if refused && !allowed {
        anyhow::anyhow!(
            "{}; an agent on this machine or a LAN needs --local (or a node started with \
             `agentnet up --local`)",
            one_line(&error)
        )
    } else {
        error
    }
}

fn read_bounded(path: &Path) -> anyhow::Result<Vec<u8>> {
    let mut buf = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .take(MAX_INPUT + 1)
            .read_to_end(&mut buf)
            .context("reading standard input")?;
    } else {
        let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        f.take(MAX_INPUT + 1)
            .read_to_end(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
    }
    if buf.len() as u64 > MAX_INPUT {
        bail!("{} is larger than {} bytes", path.display(), MAX_INPUT);
    }
    Ok(buf)
}

/// A JSON file read strictly: bounded size, depth and values, no member named twice (a card
/// with a repeated member could be read one way here and another way by a verifier).
fn read_json(path: &Path) -> anyhow::Result<Value> {
    let bytes = read_bounded(path)?;
    json::from_slice(&bytes, FILE_JSON).map_err(|e| match e {
        json::JsonError::Syntax(why) => anyhow::anyhow!("{} is not JSON: {why}", path.display()),
        e => anyhow::anyhow!("{}: {e}", path.display()),
    })
}

/// Bounds of JSON files given on the command line (cards, DID documents).
const FILE_JSON: json::Limits = json::Limits {
    max_depth: 128,
    max_values: 1 << 20,
};

#[cfg(test)]
mod cli_tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("binding an HTTP listener to 127.0.0.1:1: {0}")]
    struct Bind(#[source] std::io::Error);

    #[test]
    fn an_error_says_each_cause_once_on_one_line() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use");
        let e = anyhow::Error::new(Bind(io)).context("starting the node");
        assert_eq!(
            one_line(&e),
            "starting the node: binding an HTTP listener to 127.0.0.1:1: Address already in use"
        );
        let e = anyhow::anyhow!("first\n  second").context("outer");
        assert_eq!(one_line(&e), "outer: first second");
    }
}
