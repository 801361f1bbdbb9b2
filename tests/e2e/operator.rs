//! The bugs an operator found running two nodes from the docs alone (issue 16), each as the
//! operator met it, against the real binary: output into a closed pipe, `card sign --key` with
//! `AGENTNET_DATA_DIR` set, a did:web port written with a colon, a publication lost on restart,
//! a card published without an interface, the testnet's calls signed by the wrong DID, and
//! error messages that repeat their cause.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common;
use common::*;

/// `agentnet args` with standard output a pipe whose reading end is already closed (what
/// `agentnet … | head -1` becomes once `head` has its line).
fn into_closed_pipe(args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = Command::new(BIN)
        .args(args)
        .env_remove("AGENTNET_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.wait_with_output().unwrap()
}

fn assert_quiet_exit(what: &str, o: &std::process::Output) {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{what} panicked: {err}");
    assert_ne!(o.status.code(), Some(101), "{what}: {err}");
}

fn card(name: &str, tags: &[&str], interfaces: bool) -> Value {
    let mut c = json!({
        "name": name,
        "description": "Translates text.",
        "version": "1.0.0",
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "capabilities": {},
        "skills": [{"id": "t", "name": "Translate", "description": "Any pair.", "tags": tags}]
    });
    if interfaces {
        c["supportedInterfaces"] = json!([
            {"url": "https://translator.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ]);
    }
    c
}

fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    path
}

/// An agent key: the node key of a data directory made by `agentnet init`.
fn agent_key(dir: &Path) -> (PathBuf, String) {
    let v = json_of(&["init", "--data-dir", p(dir), "--json"]);
    (dir.join("node.key"), v["did"].as_str().unwrap().to_owned())
}

fn up(dir: &Path) -> UpNode {
    UpNode::alone(dir)
}

/// `agentnet publish --card <card> --key <key> --data-dir <data> <more>`.
fn publish_signed(card: &Path, key: &Path, data: &Path, more: &[&str]) -> Output {
    let mut args = vec![
        "publish",
        "--card",
        p(card),
        "--key",
        p(key),
        "--data-dir",
        p(data),
    ];
    args.extend_from_slice(more);
    agentnet(&args)
}

/// The adverts of `did` in the node's own index for `tag` (no network: the node is alone).
fn local(dir: &Path, tag: &str, did: &str) -> Vec<Value> {
    discover_json(dir, tag, &[])
        .into_iter()
        .filter(|a| a["did"] == did)
        .collect()
}

/// Poll `f` every 200 ms until it returns `Some`, at most 30 s.
fn eventually<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    common::eventually(what, Duration::from_secs(30), Duration::from_millis(200), f)
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let o = into_closed_pipe(&["testnet", "--nodes", "2"]);
    assert_quiet_exit("testnet | head -1", &o);

    let tmp = tempfile::tempdir().unwrap();
    let node = up(&tmp.path().join("a"));
    for args in [
        vec!["peers"],
        vec!["discover", "--skill", "nothing-here"],
        vec!["init"],
    ] {
        let mut a = args.clone();
        a.extend(["--data-dir", p(&node.dir)]);
        let o = into_closed_pipe(&a);
        assert_quiet_exit(&format!("{args:?} | head -1"), &o);
    }
}

#[test]
fn card_sign_with_a_key_file_ignores_the_data_dir_of_the_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let (key, did) = agent_key(&tmp.path().join("agent"));
    let card = write(tmp.path(), "card.json", &card("T", &["translation"], true));
    let o = Command::new(BIN)
        .args(["card", "sign", p(&card), "--key", p(&key)])
        .env("AGENTNET_DATA_DIR", tmp.path().join("node"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let signed: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let protected = signed["signatures"][0]["protected"].as_str().unwrap();
    let header = base64_url(protected);
    assert!(header.contains(&did), "{header}");
    // The data directory of the environment was not touched.
    assert!(!tmp.path().join("node").exists());

    // Typing both on the command line is still refused, naming the two flags.
    let o = agentnet(&[
        "card",
        "sign",
        p(&card),
        "--key",
        p(&key),
        "--data-dir",
        p(tmp.path()),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--key") && stderr(&o).contains("--data-dir"));
}

fn base64_url(s: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn a_did_web_port_written_with_a_colon_is_refused_with_the_percent_form() {
    let tmp = tempfile::tempdir().unwrap();
    for flag in ["--web", "--wba"] {
        let o = agentnet(&[
            "identity",
            "new",
            flag,
            "localhost:18080:agents:y",
            "--data-dir",
            p(tmp.path()),
        ]);
        assert_eq!(o.status.code(), Some(1), "{flag}: {}", stdout(&o));
        let err = stderr(&o);
        assert!(err.contains("localhost%3A18080:agents:y"), "{flag}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{flag}: {err}");
        assert!(
            !stdout(&o).contains("https://localhost/18080"),
            "{}",
            stdout(&o)
        );
    }
    // Nothing was created.
    let agents = tmp.path().join("agents");
    assert!(
        !agents.exists() || std::fs::read_dir(&agents).unwrap().next().is_none(),
        "a key was written for a refused identity"
    );
    // The percent form works and names the port in the URL.
    let o = agentnet(&[
        "identity",
        "new",
        "--web",
        "localhost%3A18080:agents:y",
        "--data-dir",
        p(tmp.path()),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("https://localhost:18080/agents/y/did.json"),
        "{}",
        stdout(&o)
    );
    // `identity list` names it with that URL, and nothing for the refused ones.
    let o = agentnet(&["identity", "list", "--data-dir", p(tmp.path())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["DID", "DOCUMENT", "URL"],
            vec![
                "did:web:localhost%3A18080:agents:y",
                "https://localhost:18080/agents/y/did.json"
            ]
        ],
        "{out}"
    );
    let o = agentnet(&["identity", "list", "--data-dir", p(tmp.path()), "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["did"], "did:web:localhost%3A18080:agents:y");
    assert_eq!(v["problem"], serde_json::Value::Null);
    // An empty data directory lists nothing, and says how to make one.
    let empty = tmp.path().join("empty");
    let o = agentnet(&["identity", "list", "--data-dir", p(&empty)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    assert!(
        stderr(&o).contains("agentnet identity new --web"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_publication_survives_a_restart_until_it_is_unpublished() {
    let tmp = tempfile::tempdir().unwrap();
    let (key, did) = agent_key(&tmp.path().join("agent"));
    let card = write(tmp.path(), "card.json", &card("T", &["translation"], true));
    let data = tmp.path().join("node");
    let node = up(&data);
    let o = publish_signed(&card, &key, &data, &["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let first: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let seq = first["seq"].as_u64().unwrap();
    drop(node); // SIGKILL: no orderly shutdown to save anything in

    // Started again, the node announces it again by itself: a newer sequence number.
    let node = up(&data);
    let again = eventually("the card to be announced again", || {
        local(&data, "translation", &did)
            .into_iter()
            .find(|a| a["seq"].as_u64().unwrap() > seq)
    });
    assert_eq!(again["card"]["name"], "T");

    let o = agentnet(&["unpublish", "--did", &did, "--data-dir", p(&data)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&did), "{}", stdout(&o));
    assert!(local(&data, "translation", &did).is_empty());
    // Unpublishing twice says there is nothing to unpublish.
    let o = agentnet(&["unpublish", "--did", &did, "--data-dir", p(&data)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not published"), "{}", stderr(&o));
    drop(node);

    // And after another restart it stays unpublished.
    let node = up(&data);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        local(&data, "translation", &did).is_empty(),
        "{}",
        node.log()
    );
}

#[test]
fn a_kept_publication_whose_key_is_gone_is_shown_and_can_be_unpublished() {
    let tmp = tempfile::tempdir().unwrap();
    let (key, did) = agent_key(&tmp.path().join("agent"));
    let card = write(tmp.path(), "card.json", &card("T", &["translation"], true));
    let data = tmp.path().join("node");
    let node = up(&data);
    let o = publish_signed(&card, &key, &data, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let status = json_of(&["status", "--json", "--data-dir", p(&data)]);
    let listed = status["published"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|p| p["did"] == did.as_str() && p["announced"] == true && p["name"] == "T"),
        "{status}"
    );
    drop(node);

    // The installed key is gone: the publication is kept, not announced, and said so.
    let installed = data.join("agents").join(format!("{did}.jwk"));
    std::fs::remove_file(&installed).unwrap();
    let node = up(&data);
    let o = agentnet(&["status", "--data-dir", p(&data)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let line = stdout(&o)
        .lines()
        .find(|l| l.contains(&did))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("{}", stdout(&o)));
    assert!(
        line.starts_with(&format!("kept publication {did}: not announced"))
            && line.contains("agentnet unpublish --did"),
        "{line}"
    );
    let o = agentnet(&["unpublish", "--did", &did, "--data-dir", p(&data)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let status = json_of(&["status", "--json", "--data-dir", p(&data)]);
    assert!(
        !status["published"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["did"] == did.as_str()),
        "{status}"
    );
    drop(node);
}

#[test]
fn publish_checks_the_card_and_says_what_it_replaces() {
    let tmp = tempfile::tempdir().unwrap();
    let (key, did) = agent_key(&tmp.path().join("agent"));
    let data = tmp.path().join("node");
    let _node = up(&data);
    let publish = |card: &Path, json: bool| {
        let more: &[&str] = if json { &["--json"] } else { &[] };
        publish_signed(card, &key, &data, more)
    };

    // No interface: callers could not call it.
    let bare = write(tmp.path(), "bare.json", &card("T", &["translation"], false));
    let o = publish(&bare, false);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("supportedInterfaces"), "{}", stderr(&o));
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
    assert!(local(&data, "translation", &did).is_empty());

    // An interface without a URL or binding is refused too.
    let mut broken = card("T", &["translation"], true);
    broken["supportedInterfaces"] = json!([{"url": "", "protocolBinding": ""}]);
    let broken = write(tmp.path(), "broken.json", &broken);
    let o = publish(&broken, false);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("supportedInterfaces"), "{}", stderr(&o));

    let one = write(
        tmp.path(),
        "one.json",
        &card("First", &["translation"], true),
    );
    let o = publish(&one, true);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["replaced"].is_null(), "{v}");

    // Another card under the same DID replaces the first: said, with the old card's name.
    let two = write(
        tmp.path(),
        "two.json",
        &card("Second", &["translation"], true),
    );
    let o = publish(&two, false);
    assert!(o.status.success(), "{}", stderr(&o));
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(all.contains("replaces") && all.contains("First"), "{all}");
    let o = publish(&one, true);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["replaced"]["name"], "Second", "{v}");
}

#[test]
fn the_testnet_calls_from_the_last_node_are_signed_by_its_did() {
    let v = json_of(&["testnet", "--json"]);
    let nodes = v["nodes"].as_array().unwrap();
    let last = nodes.last().unwrap()["did"].as_str().unwrap();
    assert_eq!(v["call"]["caller"], last, "{}", v["call"]);
    assert_eq!(v["mcp"]["caller"], last, "{}", v["mcp"]);
}

#[test]
fn errors_are_one_line_without_a_repeated_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let data = tmp.path().join("d");
    let http = format!("127.0.0.1:{port}");
    let bad_toml = tmp.path().join("bad.toml");
    std::fs::write(&bad_toml, "[node\n").unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, "").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["up", "--data-dir", p(&data), "--http", &http, "--no-mdns"],
            &port,
        ),
        (
            vec!["up", "--data-dir", p(&data), "--config", p(&bad_toml)],
            "bad.toml",
        ),
        (vec!["init", "--data-dir", p(&file)], "not a directory"),
        (
            vec!["up", "--data-dir", p(&data), "--listen", "127.0.0.1:4001"],
            "/ip4/127.0.0.1/tcp/4001",
        ),
    ];
    for (args, names) in cases {
        let o = agentnet(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        let last = err.trim().lines().last().unwrap_or_default().to_owned();
        assert!(last.contains(names), "{args:?}: {err}");
        // The line says its cause once.
        let parts: Vec<&str> = last.split(": ").collect();
        for (i, a) in parts.iter().enumerate() {
            assert!(
                !parts[i + 1..].contains(a) || a.len() < 8,
                "{args:?} repeats {a:?}: {last}"
            );
        }
        assert!(!last.contains("\\n"), "{args:?}: {last}");
    }

    // A second node on a data directory in use names the running one.
    let _node = up(&data);
    let o = agentnet(&["up", "--data-dir", p(&data), "--no-mdns"]);
    assert_eq!(o.status.code(), Some(1));
    let pid = _node.child.id().to_string();
    assert!(
        stderr(&o).contains("already running") && stderr(&o).contains(&pid),
        "{}",
        stderr(&o)
    );

    // `call` without a target names the flags that give one.
    let o = agentnet(&["call", "hello", "--data-dir", p(&data)]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("--did") && stderr(&o).contains("--skill"),
        "{}",
        stderr(&o)
    );
}
