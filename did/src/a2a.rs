//! The A2A 1.0 Agent Card as the official SDKs canonicalize it before signing.
//!
//! Both `a2a-sdk` (Python) and `@a2a-js/sdk` pass the card through their protobuf model
//! (`lf.a2a.v1.AgentCard`) before RFC 8785: fields the model does not know are dropped at every
//! level, proto3 fields without presence are dropped at their default (`""`, `false`), numbers
//! inside `google.protobuf.Struct` values become doubles. Then `signatures` is removed and empty
//! strings, nulls, lists and objects are removed recursively, bottom-up. We do the same from the
//! schema below (facts read off the SDK's descriptors), so that a card signs and verifies
//! identically here and there.

use serde_json::{Map, Value};

use crate::jcs;

/// Deepest nesting accepted, as the Python SDK's canonicalizer.
pub const MAX_DEPTH: usize = 128;

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A string without presence: dropped when `""`.
    Str,
    /// A string with presence (`optional`): kept as given.
    OptStr,
    /// A bool without presence: dropped when `false`.
    Bool,
    /// A bool with presence: kept, `false` included.
    OptBool,
    /// A nested message.
    Msg(&'static Message),
    /// `repeated string`.
    RepStr,
    /// `repeated` message.
    RepMsg(&'static Message),
    /// `map<string, message>`.
    MapMsg(&'static Message),
    /// `map<string, string>`.
    MapStr,
    /// `google.protobuf.Struct`: free JSON, numbers as doubles.
    Struct,
}

#[derive(Debug)]
struct Field {
    json: &'static str,
    kind: Kind,
}

#[derive(Debug)]
struct Message {
    name: &'static str,
    fields: &'static [Field],
}

macro_rules! msg {
    ($id:ident, $name:literal, [$($json:literal => $kind:expr),* $(,)?]) => {
        static $id: Message = Message { name: $name, fields: &[$(Field { json: $json, kind: $kind }),*] };
    };
}

use Kind::{Bool, MapMsg, MapStr, Msg, OptBool, OptStr, RepMsg, RepStr, Str, Struct};
msg!(AGENT_CARD, "AgentCard", [
    "name" => Str, "description" => Str, "supportedInterfaces" => RepMsg(&AGENT_INTERFACE),
    "provider" => Msg(&AGENT_PROVIDER), "version" => Str, "documentationUrl" => OptStr,
    "capabilities" => Msg(&AGENT_CAPABILITIES), "securitySchemes" => MapMsg(&SECURITY_SCHEME),
    "securityRequirements" => RepMsg(&SECURITY_REQUIREMENT), "defaultInputModes" => RepStr,
    "defaultOutputModes" => RepStr, "skills" => RepMsg(&AGENT_SKILL),
    "signatures" => RepMsg(&AGENT_CARD_SIGNATURE), "iconUrl" => OptStr,
]);
msg!(AGENT_INTERFACE, "AgentInterface", [
    "url" => Str, "protocolBinding" => Str, "tenant" => Str, "protocolVersion" => Str,
]);
msg!(AGENT_PROVIDER, "AgentProvider", ["url" => Str, "organization" => Str]);
msg!(AGENT_CAPABILITIES, "AgentCapabilities", [
    "streaming" => OptBool, "pushNotifications" => OptBool,
    "extensions" => RepMsg(&AGENT_EXTENSION), "extendedAgentCard" => OptBool,
]);
msg!(AGENT_EXTENSION, "AgentExtension", [
    "uri" => Str, "description" => Str, "required" => Bool, "params" => Struct,
]);
msg!(SECURITY_SCHEME, "SecurityScheme", [
    "apiKeySecurityScheme" => Msg(&API_KEY_SCHEME),
    "httpAuthSecurityScheme" => Msg(&HTTP_AUTH_SCHEME),
    "oauth2SecurityScheme" => Msg(&OAUTH2_SCHEME),
    "openIdConnectSecurityScheme" => Msg(&OPENID_SCHEME),
    "mtlsSecurityScheme" => Msg(&MTLS_SCHEME),
]);
msg!(API_KEY_SCHEME, "APIKeySecurityScheme", ["description" => Str, "location" => Str, "name" => Str]);
msg!(HTTP_AUTH_SCHEME, "HTTPAuthSecurityScheme", ["description" => Str, "scheme" => Str, "bearerFormat" => Str]);
msg!(OAUTH2_SCHEME, "OAuth2SecurityScheme", [
    "description" => Str, "flows" => Msg(&OAUTH_FLOWS), "oauth2MetadataUrl" => Str,
]);
msg!(OAUTH_FLOWS, "OAuthFlows", [
    "authorizationCode" => Msg(&AUTH_CODE_FLOW), "clientCredentials" => Msg(&CLIENT_CREDENTIALS_FLOW),
    "implicit" => Msg(&IMPLICIT_FLOW), "password" => Msg(&PASSWORD_FLOW), "deviceCode" => Msg(&DEVICE_CODE_FLOW),
]);
msg!(AUTH_CODE_FLOW, "AuthorizationCodeOAuthFlow", [
    "authorizationUrl" => Str, "tokenUrl" => Str, "refreshUrl" => Str, "scopes" => MapStr, "pkceRequired" => Bool,
]);
msg!(CLIENT_CREDENTIALS_FLOW, "ClientCredentialsOAuthFlow", ["tokenUrl" => Str, "refreshUrl" => Str, "scopes" => MapStr]);
msg!(IMPLICIT_FLOW, "ImplicitOAuthFlow", ["authorizationUrl" => Str, "refreshUrl" => Str, "scopes" => MapStr]);
msg!(PASSWORD_FLOW, "PasswordOAuthFlow", ["tokenUrl" => Str, "refreshUrl" => Str, "scopes" => MapStr]);
msg!(DEVICE_CODE_FLOW, "DeviceCodeOAuthFlow", [
    "deviceAuthorizationUrl" => Str, "tokenUrl" => Str, "refreshUrl" => Str, "scopes" => MapStr,
]);
msg!(OPENID_SCHEME, "OpenIdConnectSecurityScheme", ["description" => Str, "openIdConnectUrl" => Str]);
msg!(MTLS_SCHEME, "MutualTlsSecurityScheme", ["description" => Str]);
msg!(SECURITY_REQUIREMENT, "SecurityRequirement", ["schemes" => MapMsg(&STRING_LIST)]);
msg!(STRING_LIST, "StringList", ["list" => RepStr]);
msg!(AGENT_SKILL, "AgentSkill", [
    "id" => Str, "name" => Str, "description" => Str, "tags" => RepStr, "examples" => RepStr,
    "inputModes" => RepStr, "outputModes" => RepStr, "securityRequirements" => RepMsg(&SECURITY_REQUIREMENT),
]);
msg!(AGENT_CARD_SIGNATURE, "AgentCardSignature", ["protected" => Str, "signature" => Str, "header" => Struct]);

/// A card that does not fit the A2A 1.0 model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Agent Card at {path}: {reason}")]
pub struct CardError {
    /// Where, as a JSON path (`skills[0].tags`).
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

/// Where in the card we are; rendered (`$.skills[0].tags`) only when there is an error, so the
/// walk allocates nothing for paths.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Root,
    Field(&'a str),
    Index(usize),
}

#[derive(Clone, Copy)]
struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
}

impl<'a> Path<'a> {
    const ROOT: Path<'static> = Path {
        parent: None,
        seg: Seg::Root,
    };

    fn field(&'a self, name: &'a str) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Field(name),
        }
    }

    fn index(&'a self, i: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Index(i),
        }
    }

    fn render(&self) -> String {
        let mut segs = vec![self.seg];
        let mut p = self.parent;
        while let Some(x) = p {
            segs.push(x.seg);
            p = x.parent;
        }
        let mut out = String::new();
        for s in segs.into_iter().rev() {
            match s {
                Seg::Root => out.push('$'),
                Seg::Field(f) => {
                    out.push('.');
                    out.push_str(f);
                }
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

fn err(path: &Path<'_>, reason: impl Into<String>) -> CardError {
    CardError {
        path: path.render(),
        reason: reason.into(),
    }
}

/// `snake_case` proto name of a `camelCase` JSON name: the SDKs accept both on input.
fn proto_name(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 4);
    for c in json.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Rebuild `value` through the model: known fields only, defaults without presence dropped.
fn through_model(
    value: &Value,
    msg: &Message,
    path: &Path<'_>,
    depth: usize,
) -> Result<Value, CardError> {
    if depth > MAX_DEPTH {
        return Err(err(path, format!("nested deeper than {MAX_DEPTH}")));
    }
    let obj = value
        .as_object()
        .ok_or_else(|| err(path, format!("{} must be an object", msg.name)))?;
    // Snake-case member names are rare: only look for them when some key has an underscore.
    let snake = obj.keys().any(|k| k.contains('_'));
    let mut out = Map::new();
    for field in msg.fields {
        let v = match obj.get(field.json) {
            Some(v) => Some(v),
            None if snake => obj.get(&proto_name(field.json)),
            None => None,
        };
        let Some(v) = v else { continue };
        if v.is_null() {
            continue;
        }
        let p = path.field(field.json);
        if let Some(v) = through_field(v, field.kind, &p, depth + 1)? {
            out.insert(field.json.to_owned(), v);
        }
    }
    Ok(Value::Object(out))
}

fn through_field(
    v: &Value,
    kind: Kind,
    p: &Path<'_>,
    depth: usize,
) -> Result<Option<Value>, CardError> {
    let string = |v: &Value, p: &Path<'_>| {
        v.as_str()
            .map(|s| Value::String(s.to_owned()))
            .ok_or_else(|| err(p, "must be a string"))
    };
    Ok(match kind {
        Str => Some(string(v, p)?).filter(|s| s.as_str() != Some("")),
        OptStr => Some(string(v, p)?),
        Bool => match v.as_bool() {
            Some(true) => Some(Value::Bool(true)),
            Some(false) => None,
            None => return Err(err(p, "must be a boolean")),
        },
        OptBool => Some(Value::Bool(
            v.as_bool().ok_or_else(|| err(p, "must be a boolean"))?,
        )),
        Msg(m) => Some(through_model(v, m, p, depth)?),
        RepStr => {
            let arr = v.as_array().ok_or_else(|| err(p, "must be a list"))?;
            let items = arr
                .iter()
                .enumerate()
                .map(|(i, x)| string(x, &p.index(i)))
                .collect::<Result<Vec<_>, _>>()?;
            Some(Value::Array(items))
        }
        RepMsg(m) => {
            let arr = v.as_array().ok_or_else(|| err(p, "must be a list"))?;
            let items = arr
                .iter()
                .enumerate()
                .map(|(i, x)| through_model(x, m, &p.index(i), depth + 1))
                .collect::<Result<Vec<_>, _>>()?;
            Some(Value::Array(items))
        }
        MapMsg(m) => {
            let obj = v.as_object().ok_or_else(|| err(p, "must be an object"))?;
            let mut out = Map::new();
            for (k, x) in obj {
                out.insert(k.clone(), through_model(x, m, &p.field(k), depth + 1)?);
            }
            Some(Value::Object(out))
        }
        MapStr => {
            let obj = v.as_object().ok_or_else(|| err(p, "must be an object"))?;
            let mut out = Map::new();
            for (k, x) in obj {
                out.insert(k.clone(), string(x, &p.field(k))?);
            }
            Some(Value::Object(out))
        }
        Struct => {
            if !v.is_object() {
                return Err(err(p, "must be an object"));
            }
            Some(as_struct(v, p, depth)?)
        }
    })
}

/// A `google.protobuf.Struct` value: any JSON, numbers as IEEE doubles.
fn as_struct(v: &Value, p: &Path<'_>, depth: usize) -> Result<Value, CardError> {
    if depth > MAX_DEPTH {
        return Err(err(p, format!("nested deeper than {MAX_DEPTH}")));
    }
    Ok(match v {
        Value::Number(n) => {
            let f = n.as_f64().ok_or_else(|| err(p, "number out of range"))?;
            serde_json::Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| err(p, "number out of range"))?
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| as_struct(x, p, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, x) in o {
                out.insert(k.clone(), as_struct(x, p, depth + 1)?);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

/// Remove `""`, `null`, `[]` and `{}` recursively, bottom-up; `None` if nothing is left.
fn clean_empty(v: Value) -> Option<Value> {
    match v {
        Value::Object(o) => {
            let m: Map<String, Value> = o
                .into_iter()
                .filter_map(|(k, x)| clean_empty(x).map(|x| (k, x)))
                .collect();
            (!m.is_empty()).then_some(Value::Object(m))
        }
        Value::Array(a) => {
            let a: Vec<Value> = a.into_iter().filter_map(clean_empty).collect();
            (!a.is_empty()).then_some(Value::Array(a))
        }
        Value::String(s) if s.is_empty() => None,
        Value::Null => None,
        other => Some(other),
    }
}

/// The card as the SDKs see it after their model: unknown fields dropped, defaults dropped.
/// Keeps `signatures`.
pub fn normalize(card: &Value) -> Result<Value, CardError> {
    through_model(card, &AGENT_CARD, &Path::ROOT, 1)
}

/// The bytes an A2A card signature covers: the card through the model, without `signatures`,
/// empty values removed, RFC 8785.
pub fn canonical_bytes(card: &Value) -> Result<Vec<u8>, CardError> {
    let mut v = normalize(card)?;
    if let Some(o) = v.as_object_mut() {
        o.remove("signatures");
    }
    let cleaned = clean_empty(v).unwrap_or_else(|| Value::Object(Map::new()));
    Ok(jcs::canonicalize(&cleaned))
}

/// Top-level and nested members of `card` that the A2A 1.0 model does not know, as JSON paths.
/// A signature does not cover them, so a signer should say so.
pub fn unknown_fields(card: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_unknown(card, &AGENT_CARD, "$", &mut out, 1);
    out
}

fn collect_unknown(v: &Value, msg: &Message, path: &str, out: &mut Vec<String>, depth: usize) {
    let Some(obj) = v.as_object() else { return };
    if depth > MAX_DEPTH || out.len() > 100 {
        return;
    }
    for (k, x) in obj {
        let field = msg
            .fields
            .iter()
            .find(|f| f.json == k || proto_name(f.json) == *k);
        let p = format!("{path}.{k}");
        match field.map(|f| f.kind) {
            None => out.push(p),
            Some(Msg(m)) => collect_unknown(x, m, &p, out, depth + 1),
            Some(RepMsg(m)) => {
                for (i, e) in x.as_array().into_iter().flatten().enumerate() {
                    collect_unknown(e, m, &format!("{p}[{i}]"), out, depth + 1);
                }
            }
            Some(MapMsg(m)) => {
                for (key, e) in x.as_object().into_iter().flatten() {
                    collect_unknown(e, m, &format!("{p}.{key}"), out, depth + 1);
                }
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn drops_what_the_sdk_model_drops() {
        let card = json!({
            "name": "A", "description": "", "version": "1", "extraField": {"x": 1},
            "capabilities": {"streaming": false, "stateTransitionHistory": true,
                "extensions": [{"uri": "u", "required": false, "params": {"n": 3, "e": "", "big": 9007199254740993u64}}]},
            "skills": [{"id": "s", "name": "S", "tags": ["a", ""], "examples": []}],
            "signatures": [{"protected": "x", "signature": "y"}]
        });
        let c = String::from_utf8(canonical_bytes(&card).unwrap()).unwrap();
        assert_eq!(
            c,
            r#"{"capabilities":{"extensions":[{"params":{"big":9007199254740992,"n":3},"uri":"u"}],"streaming":false},"name":"A","skills":[{"id":"s","name":"S","tags":["a"]}],"version":"1"}"#
        );
        assert_eq!(
            unknown_fields(&card),
            vec!["$.capabilities.stateTransitionHistory", "$.extraField"]
        );
    }

    #[test]
    fn snake_case_input_canonicalizes_like_camel_case() {
        let a = json!({"name": "A", "default_input_modes": ["text/plain"], "documentation_url": "https://x"});
        let b = json!({"name": "A", "defaultInputModes": ["text/plain"], "documentationUrl": "https://x"});
        assert_eq!(canonical_bytes(&a).unwrap(), canonical_bytes(&b).unwrap());
    }

    #[test]
    fn wrong_types_are_named_errors() {
        let e = canonical_bytes(&json!({"name": 3})).unwrap_err();
        assert_eq!(e.path, "$.name");
        assert!(canonical_bytes(&json!({"skills": [{"tags": "x"}]}))
            .unwrap_err()
            .to_string()
            .contains("skills[0].tags"));
        assert!(canonical_bytes(&json!([1])).is_err());
    }

    proptest! {
        #[test]
        fn canonicalize_never_panics(s in "\\PC{0,300}") {
            if let Ok(v) = serde_json::from_str::<Value>(&s) {
                let _ = canonical_bytes(&v);
                let _ = unknown_fields(&v);
            }
        }
    }
}
