//! Signing A2A (and MCP) requests as an [`Identity`] ([`DidSigner`]): RFC 9421 HTTP Message
//! Signatures in the ANP profile, and the access tokens servers answer with.

use std::collections::HashMap;
use std::time::Duration;

use agentnet_a2a::auth::BoxFuture;
use agentnet_a2a::client::{SignError, SignRequest, Signer};
use agentnet_did::httpsig;
use reqwest::header::{HeaderMap, HeaderValue};

use crate::identity::Identity;

/// Signs A2A requests as an [`Identity`]: RFC 9421 over `@method`, `@target-uri`,
/// `@authority` and `content-digest`, `keyid` = the identity's DID URL, a fresh nonce, valid
/// 300 s. Keeps the access tokens servers answer with (ANP: `Authentication-Info`, or the
/// older `Authorization: Bearer` response header), one per origin, and sends them to that
/// origin only, until 10 s before they expire (at most [`MAX_TOKENS`] origins; beyond, the
/// oldest is forgotten and that origin gets signatures again).
#[derive(Debug)]
pub struct DidSigner {
    id: Identity,
    tokens: std::sync::Mutex<HashMap<String, (HeaderValue, std::time::Instant)>>,
}

/// Origins a [`DidSigner`] keeps a token for.
pub const MAX_TOKENS: usize = 256;
/// Longest access token kept.
const MAX_TOKEN_LEN: usize = 4096;
/// Longest lifetime believed of a token; one without a stated lifetime (the older header): 60 s.
const MAX_TOKEN_LIFE: Duration = Duration::from_secs(3600);

impl DidSigner {
    /// A signer for `id`.
    pub fn new(id: Identity) -> Self {
        DidSigner {
            id,
            tokens: Default::default(),
        }
    }

    fn lock_tokens(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (HeaderValue, std::time::Instant)>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a token is kept for `url`'s origin.
    pub fn has_token(&self, url: &url::Url) -> bool {
        self.token(url).is_some()
    }

    /// Keep `token` for `url`'s origin, valid `life` from now (tests use it to plant one).
    pub fn keep_token(&self, url: &url::Url, token: &str, life: Duration) {
        let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) else {
            return;
        };
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return;
        }
        let until = std::time::Instant::now() + life.min(MAX_TOKEN_LIFE);
        let mut t = self.lock_tokens();
        if t.len() >= MAX_TOKENS && !t.contains_key(&origin_of(url)) {
            if let Some(oldest) = t
                .iter()
                .min_by_key(|(_, (_, u))| *u)
                .map(|(k, _)| k.clone())
            {
                t.remove(&oldest);
            }
        }
        t.insert(origin_of(url), (v, until));
    }

    /// The identity.
    pub fn identity(&self) -> &Identity {
        &self.id
    }
}

fn origin_of(url: &url::Url) -> String {
    url.origin().ascii_serialization()
}

/// The access token and its lifetime in an answer's headers, if any.
fn token_in(headers: &HeaderMap) -> Option<(String, Duration)> {
    if let Some(info) = headers
        .get("authentication-info")
        .and_then(|v| v.to_str().ok())
    {
        let field = |name: &str| {
            info.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k.trim() == name).then(|| v.trim().trim_matches('"').to_string())
            })
        };
        let token = field("access_token")?;
        if !field("token_type").is_none_or(|t| t.eq_ignore_ascii_case("bearer")) {
            return None;
        }
        let life = field("expires_in")
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs)
            .unwrap_or(Duration::from_secs(60));
        return Some((token, life));
    }
    let legacy = headers.get(reqwest::header::AUTHORIZATION)?.to_str().ok()?;
    let token = legacy
        .get(..7)?
        .eq_ignore_ascii_case("bearer ")
        .then(|| legacy[7..].trim())?;
    Some((token.to_string(), Duration::from_secs(60)))
}

impl Signer for DidSigner {
    fn token(&self, url: &url::Url) -> Option<HeaderValue> {
        let now = std::time::Instant::now();
        let mut t = self.lock_tokens();
        let key = origin_of(url);
        match t.get(&key) {
            Some((v, until)) if *until > now + Duration::from_secs(10) => Some(v.clone()),
            Some(_) => {
                t.remove(&key);
                None
            }
            None => None,
        }
    }

    fn answered(&self, url: &url::Url, status: u16, headers: &HeaderMap, with_token: bool) {
        if with_token && status == 401 {
            self.lock_tokens().remove(&origin_of(url));
            return;
        }
        if status < 400 {
            if let Some((token, life)) = token_in(headers) {
                self.keep_token(url, &token, life);
            }
        }
    }

    fn sign<'a>(&'a self, r: SignRequest<'a>) -> BoxFuture<'a, Result<HeaderMap, SignError>> {
        Box::pin(async move {
            let headers = httpsig::sign(
                self.id.key(),
                self.id.kid(),
                r.method.as_str(),
                r.url.as_str(),
                r.body,
                agentnet_discovery::net::unix_now(),
                &httpsig::new_nonce(),
            )
            .map_err(|e| SignError(e.to_string()))?;
            let mut out = HeaderMap::new();
            headers.apply(&mut out);
            if out.len() != 3 {
                return Err(SignError(
                    "a signature header is not a valid header value".into(),
                ));
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_read_from_answers_and_kept_per_origin() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(
                    reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            m
        };
        assert_eq!(
            token_in(&h(&[(
                "authentication-info",
                r#"access_token="abc", token_type="Bearer", expires_in=900"#
            )])),
            Some(("abc".into(), Duration::from_secs(900)))
        );
        assert_eq!(
            token_in(&h(&[("authorization", "Bearer xyz")])),
            Some(("xyz".into(), Duration::from_secs(60)))
        );
        assert_eq!(
            token_in(&h(&[(
                "authentication-info",
                r#"access_token="a", token_type="MAC""#
            )])),
            None
        );
        for junk in [
            "",
            "=",
            ",,,",
            "access_token",
            "expires_in=x",
            "access_token=\"",
            "Basic x",
        ] {
            let _ = token_in(&h(&[
                ("authentication-info", junk),
                ("authorization", junk),
            ]));
        }

        let signer = DidSigner::new(Identity::did_key(agentnet_did::SecretKey::generate()));
        let a = url::Url::parse("http://127.0.0.1:7878/a2a/echo").unwrap();
        let a2 = url::Url::parse("http://127.0.0.1:7878/a2a/ask").unwrap();
        let b = url::Url::parse("http://127.0.0.1:7879/a2a/echo").unwrap();
        let info = h(&[(
            "authentication-info",
            r#"access_token="t1", expires_in=900"#,
        )]);
        signer.answered(&a, 200, &info, false);
        assert_eq!(
            signer.token(&a2).unwrap(),
            "Bearer t1",
            "same origin, another agent"
        );
        assert!(signer.token(&b).is_none(), "another origin");
        // An error answer gives nothing; a 401 to the token drops it.
        signer.answered(&b, 500, &info, false);
        assert!(signer.token(&b).is_none());
        signer.answered(&a, 401, &HeaderMap::new(), true);
        assert!(signer.token(&a).is_none());
        // A token about to expire is not sent.
        signer.keep_token(&a, "t2", Duration::from_secs(5));
        assert!(signer.token(&a).is_none());
        // Bounded: the oldest origin makes room.
        for port in 0..(MAX_TOKENS as u16 + 10) {
            let u = url::Url::parse(&format!("http://10.0.0.1:{}/", 1000 + port)).unwrap();
            signer.keep_token(&u, "t", Duration::from_secs(600));
        }
        assert_eq!(signer.lock_tokens().len(), MAX_TOKENS);
    }
}
