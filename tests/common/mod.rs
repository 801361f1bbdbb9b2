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
