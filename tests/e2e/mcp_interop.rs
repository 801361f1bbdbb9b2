//! The node's MCP server (`agentnet mcp` on stdio, `/mcp` on the admin listener) driven by the
//! official SDK clients: PyPI `mcp` 2.x over stdio and Streamable HTTP in both protocol eras
//! (2026-07-28 stateless, 2025-11-25 with `initialize`), and npm `@modelcontextprotocol/sdk` over
//! HTTP. Real `agentnet up` processes, real RocksDB, loopback only. End to end: on a testnet of
//! three nodes the Python client asks the last node to find an agent hosted by the first by skill
//! and to send it a message; the answer comes back through MCP.
//!
//! The clients are `interop/python/mcp_client.py` and `interop/node/mcp_client.mjs`; each prints
//! one JSON summary line. Needs `bash interop/setup.sh`; without it the tests skip, except under
//! `scripts/test.sh` (`AGENTNET_INTEROP_REQUIRED=1`), where a missing tool fails them.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{agentnet, p, stderr, stdout, BIN};
use serde_json::{json, Value};

/// Longest wait for a node to start or an advertisement to arrive; only a hang trips it.
const PATIENCE: Duration = Duration::from_secs(60);

/// The seven tools of docs/MCP.md.
const TOOLS: [&str; 7] = [
    "cancel_task",
    "discover_agents",
    "get_agent_card",
    "get_task",
    "list_peers",
    "resolve_did",
    "send_message",
];

const ERAS: [&str; 2] = ["2026-07-28", "2025-11-25"];

/// Poll `f` every 250 ms until it returns `Some`, at most [`PATIENCE`].
fn eventually<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    common::eventually(what, PATIENCE, Duration::from_millis(250), f)
}

// A running `agentnet up --config`.
use common::UpNode as Node;

/// What this module adds to the shared [`Node`] fixture.
trait McpNodeExt {
    fn start(dir: &Path, agents: &str, bootstrap: &[&str]) -> Node;
    fn data_dir(&self) -> &str;
    fn mcp_url(&self) -> String;
    fn mcp_auth(&self) -> String;
    fn addr(&self) -> String;
    fn wait_for_agent(&self, tag: &str) -> String;
}

impl McpNodeExt for Node {
    /// `agentnet up --config <dir>/node.toml` on loopback (no mDNS), hosting the agents of
    /// `agents` (TOML `[[agent]]` tables), bootstrapping from `bootstrap`. `[mcp] allow_private`
    /// (and `agentnet mcp --allow-private` below): the agents here are on 127.0.0.1 over plain
    /// http, which the MCP tools otherwise refuse to call (https to public addresses only).
    fn start(dir: &Path, agents: &str, bootstrap: &[&str]) -> Node {
        let boot: Vec<String> = bootstrap.iter().map(|b| format!("{b:?}")).collect();
        let config = format!(
            "[node]\nmdns = false\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\nbootstrap = [{}]\n\
             [mcp]\nallow_private = true\n{agents}",
            boot.join(", ")
        );
        Node::with_config(dir, &config)
    }

    fn data_dir(&self) -> &str {
        p(&self.dir)
    }

    /// `/mcp` on the admin listener.
    fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.info["admin"].as_str().unwrap())
    }

    /// The header `/mcp` needs, `Authorization: Bearer <token>`, the token read from the data
    /// directory as a host configuration does (docs/MCP.md).
    fn mcp_auth(&self) -> String {
        let token = std::fs::read_to_string(self.dir.join("admin.token")).unwrap();
        format!("Authorization: Bearer {}", token.trim())
    }

    /// The first listen address (ends in `/p2p/<peer id>`).
    fn addr(&self) -> String {
        self.info["listen"][0].as_str().unwrap().to_owned()
    }

    /// The DID of the agent tagged `tag`, once this node's index has it.
    fn wait_for_agent(&self, tag: &str) -> String {
        eventually(
            &format!("an agent tagged {tag} in {}", self.data_dir()),
            || {
                let o = agentnet(&[
                    "discover",
                    "--skill",
                    tag,
                    "--json",
                    "--data-dir",
                    self.data_dir(),
                ]);
                assert!(o.status.success(), "{}", stderr(&o));
                let v: Value = serde_json::from_str(&stdout(&o)).ok()?;
                Some(v.get(0)?["did"].as_str()?.to_owned())
            },
        )
    }
}

/// The interop tools: the venv's python and the Node modules directory, or `None` (skip) when
/// they are missing outside `scripts/test.sh`.
fn tools() -> Option<(PathBuf, PathBuf)> {
    let python = common::venv_python_with("mcp");
    let node_dir = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("interop/node");
    let have_py = python.is_some();
    let have_ts = node_dir
        .join("node_modules/@modelcontextprotocol/sdk")
        .is_dir();
    if let (Some(python), true) = (python, have_ts) {
        return Some((python, node_dir));
    }
    // scripts/test.sh installs the tools and sets this: a skip there is a failure.
    assert!(
        std::env::var_os("AGENTNET_INTEROP_REQUIRED").is_none(),
        "interop tools missing (python mcp: {have_py}, @modelcontextprotocol/sdk: {have_ts}) although scripts/test.sh installed them"
    );
    eprintln!(
        "SKIPPED: no venv with PyPI mcp or no @modelcontextprotocol/sdk (run interop/setup.sh)"
    );
    None
}

fn python_client(python: &Path) -> Command {
    let mut c = Command::new(python);
    c.arg(
        std::path::PathBuf::from(
            std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("interop/python/mcp_client.py"),
    );
    c
}

fn ts_client(node_dir: &Path) -> Command {
    let mut c = Command::new("node");
    c.current_dir(node_dir).arg("mcp_client.mjs");
    c
}

/// Run an SDK client script; its exit status and its one JSON summary line.
fn run(mut cmd: Command) -> (bool, Value) {
    let what = format!("{cmd:?}");
    let out = cmd.stdin(Stdio::null()).output().expect("the client runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let line = text.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{what}: no JSON summary ({e}):\n{text}\n--- stderr\n{err}"));
    if !out.status.success() {
        eprintln!(
            "{what}: exit {:?}\n{text}\n--- stderr\n{err}",
            out.status.code()
        );
    }
    (out.status.success(), v)
}

/// Run a client that must pass its own checks; its summary.
fn passes(cmd: Command) -> Value {
    let what = format!("{cmd:?}");
    let (ok, v) = run(cmd);
    assert!(ok && v["ok"] == true, "{what}: {v:#}");
    v
}

/// The arguments of `--call NAME JSON` for each call.
fn call_args(calls: &[(&str, Value)]) -> Vec<String> {
    calls
        .iter()
        .flat_map(|(name, args)| ["--call".to_owned(), name.to_string(), args.to_string()])
        .collect()
}

/// The calls every client makes against a node hosting the echo agent `did` tagged `tag`.
fn echo_calls(did: &str, tag: &str, text: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("discover_agents", json!({"tags": [tag], "limit": 5})),
        ("get_agent_card", json!({"did": did})),
        ("send_message", json!({"tags": [tag], "text": text})),
        (
            "send_message",
            json!({"did": did, "text": format!("{text} (by DID)")}),
        ),
        // Failures the model must see: an agent nobody advertises, a skill nobody has.
        (
            "send_message",
            json!({"did": "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", "text": "x"}),
        ),
        (
            "discover_agents",
            json!({"tags": ["no-agent-has-this-tag"]}),
        ),
    ]
}

/// Check the summary of [`echo_calls`].
fn check_echo(v: &Value, did: &str, text: &str) {
    let mut tools: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    tools.sort();
    assert_eq!(tools, TOOLS, "{v:#}");
    let calls = v["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 6, "{v:#}");
    for c in &calls[..4] {
        assert_eq!(c["isError"], false, "{c:#}");
        assert!(
            c["structuredContent"].is_object(),
            "no structuredContent: {c:#}"
        );
    }

    let found = calls[0]["structuredContent"]["agents"].as_array().unwrap();
    assert!(
        found.iter().any(|a| a["did"] == did),
        "discover_agents missed {did}: {v:#}"
    );

    let card = &calls[1]["structuredContent"];
    assert_eq!(card["did"], did, "{card:#}");
    assert_eq!(card["verified"], true, "{card:#}");
    assert_eq!(card["did_bound"], true, "{card:#}");

    for (c, want) in [
        (&calls[2], text.to_owned()),
        (&calls[3], format!("{text} (by DID)")),
    ] {
        let s = &c["structuredContent"];
        assert_eq!(s["agent"]["did"], did, "{c:#}");
        assert_eq!(s["state"], "completed", "{c:#}");
        assert!(
            s.get("task").is_none(),
            "the raw task only with full: {c:#}"
        );
        assert!(
            s["texts"].as_array().unwrap().contains(&json!(want)),
            "no echo of {want:?}: {c:#}"
        );
    }

    // An agent nobody advertises: an isError result with a sentence, not a protocol error.
    assert_eq!(calls[4]["isError"], true, "{:#}", calls[4]);
    assert!(
        !calls[4]["text"].as_str().unwrap().trim().is_empty(),
        "{:#}",
        calls[4]
    );
    // No agent for a skill: an empty list, not an error.
    assert_eq!(calls[5]["isError"], false, "{:#}", calls[5]);
    assert_eq!(
        calls[5]["structuredContent"]["agents"],
        json!([]),
        "{:#}",
        calls[5]
    );
}

const ECHO_AGENT: &str =
    "\n[[agent]]\nid = \"echo\"\nkind = \"echo\"\ntags = [\"mcp-interop-echo\"]\n";

#[test]
fn python_sdk_over_stdio_and_http_in_both_eras_finds_and_messages_the_echo_agent() {
    let Some((python, _)) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("node"), ECHO_AGENT, &[]);
    let tag = "mcp-interop-echo";
    let did = node.wait_for_agent(tag);
    for era in ERAS {
        for transport in ["stdio", "http"] {
            let text = format!("hello from python {era} {transport}");
            let mut cmd = python_client(&python);
            cmd.args(["--era", era])
                .args(call_args(&echo_calls(&did, tag, &text)));
            if transport == "http" {
                cmd.args(["--url", &node.mcp_url(), "--header", &node.mcp_auth()]);
            } else {
                // The data directory of a running node: `agentnet mcp` uses its admin API.
                cmd.args([
                    "--stdio",
                    BIN,
                    "mcp",
                    "--allow-private",
                    "--data-dir",
                    node.data_dir(),
                ]);
            }
            let v = passes(cmd);
            assert_eq!(v["protocolVersion"], era, "{v:#}");
            check_echo(&v, &did, &text);
        }
    }
}

#[test]
fn typescript_sdk_over_http_finds_and_messages_the_echo_agent() {
    let Some((_, node_dir)) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("node"), ECHO_AGENT, &[]);
    let tag = "mcp-interop-echo";
    let did = node.wait_for_agent(tag);
    let text = "hello from typescript";
    let mut cmd = ts_client(&node_dir);
    cmd.args([node.mcp_url(), "--header".into(), node.mcp_auth()])
        .args(call_args(&echo_calls(&did, tag, text)));
    let v = passes(cmd);
    assert_eq!(v["protocolVersion"], "2025-11-25", "{v:#}");
    check_echo(&v, &did, text);
}

/// The attacker: a web page the user visits drives an MCP client at `/mcp` with its own
/// `Origin`, or through a DNS name it rebound to 127.0.0.1 (`Host`). The SDK clients must be
/// refused with 403 before any tool runs, in both eras. (The TypeScript SDK runs on Node's
/// fetch, which drops a `Host` header: only the Python client forges one.)
#[test]
fn sdk_clients_from_a_foreign_origin_or_host_are_refused() {
    let Some((python, node_dir)) = tools() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("node"), ECHO_AGENT, &[]);
    let port = node.info["admin"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let origins = [
        "Origin: http://evil.example".to_owned(),
        format!("Origin: http://127.0.0.1.evil.example:{port}"),
        "Origin: null".to_owned(),
    ];
    let hosts = [
        format!("Host: rebind.evil.example:{port}"),
        "Host: evil.example".to_owned(),
    ];
    for header in origins.iter().chain(&hosts) {
        for era in ERAS {
            let mut cmd = python_client(&python);
            cmd.args(["--era", era, "--url", &node.mcp_url(), "--header", header]);
            cmd.args(["--header", &node.mcp_auth()]);
            cmd.args(["--call", "list_peers", "{}"]);
            let (ok, v) = run(cmd);
            assert!(
                !ok && v["ok"] == false,
                "python {era} {header}: accepted: {v:#}"
            );
            let statuses = v["httpStatuses"].as_array().unwrap();
            assert!(
                !statuses.is_empty() && statuses.iter().all(|s| s == 403),
                "python {era} {header}: {v:#}"
            );
        }
    }
    for header in &origins {
        let mut cmd = ts_client(&node_dir);
        cmd.args([
            &node.mcp_url(),
            "--header",
            header,
            "--header",
            &node.mcp_auth(),
            "--call",
            "list_peers",
            "{}",
        ]);
        let (ok, v) = run(cmd);
        assert!(!ok && v["ok"] == false, "ts {header}: accepted: {v:#}");
        assert!(
            v["failed"].as_str().unwrap().contains("Forbidden"),
            "ts {header}: {v:#}"
        );
    }
    // The same clients with a loopback Origin or Host are served: the refusals above are about
    // the header, not the client.
    for header in [
        format!("Origin: http://localhost:{port}"),
        format!("Host: localhost:{port}"),
    ] {
        let mut cmd = python_client(&python);
        cmd.args([
            "--era",
            "2026-07-28",
            "--url",
            &node.mcp_url(),
            "--header",
            &header,
            "--header",
            &node.mcp_auth(),
        ]);
        let v = passes(cmd);
        assert!(
            v["httpStatuses"]
                .as_array()
                .unwrap()
                .iter()
                .all(|s| s == 200),
            "{v:#}"
        );
    }
    let mut cmd = ts_client(&node_dir);
    cmd.args([
        &node.mcp_url(),
        "--header",
        &format!("Origin: http://127.0.0.1:{port}"),
        "--header",
        &node.mcp_auth(),
    ]);
    passes(cmd);
}

/// The attacker: a local process without the data directory points an SDK client at `/mcp`,
/// with no token or a wrong one: 401 before any tool runs, in both eras.
#[test]
fn sdk_clients_without_the_admin_token_are_refused() {
    let Some((python, node_dir)) = tools() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("node"), ECHO_AGENT, &[]);
    for header in [None, Some("Authorization: Bearer not-the-token")] {
        for era in ERAS {
            let mut cmd = python_client(&python);
            cmd.args(["--era", era, "--url", &node.mcp_url()]);
            if let Some(h) = header {
                cmd.args(["--header", h]);
            }
            cmd.args(["--call", "list_peers", "{}"]);
            let (ok, v) = run(cmd);
            assert!(!ok && v["ok"] == false, "python {era} {header:?}: {v:#}");
            let statuses = v["httpStatuses"].as_array().unwrap();
            assert!(
                !statuses.is_empty() && statuses.iter().all(|s| s == 401),
                "python {era} {header:?}: {v:#}"
            );
        }
        let mut cmd = ts_client(&node_dir);
        cmd.arg(node.mcp_url());
        if let Some(h) = header {
            cmd.args(["--header", h]);
        }
        cmd.args(["--call", "list_peers", "{}"]);
        let (ok, v) = run(cmd);
        assert!(!ok && v["ok"] == false, "ts {header:?}: accepted: {v:#}");
    }
}

/// The end to end: three `agentnet up` processes on loopback (node 2 bootstraps from
/// node 1, node 3 from node 2); node 1 hosts an agent; an MCP host attached to node 3 (the
/// Python SDK over `agentnet mcp` on stdio) discovers it by skill and sends it a message, and
/// the agent's answer comes back through MCP.
#[test]
fn testnet_mcp_client_on_the_last_node_finds_and_messages_an_agent_of_the_first() {
    let Some((python, _)) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let tag = "mcp-e2e-translate";
    let agent = format!("\n[[agent]]\nid = \"far-echo\"\nkind = \"echo\"\ntags = [\"{tag}\"]\n");
    let n1 = Node::start(&dir.path().join("n1"), &agent, &[]);
    let n2 = Node::start(&dir.path().join("n2"), "", &[&n1.addr()]);
    let n3 = Node::start(&dir.path().join("n3"), "", &[&n2.addr()]);

    // The agent's advertisement reached node 3 over the network (node 1 published it).
    let did = n3.wait_for_agent(tag);
    assert_eq!(did, n1.wait_for_agent(tag));

    for era in ERAS {
        let text = format!("bonjour from node 3 ({era})");
        let mut cmd = python_client(&python);
        cmd.args(["--era", era]);
        cmd.args(call_args(&[
            ("discover_agents", json!({"tags": [tag]})),
            ("send_message", json!({"tags": [tag], "text": text})),
            ("list_peers", json!({})),
            ("get_agent_card", json!({"did": did})),
        ]));
        cmd.args([
            "--stdio",
            BIN,
            "mcp",
            "--allow-private",
            "--data-dir",
            n3.data_dir(),
        ]);
        let v = passes(cmd);
        let calls = v["calls"].as_array().unwrap();
        for c in calls {
            assert_eq!(c["isError"], false, "{c:#}");
        }
        let agents = calls[0]["structuredContent"]["agents"].as_array().unwrap();
        let a = agents
            .iter()
            .find(|a| a["did"] == did.as_str())
            .unwrap_or_else(|| panic!("node 3 did not find {did}: {v:#}"));
        assert_eq!(
            a["peer_id"], n1.info["peer_id"],
            "published by node 1: {a:#}"
        );

        let sent = &calls[1]["structuredContent"];
        assert_eq!(sent["agent"]["did"], did.as_str(), "{sent:#}");
        assert_eq!(sent["state"], "completed", "{sent:#}");
        assert!(
            sent["texts"].as_array().unwrap().contains(&json!(text)),
            "{sent:#}"
        );

        // The list_peers of node 3, and the agent's verified card pointing at node 1's listener.
        assert_eq!(
            calls[2]["structuredContent"]["peer_id"], n3.info["peer_id"],
            "{v:#}"
        );
        let card = &calls[3]["structuredContent"];
        assert_eq!(card["verified"], true, "{card:#}");
        let url = card["interface"]["url"].as_str().unwrap();
        let n1_http = format!("http://{}/", n1.info["http"].as_str().unwrap());
        assert!(
            url.starts_with(&n1_http),
            "{url} is not on node 1 ({n1_http})"
        );
    }
}
