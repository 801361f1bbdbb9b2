//! Interop: the official JavaScript SDK's client (`@a2a-js/sdk` 1.3.0,
//! `interop/node/a2a_client.mjs`) against this crate's server, in-process on loopback, over
//! both bindings: the same checks as the Python interop test.
//!
//! Needs `node` and `interop/node/node_modules` (`interop/setup.sh` installs them); without
//! them the test says so and passes without running.

mod common;

use std::time::Duration;

use agentnet_a2a::auth::Policy;
use agentnet_a2a::engine::Limits;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_sdk_client_against_our_server() {
    let dir = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../interop/node");
    let node_ok = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node_ok || !dir.join("node_modules/@a2a-js/sdk").exists() {
        // scripts/test.sh installs the tools and sets this: a skip there is a failure.
        assert!(
            std::env::var_os("AGENTNET_INTEROP_REQUIRED").is_none(),
            "interop tools missing although scripts/test.sh installed them"
        );
        eprintln!("SKIPPED: node or interop/node/node_modules missing (run interop/setup.sh)");
        return;
    }
    let h = common::start_with(Policy::Did, Limits::default(), Duration::from_millis(500)).await;
    for (binding, transport) in [
        ("JSONRPC", "JsonRpcTransport"),
        ("HTTP+JSON", "_RestTransport"),
    ] {
        let mut cmd = tokio::process::Command::new("node");
        cmd.current_dir(&dir)
            .arg("a2a_client.mjs")
            .arg(&h.base)
            .arg(binding);
        common::assert_sdk_client_passes(cmd, binding, transport).await;
    }
}
