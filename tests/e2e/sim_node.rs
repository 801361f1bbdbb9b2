//! `agentnet sim-node`, the node of libp2p's gossipsub-interop contract (issue 20, part 5),
//! tested here without Shadow: three processes on loopback addresses 127.0.0.1-3, one port,
//! read a params.json, join in a line (node 2 dials only node 1), publish, and print the JSON
//! lines the harness's analysis reads; node 0's message reaches node 2 through node 1, which
//! validated it (its store's files in memory, as under Shadow) before forwarding. A params
//! file that does not read is refused with the reason.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;
use common::*;

fn spawn(dir: &std::path::Path, params: &std::path::Path, id: u32, port: u16) -> Child {
    let out = std::fs::File::create(dir.join(format!("node{id}.stdout"))).unwrap();
    let err = std::fs::File::create(dir.join(format!("node{id}.stderr"))).unwrap();
    Command::new(env!("CARGO_BIN_EXE_agentnet"))
        .args([
            "sim-node",
            "--params",
            p(params),
            "--node-id",
            &id.to_string(),
            "--listen-ip",
            &format!("127.0.0.{}", id + 1),
            "--port",
            &port.to_string(),
            "--dial",
            &format!("/ip4/127.0.0.{{n1}}/tcp/{port}"),
        ])
        // The middle node, which validates, stores and forwards, keeps its store's files in
        // memory, as under Shadow (`shadowgen` gives every host `--store-in-memory`).
        .args(if id == 1 {
            &["--store-in-memory"][..]
        } else {
            &[]
        })
        .env("AGENTNET_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap()
}

fn lines(dir: &std::path::Path, id: u32) -> Vec<Value> {
    std::fs::read_to_string(dir.join(format!("node{id}.stdout")))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("node {id}: {e}: {l}")))
        .collect()
}

fn received(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["msg"] == "Received Message")
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn three_contract_nodes_join_publish_and_print_what_the_harness_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let params = tmp.path().join("params.json");
    let script = json!({"script": [
        {"type": "initGossipSub", "gossipSubParams": {"D": 2, "HeartbeatInterval": 200_000_000u64, "Dlazy": 6}},
        {"type": "ifNodeIDEquals", "nodeID": 1, "instruction": {"type": "connect", "connectTo": [0]}},
        {"type": "ifNodeIDEquals", "nodeID": 2, "instruction": {"type": "connect", "connectTo": [1]}},
        {"type": "subscribeToTopic", "topicID": "a-subnet", "partial": false},
        {"type": "waitUntil", "elapsedSeconds": 6},
        {"type": "ifNodeIDEquals", "nodeID": 0, "instruction": {"type": "publish", "messageID": 7, "messageSizeBytes": 2048, "topicID": "a-subnet"}},
        {"type": "waitUntil", "elapsedSeconds": 9},
        {"type": "ifNodeIDEquals", "nodeID": 2, "instruction": {"type": "publish", "messageID": 8, "messageSizeBytes": 100_000, "topicID": "a-subnet"}},
        {"type": "waitUntil", "elapsedSeconds": 13},
        {"type": "publishPartial", "topicID": "a-subnet", "groupID": 1}
    ]});
    std::fs::write(&params, serde_json::to_vec(&script).unwrap()).unwrap();
    let mut children = Vec::new();
    for id in 0..3 {
        children.push(spawn(tmp.path(), &params, id, port));
        // Each listens before the next dials it.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !lines(tmp.path(), id).iter().any(|l| l["msg"] == "PeerID") {
            assert!(Instant::now() < deadline, "node {id} printed no PeerID");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for (id, c) in children.iter_mut().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = c.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} did not exit after its script"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let err = std::fs::read_to_string(tmp.path().join(format!("node{id}.stderr"))).unwrap();
        assert!(status.success(), "node {id}: {status}: {err}");
        assert!(
            err.contains("does not implement"),
            "node {id} named no skipped instruction: {err}"
        );
    }
    let all: Vec<Vec<Value>> = (0..3).map(|id| lines(tmp.path(), id)).collect();
    for (id, l) in all.iter().enumerate() {
        // The contract's first line: the PeerID its key gives, which every other node derives.
        assert_eq!(l[0]["msg"], "PeerID", "{l:?}");
        assert_eq!(l[0]["node_id"], id, "{l:?}");
        assert!(
            l[0]["id"].as_str().unwrap().starts_with("12D3KooW"),
            "{l:?}"
        );
        for x in l {
            let t = x["time"].as_str().unwrap_or_else(|| panic!("no time: {x}"));
            assert!(t.ends_with('Z') && t.contains('T'), "{t}");
        }
        assert_eq!(l.last().unwrap()["msg"], "Traffic", "{l:?}");
    }
    assert_eq!(received(&all[0]), ["8"], "{:?}", all[0]);
    assert_eq!(received(&all[1]), ["7", "8"], "{:?}", all[1]);
    assert_eq!(
        received(&all[2]),
        ["7"],
        "node 2 got node 0's message through node 1: {:?}",
        all[2]
    );
    // The 100 000-byte message was cut to what a node accepts.
    let published = all[2].iter().find(|l| l["msg"] == "Published").unwrap();
    assert!(
        published["bytes"].as_u64().unwrap() <= 64 * 1024,
        "{published}"
    );
}

#[test]
fn a_params_file_that_does_not_read_is_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let params = tmp.path().join("params.json");
    for (body, says) in [
        ("{\"script\": 5}", "not {\"script\""),
        ("not json", "not {\"script\""),
        (
            "{\"script\": [{\"type\": \"publish\", \"messageID\": -1}]}",
            "not {\"script\"",
        ),
    ] {
        std::fs::write(&params, body).unwrap();
        let o = agentnet(&[
            "sim-node",
            "--params",
            p(&params),
            "--node-id",
            "0",
            "--listen-ip",
            "127.0.0.1",
            "--port",
            "0",
        ]);
        assert!(!o.status.success(), "{body}");
        assert!(stderr(&o).contains(says), "{body}: {}", stderr(&o));
    }
    let o = agentnet(&[
        "sim-node",
        "--params",
        p(&tmp.path().join("missing.json")),
        "--node-id",
        "0",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("missing.json"), "{}", stderr(&o));
}
