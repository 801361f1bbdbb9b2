//! The ARD registry API (docs/ARD.md) through the real binary on loopback: entries gossiped by
//! another node found by search, explore and exact lookup, and every refusal in the spec's
//! error envelope.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common;
use common::*;

/// Longest wait for a node to start, a peer to connect or an advertisement to arrive.
const PATIENCE: Duration = Duration::from_secs(40);

/// A node on loopback bootstrapping from `bootstrap`.
fn start(dir: &Path, bootstrap: &[&str]) -> UpNode {
    UpNode::joining(dir, bootstrap)
}

/// The node's public HTTP base URL.
fn http(n: &UpNode) -> String {
    n.http_url()
}

fn addr(n: &UpNode) -> String {
    n.info["listen"][0].as_str().unwrap().to_owned()
}

/// `(status, JSON body)` of a request.
fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    rt().block_on(async {
        let r = req.send().await.expect("the node answers");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": text}));
        (status, v)
    })
}

fn post(url: &str, body: &Value) -> (u16, Value) {
    send(loopback_client().post(url).json(body))
}

fn get(url: &str) -> (u16, Value) {
    send(loopback_client().get(url))
}

/// Percent-encode everything but unreserved characters (RFC 3986).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn weather_card() -> Value {
    json!({
        "name": "Weather Oracle",
        "description": "Live forecasts and wind telemetry for any city.",
        "version": "2.1.0",
        "supportedInterfaces": [
            {"url": "https://weather.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": "forecast", "name": "Forecast", "description": "Five-day forecasts.",
            "tags": ["weather", "forecast"],
            "examples": ["what is the current wind speed in Chicago", "get the 5-day forecast for Seattle"]
        }]
    })
}

/// Publish `card` on `node` under a new agent key; its DID.
fn publish(tmp: &Path, node: &UpNode, name: &str, card: &Value) -> String {
    let agent = tmp.join(name);
    let did = json_of(&["init", "--data-dir", p(&agent), "--json"])["did"]
        .as_str()
        .unwrap()
        .to_owned();
    let path: PathBuf = tmp.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(card).unwrap()).unwrap();
    json_of(&[
        "publish",
        "--card",
        p(&path),
        "--key",
        p(&agent.join("node.key")),
        "--data-dir",
        p(&node.dir),
        "--json",
    ]);
    did
}

/// Poll `f` every 300 ms until it returns `Some`, at most [`PATIENCE`].
fn eventually<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    common::eventually(what, PATIENCE, Duration::from_millis(300), f)
}

fn error_code(v: &Value) -> &str {
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    v["errorCode"].as_str().unwrap_or("")
}

#[test]
fn the_registry_answers_search_explore_and_lookup_from_gossip_and_refuses_in_envelopes() {
    let tmp = tempfile::tempdir().unwrap();
    let a = start(&tmp.path().join("a"), &[]);
    let b = start(&tmp.path().join("b"), &[&addr(&a)]);
    let did = publish(tmp.path(), &a, "weather", &weather_card());
    let urn = format!("urn:air:key.did.invalid:{did}");
    let base = http(&b);

    // B searches what A gossiped.
    let found = eventually("B's registry to find the weather agent", || {
        let (s, v) = post(
            &format!("{base}/search"),
            &json!({"query": {"text": "weather forecast tools"}, "federation": "none", "pageSize": 5}),
        );
        assert_eq!(s, 200, "{v}");
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["identifier"] == urn.as_str())
            .cloned()
    });
    assert_eq!(found["displayName"], "Weather Oracle");
    assert_eq!(found["type"], "application/a2a-agent-card+json");
    assert_eq!(found["source"], format!("{base}/"));
    assert_eq!(found["trustManifest"]["identity"], did.as_str());
    let score = found["score"].as_u64().unwrap();
    assert!((1..=100).contains(&score), "{found}");
    assert!(
        found["metadata"]["matched"]
            .as_str()
            .unwrap()
            .contains("weather: name"),
        "{found}"
    );
    assert_eq!(
        found["representativeQueries"][0],
        "what is the current wind speed in Chicago"
    );
    // The referenced card is the signed one A published.
    let (s, card) = get(found["url"].as_str().unwrap());
    assert_eq!(s, 200, "{card}");
    assert_eq!(card["name"], "Weather Oracle");
    assert!(card["signatures"].as_array().is_some_and(|s| !s.is_empty()));

    // Words from the representative queries find it; a filter can exclude it.
    let (_, v) = post(
        &format!("{base}/search"),
        &json!({"query": {"text": "wind in Chicago"}}),
    );
    assert!(
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["identifier"] == urn.as_str()),
        "{v}"
    );
    let (_, v) = post(
        &format!("{base}/search"),
        &json!({"query": {"text": "weather", "filter": {"type": ["application/mcp-server-card+json"]}}}),
    );
    assert_eq!(v["results"], json!([]), "{v}");
    let (_, v) = post(
        &format!("{base}/search"),
        &json!({"query": {"text": "weather", "filter": {"publisher": "key.did.invalid", "tags": ["forecast"]}}}),
    );
    assert_eq!(v["results"][0]["identifier"], urn.as_str(), "{v}");

    // Exact lookup with the URN percent-encoded in the path, and by DID.
    let (s, v) = get(&format!("{base}/agents/{}", encode(&urn)));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["identifier"], urn.as_str());
    assert_eq!(v["metadata"]["did"], did.as_str());
    let (s, v) = get(&format!("{base}/agents/{}", encode(&did)));
    assert_eq!((s, v["identifier"].as_str()), (200, Some(urn.as_str())));
    let (s, v) = get(&format!("{base}/agents"));
    assert_eq!(s, 200, "{v}");
    assert!(
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["identifier"] == urn.as_str()),
        "{v}"
    );
    let (s, v) = get(&format!(
        "{base}/agents?filter={}&pageSize=100",
        encode("publisherId = 'key.did.invalid' AND displayName = 'weather'")
    ));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["items"][0]["identifier"], urn.as_str(), "{v}");

    // Facets over the same matched set.
    let (s, v) = post(
        &format!("{base}/explore"),
        &json!({"query": {"text": "weather"}, "resultType": {"facets": [
            {"field": "type"}, {"field": "publisher", "limit": 50}, {"field": "tags"}
        ]}}),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["resultType"], "facets");
    assert_eq!(
        v["facets"]["type"]["buckets"][0],
        json!({"value": "application/a2a-agent-card+json", "count": 1}),
        "{v}"
    );
    assert_eq!(
        v["facets"]["publisher"]["buckets"][0]["value"],
        "key.did.invalid"
    );
    assert!(v["facets"]["tags"]["buckets"]
        .as_array()
        .unwrap()
        .contains(&json!({"value": "weather", "count": 1})));

    // The attacker's side: each refusal in the spec's envelope, nothing allocated for it.
    // An unknown identifier: 404.
    let nobody = "urn:air:key.did.invalid:did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
        .to_string();
    let (s, v) = get(&format!("{base}/agents/{}", encode(&nobody)));
    assert_eq!((s, error_code(&v)), (404, "NOT_FOUND"), "{v}");
    let (s, v) = get(&format!("{base}/agents/{}/card", encode(&nobody)));
    assert_eq!((s, error_code(&v)), (404, "NOT_FOUND"), "{v}");
    // A URN claiming another publisher for the DID does not name it.
    let claimed = format!("urn:air:google.com:{did}");
    let (s, v) = get(&format!("{base}/agents/{}/card", encode(&claimed)));
    assert_eq!((s, error_code(&v)), (404, "NOT_FOUND"), "{v}");
    // Not an identifier; no text; not JSON; an unknown filter; a page too large: 400.
    let (s, v) = get(&format!(
        "{base}/agents/{}",
        encode("https://evil.example/")
    ));
    assert_eq!((s, error_code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    let (s, v) = post(&format!("{base}/search"), &json!({"query": {"filter": {}}}));
    assert_eq!((s, error_code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    let (s, v) = send(
        loopback_client()
            .post(format!("{base}/search"))
            .header("content-type", "application/json")
            .body("{\"query\":"),
    );
    assert_eq!((s, error_code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    let (s, v) = post(
        &format!("{base}/search"),
        &json!({"query": {"text": "x", "filter": {"secret.path": ["y"]}}}),
    );
    assert_eq!((s, error_code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    for limit in [
        json!({"pageSize": 1_000_000}),
        json!({"limit": 101}),
        json!({"pageSize": -1}),
    ] {
        let mut body = json!({"query": {"text": "weather"}});
        body.as_object_mut()
            .unwrap()
            .extend(limit.as_object().unwrap().clone());
        let (s, v) = post(&format!("{base}/search"), &body);
        assert_eq!(
            (s, error_code(&v)),
            (400, "INVALID_ARGUMENT"),
            "{body}: {v}"
        );
    }
    let (s, v) = get(&format!("{base}/agents/urn%3Aair%3A%FF%FE"));
    assert_eq!((s, error_code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    let (s, v) = get(&format!("{base}/agents?pageSize=5000"));
    assert_eq!((s, error_code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    let (s, v) = post(
        &format!("{base}/search"),
        &json!({"query": {"text": "w ".repeat(2000)}}),
    );
    assert_eq!((s, error_code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    let (s, v) = post(
        &format!("{base}/explore"),
        &json!({"resultType": {"facets": [{"field": "metadata.secret"}]}}),
    );
    assert_eq!((s, error_code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    // A body over the cap: 413, before it is parsed.
    let huge = json!({"query": {"text": "weather"}, "pad": "x".repeat(1 << 20)});
    let (s, v) = post(&format!("{base}/search"), &huge);
    assert_eq!((s, error_code(&v)), (413, "PAYLOAD_TOO_LARGE"), "{v}");
    // The wrong method: 405.
    let (s, v) = get(&format!("{base}/search"));
    assert_eq!((s, error_code(&v)), (405, "METHOD_NOT_ALLOWED"), "{v}");
    let (s, v) = send(loopback_client().delete(format!("{base}/agents/{}", encode(&urn))));
    assert_eq!((s, error_code(&v)), (405, "METHOD_NOT_ALLOWED"), "{v}");
}

#[test]
fn one_source_is_rate_limited_with_429() {
    let tmp = tempfile::tempdir().unwrap();
    let a = start(&tmp.path().join("a"), &[]);
    let base = http(&a);
    // The bucket holds ten seconds' worth; a bounded burst beyond it is refused.
    let statuses = rt().block_on(async {
        let c = loopback_client();
        let mut out = Vec::new();
        for _ in 0..400 {
            let r = c
                .get(format!("{base}/agents?pageSize=1"))
                .send()
                .await
                .unwrap();
            let s = r.status().as_u16();
            let retry = r.headers().get("retry-after").is_some();
            let v: Value = r.json().await.unwrap_or(Value::Null);
            out.push((s, retry, v));
            if s == 429 {
                break;
            }
        }
        out
    });
    let (s, retry, v) = statuses.last().unwrap();
    assert_eq!(*s, 429, "{} requests all answered", statuses.len());
    assert!(*retry);
    assert_eq!(error_code(v), "RATE_LIMIT_EXCEEDED");
    // The other public routes are not behind this bucket.
    let (s, _) = get(&format!("{base}/.well-known/did.json"));
    assert_eq!(s, 200);
}

#[test]
fn the_node_serves_its_hosted_agents_in_a_signed_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("node.toml");
    std::fs::write(
        &config,
        "[[agent]]\nid = \"echo\"\nkind = \"echo\"\npublish = false\nname = \"Echo\"\n\
         description = \"Echoes your message back\"\n",
    )
    .unwrap();
    let mut args = LOOPBACK.to_vec();
    args.extend(["--config", p(&config)]);
    let n = UpNode::spawn(&tmp.path().join("n"), &args);
    let base = http(&n);
    let (s, m) = get(&format!("{base}/.well-known/ard.json"));
    assert_eq!(s, 200, "{m}");
    let (_, same) = get(&format!("{base}/.well-known/ai-catalog.json"));
    assert_eq!(m, same);
    assert_eq!(m["specVersion"], "1.0");
    assert_eq!(m["host"]["identifier"], n.info["did"]);
    let e = &m["entries"][0];
    assert_eq!(m["entries"].as_array().unwrap().len(), 1, "{m}");
    let did = e["trustManifest"]["identity"].as_str().unwrap();
    assert_eq!(e["identifier"], format!("urn:air:key.did.invalid:{did}"));
    assert_eq!(e["displayName"], "Echo");
    // The entry points at the agent's card, signed by the same DID.
    let (s, card) = get(e["url"].as_str().unwrap());
    assert_eq!(s, 200, "{card}");
    assert_eq!(card["name"], "Echo");
    // Both signatures verify, and a changed entry's does not.
    let r = agentnet_did::Resolver::new(Default::default()).unwrap();
    use agentnet_node::ard::manifest::{verify_entry, verify_host, Trust};
    rt().block_on(async {
        assert_eq!(verify_entry(e, &r).await, Trust::Verified(did.to_owned()));
        assert_eq!(
            verify_host(&m, &r).await,
            Trust::Verified(n.info["did"].as_str().unwrap().to_owned())
        );
        let mut changed = m.clone();
        changed["entries"][0]["url"] = json!("https://evil.example/card");
        assert!(matches!(
            verify_entry(&changed["entries"][0], &r).await,
            Trust::Invalid(_)
        ));
        assert!(matches!(verify_host(&changed, &r).await, Trust::Invalid(_)));
    });
}

/// Serve `routes` (path → JSON) on 127.0.0.1 from a thread of its own; its base URL. The
/// server lives as long as the test process.
fn serve(routes: Vec<(&'static str, Value)>) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        rt().block_on(async move {
            let mut r = axum::Router::new();
            for (path, v) in routes {
                r = r.route(
                    path,
                    axum::routing::get(move || async move { axum::Json(v) }),
                );
            }
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            axum::serve(l, r).await.unwrap();
        })
    });
    format!("http://{}", rx.recv().unwrap())
}

/// A card after the spec's solo-developer example (section 4.4), as an A2A card.
fn solo_card(name: &str, tag: &str) -> Value {
    json!({
        "name": name,
        "description": "Simple weather lookup using open data",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": "https://alice-dev.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "get_weather", "name": "Get weather", "description": "Get current weather for a city", "tags": [tag]}]
    })
}

fn signed_entry(mut e: Value, key: &agentnet_did::SecretKey) -> Value {
    let id = e["identifier"].as_str().unwrap().to_owned();
    e["trustManifest"] = agentnet_node::ard::manifest::trust_manifest(&e, &id, key);
    e
}

fn discover(dir: &Path, tag: &str) -> Vec<String> {
    let v = json_of(&["discover", "--skill", tag, "--json", "--data-dir", p(dir)]);
    v.as_array()
        .unwrap()
        .iter()
        .map(|f| f["did"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn an_imported_manifest_publishes_only_the_entries_whose_key_is_held() {
    use agentnet_did::SecretKey;
    let tmp = tempfile::tempdir().unwrap();
    let a = start(&tmp.path().join("a"), &[]);
    let b = start(&tmp.path().join("b"), &[&addr(&a)]);
    let ours = SecretKey::generate();
    let ours_did = agentnet_node::data_dir::AgentKeys::new(&a.dir)
        .install(&ours)
        .unwrap();
    let theirs = SecretKey::generate();
    let urn = |k: &SecretKey| format!("urn:air:key.did.invalid:{}", k.did_key());

    // The card by reference, on the same server: its URL is known only once it runs, so the
    // server serves a manifest that a second one points to.
    let cards = serve(vec![
        ("/weather.json", solo_card("Weather Agent", "weather")),
        ("/stocks.json", solo_card("Stocks Agent", "stocks")),
        ("/hijack.json", solo_card("Hijacked Agent", "hijack")),
    ]);
    let entry = |k: &SecretKey, name: &str, card: &str| {
        json!({
            "identifier": urn(k),
            "displayName": name,
            "type": "application/a2a-agent-card+json",
            "url": format!("{cards}/{card}"),
            "description": "Simple weather lookup using open data",
            "representativeQueries": ["weather in Paris", "is it raining in Oslo"]
        })
    };
    let mine = signed_entry(entry(&ours, "Weather Agent", "weather.json"), &ours);
    let not_mine = signed_entry(entry(&theirs, "Stocks Agent", "stocks.json"), &theirs);
    // The attacker: an entry naming our DID, signed with its own key.
    let mut forged = signed_entry(entry(&theirs, "Hijacked Agent", "hijack.json"), &theirs);
    forged["identifier"] = json!(urn(&ours));
    forged["trustManifest"]["identity"] = json!(ours_did);
    // Or our signed entry, pointed elsewhere.
    let mut moved = mine.clone();
    moved["url"] = json!(format!("{cards}/hijack.json"));
    let manifest = json!({
        "specVersion": "1.0",
        "host": {"displayName": "Alice's AI Tools"},
        "entries": [
            mine,
            not_mine,
            forged,
            moved,
            {
                "identifier": "urn:air:github.com:alice-dev:pptx-creator",
                "displayName": "pptx-creator",
                "type": "application/ai-skill",
                "url": "https://github.com/alice-dev/pptx-creator",
                "description": "Create professional PowerPoint presentations following brand guidelines."
            }
        ]
    });
    let domain = serve(vec![("/.well-known/ard.json", manifest)]);

    // Without --local a loopback domain is refused, with what to do.
    let o = agentnet(&[
        "import",
        "ard",
        &format!("{domain}/"),
        "--data-dir",
        p(&a.dir),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("--local"), "{}", stderr(&o));

    let o = agentnet(&[
        "import",
        "ard",
        &format!("{domain}/"),
        "--local",
        "--data-dir",
        p(&a.dir),
        "--json",
    ]);
    // Exit 1: some entries did not verify.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|_| panic!("{}", stderr(&o)));
    let status: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        status,
        [
            "published",
            "verified_not_ours",
            "invalid",
            "invalid",
            "unsigned"
        ],
        "{v}"
    );
    assert_eq!(v["entries"][0]["did"], ours_did.as_str());

    // Another node finds the imported agent; nothing else of the manifest went out.
    let found = eventually("B to discover the imported agent", || {
        let d = discover(&b.dir, "weather");
        d.contains(&ours_did).then_some(d)
    });
    assert_eq!(found, std::slice::from_ref(&ours_did));
    for tag in ["stocks", "hijack"] {
        assert!(discover(&a.dir, tag).is_empty(), "{tag} was published");
    }
}
