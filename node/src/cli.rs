//! The `agentnet` command line.

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
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};

use crate::admin::{self, PublishRequest};
use crate::config::{self, FileConfig, Overrides};
use crate::directory::Directory;
use crate::{call, daemon, data_dir, identity, testnet};
use agentnet_discovery::store::Limits as StoreLimits;

/// Largest card, DID document or JWK file we read.
const MAX_INPUT: u64 = 1024 * 1024;

/// agentnet: a peer node for an open network of AI agents, with DID identities.
#[derive(Debug, Parser)]
#[command(name = "agentnet", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// Publish an Agent Card through the running node, re-announced until the node stops.
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
    /// Create and list agent identities under a domain (did:web, did:wba).
    Identity {
        #[command(subcommand)]
        command: IdentityCommand,
    },
    /// Call an agent over A2A: find its card (the node's index, then the network), verify it,
    /// send the message signed with your DID, follow the task and print its artifacts.
    Call(CallArgs),
    /// List the tools of the MCP server an agent advertises on its card (verified first;
    /// every request signed with your DID).
    Tools(ToolsArgs),
    /// Call one tool of the MCP server an agent advertises on its card (verified first; every
    /// request signed with your DID).
    Tool(ToolArgs),
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
    /// Show the running node's peers and counters.
    Peers {
        #[command(flatten)]
        node: NodeArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Start several nodes on loopback in this process, publish sample agents from some and
    /// discover them from the last: the whole network at work, in seconds.
    Testnet {
        /// How many nodes, 2 to 32.
        #[arg(
            long,
            default_value_t = testnet::DEFAULT_NODES,
            value_parser = clap::value_parser!(u8)
                .range(i64::from(testnet::MIN_NODES)..=i64::from(testnet::MAX_NODES)),
        )]
        nodes: u8,
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
    /// (`[[agent]]`: echo, ask, command, proxy). See docs/A2A.md.
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
    /// Print the DID document of an identity, and where to serve it.
    Show {
        /// The DID.
        did: String,
        #[command(flatten)]
        dir: DataDirArg,
    },
}

#[derive(Debug, Args)]
struct CallArgs {
    /// The message.
    text: String,
    /// The agent's DID (looked up in the node's index; with --skill, only this agent).
    #[arg(long, required_unless_present = "skill")]
    did: Option<String>,
    /// A skill tag the agent must have (repeat to require several); the first agent found
    /// whose card verifies and offers an interface we speak is called.
    #[arg(long = "skill")]
    skill: Vec<String>,
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
    /// Allow agent interfaces on loopback and private addresses, and plain http (testnets).
    #[arg(long)]
    allow_private: bool,
    #[command(flatten)]
    node: NodeArg,
    #[command(flatten)]
    net: NetArgs,
}

#[derive(Debug, Args)]
struct RemoteMcpArgs {
    /// The agent's DID (its card is looked up in the node's index).
    #[arg(long, required_unless_present = "skill", conflicts_with = "skill")]
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
    /// Allow MCP endpoints on loopback and private addresses, and plain http (testnets).
    #[arg(long)]
    allow_private: bool,
    #[command(flatten)]
    node: NodeArg,
    #[command(flatten)]
    net: NetArgs,
}

#[derive(Debug, Args)]
struct ToolsArgs {
    #[command(flatten)]
    remote: RemoteMcpArgs,
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
    #[command(flatten)]
    net: NetArgs,
}

#[derive(Debug, Subcommand)]
enum CardCommand {
    /// Sign a card (JWS, EdDSA, kid = DID URL) and print the signed card.
    Sign {
        /// The Agent Card JSON file (`-` for standard input).
        card: PathBuf,
        #[command(flatten)]
        dir: DataDirArg,
        /// Sign with this key file (a private Ed25519 JWK) instead of the node's key.
        #[arg(long, conflicts_with = "data_dir")]
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
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGENTNET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", text::sanitize(&format!("{e:#}")));
            ExitCode::FAILURE
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
            let mut opts = resolver_options(&net)?;
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
        Command::Call(args) => call_cmd(args).await,
        Command::Tools(args) => tools_cmd(args).await,
        Command::Tool(args) => tool_cmd(args).await,
        Command::Discover {
            skills,
            limit,
            node,
            json,
        } => discover(&skills, limit, &node, json).await,
        Command::Peers { node, json } => peers(&node, json).await,
        Command::Mcp(args) => mcp_stdio(args).await,
        Command::Testnet {
            nodes,
            data_dir,
            json,
            keep,
        } => {
            testnet::run(testnet::Options {
                nodes,
                data_dir,
                json,
                keep,
            })
            .await
        }
    }
}

/// `n` MiB in bytes, refused when it overflows.
fn mib(flag: &str, n: u64) -> anyhow::Result<u64> {
    n.checked_mul(1 << 20)
        .ok_or_else(|| anyhow::anyhow!("--{flag} {n}: too large"))
}

async fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    let cfg = match &args.config {
        Some(p) => FileConfig::read(p)?,
        None => Default::default(),
    };
    let node = cfg.node(&Overrides {
        data_dir: args.dir.data_dir.clone(),
        listen: args.listen.clone(),
        bootstrap: args.bootstrap.clone(),
        http: args.http.clone(),
        admin: args.admin.clone(),
        public_url: args.public_url.clone(),
        no_mdns: args.no_mdns,
    })?;
    let opts = daemon::Options {
        data_dir: data_dir::resolve(node.data_dir.as_deref())?,
        listen: node.listen,
        bootstrap: node.bootstrap,
        http: node.http,
        admin: node.admin,
        public_url: node.public_url,
        http_limits: crate::server::Limits::PUBLIC,
        admin_limits: crate::server::Limits::ADMIN,
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
        resolver: resolver_options(&args.net)?,
    };
    let running = daemon::start(opts).await?;
    banner(&running, args.json)?;
    running.wait().await?;
    Ok(ExitCode::SUCCESS)
}

/// What `agentnet up` prints once the node runs: one JSON line (`node.json`'s contents), or
/// where everything listens.
fn banner(node: &daemon::Running, json_out: bool) -> anyhow::Result<()> {
    if let Some(path) = node.created_key() {
        eprintln!("created a new node key at {}", path.display());
    }
    let info = &node.info;
    if json_out {
        println!("{}", serde_json::to_string(info)?);
        return Ok(());
    }
    println!("did: {}", info.did);
    println!("peer id: {}", info.peer_id);
    println!(
        "listening on http://{} (well-known files, hosted agents)",
        info.http
    );
    for h in node.hosted() {
        println!(
            "hosting {} ({}) at {}",
            h.id,
            h.key.did_key(),
            crate::hosted::agent_url(node.public_url(), &h.id)
        );
    }
    println!(
        "admin API on http://{} (token in {})",
        info.admin,
        crate::auth::token_file(node.data_dir()).display()
    );
    for a in &info.listen {
        println!("listening on {a}");
    }
    Ok(())
}

/// `agentnet mcp`: MCP on stdio, reading the node running on the data directory if its admin
/// API answers, else one started here (quiet, stopped when standard input ends, so that
/// `node.json` does not outlive it).
async fn mcp_stdio(args: McpArgs) -> anyhow::Result<ExitCode> {
    let opts = crate::mcp::stdio::Options {
        data_dir: data_dir::resolve(args.dir.data_dir.as_deref())?,
        as_did: args.as_did,
        allow_private: args.allow_private,
        resolver: resolver_options(&args.net)?,
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
            o.max_memory = Some(daemon::DEFAULT_MAX_MEMORY_MIB as usize * 1024 * 1024);
            let node = daemon::start(o).await?;
            tracing::info!(admin = %node.info.admin, "started a node in this process");
            (Arc::new(node.admin_state().clone()), Some(node))
        }
    };
    let result = crate::mcp::stdio::run(directory, &opts).await;
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

/// Time the admin commands give the node: a discovery may wait for DHT queries.
const ADMIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

fn admin_client(node: &NodeArg) -> anyhow::Result<admin::Client> {
    let dir = data_dir::resolve(node.data_dir.as_deref())?;
    Ok(match &node.node {
        Some(url) => {
            let token = crate::auth::Token::read(&dir).map_err(admin::ClientError::Token)?;
            admin::Client::new(url, token, ADMIN_TIMEOUT)?
        }
        None => admin::Client::from_data_dir(&dir, ADMIN_TIMEOUT)?,
    })
}

async fn publish(
    card_path: &Path,
    ttl: u64,
    key: Option<&Path>,
    as_did: Option<String>,
    node: &NodeArg,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let card = read_json(card_path)?;
    // The node checks all of this too; checking here first names the file.
    crate::publisher::check_card(&card)
        .map_err(|e| anyhow::anyhow!("{}: {e}", card_path.display()))?;
    let client = admin_client(node)?;
    // The key stays on this machine: it goes into the node's data directory, and the request
    // names the agent's DID.
    let did = match key {
        Some(p) => {
            let key = SecretKey::load(p)
                .with_context(|| format!("loading the agent key {}", p.display()))?;
            let dir = data_dir::resolve(node.data_dir.as_deref())?;
            Some(data_dir::AgentKeys::new(&dir).install(&key)?)
        }
        None => match as_did {
            Some(did) => {
                // Checked here first (key and document present and matching) to name the
                // problem; the node loads the same files.
                let dir = data_dir::resolve(node.data_dir.as_deref())?;
                data_dir::AgentKeys::new(&dir).load_identity(&did)?;
                Some(did)
            }
            None => None,
        },
    };
    let req = PublishRequest {
        card,
        ttl_secs: ttl,
        did,
    };
    let published = client.publish(&req).await.map_err(|e| match &e {
        admin::ClientError::Refused { reason, .. } if !reason.is_empty() => {
            anyhow::anyhow!("the node refused {} ({reason}): {e}", card_path.display())
        }
        _ => e.into(),
    })?;
    if json_out {
        println!("{}", json_line(&published)?);
    } else {
        println!(
            "published {} (seq {}, tags {}, expires at {})",
            published.did,
            published.seq,
            published.tags.join(","),
            published.expires_at
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn discover(
    skills: &[String],
    limit: usize,
    node: &NodeArg,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    if !(1..=admin::MAX_LIMIT).contains(&limit) {
        bail!("--limit must be between 1 and {}", admin::MAX_LIMIT);
    }
    let found = admin_client(node)?.discover(skills, limit).await?;
    if json_out {
        println!("{}", json_text(&found)?);
        return Ok(ExitCode::SUCCESS);
    }
    if found.is_empty() {
        eprintln!("no agent found with skill {}", skills.join(" + "));
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 3]> = found
        .iter()
        .map(|f| {
            let did = if f.domain_verified {
                f.did.clone()
            } else {
                format!("{} (domain not verified)", f.did)
            };
            [did, f.tags.join(","), f.peer_id.clone()]
        })
        .collect();
    print_table(["DID", "TAGS", "PEER"], &rows);
    Ok(ExitCode::SUCCESS)
}

fn print_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) {
    let mut width = header.map(str::len);
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    // Cells come from the network (DIDs, tags, addresses): escape what a terminal would obey.
    let rows: Vec<[String; N]> = rows
        .iter()
        .map(|r| std::array::from_fn(|i| text::sanitize(&r[i]).into_owned()))
        .collect();
    let rows = &rows[..];
    let line = |cells: [&str; N]| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == N {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        println!("{out}");
    };
    line(header);
    for r in rows {
        line(std::array::from_fn(|i| r[i].as_str()));
    }
}

async fn peers(node: &NodeArg, json_out: bool) -> anyhow::Result<ExitCode> {
    let p = admin_client(node)?.peers().await?;
    if json_out {
        println!("{}", json_text(&p)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("peer id: {}", p.peer_id);
    for a in &p.listen {
        println!("listening on {a}");
    }
    println!("{} connected peer(s)", p.peers.len());
    let rows: Vec<[String; 2]> = p
        .peers
        .iter()
        .map(|x| [x.peer_id.clone(), x.addrs.join(" ")])
        .collect();
    if !rows.is_empty() {
        print_table(["PEER", "ADDRESSES"], &rows);
    }
    let rejected: u64 = p.stats.rejected_by_reason.values().sum();
    println!(
        "advertisements: {} accepted, {} ignored, {} rejected, {} throttled",
        p.stats.accepted, p.stats.ignored, rejected, p.stats.throttled
    );
    for (reason, n) in &p.stats.rejected_by_reason {
        println!("  rejected {reason}: {n}");
    }
    Ok(ExitCode::SUCCESS)
}

fn resolver_options(net: &NetArgs) -> anyhow::Result<ResolverOptions> {
    let mut http = HttpOptions {
        timeout: std::time::Duration::from_secs(net.timeout.max(1)),
        allow_http_loopback: net.allow_http_loopback,
        allow_loopback: net.allow_http_loopback,
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

/// `value` as JSON for standard output, with every character a terminal would act on or hide
/// (controls, bidi overrides, zero-width characters: [`text::is_hidden`]) written as a `\u`
/// escape. serde_json escapes only C0 controls; the value read back is the same.
fn json_text<T: serde::Serialize>(value: &T) -> anyhow::Result<String> {
    escape_hidden(serde_json::to_string_pretty(value)?)
}

/// [`json_text`] on one line.
fn json_line<T: serde::Serialize>(value: &T) -> anyhow::Result<String> {
    escape_hidden(serde_json::to_string(value)?)
}

fn escape_hidden(raw: String) -> anyhow::Result<String> {
    // serde_json escapes every C0 control inside strings, so a raw newline or tab in its output
    // is layout between tokens, and stays.
    let hidden = |c: char| !matches!(c, '\n' | '\t' | '\r') && text::is_hidden(c);
    if !raw.chars().any(hidden) {
        return Ok(raw);
    }
    let mut out = String::with_capacity(raw.len() + 16);
    for c in raw.chars() {
        if hidden(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn init(dir: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(dir)?;
    let path = data_dir::key_file(&dir);
    let (key, created) = SecretKey::load_or_create(&path)?;
    let did = key.did_key();
    if json {
        println!(
            "{}",
            json!({"did": did.as_str(), "keyFile": path, "created": created})
        );
    } else {
        if created {
            eprintln!("created a new node key at {}", path.display());
        } else {
            eprintln!("using the node key at {}", path.display());
        }
        println!("{did}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn resolve(did: &str, json_out: bool, opts: ResolverOptions) -> anyhow::Result<ExitCode> {
    let resolver = Resolver::new(opts).map_err(anyhow::Error::msg)?;
    match resolver.resolve_str(did).await {
        Ok(doc) => {
            let doc = doc.to_json();
            if json_out {
                let out = json!({
                    "didDocument": doc,
                    "didResolutionMetadata": {"contentType": "application/did+json"},
                    "didDocumentMetadata": {}
                });
                println!("{}", json_text(&out)?);
            } else {
                println!("{}", json_text(&doc)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if json_out {
                let out = json!({
                    "didDocument": null,
                    "didResolutionMetadata": {"error": e.code(), "errorMessage": e.to_string()},
                    "didDocumentMetadata": {}
                });
                println!("{}", json_text(&out)?);
            }
            eprintln!("error: {}", text::sanitize(&e.to_string()));
            Ok(ExitCode::FAILURE)
        }
    }
}

fn sign_card(
    card_path: &Path,
    dir: Option<&Path>,
    key_path: Option<&Path>,
    kid: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let card = read_json(card_path)?;
    let key_path = match key_path {
        Some(k) => k.to_owned(),
        None => data_dir::key_file(&data_dir::resolve(dir)?),
    };
    let key = SecretKey::load(&key_path)
        .with_context(|| "loading the signing key (run `agentnet init` first?)")?;
    let kid = match kid {
        Some(k) => DidUrl::parse(k).with_context(|| format!("--kid {k:?}"))?,
        None => {
            let did = key.did_key();
            did.with_fragment(did.method_specific_id())
        }
    };
    if kid.fragment().is_none() {
        bail!("--kid must name a verification method (a DID URL with a #fragment)");
    }
    for path in agentnet_did::a2a::unknown_fields(&card) {
        eprintln!("warning: {path} is not part of the A2A 1.0 Agent Card; the signature does not cover it");
    }
    let signed = card::sign(&card, &key, &kid)?;
    println!("{}", json_text(&signed)?);
    Ok(ExitCode::SUCCESS)
}

async fn verify_card(
    card_path: &Path,
    jwk: Option<&Path>,
    net: &NetArgs,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let card = read_json(card_path)?;
    let resolver = Resolver::new(resolver_options(net)?).map_err(anyhow::Error::msg)?;
    let jwk: Option<Jwk> = match jwk {
        Some(p) => Some(
            serde_json::from_value(read_json(p)?)
                .with_context(|| format!("{} is not a JWK", p.display()))?,
        ),
        None => None,
    };
    let source = match &jwk {
        Some(j) => KeySource::Jwk(j),
        None => KeySource::Did(&resolver),
    };
    match card::verify(&card, source).await {
        Ok(sigs) => {
            if json_out {
                let list: Vec<Value> = sigs
                    .iter()
                    .map(|s| json!({"kid": s.kid, "alg": s.alg}))
                    .collect();
                println!("{}", json_line(&json!({"ok": true, "signatures": list}))?);
            } else {
                for s in &sigs {
                    println!("ok: {} signature by {}", s.alg, s.kid);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if json_out {
                println!(
                    "{}",
                    json_line(&json!({"ok": false, "error": e.to_string()}))?
                );
            }
            eprintln!("error: {}", text::sanitize(&e.to_string()));
            Ok(ExitCode::FAILURE)
        }
    }
}

fn identity_new(
    spec: &identity::DomainSpec,
    out: Option<&Path>,
    dir: Option<&Path>,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(dir)?;
    let key = SecretKey::generate();
    let created = agentnet_did::httpsig::format_utc_timestamp(agentnet_discovery::net::unix_now());
    let (did, doc) = identity::create(spec, &key, &created)?;
    let url = agentnet_did::web::document_url(&did)?;
    let (key_file, doc_file) = data_dir::AgentKeys::new(&dir).install_domain(&key, &doc)?;
    if let Some(out) = out {
        let body = serde_json::to_vec_pretty(&doc.to_json())?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &body))
            .with_context(|| format!("writing {} (it must not exist)", out.display()))?;
    }
    if json_out {
        println!(
            "{}",
            json_line(&json!({
                "did": did.as_str(),
                "kid": format!("{did}#{}", identity::KEY_FRAGMENT),
                "keyFile": key_file,
                "documentFile": doc_file,
                "url": url.as_str(),
                "document": doc.to_json(),
            }))?
        );
    } else {
        println!("{did}");
        eprintln!("key:      {} (mode 0600)", key_file.display());
        eprintln!("document: {}", doc_file.display());
        eprintln!(
            "serve the document at {url} (HTTPS, Content-Type: application/json), then \
             publish with `agentnet publish --as {did}`"
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn identity_show(did: &str, dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(dir)?;
    let keys = data_dir::AgentKeys::new(&dir);
    let id = keys.load_identity(did)?;
    let doc = read_json(&keys.document_file(did)?)?;
    println!("{}", json_text(&doc)?);
    eprintln!(
        "signs as {}; serve this document at {}",
        id.kid(),
        agentnet_did::web::document_url(id.did())?
    );
    Ok(ExitCode::SUCCESS)
}

/// The caller and the verified MCP endpoint of `agentnet tools` and `agentnet tool`.
async fn remote_mcp(
    a: &RemoteMcpArgs,
) -> anyhow::Result<(call::Caller, crate::mcp::client::Remote)> {
    let dir = data_dir::resolve(a.node.data_dir.as_deref())?;
    let id = match &a.as_did {
        Some(did) => data_dir::AgentKeys::new(&dir).load_identity(did)?,
        None => identity::Identity::did_key(
            SecretKey::load(&data_dir::key_file(&dir))
                .context("loading the node key to sign with (run `agentnet init`, or pass --as)")?,
        ),
    };
    let signer: Arc<dyn agentnet_a2a::client::Signer> = Arc::new(call::DidSigner::new(id));
    let resolver = Resolver::new(resolver_options(&a.net)?).map_err(anyhow::Error::msg)?;
    let opts = call::CallOptions {
        allow_private: a.allow_private,
        timeout: std::time::Duration::from_secs(a.timeout_secs.max(1)),
        ..Default::default()
    };
    let caller = call::Caller::new(
        Some(Arc::new(admin_client(&a.node)?)),
        resolver,
        Some(signer),
        opts,
    );
    let mut progress = |p: call::Progress| eprintln!("{}", text::sanitize(&p.to_string()));
    let remote = match &a.did {
        Some(did) => crate::mcp::client::Remote::find(&caller, did, None, &mut progress).await?,
        None => crate::mcp::client::Remote::find_by_skill(&caller, &a.skill, &mut progress).await?,
    };
    eprintln!(
        "MCP endpoint {} ({})",
        text::sanitize(remote.endpoint.url.as_str()),
        remote.endpoint.versions.join(", ")
    );
    Ok((caller, remote))
}

async fn tools_cmd(args: ToolsArgs) -> anyhow::Result<ExitCode> {
    let (caller, remote) = remote_mcp(&args.remote).await?;
    let tools = remote.list_tools(&caller).await?;
    if args.remote.json {
        let out = json!({
            "did": remote.did.as_str(),
            "url": remote.endpoint.url.as_str(),
            "tools": tools,
        });
        println!("{}", json_line(&out)?);
    } else {
        for t in &tools {
            let d = t.description.as_deref().unwrap_or("");
            println!(
                "{}\t{}",
                text::sanitize(&t.name),
                text::sanitize(&d.chars().take(300).collect::<String>())
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn tool_cmd(args: ToolArgs) -> anyhow::Result<ExitCode> {
    let tool_args: Value = serde_json::from_str(&args.args).context("--args is not JSON")?;
    if !tool_args.is_object() {
        bail!("--args must be a JSON object");
    }
    let (caller, remote) = remote_mcp(&args.remote).await?;
    let result = remote.call_tool(&caller, &args.name, tool_args).await?;
    let failed = result.is_error == Some(true);
    if args.remote.json {
        let out = json!({
            "did": remote.did.as_str(),
            "url": remote.endpoint.url.as_str(),
            "tool": args.name,
            "result": result,
        });
        println!("{}", json_line(&out)?);
    } else {
        let texts: Vec<String> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        if texts.is_empty() {
            if let Some(s) = &result.structured_content {
                println!("{}", json_line(s)?);
            }
        }
        for t in texts {
            println!("{}", text::sanitize(&t));
        }
    }
    if failed {
        eprintln!("error: the tool reported an error (isError)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

async fn call_cmd(args: CallArgs) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(args.node.data_dir.as_deref())?;
    let signer: Option<Arc<dyn agentnet_a2a::client::Signer>> = if args.anonymous {
        None
    } else {
        let id = match &args.as_did {
            Some(did) => data_dir::AgentKeys::new(&dir).load_identity(did)?,
            None => identity::Identity::did_key(
                SecretKey::load(&data_dir::key_file(&dir))
                    .context("loading the node key to sign with (run `agentnet init`, or pass --as or --anonymous)")?,
            ),
        };
        Some(Arc::new(call::DidSigner::new(id)))
    };
    let resolver = Resolver::new(resolver_options(&args.net)?).map_err(anyhow::Error::msg)?;
    let admin = admin_client(&args.node)?;
    let opts = call::CallOptions {
        stream: args.stream,
        allow_private: args.allow_private,
        timeout: std::time::Duration::from_secs(args.timeout_secs.max(1)),
        ..Default::default()
    };
    let caller = call::Caller::new(Some(Arc::new(admin)), resolver, signer, opts);
    let target = if args.skill.is_empty() {
        call::Target::Did(args.did.clone().unwrap_or_default())
    } else {
        call::Target::Skill {
            tags: args.skill.clone(),
            did: args.did.clone(),
        }
    };
    let mut progress = |p: call::Progress| eprintln!("{}", text::sanitize(&p.to_string()));
    let agent = caller.find(&target, &mut progress).await?;
    let result = match &args.task {
        Some(t) => {
            caller
                .continue_task(&agent, t, &args.text, &mut progress)
                .await
        }
        None => caller.send(&agent, &args.text, &mut progress).await,
    };
    let (outcome, failed) = match result {
        Ok(o) => (o, None),
        Err(call::CallError::NoArtifacts(t)) => {
            let e = format!("task {} completed without any artifact", t.id);
            (call::Outcome::Task(t), Some(e))
        }
        Err(e) => return Err(e.into()),
    };
    let (state, task_id) = match &outcome {
        call::Outcome::Task(t) => (Some(t.status.state.clone()), Some(t.id.clone())),
        call::Outcome::Message(_) => (None, None),
    };
    if args.json {
        let body = match &outcome {
            call::Outcome::Task(t) => json!({"task": t}),
            call::Outcome::Message(m) => json!({"message": m}),
        };
        let out = json!({
            "did": agent.did.as_str(),
            "interface": {"url": agent.endpoint.url.as_str(), "binding": agent.endpoint.binding.name()},
            "result": body,
        });
        println!("{}", json_line(&out)?);
    } else {
        for t in call::texts(&outcome) {
            println!("{}", text::sanitize(&t));
        }
        if let call::Outcome::Task(t) = &outcome {
            if matches!(
                t.status.state,
                agentnet_a2a::types::TaskState::InputRequired
            ) {
                if let Some(q) = call::status_text(t) {
                    println!("{}", text::sanitize(&q));
                }
                eprintln!(
                    "the agent waits for input: agentnet call --did {} --task {} \"…\"",
                    agent.did,
                    text::sanitize(&t.id)
                );
            }
        }
    }
    if let Some(e) = failed {
        eprintln!("error: {}", text::sanitize(&e));
        return Ok(ExitCode::FAILURE);
    }
    let ok = match &state {
        None => true,
        Some(s) => !s.is_terminal() || *s == agentnet_a2a::types::TaskState::Completed,
    };
    if !ok {
        eprintln!(
            "error: task {} ended {}",
            text::sanitize(task_id.as_deref().unwrap_or("")),
            state.as_ref().map(call::state_name).unwrap_or_default()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod output_tests {
    use super::*;

    #[test]
    fn json_output_escapes_what_a_terminal_would_obey_and_reads_back_the_same() {
        // An Agent Card from the network may carry terminal escapes, a right-to-left override,
        // zero-width and tag characters (U+E0001 is outside the BMP: a surrogate pair).
        let v = json!({
            "name": "pay\u{1b}[2J\u{202e}lapyap\u{200b}\u{e0001}\u{85}\u{2028}",
            "ok": "plain é 漢字 ✓"
        });
        for out in [json_text(&v).unwrap(), json_line(&v).unwrap()] {
            assert!(
                !out.chars().any(|c| c != '\n' && text::is_hidden(c)),
                "{out:?}"
            );
            assert!(
                out.contains("\\u202e") && out.contains("\\udb40\\udc01"),
                "{out}"
            );
            assert!(
                out.contains("plain é 漢字 ✓"),
                "visible text is left alone: {out}"
            );
            let back: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(back, v);
        }
    }
}
