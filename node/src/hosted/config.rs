//! `[[agent]]`: the hosted agents' section of the configuration file ([`AgentConfig`]), its
//! defaults and checks, and the errors of building an agent from it ([`AgentError`]).
//! [`crate::config::FileConfig`] holds a list of them.

use std::path::{Path, PathBuf};

use agentnet_a2a::auth::Policy;
use agentnet_did::card;
use serde::{Deserialize, Serialize};

/// Most hosted agents.
pub const MAX_AGENTS: usize = 64;
/// Most `env` entries of a `command` agent, and their longest name and value (bytes).
const MAX_ENV: (usize, usize, usize) = (64, 256, 4096);

/// An agent that cannot be checked or built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// An agent's value that parses but cannot be used.
    #[error("agent {agent:?}: {reason}")]
    Invalid {
        /// The agent id.
        agent: String,
        /// What is wrong.
        reason: String,
    },
    /// An agent key could not be loaded or created.
    #[error("agent {agent:?} key {}: {source}", path.display())]
    Key {
        /// The agent.
        agent: String,
        /// The key file.
        path: PathBuf,
        /// Why.
        source: agentnet_did::key::KeyError,
    },
    /// The directory of an agent's key could not be created.
    #[error("creating {}: {source}", path.display())]
    KeyDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A `command` agent's working directory could not be created.
    #[error("agent {agent:?} working directory {}: {source}", path.display())]
    WorkDir {
        /// The agent.
        agent: String,
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The card could not be signed.
    #[error("agent {agent:?} card: {source}")]
    Card {
        /// The agent.
        agent: String,
        /// Why.
        source: card::CardSignatureError,
    },
}

/// What an agent does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Kind {
    /// The built-in echo sample.
    Echo,
    /// The built-in sample that asks for the caller's name first.
    Ask,
    /// A local command.
    Command,
    /// An upstream A2A server.
    Proxy,
    /// The built-in sample of the official A2A TCK's scenarios
    /// ([`agentnet_a2a::samples::Tck`]: the message id's prefix chooses what it does).
    Tck,
}

/// Who may call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyName {
    /// Callers must sign with their DID.
    #[default]
    Did,
    /// Anyone.
    Open,
}

/// `[[agent]]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The path segment: `/a2a/<id>`; 1 to 64 of `a-z 0-9 - _`.
    pub id: String,
    /// What it does.
    pub kind: Kind,
    /// Who may call.
    #[serde(default)]
    pub policy: PolicyName,
    /// The card's name; default the id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The card's description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The skill tags it is discovered by; default `[<kind>]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// Publish its card to the network: default true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish: Option<bool>,
    /// Advert lifetime, seconds: default 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    /// A private Ed25519 JWK file to use as the agent's key instead of a generated one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// `ask`: milliseconds each turn works.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_ms: Option<u64>,
    /// `command`: the argv.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// `command`: seconds before the process is killed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// `command`: most bytes of standard output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<usize>,
    /// `command`: its whole environment (`{ NAME = "value" }`); `PATH` is
    /// [`crate::hosted::DEFAULT_PATH`]
    /// unless named here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// `proxy`: the upstream agent's base URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// `proxy`: allow an upstream on plain `http`, on loopback or a private address (testnets);
    /// default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_private: Option<bool>,
    /// `proxy`: refuse to call the upstream when its signed card differs from the one accepted
    /// (pinned when first read; `agentnet trust accept DID` accepts the new one); default
    /// false: the change is logged and the call goes on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refuse_changed_card: Option<bool>,
    /// Serve an MCP endpoint at `/a2a/<id>/mcp` (tool `echo` for kind `echo`, `send_message`
    /// for the others), under the agent's policy,
    /// advertised on its card (`urn:agentnet:mcp:v1`): default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<bool>,
    /// Serve only requests that present a delegation chain rooted at one of these principal
    /// DIDs, bound to the signed caller and covering the operation on this agent
    /// ([`crate::hosted::authority`], docs/PROTOCOL.md "Delegation"); at most 64. Default: none
    /// required (a chain presented is still checked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_delegation_from: Option<Vec<String>>,
}

/// Advert lifetime of a hosted agent's card, seconds, unless `ttl` says.
pub const DEFAULT_TTL_SECS: u64 = 3600;
/// `ask`: milliseconds each turn works, unless `work_ms` says.
pub const DEFAULT_WORK_MS: u64 = 1000;
/// `command`: seconds before the process is killed, unless `timeout_secs` says.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// `command`: most bytes of standard output, unless `max_output_bytes` says.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024;

impl Kind {
    /// The name `kind = "…"` gives it, also its default skill tag.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Echo => "echo",
            Kind::Ask => "ask",
            Kind::Command => "command",
            Kind::Proxy => "proxy",
            Kind::Tck => "tck",
        }
    }

    /// The card's description when the agent has none.
    pub fn default_description(self) -> &'static str {
        match self {
            Kind::Echo => "Echoes your message back",
            Kind::Ask => "Asks your name, then greets you",
            Kind::Command => "Runs a local command on your message",
            Kind::Proxy => "Forwards to an upstream A2A agent",
            Kind::Tck => {
                "The official A2A TCK's sample scenarios, chosen by the message id's prefix"
            }
        }
    }
}

impl AgentConfig {
    /// Its skill tags: `tags`, else its kind's name.
    pub fn tags_or_kind(&self) -> Vec<String> {
        self.tags
            .clone()
            .unwrap_or_else(|| vec![self.kind.as_str().to_owned()])
    }

    /// This agent with every key the node gives a default filled with the value in effect
    /// (what `config check` prints). Keys with no default (`key`: generated, `env`, `command`,
    /// `upstream`, `require_delegation_from`: none required) stay as written, absent if absent.
    pub fn filled(&self) -> AgentConfig {
        let mut a = self.clone();
        a.name.get_or_insert_with(|| self.id.clone());
        a.description
            .get_or_insert_with(|| self.kind.default_description().to_owned());
        a.tags = Some(self.tags_or_kind());
        a.publish.get_or_insert(true);
        a.ttl.get_or_insert(DEFAULT_TTL_SECS);
        a.mcp.get_or_insert(false);
        match self.kind {
            Kind::Ask => {
                a.work_ms.get_or_insert(DEFAULT_WORK_MS);
            }
            Kind::Command => {
                a.timeout_secs.get_or_insert(DEFAULT_TIMEOUT_SECS);
                a.max_output_bytes.get_or_insert(DEFAULT_MAX_OUTPUT_BYTES);
            }
            Kind::Proxy => {
                a.allow_private.get_or_insert(false);
                a.refuse_changed_card.get_or_insert(false);
            }
            Kind::Echo | Kind::Tck => {}
        }
        a
    }
}

pub(crate) fn invalid(agent: &str, reason: String) -> AgentError {
    AgentError::Invalid {
        agent: agent.chars().take(80).collect(),
        reason,
    }
}

impl AgentConfig {
    pub(crate) fn check(&self) -> Result<(), AgentError> {
        let bad = |r: &str| Err(invalid(&self.id, r.to_string()));
        if self.id.is_empty()
            || self.id.len() > 64
            || !self
                .id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return bad("id must be 1 to 64 of a-z 0-9 - _");
        }
        // What the network would refuse in the published card (`advert::check_card_text`),
        // refused here, where the operator can fix it.
        let texts = [("name", &self.name), ("description", &self.description)];
        for (what, text) in texts {
            let hidden = text.as_deref().and_then(agentnet_did::text::first_hiding);
            if let Some(c) = hidden {
                return Err(invalid(
                    &self.id,
                    format!(
                        "{what} holds the hidden character U+{:04X} (nodes refuse cards that hide or reorder text); remove it",
                        c as u32
                    ),
                ));
            }
        }
        for t in self.tags.iter().flatten() {
            if t.chars().any(agentnet_did::text::is_hidden) {
                return bad("a tag holds a hidden character (nodes refuse the card); remove it");
            }
        }
        let has = (
            self.work_ms.is_some(),
            self.command.is_some()
                || self.timeout_secs.is_some()
                || self.max_output_bytes.is_some()
                || self.env.is_some(),
            self.upstream.is_some()
                || self.allow_private.is_some()
                || self.refuse_changed_card.is_some(),
        );
        match self.kind {
            Kind::Echo | Kind::Tck if has != (false, false, false) => {
                return bad("echo and tck take no work_ms, command, env, upstream, allow_private or refuse_changed_card")
            }
            Kind::Ask if has.1 || has.2 => return bad("ask takes only work_ms"),
            Kind::Command if has.0 || has.2 => {
                return bad("command takes command, env, timeout_secs, max_output_bytes")
            }
            Kind::Command
                if self
                    .command
                    .as_ref()
                    .is_none_or(|c| c.is_empty() || c[0].is_empty()) =>
            {
                return bad("command needs a non-empty command = [\"program\", \"arg\", …]")
            }
            Kind::Command
                if self
                    .command
                    .as_ref()
                    .is_some_and(|c| c[0].contains('/') && !Path::new(&c[0]).is_absolute()) =>
            {
                return bad(
                    "command[0] must be a program name (looked up in PATH) or an absolute path: \
                     the command runs in a working directory of its own",
                )
            }
            Kind::Proxy if has.0 || has.1 => {
                return bad("proxy takes only upstream, allow_private and refuse_changed_card")
            }
            Kind::Proxy => {
                let u = self.upstream.as_deref().unwrap_or_default();
                match url::Url::parse(u) {
                    Ok(u) if u.scheme() == "https" => {}
                    Ok(u) if u.scheme() == "http" && self.allow_private == Some(true) => {}
                    Ok(u) if u.scheme() == "http" => {
                        return bad("proxy upstream on plain http needs allow_private = true \
                             (testnets and loopback only; https otherwise)")
                    }
                    _ => return bad("proxy needs upstream = \"https://…\""),
                }
            }
            _ => {}
        }
        if let Some(p) = &self.require_delegation_from {
            if p.is_empty() || p.len() > 64 {
                return bad("require_delegation_from: 1 to 64 principal DIDs");
            }
            if self.policy != PolicyName::Did {
                return bad("require_delegation_from needs policy = \"did\": a delegation binds to a signed caller");
            }
            for d in p {
                if let Err(e) = agentnet_did::Did::parse(d) {
                    return Err(invalid(
                        &self.id,
                        format!("require_delegation_from: {d:?} is not a DID: {e}"),
                    ));
                }
            }
        }
        if let Some(env) = &self.env {
            let (n, name, value) = MAX_ENV;
            if env.len() > n {
                return bad("env: at most 64 variables");
            }
            for (k, v) in env {
                if k.is_empty() || k.len() > name || k.contains(['=', '\0']) {
                    return Err(invalid(
                        &self.id,
                        format!(
                            "env: {k:?} is not a variable name (1 to {name} bytes, no = or NUL)"
                        ),
                    ));
                }
                if v.len() > value || v.contains('\0') {
                    return Err(invalid(
                        &self.id,
                        format!("env: the value of {k} must be at most {value} bytes, no NUL"),
                    ));
                }
            }
        }
        if self.work_ms.is_some_and(|w| w > 600_000) {
            return bad("work_ms at most 600000");
        }
        if self.timeout_secs.is_some_and(|t| t == 0 || t > 3600) {
            return bad("timeout_secs 1 to 3600");
        }
        if self.max_output_bytes.is_some_and(|m| m == 0 || m > 4 << 20) {
            return bad("max_output_bytes 1 to 4194304");
        }
        Ok(())
    }

    /// Who may call, as the A2A server takes it.
    pub fn policy(&self) -> Policy {
        match self.policy {
            PolicyName::Did => Policy::Did,
            PolicyName::Open => Policy::Open,
        }
    }
}
