//! The server over real HTTP on loopback, through our client and through raw requests: every
//! method on both bindings, the version and media-type rules, ownership, the policy, the task
//! lifecycle rules.

mod common;

use std::time::Duration;

use agentnet_a2a::auth::Policy;
use agentnet_a2a::client::{self, Binding, ClientError};
use agentnet_a2a::samples::ASK_NAME_QUESTION;
use agentnet_a2a::types::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, SendMessageResponse, StreamResponse,
    SubscribeToTaskRequest, Task, TaskState,
};
use common::*;
use reqwest::Method;
use serde_json::json;

fn task(r: SendMessageResponse) -> Task {
    match r {
        SendMessageResponse::Task(t) => t,
        other => panic!("expected a task, got {other:?}"),
    }
}

fn code(e: &ClientError) -> i32 {
    e.remote()
        .unwrap_or_else(|| panic!("not an A2A error: {e}"))
        .code
}

fn get(id: &str) -> GetTaskRequest {
    GetTaskRequest {
        id: id.into(),
        history_length: None,
        tenant: None,
    }
}

fn cancel(id: &str) -> CancelTaskRequest {
    CancelTaskRequest {
        id: id.into(),
        metadata: None,
        tenant: None,
    }
}

fn list() -> ListTasksRequest {
    ListTasksRequest {
        context_id: None,
        status: None,
        page_size: None,
        page_token: None,
        history_length: None,
        status_timestamp_after: None,
        include_artifacts: None,
        tenant: None,
    }
}

fn state(ev: &StreamResponse) -> Option<TaskState> {
    match ev {
        StreamResponse::Task(t) => Some(t.status.state.clone()),
        StreamResponse::StatusUpdate(s) => Some(s.status.state.clone()),
        _ => None,
    }
}

async fn collect(mut s: client::ClientStream) -> Vec<StreamResponse> {
    let mut out = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("stream stalled")
    {
        out.push(ev.expect("stream event"));
    }
    out
}

#[tokio::test]
async fn card_is_served_and_the_client_picks_an_interface() {
    let h = start(Policy::Did).await;
    for base in ["/echo", "/echo/"] {
        let card = client::fetch_card(
            &h.http,
            &url::Url::parse(&h.url(base)).unwrap(),
            Default::default(),
        )
        .await
        .unwrap();
        assert_eq!(card["name"], "echo");
    }
    let card = client::fetch_card(
        &h.http,
        &url::Url::parse(&h.url("/echo")).unwrap(),
        Default::default(),
    )
    .await
    .unwrap();
    let c = client::Client::from_card(h.http.clone(), &card, None).unwrap();
    assert_eq!(c.endpoint().binding, Binding::JsonRpc);
    assert_eq!(c.endpoint().url.as_str(), h.url("/echo"));
    // The card parses as an a2a-lf AgentCard too.
    serde_json::from_value::<agentnet_a2a::types::AgentCard>(card).unwrap();
}

#[tokio::test]
async fn every_method_on_both_bindings() {
    let h = start(Policy::Did).await;
    for binding in BINDINGS {
        let me = format!("did:example:{binding:?}");
        let echo = h.client("echo", binding, Some(&me));
        let ask = h.client("ask-name", binding, Some(&me));

        // SendMessage (blocking): echo completes with its artifact.
        let t = task(echo.send_message(&msg("hello")).await.unwrap());
        assert_eq!(t.status.state, TaskState::Completed, "{binding:?}");
        let art = &t.artifacts.as_ref().unwrap()[0];
        assert_eq!(art.parts[0].as_text(), Some("hello"));

        // GetTask, with historyLength.
        let g = echo.get_task(&get(&t.id)).await.unwrap();
        assert_eq!(g.id, t.id);
        assert_eq!(g.history.as_ref().unwrap().len(), 2);
        let mut one = get(&t.id);
        one.history_length = Some(1);
        let g = echo.get_task(&one).await.unwrap();
        assert_eq!(g.history.as_ref().unwrap().len(), 1);
        one.history_length = Some(0);
        assert!(echo.get_task(&one).await.unwrap().history.is_none());

        // ListTasks: pages of the caller's tasks, newest first; artifacts only when asked.
        for i in 0..3 {
            echo.send_message(&msg(&format!("m{i}"))).await.unwrap();
        }
        let mut q = list();
        q.page_size = Some(3);
        let p1 = echo.list_tasks(&q).await.unwrap();
        assert_eq!(p1.tasks.len(), 3);
        assert_eq!(p1.total_size, 4);
        assert!(p1.tasks.iter().all(|t| t.artifacts.is_none()));
        assert!(!p1.next_page_token.is_empty());
        q.page_token = Some(p1.next_page_token.clone());
        q.include_artifacts = Some(true);
        let p2 = echo.list_tasks(&q).await.unwrap();
        assert_eq!(p2.tasks.len(), 1);
        assert_eq!(p2.tasks[0].id, t.id, "oldest last");
        assert!(p2.tasks[0].artifacts.is_some());
        assert_eq!(p2.next_page_token, "");
        let mut by_state = list();
        by_state.status = Some(TaskState::Working);
        assert_eq!(echo.list_tasks(&by_state).await.unwrap().tasks.len(), 0);

        // SendStreamingMessage on ask-name: task, working…, input-required, end.
        let evs = collect(ask.send_streaming(&msg("what time is it?")).await.unwrap()).await;
        assert!(matches!(evs[0], StreamResponse::Task(_)), "{evs:?}");
        assert_eq!(state(&evs[0]), Some(TaskState::Submitted));
        assert_eq!(state(evs.last().unwrap()), Some(TaskState::InputRequired));
        assert!(evs.iter().any(|e| state(e) == Some(TaskState::Working)));
        let id = match &evs[0] {
            StreamResponse::Task(t) => t.id.clone(),
            _ => unreachable!(),
        };
        let q = ask.get_task(&get(&id)).await.unwrap();
        assert_eq!(
            q.status.message.as_ref().and_then(|m| m.text()),
            Some(ASK_NAME_QUESTION)
        );

        // SubscribeToTask while the answer is worked on; the stream ends at completion.
        let answer = ask
            .send_message(&immediately(reply(&id, "Ada")))
            .await
            .unwrap();
        assert_eq!(task(answer).status.state, TaskState::Working);
        let sub = ask
            .subscribe(&SubscribeToTaskRequest {
                id: id.clone(),
                tenant: None,
            })
            .await
            .unwrap();
        let evs = collect(sub).await;
        assert!(matches!(evs[0], StreamResponse::Task(_)));
        assert_eq!(state(evs.last().unwrap()), Some(TaskState::Completed));
        assert!(evs
            .iter()
            .any(|e| matches!(e, StreamResponse::ArtifactUpdate(_))));
        let done = ask.get_task(&get(&id)).await.unwrap();
        let greeting = done.artifacts.unwrap()[0].parts[0]
            .as_text()
            .unwrap()
            .to_string();
        assert_eq!(greeting, "Hello, Ada! You asked: what time is it?");

        // CancelTask: a working task becomes canceled.
        let slow = task(ask.send_message(&immediately(msg("slow"))).await.unwrap());
        let c = ask.cancel_task(&cancel(&slow.id)).await.unwrap();
        assert_eq!(c.status.state, TaskState::Canceled);

        // Subscribing to a terminal task is refused (UnsupportedOperation).
        let e = ask
            .subscribe(&SubscribeToTaskRequest {
                id: slow.id.clone(),
                tenant: None,
            })
            .await
            .unwrap_err();
        assert_eq!(code(&e), -32004, "{binding:?}");
    }
}

#[tokio::test]
async fn version_header_rules() {
    let h = start(Policy::Open).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
    for (version, ok) in [
        (None, false),
        (Some("0.3"), false),
        (Some("2.0"), false),
        (Some("1.1"), false),
        (Some("1.0"), true),
    ] {
        let mut rb = h
            .http
            .post(h.url("/echo"))
            .header("content-type", "application/json")
            .body(body.to_string());
        let mut get = h.http.get(h.url("/echo/tasks/x"));
        if let Some(v) = version {
            rb = rb.header("A2A-Version", v);
            get = get.header("A2A-Version", v);
        }
        let r: serde_json::Value = rb.send().await.unwrap().json().await.unwrap();
        let g = get.send().await.unwrap();
        let status = g.status().as_u16();
        let g: serde_json::Value = g.json().await.unwrap();
        if ok {
            // Past the version check: the task is simply not found.
            assert_eq!(r["error"]["code"], -32001, "{version:?}");
            assert_eq!(status, 404);
        } else {
            assert_eq!(r["error"]["code"], -32009, "{version:?}");
            assert_eq!(status, 400, "{version:?}");
            assert_eq!(g["error"]["details"][0]["reason"], "VERSION_NOT_SUPPORTED");
        }
    }
    // The version as a query parameter.
    let r = h
        .http
        .get(h.url("/echo/tasks/x?A2A-Version=1.0"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
}

#[tokio::test]
async fn media_types_and_json_rpc_errors() {
    let h = start(Policy::Open).await;
    // application/a2a+json and application/json are both accepted; text/plain is not.
    for (ct, status) in [
        ("application/json", 200),
        ("application/a2a+json", 200),
        ("text/plain", 415),
    ] {
        let r = h
            .http
            .post(h.url("/echo/message:send"))
            .header("content-type", ct)
            .header("A2A-Version", "1.0")
            .body(json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{ct}");
        if status == 200 {
            assert_eq!(r.headers()["content-type"], "application/json");
        }
    }
    // Malformed JSON: -32700.
    let r: serde_json::Value = h
        .http
        .post(h.url("/echo"))
        .header("content-type", "application/json")
        .header("A2A-Version", "1.0")
        .body("{\"jsonrpc\": \"2.0\", \"id\": 1, ")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["error"]["code"], -32700);
    assert_eq!(r["id"], serde_json::Value::Null);
    // Unknown method: -32601; the old slash-style name too.
    for m in ["NoSuchMethod", "message/send"] {
        let (status, r) = h.rpc("echo", None, m, json!({})).await;
        assert_eq!(status, 200);
        assert_eq!(r["error"]["code"], -32601, "{m}");
        assert_eq!(r["id"], 7);
    }
    // Not a request object: -32600; the id is answered once it is known to be valid.
    let (_, r) = h.rpc("echo", None, "GetTask", json!([1])).await;
    assert_eq!(r["error"]["code"], -32600);
    assert_eq!(r["id"], 7);
    for (body, id) in [
        (
            json!([{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}]),
            json!(null),
        ),
        (json!({"jsonrpc": "2.0", "method": "GetTask"}), json!(null)),
        (
            json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "GetTask"}),
            json!(null),
        ),
        (
            json!({"jsonrpc": "1.0", "id": 9, "method": "GetTask"}),
            json!(9),
        ),
        (json!({"id": "x", "method": "GetTask"}), json!("x")),
        (json!({"jsonrpc": "2.0", "id": 9, "method": 5}), json!(9)),
        (
            json!({"jsonrpc": "2.0", "id": 9, "method": "GetTask", "params": "p"}),
            json!(9),
        ),
    ] {
        let r: serde_json::Value = h
            .http
            .post(h.url("/echo"))
            .header("content-type", "application/json")
            .header("A2A-Version", "1.0")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["error"]["code"], -32600, "{body}");
        assert_eq!(r["id"], id, "{body}");
    }
    // `params` null or absent reads as `{}`: GetTask then lacks its id (-32602 or not found),
    // never -32600.
    let (_, r) = h.rpc("echo", None, "GetTask", json!(null)).await;
    assert_ne!(r["error"]["code"], -32600, "{r}");
    // Invalid params: -32602.
    let (_, r) = h
        .rpc("echo", None, "SendMessage", json!({"message": 5}))
        .await;
    assert_eq!(r["error"]["code"], -32602);
    // A message must come from the user and have parts.
    let (_, r) = h
        .rpc(
            "echo",
            None,
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602);
    // Push notifications are declared unsupported, on both bindings.
    let (_, r) = h
        .rpc(
            "echo",
            None,
            "CreateTaskPushNotificationConfig",
            json!({"taskId": "t", "url": "https://x"}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32003);
    let (_, r) = h
        .rpc(
            "echo",
            None,
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
                   "configuration": {"taskPushNotificationConfig": {"url": "https://x"}}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32003);
    let (status, r) = h
        .rest(
            Method::GET,
            "/echo/tasks/t/pushNotificationConfigs",
            None,
            None,
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        r["error"]["details"][0]["reason"],
        "PUSH_NOTIFICATION_NOT_SUPPORTED"
    );
    // No extended card configured.
    let (_, r) = h.rpc("echo", None, "GetExtendedAgentCard", json!({})).await;
    assert_eq!(r["error"]["code"], -32007);
    // Unknown HTTP+JSON route: 404 with a google.rpc.Status body.
    let (status, r) = h.rest(Method::GET, "/echo/nothing", None, None).await;
    assert_eq!(status, 404);
    assert_eq!(r["error"]["code"], 404);
}

#[tokio::test]
async fn tasks_belong_to_their_caller() {
    let h = start(Policy::Did).await;
    for binding in BINDINGS {
        let alice = h.client("ask-name", binding, Some("did:example:alice"));
        let mallory = h.client("ask-name", binding, Some("did:example:mallory"));
        let t = task(alice.send_message(&msg("hi")).await.unwrap());
        assert_eq!(t.status.state, TaskState::InputRequired);

        let e = mallory.get_task(&get(&t.id)).await.unwrap_err();
        assert_eq!(code(&e), -32001, "{binding:?}");
        if binding == Binding::HttpJson {
            assert_eq!(e.remote().unwrap().status, 404);
        }
        assert_eq!(
            code(&mallory.cancel_task(&cancel(&t.id)).await.unwrap_err()),
            -32001
        );
        assert_eq!(
            code(
                &mallory
                    .send_message(&reply(&t.id, "Eve"))
                    .await
                    .unwrap_err()
            ),
            -32001
        );
        let sub = mallory
            .subscribe(&SubscribeToTaskRequest {
                id: t.id.clone(),
                tenant: None,
            })
            .await
            .unwrap_err();
        assert_eq!(code(&sub), -32001);
        // The same answer as for a task that does not exist at all.
        let none = mallory.get_task(&get("no-such-task")).await.unwrap_err();
        assert_eq!(code(&none), -32001);
        assert!(mallory.list_tasks(&list()).await.unwrap().tasks.is_empty());
        // And alice's task is untouched.
        assert_eq!(
            alice.get_task(&get(&t.id)).await.unwrap().status.state,
            TaskState::InputRequired
        );
    }
}

#[tokio::test]
async fn did_policy_refuses_anonymous_and_bad_signatures() {
    let h = start(Policy::Did).await;
    for binding in BINDINGS {
        let anon = h.client("echo", binding, None);
        let e = anon.send_message(&msg("hi")).await.unwrap_err();
        assert_eq!(e.remote().map(|r| r.status), Some(401), "{binding:?}: {e}");
        let bad = h.client("echo", binding, Some("bad"));
        let e = bad.get_task(&get("x")).await.unwrap_err();
        assert_eq!(e.remote().map(|r| r.status), Some(401), "{binding:?}: {e}");
    }
    // The card stays public.
    let r = h
        .http
        .get(h.url("/echo/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // An open agent serves anonymous callers but still refuses a bad signature, and an
    // anonymous caller has no task list.
    let h = start(Policy::Open).await;
    let anon = h.client("echo", Binding::HttpJson, None);
    let t = task(anon.send_message(&msg("hi")).await.unwrap());
    assert_eq!(t.status.state, TaskState::Completed);
    assert!(anon.list_tasks(&list()).await.unwrap().tasks.is_empty());
    let bad = h.client("echo", Binding::HttpJson, Some("bad"));
    assert_eq!(
        bad.get_task(&get(&t.id))
            .await
            .unwrap_err()
            .remote()
            .unwrap()
            .status,
        401
    );
    // An identified caller does not see the anonymous task.
    let id = h.client("echo", Binding::HttpJson, Some("did:example:a"));
    assert_eq!(code(&id.get_task(&get(&t.id)).await.unwrap_err()), -32001);
}

#[tokio::test]
async fn terminal_tasks_refuse_messages_and_cancel_sticks() {
    let h = start_with(Policy::Did, Default::default(), Duration::from_millis(400)).await;
    for binding in BINDINGS {
        let me = h.client("echo", binding, Some("did:example:me"));
        let done = task(me.send_message(&msg("one")).await.unwrap());
        assert_eq!(done.status.state, TaskState::Completed);
        let e = me
            .send_message(&reply(&done.id, "again"))
            .await
            .unwrap_err();
        assert_eq!(code(&e), -32004, "{binding:?}");
        if binding == Binding::HttpJson {
            assert_eq!(e.remote().unwrap().status, 400);
        }
        assert_eq!(
            code(&me.cancel_task(&cancel(&done.id)).await.unwrap_err()),
            -32002
        );

        // Cancel a working task; its work finishes later and must not change it.
        let ask = h.client("ask-name", binding, Some("did:example:me"));
        let t = task(ask.send_message(&immediately(msg("slow"))).await.unwrap());
        assert!(matches!(
            t.status.state,
            TaskState::Submitted | TaskState::Working
        ));
        let c = ask.cancel_task(&cancel(&t.id)).await.unwrap();
        assert_eq!(c.status.state, TaskState::Canceled);
        tokio::time::sleep(Duration::from_millis(700)).await;
        let after = ask.get_task(&get(&t.id)).await.unwrap();
        assert_eq!(after.status.state, TaskState::Canceled);
        assert_eq!(
            after.status.timestamp, c.status.timestamp,
            "not touched since"
        );
        assert_eq!(
            code(&ask.send_message(&reply(&t.id, "x")).await.unwrap_err()),
            -32004
        );
        assert_eq!(
            code(&ask.cancel_task(&cancel(&t.id)).await.unwrap_err()),
            -32002
        );

        // A message to a task that is still working is refused too.
        let w = task(ask.send_message(&immediately(msg("slow"))).await.unwrap());
        assert_eq!(
            code(&ask.send_message(&reply(&w.id, "x")).await.unwrap_err()),
            -32004
        );
    }
    // The last turns end and free their slots.
    wait_idle(&h.ask).await;
}

#[tokio::test]
async fn cancel_ends_a_live_stream() {
    let h = start_with(Policy::Did, Default::default(), Duration::from_secs(5)).await;
    let me = h.client("ask-name", Binding::JsonRpc, Some("did:example:me"));
    let mut s = me.send_streaming(&msg("hi")).await.unwrap();
    let first = s.next().await.unwrap().unwrap();
    let id = match first {
        StreamResponse::Task(t) => t.id,
        other => panic!("{other:?}"),
    };
    me.cancel_task(&cancel(&id)).await.unwrap();
    let rest = collect(s).await;
    assert_eq!(state(rest.last().unwrap()), Some(TaskState::Canceled));
}

/// A ProtoJSON server that omits defaults on its last page: our client reads it anyway (the
/// a2a-lf type alone would refuse it, see tests/a2a_lf_wire.rs).
#[tokio::test]
async fn client_reads_a_list_page_with_defaults_omitted() {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/tasks",
        get(|| async {
            (
                [("content-type", "application/a2a+json")],
                "{\"tasks\": []}",
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let c = client::Client::new(
        agentnet_did::http::client(),
        client::Endpoint {
            url: url::Url::parse(&base).unwrap(),
            binding: Binding::HttpJson,
        },
        None,
    );
    let page = c.list_tasks(&list()).await.unwrap();
    assert!(page.tasks.is_empty());
    assert_eq!(page.next_page_token, "");
}
