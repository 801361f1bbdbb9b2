//! `shadowgen --run-netns` (issue 20, part 5): a scenario's `agentnet sim-node` processes, each
//! in a network namespace the command makes (root, iproute2), on one bridge. Every message
//! reaches every node across the namespaces; each node listened on its own address, which
//! exists only inside its namespace; no namespace of the run is left afterwards, and those of
//! an earlier run that was killed are removed. Without root it refuses and says what to do.
//!
//! The machines this project's CI runs on are Debian, as root, with iproute2; the test needs
//! both and the `agentnet` binary (`cargo test --workspace` builds it).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn agentnet() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_shadowgen")).with_file_name("agentnet");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build --bin agentnet; cargo test --workspace does)",
        bin.display()
    );
    bin
}

fn namespaces() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(out.status.success(), "ip netns list: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn scenario(dir: &Path, nodes: u32) -> PathBuf {
    let f = dir.join("scenario.toml");
    std::fs::write(
        &f,
        format!(
            "nodes = {nodes}\ndials = 2\nwarmup_s = 5\nmessages = 2\nmessage_bytes = 1024\n\
             interval_s = 1\ntail_s = 5\nmesh = 2\nbinary = {:?}\n",
            agentnet().display().to_string()
        ),
    )
    .unwrap();
    f
}

#[test]
fn nodes_in_their_own_namespaces_deliver_across_them_and_the_run_leaves_none_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let nodes = 4;
    let sc = scenario(tmp.path(), nodes);
    let out = tmp.path().join("out");
    // What a run killed before it could clean up leaves: its pid is not a process.
    let stale = "agentnet-4000000000-hub";
    let made = Command::new("ip")
        .args(["netns", "add", stale])
        .status()
        .unwrap();
    assert!(made.success(), "ip netns add (this test runs as root)");

    let thresholds = || {
        (1..=3)
            .map(|i| {
                std::fs::read_to_string(format!("/proc/sys/net/ipv4/neigh/default/gc_thresh{i}"))
                    .unwrap()
                    .trim()
                    .to_owned()
            })
            .collect::<Vec<_>>()
    };
    let before = thresholds();
    let child = Command::new(env!("CARGO_BIN_EXE_shadowgen"))
        .arg("--scenario")
        .arg(&sc)
        .arg("--out")
        .arg(&out)
        .args(["--run-netns", "9000", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "shadowgen: {}\n{err}", done.status);

    // Every message reached the other nodes, through the bridge.
    let v: Value = serde_json::from_slice(&done.stdout).unwrap();
    let msgs = v["messages"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(msgs.len(), 2, "{v}");
    for m in msgs {
        assert_eq!(m["reach"].as_f64(), Some(1.0), "{m}");
    }
    // Node M listened on 10.77.0.1 + M: an address only its namespace has.
    for m in 0..nodes {
        let text = std::fs::read_to_string(out.join(format!("run/node{m}.stdout"))).unwrap();
        let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["msg"], "PeerID", "{first}");
        assert_eq!(
            first["listen"],
            format!("/ip4/10.77.0.{}/tcp/9000", m + 1),
            "{first}"
        );
    }
    // Nothing of the run is left, nor of the killed one.
    let left = namespaces();
    let ours = format!("agentnet-{pid}-");
    assert!(!left.iter().any(|n| n.starts_with(&ours)), "{left:?}");
    assert!(!left.iter().any(|n| n == stale), "{left:?}");
    assert!(err.contains("removing 1 network namespace(s)"), "{err}");
    // The kernel's neighbour table (one for all namespaces) had room made for the run, and got
    // its thresholds back after it.
    let was: Vec<u64> = before.iter().map(|t| t.parse().unwrap()).collect();
    if was[0] < 4 * 128 || was[1] < 4 * 256 || was[2] < 4 * 512 {
        assert!(err.contains("raised the kernel's neighbour table"), "{err}");
    }
    assert_eq!(thresholds(), before);
}

#[test]
fn without_root_it_refuses_and_says_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = scenario(tmp.path(), 2);
    // In a user namespace of its own the process is not root (uid 65534 there).
    let done = Command::new("unshare")
        .arg("--user")
        .arg(env!("CARGO_BIN_EXE_shadowgen"))
        .arg("--scenario")
        .arg(&sc)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .args(["--run-netns", "9000"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(!done.status.success(), "{err}");
    assert!(
        err.contains("needs root") && err.contains("--run-local"),
        "{err}"
    );
}
