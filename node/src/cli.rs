//! The `agentnet` command line.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentnet_did::card::{self, KeySource};
use agentnet_did::didkey::{self, KeyFormat};
use agentnet_did::key::Jwk;
use agentnet_did::resolver::Options as ResolverOptions;
use agentnet_did::web::HttpOptions;
use agentnet_did::{DidUrl, Resolver, SecretKey};
use anyhow::{bail, Context as _};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};

use crate::data_dir;

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
            eprintln!("error: {e:#}");
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
    }
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

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let bytes = read_bounded(path)?;
    agentnet_did::document::check_json_depth(&bytes, 128)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not JSON", path.display()))
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
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!("{}", serde_json::to_string_pretty(&doc)?);
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
                println!("{}", serde_json::to_string_pretty(&out)?);
            }
            eprintln!("error: {e}");
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
    println!("{}", serde_json::to_string_pretty(&signed)?);
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
                println!("{}", json!({"ok": true, "signatures": list}));
            } else {
                for s in &sigs {
                    println!("ok: {} signature by {}", s.alg, s.kid);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if json_out {
                println!("{}", json!({"ok": false, "error": e.to_string()}));
            }
            eprintln!("error: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
