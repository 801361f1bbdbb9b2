//! Interop: the official Python SDK's client (`a2a-sdk` 1.3.0, `interop/python/a2a_client.py`)
//! against this crate's server, in-process on loopback, over both bindings: card, send, get,
//! list, cancel, streaming through INPUT_REQUIRED to COMPLETED, subscribe, error mapping.
//!
//! The venv is `$AGENTNET_VENV` or `~/.cache/agentnet/venv` (`interop/setup.sh` creates it);
//! without it the test says so and passes without running.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use agentnet_a2a::auth::Policy;
use agentnet_a2a::engine::Limits;

fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("AGENTNET_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/agentnet/venv"))
        })?;
    let py = venv.join("bin/python");
    py.exists().then_some(py)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_against_our_server() {
    let Some(python) = venv_python() else {
        // scripts/test.sh installs the tools and sets this: a skip there is a failure.
        assert!(
            std::env::var_os("AGENTNET_INTEROP_REQUIRED").is_none(),
            "interop tools missing although scripts/test.sh installed them"
        );
        eprintln!("SKIPPED: no Python venv with a2a-sdk (run interop/setup.sh)");
        return;
    };
    let script = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../interop/python/a2a_client.py");
    // `did` policy: the script identifies itself with the test authenticator's header.
    let h = common::start_with(Policy::Did, Limits::default(), Duration::from_millis(500)).await;
    for (binding, transport) in [
        ("JSONRPC", "JsonRpcTransport"),
        ("HTTP+JSON", "RestTransport"),
    ] {
        let mut cmd = tokio::process::Command::new(&python);
        cmd.arg(&script).arg(&h.base).arg(binding);
        common::assert_sdk_client_passes(cmd, binding, transport).await;
    }
}
