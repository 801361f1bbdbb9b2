//! What the `a2a-lf` types do on the wire, pinned: the facts `docs/A2A.md` reports, so that a
//! new `a2a-lf` that changes them fails here and the document (and our workarounds) get
//! revisited.

use agentnet_a2a::types::{AgentCard, ListTasksResponse, Part, PartContent, Task, TaskState};
use serde_json::json;

#[test]
fn correct_on_the_wire_for_what_we_write() {
    // ProtoJSON enum names, camelCase fields, parts without `kind`, results wrapped.
    let t: Task = serde_json::from_value(json!({
        "id": "t", "contextId": "c",
        "status": {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": "2026-01-01T00:00:00Z"},
        "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}]
    }))
    .unwrap();
    assert_eq!(t.status.state, TaskState::InputRequired);
    let v = serde_json::to_value(&t).unwrap();
    assert_eq!(v["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(v["history"][0]["role"], "ROLE_USER");
    assert_eq!(v["history"][0]["parts"][0], json!({"text": "hi"}));
    assert!(v.get("kind").is_none());
    let r = agentnet_a2a::types::SendMessageResponse::Task(t);
    assert!(serde_json::to_value(&r).unwrap().get("task").is_some());
}

#[test]
fn strict_where_protojson_writers_omit_defaults() {
    // A ProtoJSON writer omits "" and 0: a last page without nextPageToken/pageSize/totalSize
    // does not parse (our client fills the defaults in before parsing).
    assert!(serde_json::from_value::<ListTasksResponse>(json!({"tasks": []})).is_err());
    // Task.contextId is a plain proto3 string (may be omitted), required here.
    assert!(serde_json::from_value::<Task>(json!({
        "id": "t", "status": {"state": "TASK_STATE_WORKING"}
    }))
    .is_err());
    // ProtoJSON parsers accept enum numbers; a2a-lf does not.
    assert!(serde_json::from_value::<Task>(json!({
        "id": "t", "contextId": "c", "status": {"state": 2}
    }))
    .is_err());
    // ProtoJSON bytes may be base64url; a2a-lf takes standard base64 only.
    assert!(serde_json::from_value::<Part>(json!({"raw": "-_8"})).is_err());
    assert!(serde_json::from_value::<Part>(json!({"raw": "+/8="})).is_ok());
}

#[test]
fn lax_where_the_proto_is_strict() {
    // `content` is a oneof; two members are accepted and the first wins.
    let p: Part = serde_json::from_value(json!({"text": "a", "url": "https://x"})).unwrap();
    assert_eq!(p.content, PartContent::Text("a".into()));
    // A metadata that is not an object is dropped silently.
    let p: Part = serde_json::from_value(json!({"text": "a", "metadata": 5})).unwrap();
    assert!(p.metadata.is_none());
}

#[test]
fn cards_lose_unknown_fields_through_the_struct() {
    // A card re-serialized through AgentCard drops fields it does not model, which changes
    // what a signature covers: cards stay serde_json::Value in this crate, and the `did`
    // crate canonicalizes them for signing.
    let card = json!({
        "name": "n", "description": "d", "version": "1",
        "supportedInterfaces": [{"url": "https://a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {}, "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
        "x-extra": true
    });
    let c: AgentCard = serde_json::from_value(card).unwrap();
    assert!(serde_json::to_value(&c).unwrap().get("x-extra").is_none());
}
