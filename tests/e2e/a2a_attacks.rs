//! A stranger against the real binary's hosted agents (issue 15): requests meant to leave the
//! node unable to read its own task store, or to start again.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{post_a2a_from, UpNode};
use serde_json::{json, Value};

const CONFIG: &str = r#"
[node]
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]

[[agent]]
id = "open-echo"
kind = "echo"
policy = "open"
publish = false
"#;

/// A node hosting [`CONFIG`]'s agent.
fn start(dir: &Path) -> UpNode {
    UpNode::with_config(dir, CONFIG)
}

/// The open echo agent's A2A endpoint.
fn agent(node: &UpNode) -> String {
    format!("{}/a2a/open-echo", node.http_url())
}

/// `{"k":{"k": ... "x" ...}}`, `levels` objects deep, as text (a `Value` that deep would
/// overflow the test's own stack when dropped).
fn nested(levels: usize) -> String {
    format!("{}\"x\"{}", "{\"k\":".repeat(levels), "}".repeat(levels))
}

/// A `SendMessage` request's params (the HTTP+JSON body) with this metadata.
fn message(metadata: &str) -> String {
    format!(
        r#"{{"message":{{"role":"ROLE_USER","parts":[{{"text":"deep"}}],"messageId":"m-1","metadata":{metadata}}},"configuration":{{"returnImmediately":true}}}}"#
    )
}

fn rpc_body(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#)
}

/// An unsigned A2A request from 127.0.0.1 (see [`post_a2a_from`]).
fn post(url: &str, body: String) -> (u16, Value) {
    post_a2a_from("127.0.0.1", url, body)
}

fn rpc(url: &str, method: &str, params: Value) -> (u16, Value) {
    post(url, rpc_body(method, &params.to_string()))
}

/// SIGTERM, and wait for the process to end (a normal stop: the store is flushed).
fn stop(mut node: UpNode) {
    let pid = node.child.id().to_string();
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM {pid}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the node did not stop: {}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A message whose `metadata` nests 124 levels was accepted (200), stored one level deeper
/// inside its task, past the depth the store reads back: `GetTask` answered 500, the task
/// stayed WORKING, and after a normal stop the node refused to start. It is refused at the
/// door on both bindings now; a message of ordinary depth still works, and the node starts
/// again with every task it accepted readable.
#[test]
fn deep_messages_are_refused_at_the_door_and_the_node_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let node_dir = dir.path().join("node");
    let node = start(&node_dir);
    let url = agent(&node);

    for levels in [70, 124, 5000] {
        let (status, v) = post(&url, rpc_body("SendMessage", &message(&nested(levels))));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["error"]["code"], -32600, "{levels} levels: {v}");
        assert!(v["result"].is_null(), "{v}");
        let (status, v) = post(&format!("{url}/message:send"), message(&nested(levels)));
        assert_eq!(status, 400, "{levels} levels over HTTP+JSON: {v}");
    }

    // Ordinary depth: accepted, completed, readable.
    let (_, v) = post(&url, rpc_body("SendMessage", &message(&nested(40))));
    let id = v["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, v) = rpc(&url, "GetTask", json!({"id": id}));
        assert_eq!(status, 200, "{v}");
        if v["result"]["status"]["state"] == "TASK_STATE_COMPLETED" {
            break;
        }
        assert!(Instant::now() < deadline, "task never completed: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }

    stop(node);
    let node = start(&node_dir);
    let (status, v) = rpc(&agent(&node), "GetTask", json!({"id": id}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
}

/// All anonymous callers of an `open` agent were one owner with one quota: one client's
/// 10 000 unsigned requests made every anonymous caller get 429 for the week the tasks are
/// kept. Anonymous callers are owned by their source (an IPv4 address, an IPv6 /64) now: one
/// address filling its quota leaves another's untouched, and neither reaches the other's task.
#[test]
fn one_anonymous_source_cannot_use_up_the_others_quota() {
    let dir = tempfile::tempdir().unwrap();
    let node_dir = dir.path().join("node");
    let config = format!("{CONFIG}\n[tasks]\nmax_per_owner = 3\n");
    let node = UpNode::with_config(&node_dir, &config);
    let url = agent(&node);
    let send = |from: &str, n: usize| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{{"role":"ROLE_USER","parts":[{{"text":"hi"}}],"messageId":"m-{n}"}}}}}}"#
        );
        post_a2a_from(from, &url, body).1
    };
    let mut mine = Vec::new();
    for n in 0..3 {
        let v = send("127.0.0.2", n);
        mine.push(
            v["result"]["task"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{v}"))
                .to_string(),
        );
    }
    let v = send("127.0.0.2", 3);
    assert_eq!(
        v["error"]["code"], -32000,
        "the fourth task of 127.0.0.2: {v}"
    );
    // Another address is another owner, with its own quota.
    for n in 0..3 {
        let v = send("127.0.0.3", n);
        assert_eq!(
            v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{v}"
        );
    }
    // And the first address's tasks are its own.
    let get = |from: &str| {
        post_a2a_from(
            from,
            &url,
            rpc_body("GetTask", &json!({"id": mine[0]}).to_string()),
        )
        .1
    };
    assert_eq!(get("127.0.0.2")["result"]["id"], mine[0].as_str());
    assert_eq!(
        get("127.0.0.3")["error"]["code"],
        -32001,
        "another source's task is not found"
    );
}

/// Nine addresses filled the task store with finished tasks, after which every new task at
/// every agent was refused ("wait for the retention sweep") for the whole retention. A full
/// store now makes room from the address holding the most: a tenth address is served, and the
/// first one's oldest task is the one that went.
#[test]
fn a_store_filled_by_nine_addresses_still_serves_a_tenth() {
    let dir = tempfile::tempdir().unwrap();
    let node_dir = dir.path().join("node");
    let config =
        format!("{CONFIG}\n[tasks]\nmax_tasks = 19\nmax_per_source = 3\nmax_per_owner = 3\n");
    let node = UpNode::with_config(&node_dir, &config);
    let url = agent(&node);
    let send = |from: &str, n: usize| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{{"role":"ROLE_USER","parts":[{{"text":"hi"}}],"messageId":"m-{n}"}}}}}}"#
        );
        post_a2a_from(from, &url, body)
    };
    let mut first = Vec::new();
    // The first address holds three, the others two each: 19, full.
    for a in 1..=9 {
        for n in 0..(if a == 1 { 3 } else { 2 }) {
            let (status, v) = send(&format!("127.0.1.{a}"), n);
            let id = v["result"]["task"]["id"].as_str();
            let id = id.unwrap_or_else(|| panic!("127.0.1.{a} task {n}: {status} {v}"));
            if a == 1 {
                first.push(id.to_string());
            }
            // Later statuses are later in time, whatever the clock's resolution.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // Full: a tenth address is served all the same.
    let (status, v) = send("127.0.1.10", 0);
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "a new address on a full store: {status} {v}"
    );
    // The room came from the first address's oldest task; its newer one is still there.
    let get = |id: &str| {
        post_a2a_from(
            "127.0.1.1",
            &url,
            rpc_body("GetTask", &json!({"id": id}).to_string()),
        )
        .1
    };
    assert_eq!(get(&first[0])["error"]["code"], -32001, "evicted");
    assert_eq!(get(&first[1])["result"]["id"], first[1].as_str());
    stop(node);
}
