//! `agentnet up`, `publish`, `discover` and `peers` through the real binary, on loopback: each
//! node a process with its own data directory, killed when the test ends.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common;
use common::*;

/// Longest wait for a node to start, a peer to connect or an advertisement to arrive.
const PATIENCE: Duration = Duration::from_secs(30);

/// Poll `f` every 250 ms until it returns `Some`, at most [`PATIENCE`].
fn eventually<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    common::eventually(what, PATIENCE, Duration::from_millis(250), f)
}

// A running `agentnet up`.
use common::UpNode as Node;

/// What this module adds to the shared [`Node`] fixture.
trait DaemonNodeExt {
    fn start(dir: &Path, bootstrap: &[&str]) -> Node;
    fn data_dir(&self) -> &str;
    fn http(&self) -> String;
    fn admin(&self) -> String;
    fn token(&self) -> String;
    fn did(&self) -> &str;
    fn peer_id(&self) -> &str;
    fn addr(&self) -> &str;
    fn peers(&self) -> Value;
    fn kill(self);
}

impl DaemonNodeExt for Node {
    /// `agentnet up` on loopback with data directory `dir`.
    fn start(dir: &Path, bootstrap: &[&str]) -> Node {
        Node::joining(dir, bootstrap)
    }

    fn data_dir(&self) -> &str {
        p(&self.dir)
    }

    /// The public listener.
    fn http(&self) -> String {
        self.http_url()
    }

    /// The admin listener.
    fn admin(&self) -> String {
        format!("http://{}", self.info["admin"].as_str().unwrap())
    }

    /// The admin token of this run.
    fn token(&self) -> String {
        std::fs::read_to_string(self.dir.join("admin.token")).unwrap()
    }

    fn did(&self) -> &str {
        self.info["did"].as_str().unwrap()
    }

    fn peer_id(&self) -> &str {
        self.info["peer_id"].as_str().unwrap()
    }

    /// The first listen address, which ends in `/p2p/<peer id>`.
    fn addr(&self) -> &str {
        let a = self.info["listen"][0].as_str().expect("a listen address");
        assert!(
            a.starts_with("/ip4/127.0.0.1/tcp/")
                && a.ends_with(&format!("/p2p/{}", self.peer_id())),
            "{a}"
        );
        a
    }

    fn peers(&self) -> Value {
        json_of(&["peers", "--json", "--data-dir", self.data_dir()])
    }

    /// SIGKILL: no clean shutdown, `node.json` stays behind.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

fn card(tags: &[&str]) -> Value {
    json!({
        "name": "Translator",
        "description": "Translates text.",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": "https://translator.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "translate", "name": "Translate", "description": "Any language pair.", "tags": tags}]
    })
}

fn write_card(dir: &Path, name: &str, card: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(card).unwrap()).unwrap();
    path
}

/// The DIDs in a `discover --json` answer.
fn dids(found: &Value) -> Vec<&str> {
    found
        .as_array()
        .expect("discover --json prints a list")
        .iter()
        .map(|f| f["did"].as_str().unwrap())
        .collect()
}

#[test]
fn a_card_published_on_one_node_is_discovered_on_another() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Node::start(&tmp.path().join("a"), &[]);
    let b = Node::start(&tmp.path().join("b"), &[a.addr()]);
    let c = Node::start(&tmp.path().join("c"), &[a.addr()]);

    let peers = eventually("A to have 2 peers", || {
        let v = a.peers();
        (v["peers"].as_array().unwrap().len() == 2).then_some(v)
    });
    let mut ids: Vec<&str> = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["peer_id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut want = vec![b.peer_id(), c.peer_id()];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(peers["peer_id"], a.peer_id());

    // The agent has its own key, not the node's.
    let agent = tmp.path().join("agent");
    let agent_did = json_of(&["init", "--data-dir", p(&agent), "--json"])["did"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(agent_did, a.did());
    let card_path = write_card(tmp.path(), "card.json", &card(&["translation", "French"]));
    let published = json_of(&[
        "publish",
        "--card",
        p(&card_path),
        "--key",
        p(&agent.join("node.key")),
        "--data-dir",
        a.data_dir(),
        "--json",
    ]);
    assert_eq!(published["did"], agent_did.as_str());
    assert_eq!(published["tags"], json!(["french", "translation"]));
    // The key went into the node's data directory, not over HTTP, and stays the owner's.
    let installed = a.dir.join("agents").join(format!("{agent_did}.jwk"));
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(agent.join("node.key")).unwrap()
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&installed).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let found = eventually("C to discover the agent", || {
        let v = json_of(&[
            "discover",
            "--skill",
            "translation",
            "--json",
            "--data-dir",
            c.data_dir(),
        ]);
        dids(&v).contains(&agent_did.as_str()).then_some(v)
    });
    let entry = &found[0];
    assert_eq!(entry["peer_id"], a.peer_id());
    assert_eq!(entry["seq"], published["seq"]);
    assert_eq!(entry["card"]["name"], "Translator");
    assert!(entry["card"]["signatures"]
        .as_array()
        .is_some_and(|s| !s.is_empty()));

    // Both tags must match; a tag nobody has finds nothing.
    let none = json_of(&[
        "discover",
        "--skill",
        "translation",
        "--skill",
        "weather",
        "--json",
        "--data-dir",
        c.data_dir(),
    ]);
    assert!(dids(&none).is_empty(), "{none}");

    // The table names the DID.
    let o = agentnet(&[
        "discover",
        "--skill",
        "TRANSLATION",
        "--data-dir",
        c.data_dir(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("NAME"), "{}", stdout(&o));
    assert!(stdout(&o).contains(&agent_did), "{}", stdout(&o));

    // C holds a copy but did not publish it: it cannot unpublish it, and its copy stays.
    let o = agentnet(&["unpublish", "--did", &agent_did, "--data-dir", c.data_dir()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not published"), "{}", stderr(&o));
    let status = rt().block_on(async {
        loopback_client()
            .get(format!("{}/admin/v1/adverts/{agent_did}", c.admin()))
            .bearer_auth(c.token())
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status, 200);
}

#[test]
fn well_known_files_on_the_public_listener_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Node::start(&tmp.path().join("a"), &[]);
    assert_ne!(a.http(), a.admin());
    let http = loopback_client();
    rt().block_on(async {
        let doc: Value = http
            .get(format!("{}/.well-known/did.json", a.http()))
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc["id"], a.did());

        let card: Value = http
            .get(format!("{}/.well-known/agent-card.json", a.http()))
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(card["name"], "agentnet node");
        // No A2A interface exists yet, so none is advertised.
        assert_eq!(card["supportedInterfaces"], json!([]), "{card}");
        assert_eq!(card["skills"][0]["tags"], json!(["agentnet"]));
        let resolver = agentnet_did::Resolver::new(Default::default()).unwrap();
        let sigs = agentnet_did::card::verify(&card, agentnet_did::card::KeySource::Did(&resolver))
            .await
            .expect("the node's card verifies");
        assert!(sigs[0].kid.starts_with(a.did()), "{:?}", sigs);
        let mut tampered = card.clone();
        tampered["name"] = json!("someone else");
        assert!(agentnet_did::card::verify(
            &tampered,
            agentnet_did::card::KeySource::Did(&resolver)
        )
        .await
        .is_err());

        // The admin API is not on the public listener, token or not; the well-known files are
        // not on the admin listener.
        for path in ["/admin/v1/peers", "/admin/v1/metrics"] {
            let r = http
                .get(format!("{}{path}", a.http()))
                .bearer_auth(a.token())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 404, "{path}");
        }
        let r = http
            .get(format!("{}/.well-known/did.json", a.admin()))
            .bearer_auth(a.token())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
    });
}

#[test]
fn the_admin_api_authenticates_its_callers() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Node::start(&tmp.path().join("a"), &[]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(a.dir.join("admin.token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "admin.token is the owner's only");
    }
    let token = a.token();
    let http = loopback_client();
    let peers = format!("{}/admin/v1/peers", a.admin());
    let publish = format!("{}/admin/v1/publish", a.admin());
    let body =
        serde_json::to_vec(&json!({"card": card(&["translation"]), "ttl_secs": 60})).unwrap();
    rt().block_on(async {
        // No credentials, wrong credentials, a credential in the wrong scheme: 401, on every
        // route, before anything runs.
        let r = http.get(&peers).send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let body401: Value = r.json().await.unwrap();
        assert_eq!(body401["reason"], "unauthorized");
        let r = http.get(&peers).bearer_auth("x".repeat(43)).send().await.unwrap();
        assert_eq!(r.status(), 401);
        let r = http
            .get(&peers)
            .header("Authorization", format!("Basic {token}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let r = http
            .post(&publish)
            .header("Content-Type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let r = http
            .get(format!("{}/admin/v1/nothing-here", a.admin()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "unknown routes do not tell a stranger anything");

        // A web page's cross-site "simple" POST (text/plain, its own Origin, no token).
        let r = http
            .post(&publish)
            .header("Origin", "http://localhost:8080")
            .header("Content-Type", "text/plain")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        // Even with the token, text/plain and foreign origins are refused.
        let r = http
            .post(&publish)
            .bearer_auth(&token)
            .header("Content-Type", "text/plain")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 415);
        let r = http
            .get(&peers)
            .bearer_auth(&token)
            .header("Origin", "https://attacker.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        // DNS rebinding: a request naming another host.
        let r = http
            .get(&peers)
            .bearer_auth(&token)
            .header("Host", "attacker.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        // None of that published anything.
        let v: Value = http
            .get(format!("{}/admin/v1/adverts/{}", a.admin(), a.did()))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["reason"], "not_found", "{v}");

        // The right token works.
        let r = http.get(&peers).bearer_auth(&token).send().await.unwrap();
        assert_eq!(r.status(), 200);
        // Prometheus metrics: gossipsub's and the transports' byte counters.
        let r = http
            .get(format!("{}/admin/v1/metrics", a.admin()))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"));
        let text = r.text().await.unwrap();
        assert!(
            text.contains("gossipsub_topic_subscription_status"),
            "{text}"
        );
        // libp2p's bandwidth family is registered too, but prometheus-client (0.24 on, as the
        // Go client) leaves a family with no sample out of the text, and this node has had no
        // traffic; discovery's `network` test reads it back once gossip has flowed.
        // And the node's own counters, by name (operators' dashboards rely on them).
        for name in [
            "agentnet_adverts_accepted_total",
            "agentnet_connections_opened_total",
            "agentnet_provider_records_refused_total",
        ] {
            assert!(text.contains(name), "{name} missing from {text}");
        }

        // Bad input is a 400 with a reason: an agent whose key is not installed, a private key
        // in the request, a skill that is no tag.
        let unknown = agentnet_did::SecretKey::generate().did_key().to_string();
        for (req, reason) in [
            (json!({"card": card(&["translation"]), "did": unknown}), "unknown_agent"),
            (json!({"card": card(&["translation"]), "did": "../node.key"}), "bad_request"),
            (
                json!({"card": card(&["translation"]), "key": {"kty": "OKP", "crv": "Ed25519", "x": "AA", "d": "AA"}}),
                "bad_request",
            ),
        ] {
            let r = http
                .post(&publish)
                .bearer_auth(&token)
                .json(&req)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{req}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["reason"], reason, "{v}");
        }
        let r = http
            .get(format!("{}/admin/v1/discover?skill=a&skill=%01", a.admin()))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
    });
}

#[test]
fn a_non_loopback_admin_address_is_refused_at_startup() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a");
    for addr in ["0.0.0.0:0", "192.0.2.1:7879", "[::]:0"] {
        let o = agentnet(&[
            "up",
            "--data-dir",
            p(&dir),
            "--listen",
            "/ip4/127.0.0.1/tcp/0",
            "--http",
            "127.0.0.1:0",
            "--admin",
            addr,
            "--no-mdns",
        ]);
        assert_eq!(o.status.code(), Some(1), "{addr}");
        assert!(
            stderr(&o).contains("loopback") && stderr(&o).contains(addr),
            "{}",
            stderr(&o)
        );
        assert!(!dir.join("node.json").exists());
        assert!(!dir.join("admin.token").exists());
    }
}

#[cfg(unix)]
#[test]
fn sigterm_stops_the_node_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = Node::start(&tmp.path().join("a"), &[]);
    let pid = a.child.id().to_string();
    let o = Command::new("kill").args(["-TERM", &pid]).output().unwrap();
    assert!(o.status.success());
    let status = eventually("the node to exit", || a.child.try_wait().unwrap());
    assert!(status.success(), "{status}: {}", a.log());
    assert!(!a.dir.join("node.json").exists());
    assert!(a.log().contains("node stopped"), "{}", a.log());
}

#[test]
fn clear_errors_for_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let good = write_card(tmp.path(), "good.json", &card(&["translation"]));

    // No node runs there.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = agentnet(&["publish", "--card", p(&good), "--data-dir", p(&empty)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no running node found") && stderr(&o).contains("agentnet up"),
        "{}",
        stderr(&o)
    );
    // --node names the URL; the token still comes from the data directory.
    let o = agentnet(&[
        "discover",
        "--skill",
        "x",
        "--node",
        "http://127.0.0.1:9",
        "--data-dir",
        p(&empty),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("admin.token") && stderr(&o).contains("agentnet up"),
        "{}",
        stderr(&o)
    );
    std::fs::write(empty.join("admin.token"), "dGVzdA").unwrap();
    let o = agentnet(&[
        "discover",
        "--skill",
        "x",
        "--node",
        "http://127.0.0.1:9",
        "--data-dir",
        p(&empty),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no running node found at http://127.0.0.1:9"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(empty.join("admin.token")).unwrap();

    // Cards the network would refuse are refused before anything is sent.
    let mut no_tags = card(&[]);
    no_tags["skills"][0].as_object_mut().unwrap().remove("tags");
    let no_tags = write_card(tmp.path(), "no-tags.json", &no_tags);
    let o = agentnet(&["publish", "--card", p(&no_tags), "--data-dir", p(&empty)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no skill tags"), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    let o = agentnet(&["discover", "--skill", "", "--data-dir", p(&empty)]);
    assert_eq!(o.status.code(), Some(1));

    let no_skills = write_card(tmp.path(), "no-skills.json", &json!({"name": "x"}));
    let o = agentnet(&["publish", "--card", p(&no_skills), "--data-dir", p(&empty)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no skills"), "{}", stderr(&o));

    let garbage = tmp.path().join("garbage.json");
    std::fs::write(&garbage, b"{not json").unwrap();
    let o = agentnet(&["publish", "--card", p(&garbage), "--data-dir", p(&empty)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not JSON"), "{}", stderr(&o));

    let o = agentnet(&[
        "up",
        "--data-dir",
        p(&empty),
        "--listen",
        "/ip4/127.0.0.1/tcp/nope",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not a multiaddr"), "{}", stderr(&o));
    assert!(!empty.join("node.json").exists());

    // With a node running, its refusals come back with their reason.
    let a = Node::start(&tmp.path().join("a"), &[]);
    let o = agentnet(&[
        "publish",
        "--card",
        p(&good),
        "--ttl",
        "99999999",
        "--data-dir",
        a.data_dir(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("ttl"), "{}", stderr(&o));
}

#[test]
fn a_restarted_node_answers_from_its_store_and_refuses_replays() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a");
    let card_path = write_card(tmp.path(), "card.json", &card(&["translation"]));
    let a = Node::start(&dir, &[]);
    let publish = |node: &Node| {
        json_of(&[
            "publish",
            "--card",
            p(&card_path),
            "--data-dir",
            node.data_dir(),
            "--json",
        ])
    };
    let first = publish(&a);
    assert_eq!(first["did"], a.did());
    assert_eq!(first["seq"], 1);
    let http = loopback_client();
    let advert_url = format!("{}/admin/v1/adverts/{}", a.admin(), a.did());
    let old_token = a.token();
    let old_advert = rt().block_on(async {
        let r = http
            .get(&advert_url)
            .bearer_auth(&old_token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap()
    });
    assert_eq!(publish(&a)["seq"], 2);
    let did = a.did().to_owned();
    a.kill();

    // node.json is left behind by SIGKILL, but nothing answers there.
    assert!(dir.join("node.json").exists());
    let o = agentnet(&["publish", "--card", p(&card_path), "--data-dir", p(&dir)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no running node found"),
        "{}",
        stderr(&o)
    );

    let a = Node::start(&dir, &[]);
    assert_eq!(a.did(), did);
    assert!(a.peers()["peers"].as_array().unwrap().is_empty());
    let found = json_of(&[
        "discover",
        "--skill",
        "translation",
        "--json",
        "--data-dir",
        a.data_dir(),
    ]);
    assert_eq!(dids(&found), [did.as_str()]);
    // The kept publication was announced again at start, above the stored seq 2.
    assert_eq!(found[0]["seq"], 3);

    // A new token at every start: the old one is refused.
    assert_ne!(a.token(), old_token);
    rt().block_on(async {
        let r = http
            .get(format!("{}/admin/v1/peers", a.admin()))
            .bearer_auth(&old_token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    });

    // Replaying the first advertisement, validly signed but older, is refused.
    rt().block_on(async {
        let r = http
            .post(format!("{}/admin/v1/adverts", a.admin()))
            .bearer_auth(a.token())
            .header("Content-Type", "application/json")
            .body(old_advert)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["reason"], "stale_seq", "{body}");
    });
    let stats = a.peers()["stats"].clone();
    assert_eq!(stats["ignored"], 1, "{stats}");

    // The sequence counter survived too.
    assert_eq!(publish(&a)["seq"], 4);
}

#[test]
fn published_cards_are_re_announced_with_a_new_seq() {
    let tmp = tempfile::tempdir().unwrap();
    let card_path = write_card(tmp.path(), "card.json", &card(&["translation"]));
    let a = Node::start(&tmp.path().join("a"), &[]);
    let first = json_of(&[
        "publish",
        "--card",
        p(&card_path),
        "--ttl",
        "3",
        "--data-dir",
        a.data_dir(),
        "--json",
    ]);
    let first_seq = first["seq"].as_u64().unwrap();
    let first_expiry = first["expires_at"].as_u64().unwrap();
    // Re-announced after 2 s (2/3 of 3 s), before the first one expires.
    let later = eventually("a re-announcement", || {
        let v = json_of(&[
            "discover",
            "--skill",
            "translation",
            "--json",
            "--data-dir",
            a.data_dir(),
        ]);
        let seq = v.get(0)?["seq"].as_u64()?;
        (seq > first_seq).then_some(v)
    });
    assert!(later[0]["expires_at"].as_u64().unwrap() >= first_expiry);
}
