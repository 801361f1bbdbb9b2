//! Helpers shared by the tests that run the `agentnet` binary.
#![allow(dead_code)] // each test crate uses its own subset

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_agentnet");

/// Run `agentnet args` to completion, without the caller's `AGENTNET_DATA_DIR` and with no stdin.
pub fn agentnet(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("AGENTNET_DATA_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("the agentnet binary runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A temporary path as `&str`.
pub fn p(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

/// Run `agentnet args` and parse its standard output as JSON; panics with stderr on failure.
pub fn json_of(args: &[&str]) -> Value {
    let o = agentnet(args);
    assert!(o.status.success(), "agentnet {args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&o)))
}

/// Start a configured `agentnet up … --json` command and read the JSON banner it prints once
/// `node.json` is written; the rest of its standard output is drained. The node is killed when
/// the child is dropped.
pub async fn start_up(mut cmd: tokio::process::Command) -> (tokio::process::Child, Value) {
    use tokio::io::AsyncBufReadExt;
    let mut child = cmd
        .env_remove("AGENTNET_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("agentnet up runs");
    let mut out = tokio::io::BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let line = out
        .next_line()
        .await
        .expect("reading agentnet up's output")
        .expect("agentnet up prints its banner");
    let info: Value = serde_json::from_str(&line).expect("the banner is JSON");
    tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
    (child, info)
}
