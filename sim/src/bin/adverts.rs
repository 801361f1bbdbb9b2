//! Signed advertisements of many fresh did:key agents, one JSON document per line on stdout: the
//! index `scripts/bench_mcp.sh` fills a node with (through the admin API's advertisement import,
//! where every one is validated as if it came from the network).
//!
//! ```text
//! adverts --count 10000 --peer-id <the importing node's peer id> [--addr MULTIADDR]
//!     [--tags 200] [--per-agent 3] [--ttl 86400] [--seed 1]
//! ```
//!
//! Agent `i` carries the tags `bench-{(i + k * 7919) % tags}` for `k < per-agent` (distinct
//! when `tags` is prime to 7919 and at least `per-agent`): with the defaults every tag is on
//! 150 agents, so a one-tag query on 10 000 agents has many matches to choose from. Each card
//! (about 700 bytes) is signed by its agent's key (`agentnet_did::card::sign`), each
//! advertisement by the same key (`agentnet_discovery::advert::sign`). Keys derive from
//! `--seed`, so a run is reproducible; the keys are not written anywhere.

use std::io::Write;
use std::process::ExitCode;

use agentnet_did::{card, SecretKey};
use agentnet_discovery::advert::{self, Draft};
use agentnet_discovery::net;
use clap::Parser;
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// How many agents.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// The publishing node's libp2p peer id (the node that imports them).
    #[arg(long)]
    peer_id: String,
    /// The publishing node's address.
    #[arg(long, default_value = "/ip4/127.0.0.1/tcp/4001")]
    addr: String,
    /// Size of the tag vocabulary.
    #[arg(long, default_value_t = 200)]
    tags: u64,
    /// Tags per agent.
    #[arg(long, default_value_t = 3)]
    per_agent: u64,
    /// Lifetime of each advertisement, seconds.
    #[arg(long, default_value_t = 86_400)]
    ttl: u64,
    /// Seed of the agents' keys.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> ExitCode {
    let a = Args::parse();
    if a.tags == 0 || a.per_agent == 0 || a.per_agent > a.tags {
        eprintln!("adverts: need 1 <= --per-agent <= --tags");
        return ExitCode::from(2);
    }
    let now = net::unix_now();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for i in 0..a.count {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&a.seed.to_le_bytes());
        seed[8..16].copy_from_slice(&i.to_le_bytes());
        seed[16] = 0xad;
        let key = SecretKey::from_seed(&seed);
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        let tags: Vec<String> = (0..a.per_agent)
            .map(|k| format!("bench-{}", (i + k * 7919) % a.tags))
            .collect();
        let c = json!({
            "name": format!("Bench agent {i}"),
            "description": "A benchmark agent: translates, summarizes and classifies short texts.",
            "version": "1.0.0",
            "supportedInterfaces": [{"url": format!("https://agent-{i}.bench.example/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "provider": {"organization": "Bench Org", "url": "https://bench.example"},
            "capabilities": {"streaming": true, "pushNotifications": false},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "main", "name": "Main skill", "description": "Does the thing.", "tags": tags}]
        });
        let signed = match card::sign(&c, &key, &kid) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("adverts: signing card {i}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let ad = advert::sign(
            Draft {
                did,
                kid,
                card: signed,
                peer_id: a.peer_id.clone(),
                addrs: vec![a.addr.clone()],
                seq: 1,
                issued_at: now,
                expires_at: now + a.ttl,
            },
            &key,
        );
        let line = serde_json::to_string(&ad).expect("an advertisement encodes");
        if writeln!(out, "{line}").is_err() {
            return ExitCode::FAILURE;
        }
    }
    if out.flush().is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
