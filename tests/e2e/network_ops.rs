//! What an operator sees of the network layer, against the real binary on 127.0.0.1: a second
//! node on a taken port is refused with the address named, a bootstrap dial that fails is
//! logged with its address and error (and one that succeeds at info), and the first node of a
//! network does not warn about having no peers.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn up_args(listen: &str) -> Vec<String> {
    ["--listen", listen, "--http", "127.0.0.1:0", "--no-mdns"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn spawn(dir: &std::path::Path, args: &[String]) -> UpNode {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    UpNode::spawn(dir, &a)
}

/// `text` without its ANSI colour sequences (the log is coloured).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Wait (at most `limit`) until the node's log contains `needle`.
fn log_within(node: &UpNode, needle: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if node.log().contains(needle) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A second `agentnet up --listen <listen>` beside a first one on the same address: how it
/// ended, and its standard error.
fn second_node_on(listen: &str) -> (std::process::ExitStatus, String) {
    let tmp = tempfile::tempdir().unwrap();
    let _a = spawn(&tmp.path().join("a"), &up_args(listen));
    let mut b = Command::new(BIN)
        .args(["up", "--data-dir", p(&tmp.path().join("b"))])
        .args(up_args(listen))
        .env_remove("AGENTNET_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = b.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = b.kill();
            let _ = b.wait();
            panic!("a second `agentnet up --listen {listen}` is still running beside the first");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = b.wait_with_output().unwrap();
    (status, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_second_node_on_a_taken_port_is_refused_with_the_address_named() {
    // libp2p listens on TCP with SO_REUSEPORT: before, this second node listened on the same
    // port and the kernel spread incoming connections over both. QUIC's UDP socket was refused
    // by libp2p with its error's debug dump.
    for listen in [
        format!("/ip4/127.0.0.1/tcp/{}", free_port()),
        format!("/ip4/127.0.0.1/udp/{}/quic-v1", free_port()),
    ] {
        let (status, err) = second_node_on(&listen);
        assert!(!status.success());
        let said = format!(
            "error: starting the network: {listen} is already in use by another process; pick \
             another port with --listen"
        );
        assert_eq!(err.trim_end().lines().last(), Some(said.as_str()), "{err}");
    }
}

#[test]
fn bootstrap_dials_are_reported_and_a_first_node_does_not_warn_about_no_peers() {
    let tmp = tempfile::tempdir().unwrap();
    let a = spawn(&tmp.path().join("a"), &up_args("/ip4/127.0.0.1/tcp/0"));
    // Nothing listens on port 1.
    let mut args = up_args("/ip4/127.0.0.1/tcp/0");
    args.extend(["--bootstrap".into(), "/ip4/127.0.0.1/tcp/1".into()]);
    let lost = spawn(&tmp.path().join("lost"), &args);
    assert!(
        log_within(
            &lost,
            "dialing bootstrap peer failed",
            Duration::from_secs(10)
        ),
        "{}",
        lost.log()
    );
    let log = plain(&lost.log());
    let line = log
        .lines()
        .find(|l| l.contains("dialing bootstrap peer failed"))
        .unwrap()
        .to_owned();
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("/ip4/127.0.0.1/tcp/1"), "{line}");
    assert!(
        line.contains("error=") && log.contains("Connection refused"),
        "{log}"
    );

    let addr = a.info["listen"][0].as_str().unwrap().to_owned();
    let mut args = up_args("/ip4/127.0.0.1/tcp/0");
    args.extend(["--bootstrap".into(), addr.clone()]);
    let joined = spawn(&tmp.path().join("joined"), &args);
    assert!(
        log_within(
            &joined,
            "connected to bootstrap peer",
            Duration::from_secs(10)
        ),
        "{}",
        joined.log()
    );
    assert!(joined.log().contains(&addr), "{}", joined.log());

    // Kademlia's warning came half a second after the first listen address; by now it would
    // have been logged.
    std::thread::sleep(Duration::from_secs(1));
    for n in [&a, &lost] {
        assert!(
            !n.log().contains("Failed to trigger bootstrap"),
            "{}",
            n.log()
        );
    }
}
