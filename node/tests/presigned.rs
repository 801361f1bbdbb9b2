//! Requests signed now and sent later, as the load generator (`agentnet-sim --bin
//! signed_requests`) writes them: [`Client::prepare_send_message`] with the [`DidSigner`] of
//! `agentnet call`, replayed by another HTTP client against a real node's `did` agent.

use std::sync::Arc;

use agentnet_a2a::client::{self, Client, ClientLimits, PreparedRequest};
use agentnet_did::SecretKey;
use agentnet_node::call::{self, DidSigner};
use agentnet_node::config::FileConfig;
use agentnet_node::daemon::{self, Options};
use agentnet_node::identity::Identity;
use serde_json::Value;

/// Send `req` as a replaying load client does: its method, URL, every header, its body.
async fn replay(req: &PreparedRequest) -> (u16, Value) {
    let resp = agentnet_did::http::client()
        .request(req.method.clone(), req.url.clone())
        .headers(req.headers.clone())
        .body(req.body.clone())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_request_is_accepted_once_when_sent_later() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(
        &cfg,
        "[[agent]]\nid = \"echo\"\nkind = \"echo\"\npolicy = \"did\"\npublish = false\n",
    )
    .unwrap();
    let mut o = Options::local(dir.path().join("data"));
    o.hosted = FileConfig::read(&cfg).unwrap();
    let node = daemon::start(o).await.expect("the node starts");
    let agent = url::Url::parse(&format!("http://{}/a2a/echo", node.info.http)).unwrap();

    let http = agentnet_did::http::client();
    let card = client::fetch_card(&http, &agent, ClientLimits::default())
        .await
        .unwrap();
    let signer = Arc::new(DidSigner::new(Identity::did_key(SecretKey::generate())));
    let c = Client::from_card(http, &card, Some(signer)).unwrap();
    let mut prepared = Vec::new();
    for text in ["first", "second"] {
        let msg = call::message(text, None).unwrap();
        prepared.push(
            c.prepare_send_message(&call::send_request(msg))
                .await
                .unwrap(),
        );
    }
    // Each carries its own signature (own nonce) over its own body.
    assert_ne!(
        prepared[0].headers["signature-input"],
        prepared[1].headers["signature-input"]
    );

    // Sent in the other order, by a client that only replays bytes: both complete, each with
    // its text as the artifact.
    for (req, text) in [(&prepared[1], "second"), (&prepared[0], "first")] {
        let (status, v) = replay(req).await;
        assert_eq!(status, 200, "{v}");
        let task = &v["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
        assert_eq!(task["artifacts"][0]["parts"][0]["text"], text, "{v}");
    }
    // A replay of one of them is refused.
    let (status, _) = replay(&prepared[0]).await;
    assert_eq!(status, 401);
    node.shutdown().await;
}
