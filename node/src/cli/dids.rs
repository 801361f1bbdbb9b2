//! `resolve`, `identity new|show` and `key new`: DIDs, their documents and keys.

use anyhow::Context as _;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentnet_did::resolver::Options as ResolverOptions;
use agentnet_did::{text, Resolver, SecretKey};
use clap::{Subcommand, ValueEnum};
use serde_json::json;

use super::args::DataDirArg;
use super::input::read_json;
use super::output::{json_line, json_text, print_table};
use crate::{data_dir, identity};

#[derive(Debug, Subcommand)]
pub(super) enum KeyCommand {
    /// Write a new Ed25519 key (a private JWK, mode 0600; an existing file is never
    /// overwritten) and print its did:key: an agent's identity for `publish --key` and
    /// `card sign --key`.
    New {
        /// The key file to create.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum IdentityCommand {
    /// Create a key and the DID document of an identity under a domain; the key goes into
    /// <data-dir>/agents/ (mode 0600), the document beside it, to be served at the URL printed.
    New {
        /// did:web identity: `host[%3Aport][:path:segments]`, e.g. `example.com:agents:x`
        /// (served at https://example.com/agents/x/did.json).
        #[arg(
            long,
            value_name = "ID",
            conflicts_with = "wba",
            required_unless_present = "wba"
        )]
        web: Option<String>,
        /// did:wba identity with the ANP `e1_` key binding: `host[%3Aport]:path[:segments]`,
        /// e.g. `example.com:agents`; the last segment `e1_<key thumbprint>` is added.
        #[arg(long, value_name = "ID")]
        wba: Option<String>,
        /// Also write the DID document here.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        #[command(flatten)]
        dir: DataDirArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the identities under a domain this data directory holds, each with the URL its
    /// document must be served at.
    List {
        #[command(flatten)]
        dir: DataDirArg,
        /// Print JSON, one object per identity.
        #[arg(long)]
        json: bool,
    },
    /// Print the DID document of an identity, and where to serve it.
    Show {
        /// The DID.
        did: String,
        #[command(flatten)]
        dir: DataDirArg,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum KeyFormatArg {
    /// Multikey (did:key v0.7 default).
    Multikey,
    /// Ed25519VerificationKey2020 / X25519KeyAgreementKey2020.
    #[value(name = "2020")]
    Ed2020,
}

pub(super) async fn resolve(
    did: &str,
    json_out: bool,
    opts: ResolverOptions,
) -> anyhow::Result<ExitCode> {
    let resolver = Resolver::new(opts).map_err(anyhow::Error::msg)?;
    match resolver.resolve_str(did).await {
        Ok(doc) => {
            let doc = doc.to_json();
            if json_out {
                let out = json!({
                    "didDocument": doc,
                    "didResolutionMetadata": {"contentType": "application/did+json"},
                    "didDocumentMetadata": {}
                });
                out!("{}", json_text(&out)?)?;
            } else {
                out!("{}", json_text(&doc)?)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if json_out {
                let out = json!({
                    "didDocument": null,
                    "didResolutionMetadata": {"error": e.code(), "errorMessage": e.to_string()},
                    "didDocumentMetadata": {}
                });
                out!("{}", json_text(&out)?)?;
            }
            say!("error: {}", text::sanitize(&e.to_string()));
            Ok(ExitCode::FAILURE)
        }
    }
}

pub(super) fn identity_new(
    spec: &identity::DomainSpec,
    out: Option<&Path>,
    dir: Option<&Path>,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(dir)?;
    let key = SecretKey::generate();
    let created = agentnet_did::httpsig::format_utc_timestamp(agentnet_discovery::net::unix_now());
    let (did, doc) = identity::create(spec, &key, &created)?;
    let url = agentnet_did::web::document_url(&did)?;
    let (key_file, doc_file) = data_dir::AgentKeys::new(&dir).install_domain(&key, &doc)?;
    if let Some(out) = out {
        let body = serde_json::to_vec_pretty(&doc.to_json())?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &body))
            .with_context(|| format!("writing {} (it must not exist)", out.display()))?;
    }
    if json_out {
        out!(
            "{}",
            json_line(&json!({
                "did": did.as_str(),
                "kid": format!("{did}#{}", identity::KEY_FRAGMENT),
                "keyFile": key_file,
                "documentFile": doc_file,
                "url": url.as_str(),
                "document": doc.to_json(),
            }))?
        )?;
    } else {
        // Standard output: the DID, then where its document must be served (the URL tells
        // whether the name meant what was intended, a port for instance).
        out!("{did}")?;
        say!("key:      {} (mode 0600)", key_file.display());
        say!("document: {}", doc_file.display());
        out!(
            "serve the document at {url} (HTTPS, Content-Type: application/json), then \
             publish with `agentnet publish --as {did}`"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn identity_show(did: &str, dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(dir)?;
    let keys = data_dir::AgentKeys::new(&dir);
    let id = keys.load_identity(did)?;
    let doc = read_json(&keys.document_file(did)?)?;
    out!("{}", json_text(&doc)?)?;
    say!(
        "signs as {}; serve this document at {}",
        id.kid(),
        agentnet_did::web::document_url(id.did())?
    );
    Ok(ExitCode::SUCCESS)
}

/// Most identities `identity list` prints.
const MAX_LISTED: usize = 10_000;

/// `agentnet identity list`: the domain identities of the data directory, each checked as the
/// node would load it (key and document agree), with the URL its document is served at.
pub(super) fn identity_list(dir: Option<&Path>, json_out: bool) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(dir)?;
    let keys = data_dir::AgentKeys::new(&dir);
    let (dids, more) = keys.domain_identities(MAX_LISTED)?;
    if dids.is_empty() && !json_out {
        say!(
            "no identity under a domain in {}: create one with `agentnet identity new --web ID` \
             (or --wba ID)",
            dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = Vec::new();
    for did in &dids {
        let url = agentnet_did::Did::parse(did)
            .ok()
            .and_then(|d| agentnet_did::web::document_url(&d).ok())
            .map(|u| u.to_string())
            .unwrap_or_default();
        let problem = keys.load_identity(did).err().map(|e| e.to_string());
        if json_out {
            out!(
                "{}",
                json_line(&json!({"did": did, "url": url, "problem": problem}))?
            )?;
        } else {
            let shown = match problem {
                None => url,
                Some(p) => format!("unusable: {p}"),
            };
            rows.push([did.clone(), shown]);
        }
    }
    if !json_out {
        print_table(["DID", "DOCUMENT URL"], &rows)?;
    }
    if more {
        say!("more than {MAX_LISTED} identities: the first {MAX_LISTED} found are listed");
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentnet key new FILE`: a new Ed25519 key as a private JWK (mode 0600, never over an
/// existing file), for an agent's did:key (`agentnet publish --key FILE`, `card sign --key
/// FILE`); prints the did:key.
pub(super) fn key_new(file: &Path, json_out: bool) -> anyhow::Result<ExitCode> {
    let key = SecretKey::generate();
    key.save(file)?;
    let did = key.did_key();
    if json_out {
        out!("{}", json!({"did": did.as_str(), "keyFile": file}))?;
    } else {
        say!("wrote the key to {} (mode 0600)", file.display());
        out!("{did}")?;
    }
    Ok(ExitCode::SUCCESS)
}
