//! The committed seeds are accepted by the validators they seed: a fuzzer that starts from
//! inputs refused at the first check spends its time there and never reaches the signatures,
//! chains and engine behind it. A failure here means the corpus is stale: rewrite it with
//! `cargo run -p agentnet-fuzz --bin seeds`.

use std::path::Path;

use agentnet_did::{didkey, PublicKey};
use agentnet_fuzz::{agent_key, NOW};

fn seed(target: &str, name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn text(target: &str, name: &str) -> String {
    String::from_utf8(seed(target, name)).expect("a text seed")
}

#[test]
fn signed_documents_cards_and_tokens_verify() {
    let key = agent_key();
    let wba = agentnet_did::Document::from_json(&seed("did_document", "wba.json")).unwrap();
    agentnet_did::wba::verify_proof(&wba).expect("the did:wba seed's proof verifies");

    let card: serde_json::Value = serde_json::from_slice(&seed("card", "signed.json")).unwrap();
    agentnet_did::card::verify_with_key(&card, &key.did_key(), &PublicKey::Ed25519(key.public()))
        .expect("the card seed verifies");

    for name in ["anonymous.jws", "signed_caller.jws"] {
        let jws = text("receipt", name);
        let r = agentnet_did::receipt::parse(&jws).unwrap().receipt;
        let expect = agentnet_did::receipt::Expected {
            task_id: &r.task_id,
            agent: &r.agent,
            caller: r.caller.as_deref(),
            message: r.messages.first().map(String::as_str),
        };
        agentnet_did::receipt::verify_with_key(&jws, &PublicKey::Ed25519(key.public()), &expect)
            .expect("the receipt seed verifies");
    }
    for name in ["endorse.jws", "revoke.jws"] {
        agentnet_did::endorsement::verify(&text("endorsement", name), NOW)
            .expect("the endorsement seed verifies");
    }
}

#[test]
fn the_delegation_seeds_check_and_verify() {
    use agentnet_did::delegation::{Chain, Request, Target};
    for name in ["root.json", "handed_off.json"] {
        let v: serde_json::Value = serde_json::from_slice(&seed("delegation", name)).unwrap();
        let chain = Chain::parse(&v).unwrap();
        let links = chain.links();
        let last = links.last().unwrap();
        // The handed-off chain is presented by its last issuer to its last audience.
        let (caller, agent) = if links.len() == 1 {
            (
                last.audience.to_string(),
                "did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH".to_string(),
            )
        } else {
            (last.issuer.to_string(), last.audience.to_string())
        };
        let skills = ["translation".to_string()];
        let req = Request {
            principals: None,
            caller: &caller,
            target: Target {
                agent: &agent,
                skills: &skills,
                op: "send",
            },
            now: NOW as i64,
        };
        chain.check(&req).expect("the chain seed checks");
        for (i, l) in links.iter().enumerate() {
            let doc = didkey::resolve(&l.issuer, Default::default()).unwrap();
            chain.verify_link(i, &doc).expect("each link verifies");
        }
    }
}

#[tokio::test]
async fn the_signed_requests_verify() {
    use agentnet_did::httpsig::{Verifier, VerifyOptions};
    let resolver = agentnet_did::Resolver::new(Default::default()).unwrap();
    resolver.pin(agentnet_fuzz::wba_document()).unwrap();
    for name in ["rfc9421_key.txt", "rfc9421_wba.txt", "legacy_didwba.txt"] {
        let bytes = seed("httpsig", name);
        let req = agentnet_fuzz::split_request(&bytes).unwrap();
        Verifier::new(resolver.clone(), VerifyOptions::default())
            .verify(req.method, req.target, &req.headers, req.body, NOW)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[tokio::test]
async fn the_advert_seed_validates() {
    let v = agentnet_discovery::Validator::new(
        agentnet_did::Resolver::new(Default::default()).unwrap(),
        Default::default(),
    );
    v.validate(&seed("advert", "did_key.json"), None, NOW)
        .await
        .expect("the advert seed validates");
}
