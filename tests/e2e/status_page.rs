//! The status page on the admin listener (`/status`, `/admin/v1/status`) of a real `agentnet up`
//! hosting an echo agent whose card it publishes (and so discovers in its own index).
//!
//! The page is rendered by a real headless Chromium (Debian's `chromium`, installed by
//! scripts/system-deps.sh): its DOM after the scripts ran is checked, and a screenshot is kept
//! as `<target>/test-artifacts/status_page.png`. Without `chromium` that test skips, except
//! under `scripts/test.sh` (`AGENTNET_INTEROP_REQUIRED=1`), where a missing tool fails it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{p, UpNode, BIN, LOOPBACK};
use serde_json::{json, Value};

/// A card name with markup: the page must show it as text.
const NAME: &str = "Echo <b>bold</b> <img src=x onerror=alert(1)>";

fn config() -> String {
    format!(
        r#"
[[agent]]
id = "echo"
kind = "echo"
name = {NAME:?}
policy = "open"
tags = ["status-echo"]
"#
    )
}

/// A node on loopback hosting [`config`]'s echo agent.
fn start(dir: &Path) -> UpNode {
    UpNode::with_config_args(dir, &config(), &LOOPBACK)
}

fn addr(node: &UpNode, which: &str) -> String {
    node.info[which].as_str().unwrap().to_string()
}

fn token(node: &UpNode) -> String {
    std::fs::read_to_string(node.dir.join("admin.token"))
        .unwrap()
        .trim()
        .to_string()
}

/// `GET url` with an optional bearer token: status, headers, body.
async fn get(url: &str, bearer: Option<&str>) -> (u16, reqwest::header::HeaderMap, String) {
    let client = agentnet_did::http::client_builder()
        .no_proxy()
        .build()
        .unwrap();
    let mut req = client.get(url);
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

/// `GET /admin/v1/discover?skill=status-echo`, which pins the echo card (first shown).
async fn discover(admin: &str, token: &str) {
    let url = format!("http://{admin}/admin/v1/discover?skill=status-echo");
    let (status, _, body) = get(&url, Some(token)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("status-echo"), "{body}");
}

/// One echo task, so that the page has a recent task to list.
async fn send_echo(node: &UpNode) {
    let url = format!("http://{}/a2a/echo", addr(node, "http"));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"role": "ROLE_USER", "messageId": "m-1", "parts": [{"text": "hello page"}]}}});
    let r = agentnet_did::http::client_builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(&url)
        .header("content-type", "application/json")
        .header("A2A-Version", "1.0")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
}

/// The public listener has neither route; the admin one serves the page to anyone local but
/// its data only with the token.
#[tokio::test]
async fn status_is_on_the_admin_listener_only_and_behind_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let (http, admin, t) = (addr(&node, "http"), addr(&node, "admin"), token(&node));

    for path in ["/status", "/status.js", "/admin/v1/status"] {
        let (status, _, _) = get(&format!("http://{http}{path}"), Some(&t)).await;
        assert_eq!(status, 404, "public listener, {path}");
    }

    let api = format!("http://{admin}/admin/v1/status");
    let (status, headers, body) = get(&api, None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(headers["www-authenticate"], "Bearer");
    assert!(!body.contains(node.info["did"].as_str().unwrap()), "{body}");
    let wrong = "A".repeat(t.len());
    assert_eq!(get(&api, Some(&wrong)).await.0, 401);
    // The page's routes sit beside the guard: unknown admin paths are still refused alike.
    assert_eq!(
        get(&format!("http://{admin}/admin/v1/nope"), None).await.0,
        401
    );
    assert_eq!(get(&format!("http://{admin}/statuz"), None).await.0, 401);

    let (status, _, body) = get(&api, Some(&t)).await;
    assert_eq!(status, 200, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["node"]["did"], node.info["did"]);
    assert_eq!(r["node"]["peer_id"], node.info["peer_id"]);
    assert_eq!(r["hosted"][0]["name"], NAME);
    assert_eq!(r["hosted"][0]["published"], true);
    let echo_did = r["hosted"][0]["did"].clone();
    let found = r["discovered"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["did"] == echo_did)
        .unwrap_or_else(|| panic!("the published echo card is not listed: {r}"));
    assert_eq!(found["name"], NAME);
    assert_eq!(found["own"], true);
    assert_eq!(found["signature_verified"], true);
    // A did:key: self-asserted, no domain named, none vouched for the key.
    assert_eq!(found["domain_verified"], false, "{found}");
    assert_eq!(found["domain"], Value::Null, "{found}");
    assert_eq!(found["level"], "self-asserted", "{found}");
    assert!(
        found["reasons"][0]
            .as_str()
            .is_some_and(|r| r.contains("no domain vouches")),
        "{found}"
    );
    // Its flags (a loopback URL on a node not started --local), the URL whole.
    let url = format!("http://{http}/a2a/echo");
    assert!(
        found["flags"].as_array().is_some_and(|f| f
            .iter()
            .any(|f| f["rule"] == "private-url" && f["excerpt"] == url)),
        "{found}"
    );
    // Not pinned until shown by `discover` (the page only reads pins), then pinned.
    assert_eq!(found["pin"], Value::Null, "{found}");
    discover(&admin, &t).await;
    let (_, _, body) = get(&api, Some(&t)).await;
    let r: Value = serde_json::from_str(&body).unwrap();
    let found = r["discovered"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["did"] == echo_did)
        .unwrap_or_else(|| panic!("the published echo card is not listed: {r}"));
    assert_eq!(found["pin"]["state"], "pinned", "{found}");
    assert!(!r["history"].as_array().unwrap().is_empty(), "{r}");

    send_echo(&node).await;
    let (_, _, body) = get(&api, Some(&t)).await;
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["tasks"]["recent"][0]["agent"], "echo", "{r}");
    assert_eq!(r["tasks"]["recent"][0]["state"], "TASK_STATE_COMPLETED");

    // The page: no token in it, locked down by its headers.
    for path in ["/status", "/status.js", "/status.css"] {
        let (status, headers, body) = get(&format!("http://{admin}{path}"), None).await;
        assert_eq!(status, 200, "{path}");
        assert!(!body.contains(&t), "{path} holds the token");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.starts_with("default-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(headers["x-frame-options"], "DENY");
        assert_eq!(headers["x-content-type-options"], "nosniff");
    }
    let (_, _, html) = get(&format!("http://{admin}/status"), None).await;
    assert!(html.contains(r#"<script src="/status.js""#));
    assert!(!html.contains("<script>"), "inline script");
    // The page hides the Log out button (and the dashboard) with the `hidden` attribute, which
    // any author `display` rule outranks: the stylesheet must make `hidden` win.
    assert!(html.contains(r#"id="session" hidden"#), "{html}");
    let (_, _, css) = get(&format!("http://{admin}/status.css"), None).await;
    assert!(
        css.contains("[hidden] { display: none !important; }"),
        "{css}"
    );
}

/// Debian's `chromium`, or `None` (skip) when it is missing outside `scripts/test.sh`.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        // scripts/test.sh installs it (scripts/system-deps.sh) and sets this: a skip there is
        // a failure.
        assert!(
            std::env::var_os("AGENTNET_INTEROP_REQUIRED").is_none(),
            "no `chromium` on PATH although scripts/test.sh ran scripts/system-deps.sh"
        );
        eprintln!("SKIPPED: no `chromium` on PATH (bash scripts/system-deps.sh installs it)");
    }
    found
}

/// Run headless Chromium on `url` with `args` (`--dump-dom` or `--screenshot=…`), a fresh
/// profile, at most 120 s; its standard output.
fn run_chromium(chromium: &Path, url: &str, args: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-proxy-server",
            &format!("--user-data-dir={}", p(profile.path())),
            "--virtual-time-budget=8000",
        ])
        .args(args)
        .arg(url)
        .current_dir(profile.path())
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(err.reopen().unwrap())
        .spawn()
        .expect("chromium starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(err.path()).unwrap_or_default();
    assert!(status.success(), "chromium {args:?}: {status}\n{stderr}");
    std::fs::read_to_string(out.path()).unwrap()
}

/// The element with this id's opening tag, as the DOM dump writes it.
fn tag_of<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in\n{dom}"));
    let start = dom[..at].rfind('<').unwrap();
    let end = at + dom[at..].find('>').unwrap();
    &dom[start..=end]
}

/// The text of the element with this id up to its first child or end tag.
fn text_of<'a>(dom: &'a str, id: &str) -> &'a str {
    let tag = tag_of(dom, id);
    let start = dom.find(tag).unwrap() + tag.len();
    let end = start + dom[start..].find('<').unwrap();
    &dom[start..end]
}

/// Where the screenshot is kept: `<target dir>/test-artifacts/`, the target dir being the
/// binary's (`<target>/debug/agentnet`).
fn artifacts_dir() -> PathBuf {
    let target = Path::new(BIN)
        .parent()
        .and_then(Path::parent)
        .expect("the binary lives in <target>/<profile>/");
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn status_page_renders_in_headless_chromium() {
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let (admin, t) = (addr(&node, "admin"), token(&node));
    let did = node.info["did"].as_str().unwrap().to_string();
    send_echo(&node).await;
    discover(&admin, &t).await;
    // The first samples of the counters' history.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Logged in once through the fragment.
    let url = format!("http://{admin}/status#token={t}");
    let c = chromium.clone();
    let u = url.clone();
    let dom = tokio::task::spawn_blocking(move || run_chromium(&c, &u, &["--dump-dom"]))
        .await
        .unwrap();
    assert!(!tag_of(&dom, "dashboard").contains("hidden"), "{dom}");
    assert!(tag_of(&dom, "login").contains("hidden"), "{dom}");
    assert_eq!(text_of(&dom, "node-did"), did, "{dom}");
    assert_eq!(text_of(&dom, "node-peer"), node.info["peer_id"], "{dom}");
    // The card name is shown as text: escaped in the dump, never parsed as markup.
    let escaped = "Echo &lt;b&gt;bold&lt;/b&gt; &lt;img src=x onerror=alert(1)&gt;";
    assert!(dom.contains(escaped), "{dom}");
    assert!(!dom.contains("<b>bold"), "{dom}");
    assert!(!dom.contains("<img"), "{dom}");
    // The counters chart, one small SVG per series.
    let charts = &dom[dom.find(tag_of(&dom, "counters-chart")).unwrap()..];
    assert!(charts.contains(r#"data-series="Gossip received""#), "{dom}");
    assert!(charts.contains(r#"data-series="Validations""#), "{dom}");
    assert!(charts.matches("<svg").count() >= 4, "{dom}");
    assert!(charts.contains("<polyline"), "{dom}");
    // The discovered card with its verification, and the echo task.
    assert!(
        dom.contains("signature ✓") && dom.contains("this node"),
        "{dom}"
    );
    // Its trust level, pin and flags; nothing that reads as a domain vouching for a did:key.
    let discovered = &dom[dom.find(tag_of(&dom, "discovered")).unwrap()..];
    let discovered = &discovered[..discovered.find("</tbody>").unwrap()];
    for shown in [
        ">self-asserted<",
        ">pinned<",
        ">private-url<",
        ">no domain<",
    ] {
        assert!(discovered.contains(shown), "{shown} not in\n{discovered}");
    }
    assert!(!dom.contains("domain ✓"), "{discovered}");
    assert!(dom.contains(">completed<"), "{dom}");
    // The echo task's owner as a person reads it, not the store's key.
    let tasks = &dom[dom.find(tag_of(&dom, "tasks")).unwrap()..];
    let tasks = &tasks[..tasks.find("</tbody>").unwrap()];
    assert!(tasks.contains(">anonymous (127.0.0.1)<"), "{tasks}");
    assert!(!tasks.contains(">a:") && !tasks.contains(">c:"), "{tasks}");
    assert!(!dom.contains(&t), "the token is rendered");

    // A wrong token: the login form and the node's refusal, no data.
    let wrong = format!("http://{admin}/status#token={}", "A".repeat(t.len()));
    let c = chromium.clone();
    let dom = tokio::task::spawn_blocking(move || run_chromium(&c, &wrong, &["--dump-dom"]))
        .await
        .unwrap();
    assert!(!tag_of(&dom, "login").contains("hidden"), "{dom}");
    assert!(tag_of(&dom, "dashboard").contains("hidden"), "{dom}");
    assert!(
        text_of(&dom, "login-error").contains("refused this token"),
        "{dom}"
    );
    assert!(!dom.contains(&did), "{dom}");
    assert!(!dom.contains("Echo &lt;b&gt;"), "{dom}");

    // Without any token: the form, no error yet.
    let bare = format!("http://{admin}/status");
    let c = chromium.clone();
    let dom = tokio::task::spawn_blocking(move || run_chromium(&c, &bare, &["--dump-dom"]))
        .await
        .unwrap();
    assert!(!tag_of(&dom, "login").contains("hidden"), "{dom}");
    assert_eq!(text_of(&dom, "login-error"), "", "{dom}");
    assert!(!dom.contains(&did), "{dom}");

    // The screenshot, kept.
    let shot = artifacts_dir().join("status_page.png");
    let _ = std::fs::remove_file(&shot);
    let arg = format!("--screenshot={}", p(&shot));
    tokio::task::spawn_blocking(move || {
        run_chromium(&chromium, &url, &[&arg, "--window-size=1280,900"])
    })
    .await
    .unwrap();
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("{}: {e}", shot.display()));
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png.len() > 20_000, "a {} byte screenshot", png.len());
    eprintln!("status page screenshot: {}", shot.display());
}
