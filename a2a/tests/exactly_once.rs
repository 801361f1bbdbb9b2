//! Exactly-once sends (issue 18, part 3), over real HTTP on loopback: a caller that lost the
//! answer sends the same message again (same `messageId`) and gets the task the first send
//! started, not a second task and not a second turn; a follow-up sent twice is received once;
//! another caller's message of the same id is its own.

mod common;

use std::time::Duration;

use agentnet_a2a::auth::Policy;
use common::*;
use serde_json::{json, Value};

/// A `SendMessage` of `text` with message id `id` (and `task` to continue one).
fn send(id: &str, text: &str, task: Option<&str>) -> Value {
    let mut m = json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}],
                       "extensions": [agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION]});
    if let Some(t) = task {
        m["taskId"] = json!(t);
    }
    json!({"message": m})
}

fn task_of(body: &Value) -> &Value {
    &body["result"]["task"]
}

async fn list(h: &Harness, caller: &str) -> Vec<Value> {
    let (status, body) = h
        .rpc("ask-name", Some(caller), "ListTasks", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    body["result"]["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_send_repeated_after_its_answer_was_lost_gets_the_same_task() {
    // The ask agent works 500 ms before it asks for a name.
    let h = start(Policy::Did).await;
    let caller = "did:key:z6MkRetrying";
    // The first send: the caller gives up after 150 ms, before the answer; the server has the
    // message and starts the task all the same.
    let impatient = agentnet_did::http::client_builder()
        .timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let lost = impatient
        .post(h.url("/ask-name"))
        .header("content-type", "application/json")
        .header("A2A-Version", "1.0")
        .header(CALLER, caller)
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                   "params": send("m-1", "hello", None)})
            .to_string(),
        )
        .send()
        .await;
    assert!(lost.is_err(), "the first answer was to be lost: {lost:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;

    // The retry, same message id: the task the first send started.
    let (status, body) = h
        .rpc(
            "ask-name",
            Some(caller),
            "SendMessage",
            send("m-1", "hello", None),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let id = task_of(&body)["id"].as_str().unwrap().to_owned();
    wait_idle(&h.ask).await;
    let tasks = list(&h, caller).await;
    assert_eq!(tasks.len(), 1, "one task, not two: {tasks:?}");
    assert_eq!(tasks[0]["id"], id.as_str());
    let (_, got) = h
        .rpc("ask-name", Some(caller), "GetTask", json!({"id": id}))
        .await;
    let task = &got["result"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{task}"
    );
    let received: Vec<&Value> = task["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "ROLE_USER")
        .collect();
    assert_eq!(received.len(), 1, "one turn ran on one message: {task}");

    // The answer to its question, sent twice: received once; the second send gets the task as
    // the first left it (before, it was refused: a completed task takes no more messages).
    let (status, first) = h
        .rpc(
            "ask-name",
            Some(caller),
            "SendMessage",
            send("m-2", "Ada", Some(&id)),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    wait_idle(&h.ask).await;
    let (status, again) = h
        .rpc(
            "ask-name",
            Some(caller),
            "SendMessage",
            send("m-2", "Ada", Some(&id)),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert!(again.get("error").is_none(), "{again}");
    assert_eq!(task_of(&again)["id"], id.as_str());
    assert_eq!(
        task_of(&again)["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{again}"
    );
    let users = task_of(&again)["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "ROLE_USER")
        .count();
    assert_eq!(users, 2, "hello and Ada, each once: {again}");
    assert_eq!(list(&h, caller).await.len(), 1);
}

#[tokio::test]
async fn a_message_id_is_its_callers_own() {
    let h = start(Policy::Did).await;
    let (_, a) = h
        .rpc(
            "ask-name",
            Some("did:key:z6MkA"),
            "SendMessage",
            send("same", "a", None),
        )
        .await;
    // Another caller who knows (or guesses) the message id gets a task of its own, never the
    // first caller's.
    let (_, b) = h
        .rpc(
            "ask-name",
            Some("did:key:z6MkB"),
            "SendMessage",
            send("same", "b", None),
        )
        .await;
    let (a, b) = (task_of(&a)["id"].clone(), task_of(&b)["id"].clone());
    assert!(a.is_string() && b.is_string(), "{a} {b}");
    assert_ne!(a, b);
    wait_idle(&h.ask).await;
    assert_eq!(list(&h, "did:key:z6MkB").await.len(), 1);
    // A new message of the first caller is a new task.
    let (_, c) = h
        .rpc(
            "ask-name",
            Some("did:key:z6MkA"),
            "SendMessage",
            send("other", "c", None),
        )
        .await;
    assert_ne!(task_of(&c)["id"], a);
    wait_idle(&h.ask).await;
    assert_eq!(list(&h, "did:key:z6MkA").await.len(), 2);
}

#[tokio::test]
async fn a_message_that_does_not_ask_to_run_once_runs_each_time() {
    // As A2A has it (and the official TCK expects: it sends one message id on each transport):
    // without the extension in the message, the same id twice is two tasks.
    let h = start(Policy::Did).await;
    let caller = "did:key:z6MkPlain";
    let plain =
        || json!({"message": {"messageId": "same", "role": "ROLE_USER", "parts": [{"text": "x"}]}});
    let (_, a) = h
        .rpc("ask-name", Some(caller), "SendMessage", plain())
        .await;
    let (_, b) = h
        .rpc("ask-name", Some(caller), "SendMessage", plain())
        .await;
    assert_ne!(task_of(&a)["id"], task_of(&b)["id"], "{a} {b}");
    wait_idle(&h.ask).await;
    assert_eq!(list(&h, caller).await.len(), 2);
}
