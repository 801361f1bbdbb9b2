//! The `agentnet` command line: the only part of the library, with [`testnet`], that prints.
//!
//! - this module: the top-level [`Cli`] with its commands, [`main`], and the dispatch;
//! - `args`: the arguments several commands share (the node, the data directory, the resolver
//!   options, the reach of calls), and the admin client; `input`: files read bounded;
//! - `node`: `init`, `up` (and its banner), `mcp`;
//! - `network`: `publish`, `unpublish`, `discover`, `peers`, `trust accept`;
//! - `cards`: `card sign|verify`; `dids`: `resolve`, `identity new|show|list`, `key new`;
//! - `calls`: `call`, `tools`, `tool`; [`testnet`]: `testnet`;
//! - `status`: `status`, `config check`, and the log format (`--log-format`);
//! - `output`: tables and JSON for the terminal.
//!
//! Each command's own arguments (its `clap::Args` or `clap::Subcommand` types) live in its file.

use std::path::PathBuf;
use std::process::ExitCode;

use agentnet_did::didkey::{self, KeyFormat};
use agentnet_did::text;
use anyhow::bail;
use clap::parser::ValueSource;
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

use crate::{admin, identity};

#[macro_use]
mod output;
mod ard;
mod args;
mod audit;
mod calls;
mod cards;
mod delegate;
mod dids;
mod endorse;
mod input;
pub mod netns;
mod network;
mod node;
mod sim_node;
mod status;
pub mod testnet;

use args::{resolver_options, DataDirArg, NetArgs, NodeArg};
use audit::audit_cmd;
use calls::{call_cmd, tool_cmd, tools_cmd, CallArgs, ToolArgs, ToolsArgs};
use cards::{sign_card, verify_card, CardCommand};
use dids::{
    identity_list, identity_new, identity_show, key_new, resolve, IdentityCommand, KeyCommand,
    KeyFormatArg,
};
use network::{discover, peers, publish, trust_accept, unpublish, TrustCommand};
use node::{init, mcp_stdio, up, McpArgs, UpArgs};
use status::{config_check, status, ConfigCommand, LogFormat};

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
