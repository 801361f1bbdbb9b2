//! What an operator reads off a node (issue 16), against the real binary: `agentnet status`
//! of a running node and of none, `agentnet config check` with a flag over the file and with
//! an invalid file, and the log of `up` written to a file (no colour codes) or as JSON lines.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::common;
use common::*;

/// A hosted echo agent, published.
const CONFIG: &str = r#"
[node]
http = "127.0.0.1:0"

[[agent]]
id = "echo"
kind = "echo"
policy = "open"
tags = ["echo"]
"#;

/// Nothing listens on port 1 of loopback.
const LOST: &str = "/ip4/127.0.0.1/tcp/1";

/// A node on loopback with more flags `extra`.
fn up(dir: &Path, extra: &[&str]) -> UpNode {
    UpNode::on_loopback(dir, extra)
}

/// Poll `f` every 200 ms until it returns `Some`, at most 20 s.
fn eventually<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    common::eventually(what, Duration::from_secs(20), Duration::from_millis(200), f)
}

#[test]
fn status_shows_the_node_its_failed_bootstrap_and_its_hosted_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    std::fs::create_dir_all(&dir).unwrap();
    let config = tmp.path().join("node.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let node = up(&dir, &["--config", p(&config), "--bootstrap", LOST]);
    let did = node.info["did"].as_str().unwrap().to_owned();

    // The dial to port 1 fails within a few seconds; status says so, with the error.
    let v = eventually("the bootstrap dial fails", || {
        let v = json_of(&["status", "--data-dir", p(&dir), "--json"]);
        (v["bootstrap"][0]["state"] == "failed").then_some(v)
    });
    assert_eq!(v["node"]["did"], did.as_str(), "{v}");
    let b = &v["bootstrap"][0];
    assert_eq!(b["address"], LOST, "{v}");
    assert!(
        b["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{v}"
    );
    assert!(b["since_time"].as_str().unwrap().ends_with('Z'), "{v}");
    assert_eq!(v["hosted"][0]["id"], "echo", "{v}");
    let agent = v["hosted"][0]["did"].as_str().unwrap().to_owned();
    // The hosted agent is published; its expiry also as RFC 3339.
    let published = eventually("the hosted agent is published", || {
        let v = json_of(&["status", "--data-dir", p(&dir), "--json"]);
        v["published"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["did"] == agent.as_str()).cloned())
    });
    assert!(
        published["expires"].as_str().unwrap().contains('T'),
        "{published}"
    );
    assert!(v["store"]["max_bytes"].as_u64().unwrap() > 0, "{v}");

    let o = agentnet(&["status", "--data-dir", p(&dir)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains(&format!("did: {did}")), "{out}");
    let admin = node.info["admin"].as_str().unwrap();
    assert!(
        out.contains(&format!("status page: http://{admin}/status (log in with")),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("bootstrap {LOST}: failed")))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("last error: "), "{line}");
    assert!(out.contains(&format!("hosting echo ({agent})")), "{out}");
    // A one-hour advert, read within a minute of its publication.
    let expiry = out
        .lines()
        .find(|l| l.starts_with(&format!("published {agent}")))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        expiry.ends_with("expires in 59 min") || expiry.ends_with("expires in 1 h"),
        "{expiry}"
    );
}

#[test]
fn status_without_a_node_says_how_to_start_one_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("none");
    let o = agentnet(&["status", "--data-dir", p(&dir)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "no running node on {d}: start one with `agentnet up --data-dir {d}`",
            d = dir.display()
        )),
        "{err}"
    );
    assert!(stdout(&o).is_empty());
}

#[test]
fn config_check_prints_the_flag_over_the_file_and_refuses_an_invalid_file() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("node.toml");
    std::fs::write(&config, "[node]\nhttp = \"127.0.0.1:9000\"\nmdns = true\n").unwrap();
    let dir = tmp.path().join("d");
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "config",
            "check",
            "--config",
            p(&config),
            "--data-dir",
            p(&dir),
        ];
        a.extend(extra);
        a
    };
    let o = agentnet(&args(&["--http", "127.0.0.1:9001"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("http = \"127.0.0.1:9001\""), "{out}");
    assert!(!out.contains("9000"), "{out}");
    // What it prints is a configuration file `up` reads.
    let printed = tmp.path().join("printed.toml");
    std::fs::write(&printed, &out).unwrap();
    let again = json_of(&["config", "check", "--config", p(&printed), "--json"]);
    assert_eq!(again["node"]["http"], "127.0.0.1:9001", "{again}");
    assert_eq!(again["node"]["data_dir"], p(&dir), "{again}");

    let v = json_of(&args(&["--no-mdns", "--json"]));
    assert_eq!(v["node"]["http"], "127.0.0.1:9000", "{v}");
    assert_eq!(v["node"]["mdns"], false, "{v}");
    // Nothing was started: no data directory, no node.json.
    assert!(!dir.exists());

    for (bad, says) in [
        ("[node]\nadmin = \"0.0.0.0:7879\"\n", "loopback"),
        ("[node\n", "node.toml"),
        ("[[agent]]\nid = \"Bad Id\"\nkind = \"echo\"\n", "Bad Id"),
    ] {
        assert_config_refused(&config, bad, says);
    }
}

#[test]
fn the_log_of_up_in_a_file_has_no_colour_codes_and_json_lines_parse() {
    let tmp = tempfile::tempdir().unwrap();
    // A failing bootstrap dial makes sure a warning is logged, beside the info lines.
    let text = up(&tmp.path().join("text"), &["--bootstrap", LOST]);
    let log = eventually("a bootstrap warning", || {
        let l = text.log();
        l.contains("bootstrap").then_some(l)
    });
    assert!(log.lines().count() > 1, "{log}");
    assert!(!log.contains("\x1b["), "{log:?}");

    let mut json = up(
        &tmp.path().join("json"),
        &["--bootstrap", LOST, "--log-format", "json"],
    );
    eventually("a bootstrap warning", || {
        let l = json.log();
        l.contains("bootstrap").then_some(l)
    });
    // Stopped (SIGTERM, as Ctrl-C), it says so in JSON lines too.
    let term = std::process::Command::new("kill")
        .args(["-TERM", &json.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let stopped = eventually("the node to stop", || json.child.try_wait().unwrap());
    assert!(stopped.success(), "{stopped}");
    let log = json.log();
    // The first start creates the node key: that notice is a JSON line too.
    assert!(log.contains("created a new node key"), "{log}");
    assert!(
        log.contains("\"stopping...\"") && log.contains("\"stopped\""),
        "{log}"
    );
    for line in log.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert!(v["level"].is_string(), "{line}");
    }
}
