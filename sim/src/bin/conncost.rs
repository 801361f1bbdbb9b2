//! What a connection costs a node, and what many connections from strangers cost it.
//!
//! The victim is a real agentnet discovery node (TCP on loopback, default `net::Config`, a RocksDB
//! store in a temporary directory) in a child process of its own, so its resident memory is read
//! from `/proc/<pid>/status` without the attacker's share. The attacker, in this process, opens
//! `--connections` connections, each from a fresh libp2p identity (so the per-peer limit of 2
//! does not apply: identities cost nothing), each speaking gossipsub on the agentnet topic (so
//! the connection is not idle: an attacker keeps it alive) and ping.
//!
//! ```text
//! cargo run --release -p agentnet-sim --bin conncost -- [--connections 400] [--parallel 64]
//!     [--hold-s 5] [--json]
//! ```
//!
//! Reported: the victim's RSS before, at the peak while the connections are open (sampled every
//! 100 ms), the connections it held (its `peers()`), the cost per connection at the peak, and
//! its RSS after the attacker left. The victim's connection manager closes surplus connections
//! outside the gossip mesh 10 s after they open (`conn_grace`); `--hold-s` below that measures
//! them all at once.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use agentnet_did::{Resolver, SecretKey};
use agentnet_discovery::advert::{Limits, Validator};
use agentnet_discovery::net::{self, Config, TransportKind, TOPIC};
use agentnet_discovery::store::Store;
use clap::Parser;
use futures::StreamExt;
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{gossipsub, noise, ping, tcp, yamux, Multiaddr};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The victim allocates as the `agentnet` binary does (mimalloc).
/// (Not with the `system-alloc` feature: heaptrack sees only what goes through malloc.)
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "conncost",
    about = "Measure what connections from strangers cost an agentnet node"
)]
struct Args {
    /// Attacker connections, each from a fresh identity.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(1..=4000))]
    connections: u32,
    /// Dials in flight at once (the victim refuses incoming connections beyond a quarter of its
    /// connection cap still in their handshake).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4000))]
    parallel: u32,
    /// Seconds the connections are held open after the last one is dialed.
    #[arg(long = "hold-s", default_value_t = 5)]
    hold_s: u64,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Internal: run the victim node and print its address.
    #[arg(long, hide = true)]
    serve: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("conncost: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = if args.serve {
        rt.block_on(serve())
    } else {
        rt.block_on(attack(&args))
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("conncost: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The victim: one node, default settings, until stdin closes.
async fn serve() -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("agentnet-conncost-{}", std::process::id()));
    let path = dir.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&path))
        .await
        .map_err(|e| format!("opening store: {e}"))?
        .map_err(|e| format!("opening store: {e}"))?;
    let validator = Validator::new(
        Resolver::new(Default::default()).map_err(|e| format!("resolver: {e}"))?,
        Limits::default(),
    );
    let cfg = Config {
        listen: vec!["/ip4/127.0.0.1/tcp/0"
            .parse()
            .map_err(|e| format!("listen address: {e}"))?],
        transport: TransportKind::Network,
        mdns: false,
        ..Default::default()
    };
    let shutdown = CancellationToken::new();
    let key = SecretKey::generate();
    let (client, task) = net::spawn(&key, cfg, store, validator, shutdown.clone())
        .await
        .map_err(|e| format!("starting the node: {e}"))?;
    let mut addrs = Vec::new();
    for _ in 0..50 {
        addrs = client.listen_addrs().await.map_err(|e| e.to_string())?;
        if !addrs.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let addr = addrs.first().ok_or("the node did not listen")?.clone();
    println!("{}/p2p/{}", addr, client.peer_id());
    // Commands on stdin: `peers` prints the number of connected peers; EOF stops.
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(tokio::io::stdin()));
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim() == "peers" {
            let n = client.peers().await.map(|p| p.len()).unwrap_or(0);
            println!("{n}");
        }
    }
    shutdown.cancel();
    let _ = task.await;
    drop(client);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[derive(NetworkBehaviour)]
struct Attacker {
    gossipsub: gossipsub::Behaviour,
    ping: ping::Behaviour,
}

fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

async fn attack(args: &Args) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let mut child = Command::new(exe)
        .arg("--serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the victim: {e}"))?;
    let pid = child.id();
    let mut stdin = child.stdin.take().ok_or("victim stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("victim stdout")?);
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .map_err(|e| format!("reading the victim's address: {e}"))?;
    let target: Multiaddr = line
        .trim()
        .parse()
        .map_err(|e| format!("victim address {line:?}: {e}"))?;
    let mut peers = move || -> Option<u64> {
        writeln!(stdin, "peers").ok()?;
        let mut l = String::new();
        stdout.read_line(&mut l).ok()?;
        l.trim().parse().ok()
    };

    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_kib(pid).ok_or("victim RSS")?;

    // Sample the victim's RSS every 100 ms.
    let stop = CancellationToken::new();
    let sampler = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while !stop.is_cancelled() {
                peak = peak.max(rss_kib(pid).unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    };

    let started = Instant::now();
    let attackers = CancellationToken::new();
    let (conn_tx, mut conn_rx) = tokio::sync::mpsc::channel::<bool>(args.connections as usize);
    let dialing = std::sync::Arc::new(tokio::sync::Semaphore::new(args.parallel as usize));
    for _ in 0..args.connections {
        let (target, stop, tx) = (target.clone(), attackers.clone(), conn_tx.clone());
        let permit = dialing
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let ok = attacker(target, stop, tx.clone(), permit).await;
            if let Err(e) = ok {
                eprintln!("conncost: attacker: {e}");
                let _ = tx.send(false).await;
            }
        });
    }
    drop(conn_tx);
    let (mut up, mut failed) = (0u32, 0u32);
    while up + failed < args.connections {
        match tokio::time::timeout(Duration::from_secs(30), conn_rx.recv()).await {
            Ok(Some(true)) => up += 1,
            Ok(Some(false)) => failed += 1,
            _ => break,
        }
    }
    let dialed_in = started.elapsed();
    tokio::time::sleep(Duration::from_secs(args.hold_s)).await;
    let held = tokio::task::spawn_blocking(move || {
        let n = peers();
        (n, peers)
    })
    .await
    .map_err(|e| e.to_string())?;
    let (held, mut peers) = held;
    attackers.cancel();
    tokio::time::sleep(Duration::from_secs(12)).await;
    stop.cancel();
    let peak = sampler.await.map_err(|e| e.to_string())?;
    let after = rss_kib(pid).unwrap_or(0);
    let left = peers();
    drop(peers);
    let _ = child.wait();

    let per_conn = (up > 0).then(|| (peak.saturating_sub(before)) as f64 / f64::from(up));
    let report = json!({
        "connections_attempted": args.connections,
        "connections_established": up,
        "connections_failed": failed,
        "dial_s": dialed_in.as_secs_f64(),
        "victim_peers_after_hold": held,
        "victim_peers_after_leave": left,
        "victim_rss_kib": {"before": before, "peak": peak, "after": after},
        "kib_per_connection_at_peak": per_conn,
    });
    if args.json {
        println!("{report}");
    } else {
        println!(
            "{} connections ({} failed) in {:.1} s",
            up,
            failed,
            dialed_in.as_secs_f64()
        );
        println!(
            "victim: RSS {} KiB before, {} KiB peak, {} KiB after; held {} peers after {} s, {} after the attacker left",
            before,
            peak,
            after,
            held.map_or("?".into(), |n| n.to_string()),
            args.hold_s,
            left.map_or("?".into(), |n| n.to_string())
        );
        if let Some(c) = per_conn {
            println!("cost per connection at the peak: {c:.1} KiB");
        }
    }
    Ok(())
}

/// One attacker identity: dial, subscribe to the topic, hold until `stop`.
async fn attacker(
    target: Multiaddr,
    stop: CancellationToken,
    up: tokio::sync::mpsc::Sender<bool>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Result<(), String> {
    let mut permit = Some(permit);
    let mut swarm = libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default().nodelay(true),
            noise::Config::new,
            yamux::Config::default,
        )
        .map_err(|e| e.to_string())?
        .with_behaviour(|_| {
            let cfg = gossipsub::ConfigBuilder::default()
                .validation_mode(gossipsub::ValidationMode::Anonymous)
                .build()?;
            Ok(Attacker {
                gossipsub: gossipsub::Behaviour::new(
                    gossipsub::MessageAuthenticity::Anonymous,
                    cfg,
                )?,
                ping: ping::Behaviour::default(),
            })
        })
        .map_err(|e| e.to_string())?
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(3600)))
        .build();
    swarm
        .behaviour_mut()
        .gossipsub
        .subscribe(&gossipsub::IdentTopic::new(TOPIC))
        .map_err(|e| e.to_string())?;
    swarm.dial(target).map_err(|e| e.to_string())?;
    let mut reported = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            ev = swarm.select_next_some() => match ev {
                SwarmEvent::ConnectionEstablished { .. } if !reported => {
                    reported = true;
                    permit.take();
                    let _ = up.send(true).await;
                }
                SwarmEvent::OutgoingConnectionError { error, .. } if !reported => {
                    drop(permit);
                    return Err(format!("dial: {error}"));
                }
                _ => {}
            }
        }
    }
    Ok(())
}
