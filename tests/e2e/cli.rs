//! The `agentnet` command line as a user runs it: exit codes, output, error messages.

use std::io::{Read, Write};
use std::net::TcpListener;

use serde_json::{json, Value};

use crate::common;
use common::*;

#[test]
fn init_creates_one_key_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = agentnet(&["init", "--data-dir", p(dir.path()), "--json"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let v: Value = serde_json::from_str(&stdout(&first)).unwrap();
    assert_eq!(v["created"], json!(true));
    let did = v["did"].as_str().unwrap().to_owned();
    assert!(did.starts_with("did:key:z6Mk"), "{did}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("node.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let again = agentnet(&["init", "--data-dir", p(dir.path())]);
    assert!(again.status.success());
    assert_eq!(stdout(&again).trim(), did);
    assert!(stderr(&again).contains("using the node key"));
}

#[test]
fn init_refuses_a_corrupt_key_instead_of_replacing_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("node.key");
    std::fs::write(&key, b"garbage").unwrap();
    let o = agentnet(&["init", "--data-dir", p(dir.path())]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("node.key") && stderr(&o).contains("not a JWK"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&key).unwrap(), b"garbage");
}

#[test]
fn resolve_prints_did_key_documents_and_named_errors() {
    let did = "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp";
    let o = agentnet(&["resolve", did, "--key-agreement"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["id"], did);
    assert_eq!(
        doc["keyAgreement"][0]["publicKeyMultibase"],
        "z6LShs9GGnqk85isEBzzshkuVWrVKsRp24GnDuHk8QWkARMW"
    );

    let bad = agentnet(&["resolve", "did:key:fed010000", "--json"]);
    assert_eq!(bad.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&bad)).unwrap();
    assert_eq!(v["didResolutionMetadata"]["error"], "invalidDid");
    assert!(v["didDocument"].is_null());

    let o = agentnet(&["resolve", "did:example:123"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("methodNotSupported"), "{}", stderr(&o));

    let o = agentnet(&["resolve", "not a did"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("invalidDid") && stderr(&o).contains("not a did"));
}

/// A one-shot plain-HTTP server on loopback answering with `body(port)`; the thread returns the
/// request it got.
fn serve_once(body: impl FnOnce(u16) -> Vec<u8>) -> (u16, std::thread::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = body(port);
    let h = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = vec![0u8; 4096];
        let n = s.read(&mut req).unwrap();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/did+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(&body).unwrap();
        String::from_utf8_lossy(&req[..n]).into_owned()
    });
    (port, h)
}

#[test]
fn resolve_did_web_on_loopback_needs_the_flag() {
    let o = agentnet(&["resolve", "did:web:localhost%3A9"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("notAllowedUrl"), "{}", stderr(&o));

    let key = agentnet_did::SecretKey::from_seed(&[11; 32]);
    let (port, server) = serve_once(|port| {
        let did = agentnet_did::Did::parse(&format!("did:web:localhost%3A{port}")).unwrap();
        let mut doc = agentnet_did::wba::document_for(&did, &key, "2026-01-01T00:00:00Z");
        doc.proof = None;
        serde_json::to_vec(&doc).unwrap()
    });
    let did = format!("did:web:localhost%3A{port}");
    let o = agentnet(&["resolve", &did, "--allow-http-loopback", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["didDocument"]["id"], did.as_str());
    let request = server.join().unwrap();
    assert!(
        request.starts_with("GET /.well-known/did.json HTTP/1.1"),
        "{request}"
    );
}

#[test]
fn resolve_refuses_a_document_for_another_did() {
    let (port, server) = serve_once(|_| {
        serde_json::to_vec(&json!({"id": "did:web:evil.example", "verificationMethod": []}))
            .unwrap()
    });
    let o = agentnet(&[
        "resolve",
        &format!("did:web:localhost%3A{port}"),
        "--allow-http-loopback",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("invalidDidDocument") && stderr(&o).contains("evil.example"),
        "{}",
        stderr(&o)
    );
    server.join().unwrap();
}

#[test]
fn card_sign_then_verify_and_tampering_fails() {
    let dir = tempfile::tempdir().unwrap();
    assert!(agentnet(&["init", "--data-dir", p(dir.path())])
        .status
        .success());
    let card = json!({
        "name": "Echo", "description": "Echoes", "version": "1.0.0",
        "supportedInterfaces": [{"url": "https://a.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "d", "tags": ["echo"]}],
        "x-extra": true
    });
    let card_path = dir.path().join("card.json");
    std::fs::write(&card_path, serde_json::to_vec(&card).unwrap()).unwrap();
    let signed = agentnet(&["card", "sign", p(&card_path), "--data-dir", p(dir.path())]);
    assert!(signed.status.success(), "{}", stderr(&signed));
    assert!(
        stderr(&signed).contains("$.x-extra"),
        "warns about unsigned members: {}",
        stderr(&signed)
    );
    let signed_path = dir.path().join("signed.json");
    std::fs::write(&signed_path, &signed.stdout).unwrap();

    let ok = agentnet(&["card", "verify", p(&signed_path), "--json"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let v: Value = serde_json::from_str(&stdout(&ok)).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["signatures"][0]["alg"], "EdDSA");

    let mut tampered: Value = serde_json::from_slice(&signed.stdout).unwrap();
    tampered["skills"][0]["tags"] = json!(["echo", "payments"]);
    std::fs::write(&signed_path, serde_json::to_vec(&tampered).unwrap()).unwrap();
    let bad = agentnet(&["card", "verify", p(&signed_path)]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("does not verify"), "{}", stderr(&bad));

    let unsigned = agentnet(&["card", "verify", p(&card_path)]);
    assert_eq!(unsigned.status.code(), Some(1));
    assert!(stderr(&unsigned).contains("no signatures"));
}

#[test]
fn card_commands_give_clear_errors_on_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, b"{not json").unwrap();
    let o = agentnet(&["card", "verify", p(&junk)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("junk.json") && stderr(&o).contains("not JSON"),
        "{}",
        stderr(&o)
    );

    let o = agentnet(&[
        "card",
        "sign",
        p(&junk),
        "--data-dir",
        p(&dir.path().join("nokey")),
    ]);
    assert_eq!(o.status.code(), Some(1));

    std::fs::write(&junk, b"{\"name\": \"x\"}").unwrap();
    let o = agentnet(&[
        "card",
        "sign",
        p(&junk),
        "--data-dir",
        p(&dir.path().join("nokey")),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("agentnet init"), "{}", stderr(&o));

    let o = agentnet(&[
        "card",
        "sign",
        p(&junk),
        "--key",
        p(&junk),
        "--data-dir",
        "x",
    ]);
    assert_eq!(o.status.code(), Some(2), "clap refuses conflicting flags");

    let big = dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; 2 * 1024 * 1024]).unwrap();
    let o = agentnet(&["card", "verify", p(&big)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("larger than"), "{}", stderr(&o));
}

#[test]
fn up_refuses_a_store_cap_that_overflows_before_it_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let o = agentnet(&[
        "up",
        "--data-dir",
        p(tmp.path()),
        "--no-mdns",
        "--store-max-mib",
        "18446744073709551615",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--store-max-mib") && stderr(&o).contains("too large"),
        "{}",
        stderr(&o)
    );
    assert!(!tmp.path().join("store").exists(), "nothing was started");
}
