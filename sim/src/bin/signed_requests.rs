//! Pre-signed A2A `SendMessage` requests for a load test of a hosted agent with `policy = "did"`.
//!
//! wrk cannot sign requests, and every DID-signed request needs its own nonce (the node refuses
//! a replay). This generator creates `--dids` did:key identities and writes `--requests`
//! requests, round-robin over the identities, each exactly as `agentnet call "TEXT"` would send
//! it: the message built by [`call::message`] and [`call::send_request`], the request built and
//! signed by the `agentnet-a2a` client ([`Client::prepare_send_message`]) with the node's
//! [`DidSigner`] (RFC 9421, a fresh nonce, `created` = now), for the interface the agent's card
//! offers first that we speak (the card is read from `<agent>/.well-known/agent-card.json`).
//! `scripts/wrk_replay.lua` replays the file, one line per request.
//!
//! ```text
//! cargo run --release -p agentnet-sim --bin signed_requests -- \
//!     --agent http://127.0.0.1:PORT/a2a/echo-did --dids 32 --requests 90000 --out reqs.tsv \
//!     [--check 3 --check-out check.tsv] [--text hello]
//! ```
//!
//! File format, one request per line, fields separated by a tab: the method, the path and
//! query, then one `Name: value` field per header, then the body (compact JSON: no raw tab or
//! newline; a request that would contain one is refused).
//!
//! What bounds a run: the signatures are valid for the verifier's window (`max_age`, 300 s,
//! from `created`), and the node's verifier holds at most
//! [`DidAuthConfig::per_did_nonces`] live nonces per DID and [`DidAuthConfig::max_nonces`] in
//! all (for `max_age + max_future_skew`, 360 s): the generator refuses a file whose requests
//! would exceed either with the node's defaults, since the surplus would be refused with 401.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use agentnet_a2a::client::{self, Client, ClientLimits, PreparedRequest};
use agentnet_did::SecretKey;
use agentnet_node::call::{self, DidSigner};
use agentnet_node::hosted::a2a_auth::DidAuthConfig;
use agentnet_node::identity::Identity;
use clap::Parser;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "signed_requests",
    about = "Write pre-signed A2A SendMessage requests (RFC 9421, did:key) for wrk to replay"
)]
struct Args {
    /// The hosted agent's base URL (its card is at `<agent>/.well-known/agent-card.json`).
    #[arg(long)]
    agent: url::Url,
    /// Distinct did:key identities, used round-robin.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    dids: u32,
    /// Requests written to `--out`.
    #[arg(long, default_value_t = 90_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    requests: u32,
    /// Where the requests go.
    #[arg(long)]
    out: PathBuf,
    /// Extra requests (same identities, own nonces) written to `--check-out`, to try by hand
    /// before the load.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1000))]
    check: u32,
    /// Where the `--check` requests go.
    #[arg(long)]
    check_out: Option<PathBuf>,
    /// The message text.
    #[arg(long, default_value = "hello")]
    text: String,
    /// Each message presents a delegation chain of this many links (issue 18), from a fixed
    /// principal (`--print-principal`) through intermediates to the request's signer; 0: none.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=8))]
    delegation_links: u32,
    /// Print the principal DID the chains start at (for the agent's `require_delegation_from`)
    /// and exit.
    #[arg(long)]
    print_principal: bool,
}

/// The principal of `--delegation-links` chains: a fixed key, so a node can be configured first.
fn principal() -> SecretKey {
    SecretKey::from_seed(&[0xD1; 32])
}

/// A chain of `links` links from [`principal`] to `holder` (intermediates fresh keys), granting
/// `send` and `get` on any agent, one level less at each link.
fn chain_to(holder: &SecretKey, links: u32) -> Result<serde_json::Value, String> {
    use agentnet_did::delegation::{self, Capability, Grant};
    let mut keys = vec![principal()];
    for _ in 1..links {
        keys.push(SecretKey::generate());
    }
    keys.push(SecretKey::from_seed(&holder.seed()));
    let mut chain: Option<serde_json::Value> = None;
    let now = delegation::now();
    for i in 0..links as usize {
        let did = keys[i].did_key();
        let kid = did.with_fragment(did.method_specific_id());
        let cap = Capability {
            ops: vec!["send".into(), "get".into()],
            depth: links - 1 - i as u32,
            ..Default::default()
        };
        let audience = keys[i + 1].did_key();
        let grant = Grant {
            audience: &audience,
            capability: &cap,
            valid_from: now - 60,
            valid_until: now + 3600,
        };
        chain = Some(
            delegation::issue(&keys[i], &kid, &grant, chain.as_ref()).map_err(|e| e.to_string())?,
        );
    }
    chain.ok_or_else(|| "no links".to_string())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("signed_requests: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    if args.print_principal {
        println!("{}", principal().did_key());
        return Ok(());
    }
    let quota = DidAuthConfig::new("http://unused");
    let total = u64::from(args.requests) + u64::from(args.check);
    let per_did = total.div_ceil(u64::from(args.dids));
    if per_did > quota.per_did_nonces as u64 {
        return Err(format!(
            "{per_did} requests per DID exceed the node's per-DID nonce quota ({}): use more --dids",
            quota.per_did_nonces
        ));
    }
    if total > quota.max_nonces as u64 {
        return Err(format!(
            "{total} requests exceed the node's nonce cache ({} live nonces, all DIDs)",
            quota.max_nonces
        ));
    }
    if args.check > 0 && args.check_out.is_none() {
        return Err("--check needs --check-out".into());
    }

    let http = agentnet_did::http::client();
    let card = client::fetch_card(&http, &args.agent, ClientLimits::default())
        .await
        .map_err(|e| format!("reading the agent's card: {e}"))?;
    let clients = (0..args.dids)
        .map(|_| {
            let key = SecretKey::generate();
            let chain = match args.delegation_links {
                0 => None,
                n => Some(chain_to(&key, n)?),
            };
            let signer = Arc::new(DidSigner::new(Identity::did_key(key)));
            Client::from_card(http.clone(), &card, Some(signer))
                .map(|c| (c, chain))
                .map_err(|e| format!("choosing the agent's interface: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;

    let started = Instant::now();
    let created = agentnet_discovery::net::unix_now();
    write_file(&clients, &args.text, &args.out, 0, args.requests).await?;
    if let Some(p) = &args.check_out {
        write_file(&clients, &args.text, p, args.requests as usize, args.check).await?;
    }
    let endpoint = clients
        .first()
        .map(|(c, _)| c.endpoint().url.to_string())
        .unwrap_or_default();
    println!(
        "{} requests (+{} to check) to {endpoint}, {} did:key identities ({per_did} requests each \
         at most; node quota {} per DID, {} in all), signed at {created} (valid until {}), in {:.1} s",
        args.requests,
        args.check,
        args.dids,
        quota.per_did_nonces,
        quota.max_nonces,
        created + quota.max_age,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Write `n` requests to `path`, the `i`-th signed by `clients[(start + i) % len]` (with its
/// delegation chain, if any, in the message's metadata).
async fn write_file(
    clients: &[(Client, Option<serde_json::Value>)],
    text: &str,
    path: &Path,
    start: usize,
    n: u32,
) -> Result<(), String> {
    let file =
        std::fs::File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    let mut out = BufWriter::new(file);
    for i in 0..n as usize {
        let (client, chain) = &clients[(start + i) % clients.len()];
        let mut msg = call::message(text, None).map_err(|e| e.to_string())?;
        if let Some(c) = chain {
            msg.metadata = Some(std::collections::HashMap::from([(
                agentnet_did::delegation::METADATA_MEMBER.to_string(),
                c.clone(),
            )]));
        }
        let req = client
            .prepare_send_message(&call::send_request(msg))
            .await
            .map_err(|e| format!("signing a request: {e}"))?;
        out.write_all(line(&req)?.as_bytes())
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    out.flush()
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// One request as a line: method, path and query, `Name: value` per header, body; tab-separated.
fn line(req: &PreparedRequest) -> Result<String, String> {
    let plain = |s: &str| !s.contains(['\t', '\n', '\r']);
    let path = match req.url.query() {
        Some(q) => format!("{}?{q}", req.url.path()),
        None => req.url.path().to_string(),
    };
    let mut out = format!("{}\t{path}", req.method);
    for (name, value) in &req.headers {
        let value = value
            .to_str()
            .map_err(|_| format!("header {name} is not text"))?;
        if !plain(value) {
            return Err(format!("header {name} holds a tab or newline"));
        }
        out.push('\t');
        out.push_str(name.as_str());
        out.push_str(": ");
        out.push_str(value);
    }
    let body = std::str::from_utf8(&req.body).map_err(|_| "the body is not UTF-8".to_string())?;
    if !plain(body) {
        return Err("the body holds a tab or newline".into());
    }
    out.push('\t');
    out.push_str(body);
    out.push('\n');
    Ok(out)
}
