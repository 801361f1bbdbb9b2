//! The A2A errors a server answers with, and how each binding writes them.
//!
//! One enum, [`ProtocolError`], holds every error the engine and the server can return to a
//! caller. Each variant knows its JSON-RPC code (A2A 1.0 section 5.4: -32001…-32009 for the
//! A2A errors, the JSON-RPC 2.0 codes for the generic ones), its HTTP status and its
//! `google.rpc.ErrorInfo` reason. Two errors are ours, not the spec's, because the spec leaves
//! them to the binding: [`ProtocolError::Unauthenticated`] (HTTP 401, JSON-RPC -32000,
//! reason `UNAUTHENTICATED`) and [`ProtocolError::Busy`] (HTTP 429, JSON-RPC -32000, reason
//! `RESOURCE_EXHAUSTED`).

use axum::http::StatusCode;
use serde_json::{json, Value};

/// The `domain` of every `google.rpc.ErrorInfo` we write (A2A 1.0 section 11.6).
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";

/// The `@type` of a `google.rpc.ErrorInfo` detail.
pub const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// An error answered to an A2A caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// No task with this id belongs to the caller (whether it exists for someone else is not
    /// revealed). -32001, 404.
    #[error("task not found: {0}")]
    TaskNotFound(String),
    /// Cancel of a task in a terminal state. -32002, 400.
    #[error("task {0} is in a terminal state and cannot be canceled")]
    TaskNotCancelable(String),
    /// Any push-notification operation: this server does not support them. -32003, 400.
    #[error("push notifications are not supported")]
    PushNotificationNotSupported,
    /// The operation is not supported in this state (a message to a terminal task, a
    /// subscription to a terminal task, a message while the task is still working). -32004,
    /// 400.
    #[error("unsupported operation: {0}")]
    UnsupportedOperation(String),
    /// A media type in the request is not supported. -32005, 400.
    #[error("content type not supported: {0}")]
    ContentTypeNotSupported(String),
    /// The agent behind the server answered something that does not fit the protocol.
    /// -32006, 500.
    #[error("invalid agent response: {0}")]
    InvalidAgentResponse(String),
    /// `GetExtendedAgentCard` without an extended card configured. -32007, 400.
    #[error("extended agent card not configured")]
    ExtendedAgentCardNotConfigured,
    /// The request's `A2A-Version` (missing means 0.3) is not one we serve. -32009, 400.
    #[error("A2A version {0:?} is not supported (this server speaks 1.0)")]
    VersionNotSupported(String),
    /// The body is not JSON. -32700, 400.
    #[error("invalid JSON payload: {0}")]
    Parse(String),
    /// The JSON is not a valid JSON-RPC request. -32600, 400.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Unknown JSON-RPC method or HTTP+JSON route. -32601, 404.
    #[error("method not found: {0}")]
    MethodNotFound(String),
    /// The parameters do not fit the method. -32602, 400.
    #[error("invalid parameters: {0}")]
    InvalidParams(String),
    /// Something failed on our side (the task store). -32603, 500.
    #[error("internal error: {0}")]
    Internal(String),
    /// The agent's policy requires an identified caller and there is none, or the
    /// authenticator refused the request. -32000, 401.
    #[error("authentication required: {0}")]
    Unauthenticated(String),
    /// The caller is authenticated but not allowed: its delegation does not cover the request
    /// (`docs/PROTOCOL.md`, "Delegation"). -32000, 403.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// A bound was reached (tasks in flight, subscribers, store capacity). -32000, 429.
    #[error("server busy: {0}")]
    Busy(String),
    /// The request body is over the size limit. -32600, 413.
    #[error("request body over {0} bytes")]
    TooLarge(usize),
    /// The HTTP request's content type is not `application/a2a+json` or `application/json`.
    /// -32005 (`ContentTypeNotSupportedError`, which A2A 1.0 section 9.5 pairs with HTTP 415),
    /// 415.
    #[error("request content type {0:?} is not application/a2a+json or application/json")]
    MediaType(String),
}

impl ProtocolError {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i32 {
        match self {
            ProtocolError::TaskNotFound(_) => -32001,
            ProtocolError::TaskNotCancelable(_) => -32002,
            ProtocolError::PushNotificationNotSupported => -32003,
            ProtocolError::UnsupportedOperation(_) => -32004,
            ProtocolError::ContentTypeNotSupported(_) | ProtocolError::MediaType(_) => -32005,
            ProtocolError::InvalidAgentResponse(_) => -32006,
            ProtocolError::ExtendedAgentCardNotConfigured => -32007,
            ProtocolError::VersionNotSupported(_) => -32009,
            ProtocolError::Parse(_) => -32700,
            ProtocolError::InvalidRequest(_) | ProtocolError::TooLarge(_) => -32600,
            ProtocolError::MethodNotFound(_) => -32601,
            ProtocolError::InvalidParams(_) => -32602,
            ProtocolError::Internal(_) => -32603,
            ProtocolError::Unauthenticated(_)
            | ProtocolError::PermissionDenied(_)
            | ProtocolError::Busy(_) => -32000,
        }
    }

    /// The HTTP status (A2A 1.0 section 5.4 for the A2A errors).
    pub fn http_status(&self) -> StatusCode {
        match self {
            ProtocolError::TaskNotFound(_) | ProtocolError::MethodNotFound(_) => {
                StatusCode::NOT_FOUND
            }
            ProtocolError::InvalidAgentResponse(_) | ProtocolError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ProtocolError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ProtocolError::PermissionDenied(_) => StatusCode::FORBIDDEN,
            ProtocolError::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
            ProtocolError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ProtocolError::MediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// The `google.rpc.ErrorInfo` reason: the error's name in UPPER_SNAKE_CASE.
    pub fn reason(&self) -> &'static str {
        match self {
            ProtocolError::TaskNotFound(_) => "TASK_NOT_FOUND",
            ProtocolError::TaskNotCancelable(_) => "TASK_NOT_CANCELABLE",
            ProtocolError::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ProtocolError::UnsupportedOperation(_) => "UNSUPPORTED_OPERATION",
            ProtocolError::ContentTypeNotSupported(_) => "CONTENT_TYPE_NOT_SUPPORTED",
            ProtocolError::InvalidAgentResponse(_) => "INVALID_AGENT_RESPONSE",
            ProtocolError::ExtendedAgentCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            ProtocolError::VersionNotSupported(_) => "VERSION_NOT_SUPPORTED",
            ProtocolError::Parse(_) => "PARSE_ERROR",
            ProtocolError::InvalidRequest(_) => "INVALID_REQUEST",
            ProtocolError::MethodNotFound(_) => "METHOD_NOT_FOUND",
            ProtocolError::InvalidParams(_) => "INVALID_PARAMS",
            ProtocolError::Internal(_) => "INTERNAL_ERROR",
            ProtocolError::Unauthenticated(_) => "UNAUTHENTICATED",
            ProtocolError::PermissionDenied(_) => "PERMISSION_DENIED",
            ProtocolError::Busy(_) => "RESOURCE_EXHAUSTED",
            ProtocolError::TooLarge(_) => "PAYLOAD_TOO_LARGE",
            ProtocolError::MediaType(_) => "CONTENT_TYPE_NOT_SUPPORTED",
        }
    }

    /// The gRPC-style status name the HTTP+JSON binding's `error.status` carries.
    fn status_name(&self) -> &'static str {
        match self {
            ProtocolError::TaskNotFound(_) | ProtocolError::MethodNotFound(_) => "NOT_FOUND",
            ProtocolError::InvalidAgentResponse(_) | ProtocolError::Internal(_) => "INTERNAL",
            ProtocolError::Unauthenticated(_) => "UNAUTHENTICATED",
            ProtocolError::PermissionDenied(_) => "PERMISSION_DENIED",
            ProtocolError::Busy(_) => "RESOURCE_EXHAUSTED",
            ProtocolError::ContentTypeNotSupported(_)
            | ProtocolError::Parse(_)
            | ProtocolError::InvalidRequest(_)
            | ProtocolError::InvalidParams(_)
            | ProtocolError::TooLarge(_)
            | ProtocolError::MediaType(_) => "INVALID_ARGUMENT",
            _ => "FAILED_PRECONDITION",
        }
    }

    fn details(&self) -> Value {
        let mut metadata = serde_json::Map::new();
        metadata.insert(
            "timestamp".into(),
            Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        );
        if let ProtocolError::TaskNotFound(id) | ProtocolError::TaskNotCancelable(id) = self {
            metadata.insert("taskId".into(), Value::String(id.clone()));
        }
        json!([{
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason(),
            "domain": ERROR_DOMAIN,
            "metadata": metadata,
        }])
    }

    /// The JSON-RPC `error` object (A2A 1.0 section 9.5).
    pub fn to_jsonrpc(&self) -> Value {
        json!({ "code": self.code(), "message": self.to_string(), "data": self.details() })
    }

    /// The HTTP+JSON error body, `google.rpc.Status` in JSON (A2A 1.0 section 11.6).
    pub fn to_rest(&self) -> Value {
        json!({ "error": {
            "code": self.http_status().as_u16(),
            "status": self.status_name(),
            "message": self.to_string(),
            "details": self.details(),
        }})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_spec_table() {
        let cases = [
            (ProtocolError::TaskNotFound("t".into()), -32001, 404),
            (ProtocolError::TaskNotCancelable("t".into()), -32002, 400),
            (ProtocolError::PushNotificationNotSupported, -32003, 400),
            (ProtocolError::UnsupportedOperation("x".into()), -32004, 400),
            (
                ProtocolError::ContentTypeNotSupported("x".into()),
                -32005,
                400,
            ),
            (ProtocolError::InvalidAgentResponse("x".into()), -32006, 500),
            (ProtocolError::ExtendedAgentCardNotConfigured, -32007, 400),
            (
                ProtocolError::VersionNotSupported("0.3".into()),
                -32009,
                400,
            ),
            // The request's own content type: the same error, with HTTP 415.
            (ProtocolError::MediaType("text/plain".into()), -32005, 415),
        ];
        for (e, code, status) in cases {
            assert_eq!(e.code(), code, "{e}");
            assert_eq!(e.http_status().as_u16(), status, "{e}");
            let rest = e.to_rest();
            assert_eq!(rest["error"]["details"][0]["reason"], e.reason());
            assert_eq!(rest["error"]["details"][0]["domain"], ERROR_DOMAIN);
            assert_eq!(e.to_jsonrpc()["code"], code);
        }
    }
}
