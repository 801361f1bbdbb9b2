//! The check every SDK client script's run must pass (`interop/node/a2a_client.mjs`,
//! `interop/python/a2a_client.py`). Its own file so that the root package's tests, which run
//! the same scripts against the `agentnet` binary, include it (`#[path]`) instead of a copy.

use std::time::Duration;

/// Run an SDK's client script (`cmd`, already given its arguments) against a test server over
/// `binding`, and check its one-line JSON summary: every check passed, in order, over the
/// `transport` the SDK was expected to pick.
pub async fn assert_sdk_client_passes(
    mut cmd: tokio::process::Command,
    binding: &str,
    transport: &str,
) {
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("the SDK client timed out")
        .expect("running the SDK client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("{binding}: no JSON summary ({e})\nstdout: {stdout}\nstderr: {stderr}")
    });
    assert_eq!(
        summary["ok"], true,
        "{binding}: {summary}\nstderr: {stderr}"
    );
    assert_eq!(
        summary["transport"], transport,
        "{binding}: the SDK chose another binding"
    );
    assert_eq!(
        summary["checks"],
        serde_json::json!([
            "card",
            "send",
            "get",
            "list",
            "task-not-found",
            "cancel",
            "stream",
            "subscribe",
            "errors"
        ])
    );
    assert!(out.status.success());
}
