//! `agentnet sim-node --params FILE`: an agentnet discovery node that follows the node contract
//! of libp2p's `test-plans/gossipsub-interop` harness, so that Shadow (a discrete-event
//! simulator running unmodified binaries) can run thousands of them (issue 20, part 5;
//! docs/SIMULATION.md, "Past one machine").
//!
//! The contract, as that harness defines it: the node's id comes from its hostname `node<N>`;
//! its libp2p key is Ed25519 from a seed of 32 bytes, zero but for the id little-endian in the
//! first four (so every node derives every other's PeerId); it listens on TCP port 9000 and
//! dials `node<M>` by name; it reads `{"script": [instruction, …]}` from `--params` and runs
//! the instructions in order (`connect`, `ifNodeIDEquals`, `waitUntil`, `publish`,
//! `subscribeToTopic`, `setTopicValidationDelay`, `initGossipSub`); it prints JSON lines on
//! standard output, each with `time` (RFC 3339) and `msg`: `PeerID` first, then `Received
//! Message` with the message `id` per message received; it exits 0 after the last instruction.
//!
//! What differs, and why: a `publish` is a signed advertisement of a fresh did:key agent (the
//! message id in its skill tag, the card padded towards `messageSizeBytes`, at most what a node
//! accepts), gossiped on the advertisement topic and validated by every node before it is
//! forwarded, as on the real network; `Received Message` is printed when a node *accepted* it
//! (first delivery; duplicates are not lines here but the counters of the last line, `Traffic`,
//! from the node's gossipsub metrics). Instructions this node does not implement
//! (`addPartialMessage`, `publishPartial`, validation delays) are named on standard error and
//! skipped.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use agentnet_did::{card, Resolver, SecretKey};
use agentnet_discovery::advert::{self, Draft, Limits, Validator};
use agentnet_discovery::net::{self, Config, TransportKind};
use agentnet_discovery::store::{Memory, Store};
use serde::Deserialize;

use anyhow::Context as _;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use serde_json::{json, Value};

/// Largest params file read.
const MAX_PARAMS_BYTES: u64 = 64 << 20;
/// Most instructions run (nested ones included).
const MAX_INSTRUCTIONS: usize = 1_000_000;
/// The contract's TCP port.
const PORT: u16 = 9000;
/// Dials of a `connect` target, a second apart: hundreds of processes started together on
/// two cores take tens of seconds to all listen, and a node whose every dial was refused
/// is left with the one connection a busy node may trim.
const DIAL_ATTEMPTS: u32 = 60;
/// The tag prefix carrying a message id.
const TAG_PREFIX: &str = "sim-msg-";

#[derive(Debug, Args)]
pub(super) struct SimNodeArgs {
    /// The harness's params.json (`{"script": [...]}`).
    #[arg(long)]
    params: PathBuf,
    /// This node's id; default: N from the hostname `node<N>` (what Shadow sets).
    #[arg(long)]
    node_id: Option<u32>,
    /// The address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    listen_ip: IpAddr,
    /// The TCP port (the contract's is 9000).
    #[arg(long, default_value_t = PORT)]
    port: u16,
    /// How node M is dialled: `{n}` is M, `{n1}` M + 1, `{ip}` the address `--ip-base` plus M
    /// (e.g. `/ip4/{ip}/tcp/9000` on one machine's loopback); `/p2p/<its PeerId>` is added.
    #[arg(long, default_value = "/dns4/node{n}/tcp/9000")]
    dial: String,
    /// What `{ip}` counts from: node M's address is this plus M (127.0.0.1 on loopback; the
    /// first node's address in network namespaces, `shadowgen --run-netns`).
    #[arg(long, default_value = "127.0.0.1")]
    ip_base: std::net::Ipv4Addr,
    /// The RocksDB store's directory; default: a temporary directory, removed at exit.
    #[arg(long, conflicts_with = "store_in_memory")]
    store: Option<PathBuf>,
    /// Keep the store's files in RocksDB's in-memory file system instead: the same database,
    /// but no file on disk and no file descriptor. Under Shadow one process holds every
    /// node's open files under one limit, and a store on disk holds 15 of them
    /// (docs/SIMULATION.md, "Shadow on a machine like this one").
    #[arg(long)]
    store_in_memory: bool,
}

#[derive(Debug, Deserialize)]
struct Params {
    script: Vec<Instruction>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
enum Instruction {
    Connect {
        #[serde(rename = "connectTo")]
        connect_to: Vec<u32>,
    },
    #[serde(rename = "ifNodeIDEquals")]
    IfNodeIdEquals {
        #[serde(rename = "nodeID")]
        node_id: u32,
        instruction: Box<Instruction>,
    },
    WaitUntil {
        #[serde(rename = "elapsedSeconds")]
        elapsed_seconds: f64,
    },
    Publish {
        #[serde(rename = "messageID")]
        message_id: u64,
        #[serde(rename = "messageSizeBytes")]
        message_size_bytes: usize,
        #[serde(rename = "topicID")]
        topic_id: String,
    },
    SubscribeToTopic {
        #[serde(rename = "topicID")]
        topic_id: String,
    },
    InitGossipSub {
        #[serde(rename = "gossipSubParams")]
        params: serde_json::Map<String, Value>,
    },
    #[serde(other)]
    Other,
}

/// One JSON line on standard output.
fn line(msg: &str, mut fields: serde_json::Map<String, Value>) {
    fields.insert(
        "time".into(),
        Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
    );
    fields.insert("msg".into(), Value::String(msg.into()));
    let _ = out!("{}", Value::Object(fields));
}

fn fields(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Default::default(),
    }
}

/// The contract's key of node `id`: Ed25519 from 32 zero bytes with `id` little-endian first.
fn key_of(id: u32) -> SecretKey {
    let mut seed = [0u8; 32];
    seed[..4].copy_from_slice(&id.to_le_bytes());
    SecretKey::from_seed(&seed)
}

/// The address of node `m`: `base` plus `m`; `None` past 255.255.255.255.
fn address_of(base: std::net::Ipv4Addr, m: u32) -> Option<std::net::Ipv4Addr> {
    u32::from(base).checked_add(m).map(std::net::Ipv4Addr::from)
}

/// N of the hostname `node<N>`.
fn id_from_hostname() -> anyhow::Result<u32> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        bail!("reading the hostname failed: give --node-id N");
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let host = String::from_utf8_lossy(&buf[..end]).into_owned();
    host.strip_prefix("node")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("the hostname {host:?} is not node<N>: give --node-id N"))
}

/// The instructions that apply to node `me`, flattened, in order.
fn flatten(script: Vec<Instruction>, me: u32, out: &mut Vec<Instruction>) -> anyhow::Result<()> {
    for i in script {
        if out.len() >= MAX_INSTRUCTIONS {
            bail!("more than {MAX_INSTRUCTIONS} instructions");
        }
        match i {
            Instruction::IfNodeIdEquals {
                node_id,
                instruction,
            } => {
                if node_id == me {
                    flatten(vec![*instruction], me, out)?;
                }
            }
            other => out.push(other),
        }
    }
    Ok(())
}

/// The network settings of the first `initGossipSub`: `D` (mesh degree) and
/// `HeartbeatInterval` (nanoseconds) map onto the node's; the rest is named and left.
fn gossip_settings(script: &[Instruction], cfg: &mut Config) {
    let Some(params) = script.iter().find_map(|i| match i {
        Instruction::InitGossipSub { params } => Some(params),
        _ => None,
    }) else {
        return;
    };
    for (k, v) in params {
        match (k.as_str(), v.as_u64()) {
            ("D", Some(d)) if (2..=64).contains(&d) => cfg.gossip_mesh = d as usize,
            ("HeartbeatInterval", Some(ns)) if ns >= 1_000_000 => {
                cfg.heartbeat = Duration::from_nanos(ns)
            }
            _ => say!("sim-node: gossipsub parameter {k} not applied (the node's own is used)"),
        }
    }
}

/// A signed advertisement carrying message `id`, its card padded towards `size` bytes.
fn advert_for(id: u64, size: usize, peer: &str, addr: &str) -> anyhow::Result<Vec<u8>> {
    use sha2::Digest as _;
    let seed: [u8; 32] = sha2::Sha256::digest(format!("agentnet sim-node message {id}")).into();
    let key = SecretKey::from_seed(&seed);
    let did = key.did_key();
    let kid = did.with_fragment(did.method_specific_id());
    let card_of = |pad: usize| {
        json!({
            "name": format!("Sim message {id}"),
            "description": format!("A message of the gossipsub-interop contract. {}", "x".repeat(pad)),
            "version": "1.0.0",
            "supportedInterfaces": [{"url": "https://agents.invalid/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "m", "name": "Message", "description": "Carries a message id.", "tags": [format!("{TAG_PREFIX}{id}")]}]
        })
    };
    let now = net::unix_now();
    let sign = |pad: usize| -> anyhow::Result<Vec<u8>> {
        let signed = card::sign(&card_of(pad), &key, &kid)?;
        let ad = advert::sign(
            Draft {
                did: did.clone(),
                kid: kid.clone(),
                card: signed,
                peer_id: peer.to_string(),
                addrs: vec![addr.to_string()],
                seq: 1,
                issued_at: now,
                expires_at: now + 3600,
            },
            &key,
        );
        Ok(serde_json::to_vec(&ad)?)
    };
    // The envelope and both signatures measured once unpadded; the padding makes up the rest,
    // within what a node accepts.
    let bare = sign(0)?;
    let want = size.min(Limits::default().max_bytes - 1024);
    if want <= bare.len() {
        return Ok(bare);
    }
    sign(want - bare.len())
}

/// Run one node of the harness: read its script, start the node, print each delivery, play
/// the script, print the traffic, stop.
pub(super) async fn sim_node_cmd(a: SimNodeArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let me = match a.node_id {
        Some(n) => n,
        None => id_from_hostname()?,
    };
    let script = read_script(&a, me)?;

    let tmp;
    let store_dir = match &a.store {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("agentnet-sim-node-")
                .tempdir()?;
            tmp.path().to_owned()
        }
    };
    let store = if a.store_in_memory {
        // rust-rocksdb makes the (empty) directory on disk even so: a temporary one.
        let memory = Memory::default().files_in_memory()?;
        Store::open_shared(&store_dir.join("store"), Default::default(), &memory)?
    } else {
        Store::open(&store_dir.join("store"))?
    };
    let validator = Validator::new(Resolver::new(Default::default())?, Limits::default());
    let listen: libp2p::Multiaddr = format!(
        "/{}/{}/tcp/{}",
        if a.listen_ip.is_ipv4() { "ip4" } else { "ip6" },
        a.listen_ip,
        a.port
    )
    .parse()?;
    let mut cfg = Config {
        listen: vec![listen.clone()],
        mdns: false,
        transport: TransportKind::Network,
        redial_peers: 0,
        ..Default::default()
    };
    gossip_settings(&script, &mut cfg);
    if a.listen_ip.is_loopback() {
        // Every process on this machine dials from 127.0.0.1 (see the field's documentation).
        cfg.colocation_whitelist = vec![std::net::Ipv4Addr::LOCALHOST.into()];
    }
    let key = key_of(me);
    let stop = net::CancellationToken::new();
    let (client, task) = net::spawn(&key, cfg, store, validator, stop.clone()).await?;
    let peer = client.peer_id().to_string();
    line(
        "PeerID",
        fields(json!({"id": peer, "node_id": me, "listen": listen.to_string()})),
    );

    let own = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let printer = print_deliveries(client.subscribe(), own.clone());

    let addr = listen.with(libp2p::multiaddr::Protocol::P2p(client.peer_id()));
    for i in script {
        play(&a, i, start, &client, &own, &peer, &addr).await?;
    }
    print_traffic(&client).await;
    stop.cancel();
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    printer.abort();
    Ok(ExitCode::SUCCESS)
}

/// The script of node `me`: the harness's params.json, bounded, its `ifNodeIdEquals` blocks
/// for `me` flattened in.
fn read_script(a: &SimNodeArgs, me: u32) -> anyhow::Result<Vec<Instruction>> {
    let file = std::fs::File::open(&a.params)
        .with_context(|| format!("reading {}", a.params.display()))?;
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_PARAMS_BYTES + 1),
        &mut text,
    )
    .with_context(|| format!("reading {}", a.params.display()))?;
    if text.len() as u64 > MAX_PARAMS_BYTES {
        bail!(
            "{} is larger than {MAX_PARAMS_BYTES} bytes",
            a.params.display()
        );
    }
    let params: Params = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not {{\"script\": [instruction, …]}}",
            a.params.display()
        )
    })?;
    let mut script = Vec::new();
    flatten(params.script, me, &mut script)?;
    Ok(script)
}

/// Print every advertisement this node accepts from the network (a delivery), except the
/// node's `own` messages, until the node stops.
fn print_deliveries(
    mut accepted: tokio::sync::broadcast::Receiver<net::Accepted>,
    own_seen: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<u64>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match accepted.recv().await {
                Ok(acc) => {
                    let Some(id) = acc
                        .tags
                        .iter()
                        .find_map(|t| t.strip_prefix(TAG_PREFIX)?.parse::<u64>().ok())
                    else {
                        continue;
                    };
                    if own_seen.lock().is_ok_and(|o| o.contains(&id)) {
                        continue;
                    }
                    line("Received Message", fields(json!({"id": id.to_string()})));
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    say!("sim-node: {n} deliveries not printed (the printer fell behind)");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    })
}

/// Play one instruction of the script on the node behind `client` (`peer` at `addr`),
/// started at `start`; the messages it publishes go into `own`.
async fn play(
    a: &SimNodeArgs,
    i: Instruction,
    start: Instant,
    client: &net::Client,
    own: &std::sync::Mutex<std::collections::HashSet<u64>>,
    peer: &str,
    addr: &libp2p::Multiaddr,
) -> anyhow::Result<()> {
    match i {
        Instruction::Connect { connect_to } => connect(a, client, connect_to)?,
        Instruction::WaitUntil { elapsed_seconds } => {
            let at = start + Duration::from_secs_f64(elapsed_seconds.clamp(0.0, 1e7));
            tokio::time::sleep_until(at.into()).await;
        }
        Instruction::Publish {
            message_id,
            message_size_bytes,
            topic_id,
        } => {
            if let Ok(mut o) = own.lock() {
                o.insert(message_id);
            }
            let bytes = advert_for(message_id, message_size_bytes, peer, &addr.to_string())?;
            let size = bytes.len();
            match client.publish(bytes).await {
                Ok(_) => line(
                    "Published",
                    fields(json!({"id": message_id.to_string(), "topic": topic_id, "bytes": size})),
                ),
                Err(e) => say!("sim-node: publishing message {message_id}: {e}"),
            }
        }
        Instruction::SubscribeToTopic { topic_id } => {
            // One topic carries every advertisement; the node is always subscribed.
            say!(
                "sim-node: topic {topic_id:?} is the advertisement topic {}",
                net::TOPIC
            );
        }
        Instruction::InitGossipSub { .. } => {}
        Instruction::IfNodeIdEquals { .. } => {}
        Instruction::Other => {
            say!("sim-node: an instruction this node does not implement, skipped")
        }
    }
    Ok(())
}

/// Dial each node of `connect_to` at its address (`--ip-base`, `--dial`), in the background.
fn connect(a: &SimNodeArgs, client: &net::Client, connect_to: Vec<u32>) -> anyhow::Result<()> {
    for m in connect_to {
        let ip = address_of(a.ip_base, m).with_context(|| {
            format!(
                "node {m} has no address: --ip-base {} plus {m} passes 255.255.255.255",
                a.ip_base
            )
        })?;
        let target = a
            .dial
            .replace("{n1}", &(u64::from(m) + 1).to_string())
            .replace("{n}", &m.to_string())
            .replace("{ip}", &ip.to_string());
        let peer_m = net::peer_id_of(&key_of(m))?;
        let ma: libp2p::Multiaddr = format!("{target}/p2p/{peer_m}")
            .parse()
            .with_context(|| format!("--dial gives {target:?} for node {m}"))?;
        let c = client.clone();
        // The harness's own nodes dial without waiting; a node that is not up yet is
        // tried again (for DIAL_ATTEMPTS seconds), then named.
        tokio::spawn(async move {
            for attempt in 1..=DIAL_ATTEMPTS {
                match c.dial(ma.clone()).await {
                    Ok(()) => break,
                    Err(e) if attempt == DIAL_ATTEMPTS => {
                        say!("sim-node: dialing node {m} at {ma}: {e}")
                    }
                    Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
        });
    }
    Ok(())
}

/// The last line: the node's peers and gossip traffic.
async fn print_traffic(client: &net::Client) {
    let t = client.traffic();
    let peers = client.peers().await.map(|p| p.len()).unwrap_or(0);
    line(
        "Traffic",
        fields(json!({
            "peers": peers,
            "gossip_received": t.gossip_received,
            "gossip_unique": t.gossip_unique,
            "duplicates": t.gossip_received.saturating_sub(t.gossip_unique),
            "bytes_in": t.bytes_in,
            "bytes_out": t.bytes_out,
        })),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest as _;

    /// The harness's cross-implementation vector (`rust-libp2p/src/key.rs` in
    /// libp2p/test-plans gossipsub-interop): SHA-256 of `>{id}:{peerid}\n` for ids 0 to 9999.
    #[test]
    fn node_addresses_count_from_the_base_and_stop_at_the_last_address() {
        let lo = std::net::Ipv4Addr::LOCALHOST;
        assert_eq!(address_of(lo, 0), Some(lo));
        assert_eq!(
            address_of(lo, 300),
            Some(std::net::Ipv4Addr::new(127, 0, 1, 45))
        );
        let ns = std::net::Ipv4Addr::new(10, 77, 0, 1);
        assert_eq!(
            address_of(ns, 2),
            Some(std::net::Ipv4Addr::new(10, 77, 0, 3))
        );
        let top = std::net::Ipv4Addr::new(255, 255, 255, 254);
        assert_eq!(address_of(top, 1), Some(std::net::Ipv4Addr::BROADCAST));
        assert_eq!(address_of(top, 2), None);
        assert_eq!(address_of(top, u32::MAX), None);
    }

    #[test]
    fn node_keys_are_the_contract_s() {
        let mut h = sha2::Sha256::new();
        for id in 0..10_000u32 {
            let peer = net::peer_id_of(&key_of(id)).unwrap();
            h.update(format!(">{id}:{peer}\n").as_bytes());
        }
        assert_eq!(
            h.finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
            "11395ea896d00ca25f7f648ebb336488ee092096a5498d90d76b92eaec27867a"
        );
    }

    #[test]
    fn the_script_is_flattened_for_this_node_and_unknown_instructions_kept_as_other() {
        let p: Params = serde_json::from_value(json!({"script": [
            {"type": "ifNodeIDEquals", "nodeID": 1, "instruction": {"type": "connect", "connectTo": [0, 2]}},
            {"type": "ifNodeIDEquals", "nodeID": 2, "instruction": {"type": "waitUntil", "elapsedSeconds": 3}},
            {"type": "publishPartial", "topicID": "t", "groupID": 1},
            {"type": "initGossipSub", "gossipSubParams": {"D": 4, "HeartbeatInterval": 500000000, "Dlazy": 2}}
        ]}))
        .unwrap();
        let mut out = Vec::new();
        flatten(p.script, 1, &mut out).unwrap();
        assert!(matches!(&out[0], Instruction::Connect { connect_to } if connect_to == &[0, 2]));
        assert!(matches!(out[1], Instruction::Other));
        let mut cfg = Config::default();
        gossip_settings(&out, &mut cfg);
        assert_eq!(
            (cfg.gossip_mesh, cfg.heartbeat),
            (4, Duration::from_millis(500))
        );
    }

    #[test]
    fn a_published_message_is_a_valid_advertisement_within_the_node_s_bound() {
        let peer = net::peer_id_of(&key_of(0)).unwrap().to_string();
        let addr = format!("/ip4/127.0.0.1/tcp/9000/p2p/{peer}");
        for size in [100, 2048, 10_000, 200_000] {
            let b = advert_for(7, size, &peer, &addr).unwrap();
            assert!(
                b.len() <= Limits::default().max_bytes,
                "{size}: {}",
                b.len()
            );
            if (2048..=10_000).contains(&size) {
                assert!(b.len() * 10 >= size * 9, "{size}: only {}", b.len());
            }
            let v = Validator::new(
                Resolver::new(Default::default()).unwrap(),
                Limits::default(),
            );
            let ad = v.precheck(&b, None, net::unix_now()).unwrap();
            assert!(ad.card.to_string().contains("sim-msg-7"));
        }
    }
}
