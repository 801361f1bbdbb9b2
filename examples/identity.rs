//! A tour of the identity layer: a DID, its document, a signed A2A Agent Card, and a DID-signed
//! HTTP request checked the way a receiving agent checks it.
//!
//! `cargo run --example identity`

use std::time::{SystemTime, UNIX_EPOCH};

use agentnet_did::httpsig::{self, Verifier, VerifyOptions};
use agentnet_did::{card, wba, Relationship, Resolver, SecretKey};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. An identity: an Ed25519 key, and its did:key.
    let key = SecretKey::generate();
    let did = key.did_key();
    println!("DID: {did}");

    // 2. did:key resolves locally; the document authorizes the key for every relationship.
    let resolver = Resolver::new(Default::default())?;
    let doc = resolver.resolve(&did).await?;
    let vm = did.with_fragment(did.method_specific_id());
    doc.key_for(&vm.to_string(), Relationship::AssertionMethod)?;
    println!("document: {}", serde_json::to_string(&doc.to_json())?);

    // 3. Sign an A2A Agent Card; anyone can check it against the DID.
    let agent_card = json!({
        "name": "Echo", "description": "Echoes what it is sent.", "version": "1.0.0",
        "supportedInterfaces": [{"url": "https://agents.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "Echo text.", "tags": ["echo"]}]
    });
    let signed = card::sign(&agent_card, &key, &vm)?;
    let signers = card::verify(&signed, card::KeySource::Did(&resolver)).await?;
    println!("card signed by {}", signers[0].kid);

    // 4. A did:wba identity bound to the same key, and an RFC 9421 request signed with it.
    let wba_did = wba::did_for("agents.example", None, &["echo"], &key.public())?;
    let wba_doc = wba::document_for(&wba_did, &key, "2026-01-01T00:00:00Z");
    let receiver = Resolver::new(Default::default())?;
    receiver.pin(wba_doc)?; // as if fetched from https://agents.example/echo/.../did.json
    let verifier = Verifier::new(receiver, VerifyOptions::default());
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let url = "https://peer.example/a2a";
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage"}"#;
    let keyid = format!("{wba_did}#key-1").parse()?;
    let headers = httpsig::sign(&key, &keyid, "POST", url, body, now, &httpsig::new_nonce())?;
    let mut map = http::HeaderMap::new();
    headers.apply(&mut map);
    let caller = verifier.verify("POST", url, &map, body, now).await?;
    println!("request verified: caller {}", caller.did);
    let replay = verifier.verify("POST", url, &map, body, now).await;
    println!("same request again: {}", replay.unwrap_err());
    Ok(())
}
