//! The node's configuration file, `agentnet up --config node.toml` (TOML, unknown keys
//! refused): its sections, their defaults and checks, and how the flags of `agentnet up`
//! override its `[node]` values ([`FileConfig::node`]).
//!
//! - `[node]` ([`NodeSection`]): where the node keeps its data and listens; each value has a
//!   flag that wins over it.
//! - `[http]` ([`HttpSection`]): the public listener's trusted reverse proxies.
//! - `[tasks]` ([`TasksSection`]): how long and how many A2A tasks the node keeps.
//! - `[auth]` ([`AuthSection`]): the DID verifier's bounds.
//! - `[mcp]` ([`McpSection`]): the MCP server on the admin listener.
//! - `[trust]` ([`TrustSection`]): what the node flags in what it shows.
//! - `[[agent]]` ([`AgentConfig`], the hosted agents' own section): the hosted agents, which
//!   [`crate::hosted`] builds.
//!
//! Everything a user gives is checked here, before the daemon starts anything:
//! [`FileConfig::check`] (the agents, the bounds), [`check_admin`] and [`check_public_url`].

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::time::Duration;

use libp2p::Multiaddr;
use serde::{Deserialize, Serialize};

use crate::hosted::a2a_auth::DidAuthConfig;
use crate::hosted::config::{invalid, AgentConfig, AgentError, MAX_AGENTS};
use crate::hosted::tasks::Retention;
use crate::http::server::forwarded::{self, TrustedProxies};

/// Longest configuration file read.
const MAX_CONFIG: u64 = 1 << 20;

/// Default address of the public HTTP listener.
pub const DEFAULT_HTTP: &str = "127.0.0.1:7878";
/// Default address of the admin listener: loopback, a free port (the commands find it in
/// `node.json`, so several nodes on one machine never collide).
pub const DEFAULT_ADMIN: &str = "127.0.0.1:0";

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Reading the file failed.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than we read.
    #[error("{} is larger than {MAX_CONFIG} bytes", .0.display())]
    TooLarge(PathBuf),
    /// Not TOML of our shape (unknown keys included).
    #[error("{}: line {line}, column {column}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where, from 1 (0 when the parser gave no place).
        line: usize,
        /// The column, in characters from 1.
        column: usize,
        /// What is wrong, one line.
        message: String,
    },
    /// A section's value (`[node]`, `[trust]`, `[tasks]`, …) that parses but cannot be used.
    #[error("[{section}] {reason}")]
    Section {
        /// The section's name.
        section: String,
        /// What is wrong.
        reason: String,
    },
    /// A flag's value (or the file's, under the flag's name) does not parse.
    #[error("--{flag} {value:?} {reason}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// `--admin` is not a loopback address.
    #[error("the admin API must listen on a loopback address (such as {DEFAULT_ADMIN}), not {0}")]
    AdminNotLoopback(SocketAddr),
    /// `--public-url` is not an `http(s)://host[:port]` URL.
    #[error("public URL {0:?} must be http(s)://host[:port] without a path")]
    PublicUrl(String),
    /// An entry of `[http] trusted_proxies` is not an address or block, or there are too many.
    #[error("[http] trusted_proxies: {entry} {reason}")]
    TrustedProxy {
        /// The entry as written, quoted (its first 80 characters), or how many there are.
        entry: String,
        /// What is wrong.
        reason: String,
    },
    /// A hosted agent's section cannot be used.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

/// The configuration file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Node settings; each has a flag of `agentnet up` that overrides it.
    #[serde(default)]
    pub node: NodeSection,
    /// The public listener's trusted reverse proxies.
    #[serde(default)]
    pub http: HttpSection,
    /// Task storage.
    #[serde(default)]
    pub tasks: TasksSection,
    /// The audit log's budget, and strangers' share of it.
    #[serde(default)]
    pub audit: AuditSection,
    /// The DID verifier's bounds.
    #[serde(default)]
    pub auth: AuthSection,
    /// The hosted agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent: Vec<AgentConfig>,
    /// The MCP server on the admin listener (`/mcp`).
    #[serde(default)]
    pub mcp: McpSection,
    /// What the node flags and trusts in what it shows.
    #[serde(default)]
    pub trust: TrustSection,
}

/// `[trust]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrustSection {
    /// A file of flag rules added to the built-in ones (`node/rules/flags.toml` shows the
    /// shape; a path as given): what `discover` and the MCP tools flag in the cards they show.
    pub flag_rules: Option<PathBuf>,
    /// DIDs or domain names whose agents are `allow-listed` (a domain: its did:web and did:wba
    /// agents whose documents it served, subdomains included).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// DIDs or domain names whose agents discovery never returns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// The operator's own classifier of the texts the node shows (a command, or an HTTP
    /// endpoint on loopback), consulted beside the rules ([`crate::trust::flags::classifier`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classifier: Option<crate::trust::flags::classifier::Config>,
    /// The weakest level discovery returns: `self-asserted` (all, the default),
    /// `domain-verified`, `endorsed`, `allow-listed`.
    pub min_level: Option<crate::trust::Level>,
    /// did:key DIDs whose endorsements count (beside the node's own DID, which always does):
    /// an agent one of them endorses is `endorsed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endorsers: Vec<String>,
    /// How far endorsements count from the endorsers: 1 (the default), their own only; 2, also
    /// those of the DIDs they endorsed; at most 4.
    pub endorse_depth: Option<u8>,
}

impl TrustSection {
    /// The policy these settings make ([`crate::trust`]).
    pub fn policy(&self) -> Result<crate::trust::Policy, String> {
        crate::trust::Policy::new(&self.allow, &self.deny, self.min_level)
    }

    /// The endorsers and depth, checked: did:key DIDs (endorsements are signed by did:key
    /// issuers, [`agentnet_did::endorsement`]), a depth of 1 to
    /// [`crate::trust::endorsements::MAX_DEPTH`].
    pub fn endorsers(&self) -> Result<(Vec<String>, u8), String> {
        if self.endorsers.len() > crate::trust::MAX_ENDORSERS {
            return Err(format!(
                "endorsers: at most {} entries",
                crate::trust::MAX_ENDORSERS
            ));
        }
        for e in &self.endorsers {
            let did = agentnet_did::Did::parse(e)
                .map_err(|err| format!("endorsers: {e:?} is not a DID: {err}"))?;
            if *did.method() != agentnet_did::Method::Key {
                return Err(format!(
                    "endorsers: {e:?} is not a did:key; endorsements are signed by did:key \
                     issuers (an organisation lists the did:key it endorses with, e.g. its \
                     node's: `agentnet status` prints it)"
                ));
            }
        }
        let depth = self.endorse_depth.unwrap_or(1);
        if !(1..=crate::trust::endorsements::MAX_DEPTH).contains(&depth) {
            return Err(format!(
                "endorse_depth: {depth} is not between 1 and {}",
                crate::trust::endorsements::MAX_DEPTH
            ));
        }
        Ok((self.endorsers.clone(), depth))
    }
}

/// `[http]`: the public listener behind a reverse proxy ([`crate::http::server::forwarded`]).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    /// Addresses and CIDR blocks (IPv4 and IPv6, at most
    /// [`forwarded::MAX_TRUSTED_PROXIES`]) of the reverse proxies in front of the public
    /// listener: a request from one of them is from the client its `forwarded_header` names.
    /// Default none: every request is from its TCP peer, and no forwarding header is read.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// The header those proxies write, `x-forwarded-for` (the default) or `forwarded`
    /// (RFC 7239); the other one is never read.
    pub forwarded_header: Option<forwarded::Header>,
}

impl HttpSection {
    /// The trusted proxies, each entry parsed: a bad one, or too many, is refused by name.
    pub fn trusted_proxies(&self) -> Result<TrustedProxies, ConfigError> {
        let max = forwarded::MAX_TRUSTED_PROXIES;
        if self.trusted_proxies.len() > max {
            return Err(ConfigError::TrustedProxy {
                entry: format!("{} entries", self.trusted_proxies.len()),
                reason: format!("are too many; at most {max} (write a block for many addresses)"),
            });
        }
        let blocks = self
            .trusted_proxies
            .iter()
            .map(|e| {
                e.parse()
                    .map_err(|err: forwarded::BlockError| ConfigError::TrustedProxy {
                        entry: format!("{:?}", e.chars().take(80).collect::<String>()),
                        reason: err.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TrustedProxies::new(
            blocks,
            self.forwarded_header.unwrap_or_default(),
        ))
    }

    /// Every key with the value in effect, each block as the node reads it (what `config
    /// check` shows).
    fn filled(&self) -> Result<HttpSection, ConfigError> {
        self.trusted_proxies()?;
        let trusted_proxies = self
            .trusted_proxies
            .iter()
            .filter_map(|e| e.parse::<forwarded::Block>().ok())
            .map(|b| b.to_string())
            .collect();
        Ok(HttpSection {
            trusted_proxies,
            forwarded_header: Some(self.forwarded_header.unwrap_or_default()),
        })
    }
}

/// `[mcp]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    /// Let `/mcp`'s tools call agents on loopback and private addresses over plain http
    /// (local testnets); default false: https to public addresses only.
    pub allow_private: Option<bool>,
    /// A delegation chain file (`agentnet delegate --to <the node's DID>`, a path as given) that
    /// `/mcp`'s `send_message` presents to the agents it calls, handed off to each when the
    /// chain allows: the MCP host then acts on the principal's behalf. Its last audience must be
    /// the node's did:key, which signs `/mcp`'s calls.
    pub delegation: Option<PathBuf>,
}

/// `[node]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--http`.
    pub http: Option<String>,
    /// `--admin`.
    pub admin: Option<String>,
    /// `--listen`.
    pub listen: Option<Vec<String>>,
    /// `--bootstrap`.
    pub bootstrap: Option<Vec<String>>,
    /// `--public-url`: how clients reach the public listener (`http://host:port`); default the
    /// listener's bound address.
    pub public_url: Option<String>,
    /// mDNS (`--no-mdns` turns it off).
    pub mdns: Option<bool>,
    /// `--local`: a network on one machine or a LAN. The node and the commands run on its data
    /// directory call agents and MCP endpoints on loopback and private addresses over plain
    /// http, and resolve did:web/did:wba on loopback over plain http; default false: https to
    /// public addresses only.
    pub local: Option<bool>,
}

/// `[tasks]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TasksSection {
    /// Keep tasks that are not running this many hours after their last status: 168.
    pub retention_hours: Option<u64>,
    /// Most tasks in all.
    pub max_tasks: Option<u64>,
    /// Most tasks per caller and agent.
    pub max_per_owner: Option<u64>,
    /// Most tasks created from one network block (IPv4 address, IPv6 /64), every agent together.
    pub max_per_source: Option<u64>,
    /// Most MiB of task records in all.
    pub max_total_mib: Option<u64>,
    /// Most MiB of one caller's tasks at one agent.
    pub max_per_owner_mib: Option<u64>,
    /// Most MiB of the tasks created from one network block.
    pub max_per_source_mib: Option<u64>,
    /// New tasks per second from one network block (bursts of ten seconds' worth); 0: no bound.
    pub new_per_second_per_source: Option<u32>,
}

/// `[audit]`: the audit log's budget (`node/src/audit.rs`, "Bounds"). The entries a hosted
/// `proxy` agent writes on behalf of remote callers (strangers) have their own share of it, in
/// all, per caller and per network block; the node's own entries keep the rest.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSection {
    /// Most KiB of entries in all: 1 048 576 (1 GiB).
    pub max_total_kib: Option<u64>,
    /// Most KiB of the entries on behalf of remote callers, all together: a quarter of
    /// `max_total_kib`. Must be less than it: the rest is the node's own.
    pub strangers_kib: Option<u64>,
    /// Most KiB of them on behalf of one remote caller (a DID, or an anonymous caller's
    /// network block): a 64th of `strangers_kib`.
    pub strangers_per_owner_kib: Option<u64>,
    /// Most KiB of them from callers of one network block (IPv4 address, IPv6 /64): a 16th
    /// of `strangers_kib`.
    pub strangers_per_source_kib: Option<u64>,
}

impl AuditSection {
    /// The log's bounds: each key's value; a share not set scales with its total
    /// ([`crate::audit::Limits::with_total_bytes`]).
    pub fn limits(&self) -> crate::audit::Limits {
        let kib = |v: u64| v.saturating_mul(1 << 10);
        let total = self
            .max_total_kib
            .map_or(crate::audit::Limits::default().max_bytes, kib);
        let mut l = crate::audit::Limits::with_total_bytes(total);
        if let Some(s) = self.strangers_kib {
            let d = crate::audit::Limits::with_total_bytes(kib(s).saturating_mul(4));
            l.max_remote_bytes = kib(s);
            l.max_remote_owner_bytes = d.max_remote_owner_bytes;
            l.max_remote_source_bytes = d.max_remote_source_bytes;
        }
        if let Some(v) = self.strangers_per_owner_kib {
            l.max_remote_owner_bytes = kib(v);
        }
        if let Some(v) = self.strangers_per_source_kib {
            l.max_remote_source_bytes = kib(v);
        }
        l
    }

    /// Strangers' share must leave the node room of its own, and no part of it may exceed
    /// it; the message names the key and what to set.
    pub fn check(&self) -> Result<(), ConfigError> {
        let l = self.limits();
        let (total, strangers) = (l.max_bytes >> 10, l.max_remote_bytes >> 10);
        if total == 0 {
            return Err(invalid_in(
                "audit",
                "max_total_kib = 0 leaves no room for any receipt; set it above 0".into(),
            ));
        }
        if strangers >= total {
            return Err(invalid_in(
                "audit",
                format!(
                    "strangers_kib = {strangers} is not less than max_total_kib = {total}: remote \
                     callers of a proxy agent could fill the whole log and the node's own \
                     receipts would be refused; set strangers_kib below {total} (or leave it \
                     out: the default is a quarter of max_total_kib)"
                ),
            ));
        }
        for (key, set, share) in [
            (
                "strangers_per_owner_kib",
                self.strangers_per_owner_kib,
                l.max_remote_owner_bytes >> 10,
            ),
            (
                "strangers_per_source_kib",
                self.strangers_per_source_kib,
                l.max_remote_source_bytes >> 10,
            ),
        ] {
            if set.is_some() && share > strangers {
                return Err(invalid_in(
                    "audit",
                    format!(
                        "{key} = {share} is more than strangers_kib = {strangers}: one caller or \
                         network block could take the whole strangers' share; set {key} to at \
                         most {strangers} (or leave it out: the default is a share of \
                         strangers_kib)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every key with the value in effect (what `config check` shows).
    fn filled(&self) -> AuditSection {
        let l = self.limits();
        AuditSection {
            max_total_kib: Some(l.max_bytes >> 10),
            strangers_kib: Some(l.max_remote_bytes >> 10),
            strangers_per_owner_kib: Some(l.max_remote_owner_bytes >> 10),
            strangers_per_source_kib: Some(l.max_remote_source_bytes >> 10),
        }
    }
}

/// `[auth]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Live nonces per DID.
    pub per_did_nonces: Option<usize>,
    /// Live nonces per source (IPv4 address, IPv6 /64); default `max_nonces / 32`.
    pub per_source_nonces: Option<usize>,
    /// Live nonces in all.
    pub max_nonces: Option<usize>,
    /// Uncached DID resolutions per source (IPv4 address, IPv6 /64), burst.
    pub fetch_burst: Option<u32>,
    /// And per minute.
    pub fetches_per_minute: Option<u32>,
    /// Lifetime of the access tokens given to verified callers, seconds; 0: none; at most
    /// [`MAX_TOKEN_TTL_SECS`].
    pub token_ttl_secs: Option<u64>,
    /// Most Ed25519 request signatures verified together when requests arrive faster than
    /// they are verified; 0 (the default) or 1: each alone; at most 64.
    pub verify_batch: Option<usize>,
}

impl TasksSection {
    /// The task store's bounds: each key's value, or [`Retention`]'s default; the disk margin
    /// is the advert store's (`--store-min-free-mib`).
    pub fn retention(&self, min_free_bytes: u64) -> Retention {
        let mib = |v: Option<u64>, default: u64| v.map_or(default, |m| m.saturating_mul(1 << 20));
        let base = Retention::default();
        // A share not set is scaled from its total, so that a small total keeps small shares.
        let d = Retention::with_totals(
            self.max_tasks.unwrap_or(base.max_tasks),
            mib(self.max_total_mib, base.max_bytes),
        );
        Retention {
            keep: self
                .retention_hours
                .map_or(d.keep, |h| Duration::from_secs(h.saturating_mul(3600))),
            max_tasks: d.max_tasks,
            max_per_owner: self.max_per_owner.unwrap_or(d.max_per_owner),
            max_per_source: self.max_per_source.unwrap_or(d.max_per_source),
            max_bytes: d.max_bytes,
            max_owner_bytes: mib(self.max_per_owner_mib, d.max_owner_bytes),
            max_source_bytes: mib(self.max_per_source_mib, d.max_source_bytes),
            min_free_bytes,
            new_per_second_per_source: self
                .new_per_second_per_source
                .unwrap_or(d.new_per_second_per_source),
        }
    }

    /// A share set above its total is refused: it would let one caller or one network block
    /// take the whole store. The message names the key and what to set.
    pub fn check(&self) -> Result<(), ConfigError> {
        let r = self.retention(0);
        let shares = [
            (
                "max_per_owner",
                self.max_per_owner,
                r.max_per_owner,
                "max_tasks",
                r.max_tasks,
                "",
            ),
            (
                "max_per_source",
                self.max_per_source,
                r.max_per_source,
                "max_tasks",
                r.max_tasks,
                "",
            ),
            (
                "max_per_owner_mib",
                self.max_per_owner_mib,
                r.max_owner_bytes >> 20,
                "max_total_mib",
                r.max_bytes >> 20,
                " MiB",
            ),
            (
                "max_per_source_mib",
                self.max_per_source_mib,
                r.max_source_bytes >> 20,
                "max_total_mib",
                r.max_bytes >> 20,
                " MiB",
            ),
        ];
        for (key, set, share, total_key, total, unit) in shares {
            if set.is_some() && share > total {
                return Err(invalid_in(
                    "tasks",
                    format!(
                        "{key} = {share} is more than {total_key} = {total}{unit}: one \
                         caller or network block could fill the whole store; set {key} to at \
                         most {total} (or leave it out: the default is a share of {total_key})"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every key with the value in effect (what `config check` shows).
    fn filled(&self) -> TasksSection {
        let r = self.retention(0);
        TasksSection {
            retention_hours: Some(r.keep.as_secs() / 3600),
            max_tasks: Some(r.max_tasks),
            max_per_owner: Some(r.max_per_owner),
            max_per_source: Some(r.max_per_source),
            max_total_mib: Some(r.max_bytes >> 20),
            max_per_owner_mib: Some(r.max_owner_bytes >> 20),
            max_per_source_mib: Some(r.max_source_bytes >> 20),
            new_per_second_per_source: Some(r.new_per_second_per_source),
        }
    }
}

impl AuthSection {
    /// The DID verifier's configuration for hosted agents reached at `public_base`: each key's
    /// value, or [`DidAuthConfig`]'s default (`per_source_nonces`: `max_nonces / 32`).
    pub fn verifier(&self, public_base: String) -> DidAuthConfig {
        let mut c = DidAuthConfig::new(public_base);
        c.per_did_nonces = self.per_did_nonces.unwrap_or(c.per_did_nonces);
        c.max_nonces = self.max_nonces.unwrap_or(c.max_nonces);
        c.per_source_nonces = self.per_source_nonces.unwrap_or((c.max_nonces / 32).max(1));
        c.fetch_burst = self.fetch_burst.unwrap_or(c.fetch_burst);
        c.fetches_per_minute = self.fetches_per_minute.unwrap_or(c.fetches_per_minute);
        if let Some(secs) = self.token_ttl_secs {
            c.token_ttl = Duration::from_secs(secs);
        }
        c.verify_batch = self
            .verify_batch
            .unwrap_or(c.verify_batch)
            .min(agentnet_did::batch::MAX_BATCH);
        c
    }

    /// Every key with the value in effect (what `config check` shows).
    fn filled(&self) -> AuthSection {
        let c = self.verifier(String::new());
        AuthSection {
            per_did_nonces: Some(c.per_did_nonces),
            per_source_nonces: Some(c.per_source_nonces),
            max_nonces: Some(c.max_nonces),
            fetch_burst: Some(c.fetch_burst),
            fetches_per_minute: Some(c.fetches_per_minute),
            token_ttl_secs: Some(c.token_ttl.as_secs()),
            verify_batch: Some(c.verify_batch),
        }
    }
}

impl FileConfig {
    /// Read and check `path`.
    pub fn read(path: &Path) -> Result<FileConfig, ConfigError> {
        use std::io::Read as _;
        let read = |source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let f = std::fs::File::open(path).map_err(read)?;
        let mut text = String::new();
        f.take(MAX_CONFIG + 1)
            .read_to_string(&mut text)
            .map_err(read)?;
        if text.len() as u64 > MAX_CONFIG {
            return Err(ConfigError::TooLarge(path.to_owned()));
        }
        let cfg: FileConfig = toml::from_str(&text).map_err(|e| {
            let (line, column) = e
                .span()
                .map_or((0, 0), |span| line_column(&text, span.start));
            ConfigError::Parse {
                path: path.to_owned(),
                line,
                column,
                message: e.message().split_whitespace().collect::<Vec<_>>().join(" "),
            }
        })?;
        cfg.check()?;
        Ok(cfg)
    }

    /// The checks serde cannot make.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.agent.len() > MAX_AGENTS {
            return Err(invalid_in("node", format!("more than {MAX_AGENTS} agents")));
        }
        self.http.trusted_proxies()?;
        if self
            .auth
            .token_ttl_secs
            .is_some_and(|t| t > MAX_TOKEN_TTL_SECS)
        {
            return Err(invalid_in(
                "auth",
                format!("token_ttl_secs must be at most {MAX_TOKEN_TTL_SECS} (one day)"),
            ));
        }
        self.tasks.check()?;
        self.audit.check()?;
        self.trust.policy().map_err(|e| invalid_in("trust", e))?;
        self.trust.endorsers().map_err(|e| invalid_in("trust", e))?;
        if let Some(f) = &self.trust.flag_rules {
            crate::trust::flags::Rules::with_file(f)
                .map_err(|e| invalid_in("trust", format!("flag_rules: {e}")))?;
        }
        if let Some(c) = &self.trust.classifier {
            c.check()
                .map_err(|e| invalid_in("trust", format!("classifier: {e}")))?;
        }
        let mut ids = HashSet::new();
        for a in &self.agent {
            a.check()?;
            if !ids.insert(a.id.as_str()) {
                return Err(invalid(&a.id, "id used twice".into()).into());
            }
        }
        Ok(())
    }
}

/// Longest access-token lifetime `[auth] token_ttl_secs` may set: one day.
pub const MAX_TOKEN_TTL_SECS: u64 = 24 * 3600;

fn invalid_in(section: &str, reason: String) -> ConfigError {
    ConfigError::Section {
        section: section.to_owned(),
        reason,
    }
}

/// The `[node]` values `agentnet up` was given as flags; unset ones (`None`, empty) leave the
/// file's value, or the default.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--data-dir` (or `$AGENTNET_DATA_DIR`).
    pub data_dir: Option<PathBuf>,
    /// `--listen`.
    pub listen: Vec<String>,
    /// `--bootstrap`.
    pub bootstrap: Vec<String>,
    /// `--http`.
    pub http: Option<String>,
    /// `--admin`.
    pub admin: Option<String>,
    /// `--public-url`.
    pub public_url: Option<String>,
    /// `--no-mdns`.
    pub no_mdns: bool,
    /// `--local` (or `$AGENTNET_LOCAL`).
    pub local: bool,
}

/// The `[node]` settings in effect, each parsed: a flag wins over the file, the file over the
/// default.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// The data directory, if a flag or the file names one (else the platform's default).
    pub data_dir: Option<PathBuf>,
    /// libp2p listen addresses; empty: the network's defaults.
    pub listen: Vec<Multiaddr>,
    /// Peers to dial at start.
    pub bootstrap: Vec<Multiaddr>,
    /// The public HTTP listener.
    pub http: SocketAddr,
    /// The admin listener (loopback: [`check_admin`]).
    pub admin: SocketAddr,
    /// How clients reach the public listener ([`check_public_url`]).
    pub public_url: Option<String>,
    /// mDNS on the LAN.
    pub mdns: bool,
    /// A local network ([`NodeSection::local`]).
    pub local: bool,
}

impl FileConfig {
    /// The `[node]` settings with `flags` over the file's values, parsed and checked
    /// ([`check_admin`], [`check_public_url`]).
    pub fn node(&self, flags: &Overrides) -> Result<NodeSettings, ConfigError> {
        let n = &self.node;
        let listen = if flags.listen.is_empty() {
            n.listen.clone().unwrap_or_default()
        } else {
            flags.listen.clone()
        };
        let bootstrap = if flags.bootstrap.is_empty() {
            n.bootstrap.clone().unwrap_or_default()
        } else {
            flags.bootstrap.clone()
        };
        let http = flags
            .http
            .clone()
            .or_else(|| n.http.clone())
            .unwrap_or_else(|| DEFAULT_HTTP.into());
        let admin = flags
            .admin
            .clone()
            .or_else(|| n.admin.clone())
            .unwrap_or_else(|| DEFAULT_ADMIN.into());
        let settings = NodeSettings {
            data_dir: flags.data_dir.clone().or_else(|| n.data_dir.clone()),
            listen: parse_multiaddrs("listen", &listen)?,
            bootstrap: parse_multiaddrs("bootstrap", &bootstrap)?,
            http: parse_addr("http", &http)?,
            admin: parse_addr("admin", &admin)?,
            public_url: flags.public_url.clone().or_else(|| n.public_url.clone()),
            mdns: !flags.no_mdns && n.mdns.unwrap_or(true),
            local: flags.local || n.local.unwrap_or(false),
        };
        check_admin(settings.admin)?;
        if let Some(u) = &settings.public_url {
            check_public_url(u)?;
        }
        Ok(settings)
    }
}

impl FileConfig {
    /// This file with `flags` merged into its `[node]` section and the defaults filled in there
    /// (the data directory: `data_dir`, the one the node would use), checked as
    /// [`FileConfig::node`] checks it: what `agentnet config check` prints.
    pub fn effective(&self, flags: &Overrides, data_dir: &Path) -> Result<FileConfig, ConfigError> {
        self.check()?;
        let s = self.node(flags)?;
        let addrs = |a: &[Multiaddr]| a.iter().map(ToString::to_string).collect();
        Ok(FileConfig {
            node: NodeSection {
                data_dir: Some(data_dir.to_owned()),
                http: Some(s.http.to_string()),
                admin: Some(s.admin.to_string()),
                listen: Some(addrs(&s.listen)),
                bootstrap: Some(addrs(&s.bootstrap)),
                public_url: s.public_url,
                mdns: Some(s.mdns),
                local: Some(s.local),
            },
            http: self.http.filled()?,
            tasks: self.tasks.filled(),
            audit: self.audit.filled(),
            auth: self.auth.filled(),
            mcp: McpSection {
                allow_private: Some(self.mcp.allow_private.unwrap_or(s.local)),
                delegation: self.mcp.delegation.clone(),
            },
            trust: self.trust.clone(),
            agent: self.agent.iter().map(AgentConfig::filled).collect(),
        })
    }
}

/// Line and column (from 1, the column in characters) of byte `at` in `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

/// Each of `addrs` (the values of `--<flag>`) as a multiaddr.
pub fn parse_multiaddrs(
    flag: &'static str,
    addrs: &[String],
) -> Result<Vec<Multiaddr>, ConfigError> {
    addrs
        .iter()
        .map(|a| {
            a.parse()
                .map_err(|e: libp2p::multiaddr::Error| ConfigError::Flag {
                    flag,
                    value: a.clone(),
                    reason: match a.parse::<SocketAddr>() {
                        Ok(SocketAddr::V4(v4)) => format!(
                            "is not a multiaddr; write it /ip4/{}/tcp/{}",
                            v4.ip(),
                            v4.port()
                        ),
                        Ok(SocketAddr::V6(v6)) => format!(
                            "is not a multiaddr; write it /ip6/{}/tcp/{}",
                            v6.ip(),
                            v6.port()
                        ),
                        Err(_) => format!("is not a multiaddr: {e}"),
                    },
                })
        })
        .collect()
}

fn parse_addr(flag: &'static str, value: &str) -> Result<SocketAddr, ConfigError> {
    value.parse().map_err(|e| ConfigError::Flag {
        flag,
        value: value.to_owned(),
        reason: format!("is not an address such as 127.0.0.1:7878: {e}"),
    })
}

/// The admin listener must be on loopback.
pub fn check_admin(addr: SocketAddr) -> Result<(), ConfigError> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(ConfigError::AdminNotLoopback(addr))
    }
}

/// `url` as the public base of the hosted agents' URLs: `http(s)://host[:port]`, no path or
/// query; returned without a trailing `/`.
pub fn check_public_url(url: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::PublicUrl(url.to_owned());
    let parsed = url::Url::parse(url).map_err(|_| bad())?;
    if !matches!(parsed.scheme(), "http" | "https")
        || parsed.host_str().is_none()
        || parsed.path() != "/"
        || parsed.query().is_some()
    {
        return Err(bad());
    }
    Ok(url.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosted::config::{
        Kind, PolicyName, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_TIMEOUT_SECS, DEFAULT_TTL_SECS,
    };

    fn config(text: &str) -> Result<FileConfig, ConfigError> {
        let cfg: FileConfig = toml::from_str(text).expect("TOML of our shape");
        cfg.check().map(|()| cfg)
    }

    /// `[trust] classifier` is checked before the node starts: an endpoint off loopback, both
    /// a command and an endpoint, or a budget out of bounds is refused and named; a loopback
    /// endpoint or a command is accepted with the default budgets.
    #[test]
    fn a_classifier_off_loopback_or_out_of_bounds_is_refused_at_check() {
        for (bad, why) in [
            ("{ url = \"http://10.0.0.1:9/judge\" }", "loopback"),
            ("{ url = \"https://127.0.0.1:9/judge\" }", "plain http"),
            (
                "{ command = [\"judge\"], url = \"http://127.0.0.1:9/j\" }",
                "one of",
            ),
            (
                "{ command = [\"judge\"], max_concurrent = 0 }",
                "max_concurrent",
            ),
            ("{ command = [] }", "program"),
        ] {
            let e = config(&format!("[trust]\nclassifier = {bad}\n")).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.contains("classifier") && msg.contains(why),
                "{bad}: {msg}"
            );
        }
        let c =
            config("[trust]\nclassifier = { url = \"http://127.0.0.1:8089/judge\" }\n").unwrap();
        let cl = c.trust.classifier.unwrap();
        assert_eq!(
            (cl.timeout_ms, cl.max_bytes, cl.max_concurrent),
            (2000, 16384, 4)
        );
    }

    /// An operator's flag rules are read when the file is checked: a missing file or a bad
    /// pattern is named, before the node starts.
    #[test]
    fn flag_rules_that_do_not_read_are_named_at_check() {
        let e = config("[trust]\nflag_rules = \"/nonexistent/rules.toml\"\n").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("flag_rules") && msg.contains("/nonexistent/rules.toml"),
            "{msg}"
        );
        // Named by its section, not as an agent called "trust".
        assert!(msg.starts_with("[trust] flag_rules: "), "{msg}");
        assert!(!msg.contains("agent"), "{msg}");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("rules.toml");
        std::fs::write(
            &f,
            "[[rule]]\nid = \"x\"\nreason = \"r\"\npatterns = ['(']\n",
        )
        .unwrap();
        let e = config(&format!(
            "[trust]\nflag_rules = {:?}\n",
            f.display().to_string()
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("rule x: pattern"), "{e}");
        std::fs::write(
            &f,
            "[[rule]]\nid = \"x\"\nreason = \"r\"\npatterns = ['zzz']\n",
        )
        .unwrap();
        assert!(config(&format!(
            "[trust]\nflag_rules = {:?}\n",
            f.display().to_string()
        ))
        .is_ok());
    }

    #[test]
    fn a_file_that_is_not_toml_is_one_line_with_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "# ok\n[node\n").unwrap();
        let e = FileConfig::read(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: line 2, column ", path.display())),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        assert_eq!(line_column("ab\ncé\nd", 6), (2, 3));
    }

    #[test]
    fn command_env_and_program_are_checked() {
        let agent = |rest: &str| format!("[[agent]]\nid = \"c\"\nkind = \"command\"\n{rest}\n");
        let ok = config(&agent(
            "command = [\"tr\"]\nenv = { A = \"1\", PATH = \"/opt/bin\" }",
        ));
        assert_eq!(ok.unwrap().agent[0].env.as_ref().unwrap()["A"], "1");
        assert!(config(&agent("command = [\"/usr/bin/tr\"]")).is_ok());
        for (bad, says) in [
            ("command = [\"./run.sh\"]", "absolute path"),
            ("command = [\"bin/run\"]", "absolute path"),
            (
                "command = [\"tr\"]\nenv = { \"A=B\" = \"1\" }",
                "variable name",
            ),
            (
                "command = [\"tr\"]\nenv = { \"\" = \"1\" }",
                "variable name",
            ),
            ("command = [\"tr\"]\nenv = { A = \"a\\u0000b\" }", "NUL"),
        ] {
            let e = config(&agent(bad)).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e =
            config("[[agent]]\nid = \"e\"\nkind = \"echo\"\nenv = { A = \"1\" }\n").unwrap_err();
        assert!(e.to_string().contains("env"), "{e}");
    }

    /// `max_tasks = 3000` under the default `max_per_source` let one address take the whole
    /// total: a share not set scales with its total, and a share set above it is refused with
    /// what to set.
    #[test]
    fn task_shares_scale_with_their_total_and_never_exceed_it() {
        let r = config("[tasks]\nmax_tasks = 3000\nmax_total_mib = 64\n")
            .unwrap()
            .tasks
            .retention(0);
        assert_eq!(
            (r.max_tasks, r.max_per_source, r.max_per_owner),
            (3000, 60, 30)
        );
        assert_eq!((r.max_source_bytes, r.max_owner_bytes), (8 << 20, 4 << 20));
        // The defaults are the same fractions of the default totals.
        let d = config("").unwrap().tasks.retention(0);
        assert_eq!((d.max_per_source, d.max_per_owner), (20_000, 10_000));
        assert_eq!(
            (d.max_source_bytes, d.max_owner_bytes),
            (128 << 20, 64 << 20)
        );
        for (bad, key) in [
            ("max_tasks = 3000\nmax_per_source = 20000", "max_per_source"),
            ("max_tasks = 3000\nmax_per_owner = 3001", "max_per_owner"),
            (
                "max_total_mib = 64\nmax_per_source_mib = 128",
                "max_per_source_mib",
            ),
            (
                "max_total_mib = 64\nmax_per_owner_mib = 65",
                "max_per_owner_mib",
            ),
        ] {
            let e = config(&format!("[tasks]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains("at most"), "{bad}: {e}");
        }
        // A share equal to its total is allowed.
        assert!(config("[tasks]\nmax_tasks = 3000\nmax_per_source = 3000\n").is_ok());
    }

    /// `[audit]`: strangers' shares scale with their totals, must leave the node room of its
    /// own, and no part of them may exceed the strangers' share.
    #[test]
    fn audit_shares_scale_and_strangers_never_take_the_whole_log() {
        let d = config("").unwrap().audit.limits();
        assert_eq!(d, crate::audit::Limits::default());
        assert_eq!(
            (
                d.max_remote_bytes,
                d.max_remote_source_bytes,
                d.max_remote_owner_bytes
            ),
            (256 << 20, 16 << 20, 4 << 20)
        );
        let l = config("[audit]\nmax_total_kib = 4096\n")
            .unwrap()
            .audit
            .limits();
        assert_eq!(
            (l.max_bytes, l.max_remote_bytes, l.max_remote_source_bytes),
            (4 << 20, 1 << 20, 64 << 10)
        );
        let l = config("[audit]\nstrangers_kib = 64\n")
            .unwrap()
            .audit
            .limits();
        assert_eq!(
            (l.max_remote_bytes, l.max_remote_owner_bytes),
            (64 << 10, 1 << 10)
        );
        for (bad, key) in [
            ("max_total_kib = 100\nstrangers_kib = 100", "strangers_kib"),
            (
                "strangers_kib = 64\nstrangers_per_owner_kib = 65",
                "strangers_per_owner_kib",
            ),
            (
                "strangers_kib = 64\nstrangers_per_source_kib = 65",
                "strangers_per_source_kib",
            ),
            ("max_total_kib = 0", "max_total_kib"),
        ] {
            let e = config(&format!("[audit]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
            assert!(e.starts_with(&format!("[audit] {key} = ")), "{bad}: {e}");
            assert!(!e.contains("  "), "{bad}: a run of spaces in {e:?}");
        }
        assert!(config("[audit]\nstrangers_kib = 64\nstrangers_per_source_kib = 64\n").is_ok());
    }

    #[test]
    fn the_tck_kind_takes_no_other_keys() {
        let cfg = config("[[agent]]\nid = \"tck\"\nkind = \"tck\"\npolicy = \"open\"\n").unwrap();
        assert_eq!(cfg.agent[0].kind, Kind::Tck);
        for bad in [
            "work_ms = 5",
            "command = [\"tr\"]",
            "upstream = \"https://a.example\"",
        ] {
            let e = config(&format!("[[agent]]\nid = \"t\"\nkind = \"tck\"\n{bad}\n")).unwrap_err();
            assert!(e.to_string().contains("tck take"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_card_text_the_network_would_refuse_is_refused_at_load() {
        let agent = |rest: &str| format!("[[agent]]\nid = \"e\"\nkind = \"echo\"\n{rest}\n");
        for bad in [
            "description = \"opens safe\\u202etxt.exe\"",
            "name = \"Pay\\u200bPal\"",
            "tags = [\"trans\\u200blation\"]",
        ] {
            let e = config(&agent(bad)).unwrap_err();
            assert!(e.to_string().contains("hidden character"), "{bad}: {e}");
        }
        assert!(config(&agent("description = \"two\\nlines\\tand a tab\"")).is_ok());
    }

    #[test]
    fn trusted_proxies_are_checked_entry_by_entry() {
        let c = config("[http]\ntrusted_proxies = [\"127.0.0.1\", \"2001:db8::/32\"]\n").unwrap();
        let t = c.http.trusted_proxies().unwrap();
        assert!(t.trusts("127.0.0.1".parse().unwrap()));
        assert!(t.trusts("2001:db8:5::1".parse().unwrap()));
        assert!(!t.trusts("127.0.0.2".parse().unwrap()));
        assert!(config("")
            .unwrap()
            .http
            .trusted_proxies()
            .unwrap()
            .is_empty());
        let e = config("[http]\ntrusted_proxies = [\"127.0.0.1\", \"10.0.0.0/40\"]\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("[http] trusted_proxies: \"10.0.0.0/40\" "),
            "{e}"
        );
        let many: Vec<String> = (0..=forwarded::MAX_TRUSTED_PROXIES)
            .map(|i| format!("\"10.0.{i}.0/24\""))
            .collect();
        let e = config(&format!("[http]\ntrusted_proxies = [{}]\n", many.join(","))).unwrap_err();
        assert!(e.to_string().contains("at most 64"), "{e}");
    }

    #[test]
    fn a_plain_http_proxy_upstream_needs_allow_private() {
        let proxy = |rest: &str| format!("[[agent]]\nid = \"p\"\nkind = \"proxy\"\n{rest}\n");
        assert!(config(&proxy("upstream = \"https://agents.example/a\"")).is_ok());
        let e = config(&proxy("upstream = \"http://127.0.0.1:9/a\"")).unwrap_err();
        assert!(e.to_string().contains("allow_private = true"), "{e}");
        assert!(config(&proxy(
            "upstream = \"http://127.0.0.1:9/a\"\nallow_private = true"
        ))
        .is_ok());
        let e =
            config("[[agent]]\nid = \"e\"\nkind = \"echo\"\nallow_private = true\n").unwrap_err();
        assert!(e.to_string().contains("allow_private"), "{e}");
    }

    #[test]
    fn the_effective_config_prints_as_toml_that_reads_back() {
        let cfg = config(
            "[node]\nhttp = \"127.0.0.1:9000\"\n[tasks]\nmax_tasks = 5\n\
             [[agent]]\nid = \"c\"\nkind = \"command\"\ncommand = [\"tr\"]\n\
             env = { A = \"1\" }\npolicy = \"open\"\nmcp = true\n",
        )
        .unwrap();
        let flags = Overrides {
            http: Some("127.0.0.1:9001".into()),
            no_mdns: true,
            ..Default::default()
        };
        let eff = cfg.effective(&flags, Path::new("/d")).unwrap();
        let text = toml::to_string(&eff).unwrap();
        let back = config(&text).unwrap();
        assert_eq!(back.node.http.as_deref(), Some("127.0.0.1:9001"), "{text}");
        assert_eq!(back.node.admin.as_deref(), Some(DEFAULT_ADMIN), "{text}");
        assert_eq!(back.node.mdns, Some(false));
        assert_eq!(back.node.data_dir.as_deref(), Some(Path::new("/d")));
        assert_eq!(back.tasks.max_tasks, Some(5));
        // Every key of [tasks] and [auth] is shown with the value in effect, and means it.
        let defaults = Retention::default();
        assert_eq!(
            back.tasks.retention_hours,
            Some(defaults.keep.as_secs() / 3600)
        );
        assert_eq!(back.tasks.max_total_mib, Some(defaults.max_bytes >> 20));
        // Scaled from `max_tasks = 5`, and printed: what reads back is what ran.
        assert_eq!(back.tasks.retention(0).max_per_source, 1);
        assert_eq!(back.tasks.max_per_source, Some(1));
        let verifier = DidAuthConfig::new(String::new());
        assert_eq!(back.auth.max_nonces, Some(verifier.max_nonces));
        assert_eq!(back.auth.per_source_nonces, Some(verifier.max_nonces / 32));
        assert_eq!(back.auth.token_ttl_secs, Some(verifier.token_ttl.as_secs()));
        assert_eq!(back.mcp.allow_private, Some(false));
        assert_eq!(back.node.local, Some(false));
        assert_eq!(back.agent[0].env.as_ref().unwrap()["A"], "1");
        assert_eq!(back.agent[0].policy, PolicyName::Open);
        assert_eq!(back.agent[0].mcp, Some(true));
    }

    /// `config check --json` shows each agent key the node gives a default with the value in
    /// effect, and no `null` for a key that has none.
    #[test]
    fn the_effective_config_fills_each_agents_defaults() {
        let cfg = config(
            "[[agent]]\nid = \"e\"\nkind = \"echo\"\n\
             [[agent]]\nid = \"c\"\nkind = \"command\"\ncommand = [\"tr\"]\nttl = 60\n",
        )
        .unwrap();
        let eff = cfg
            .effective(&Overrides::default(), Path::new("/d"))
            .unwrap();
        let v = serde_json::to_value(&eff).unwrap();
        let e = &v["agent"][0];
        assert_eq!(e["name"], "e", "{e}");
        assert_eq!(e["description"], Kind::Echo.default_description(), "{e}");
        assert_eq!(e["tags"], serde_json::json!(["echo"]), "{e}");
        assert_eq!(e["publish"], true, "{e}");
        assert_eq!(e["ttl"], DEFAULT_TTL_SECS, "{e}");
        assert_eq!(e["mcp"], false, "{e}");
        let c = &v["agent"][1];
        assert_eq!(c["ttl"], 60, "{c}");
        assert_eq!(c["timeout_secs"], DEFAULT_TIMEOUT_SECS, "{c}");
        assert_eq!(c["max_output_bytes"], DEFAULT_MAX_OUTPUT_BYTES, "{c}");
        for a in v["agent"].as_array().unwrap() {
            for (k, x) in a.as_object().unwrap() {
                assert!(!x.is_null(), "agent key {k} is null: {a}");
            }
        }
        // And it reads back as the same agents.
        let back = config(&toml::to_string(&eff).unwrap()).unwrap();
        assert_eq!(back.agent[1].ttl, Some(60));
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_the_defaults() {
        let cfg = config(
            "[node]\nhttp = \"127.0.0.1:9000\"\nlisten = [\"/ip4/127.0.0.1/tcp/1\"]\nmdns = false\n",
        )
        .unwrap();
        let s = cfg.node(&Overrides::default()).unwrap();
        assert_eq!(s.http, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(s.admin, DEFAULT_ADMIN.parse().unwrap());
        assert_eq!(s.listen.len(), 1);
        assert!(!s.mdns);
        let flags = Overrides {
            http: Some("127.0.0.1:9001".into()),
            listen: vec!["/ip4/127.0.0.1/tcp/2".into(), "/ip4/127.0.0.1/tcp/3".into()],
            ..Default::default()
        };
        let s = cfg.node(&flags).unwrap();
        assert_eq!(s.http, "127.0.0.1:9001".parse().unwrap());
        assert_eq!(s.listen.len(), 2);
        for (flags, says) in [
            (
                Overrides {
                    admin: Some("0.0.0.0:1".into()),
                    ..Default::default()
                },
                "loopback",
            ),
            (
                Overrides {
                    http: Some("nowhere".into()),
                    ..Default::default()
                },
                "--http",
            ),
            (
                Overrides {
                    bootstrap: vec!["x".into()],
                    ..Default::default()
                },
                "not a multiaddr",
            ),
            (
                Overrides {
                    public_url: Some("http://h/path".into()),
                    ..Default::default()
                },
                "public URL",
            ),
        ] {
            let e = cfg.node(&flags).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }
}
