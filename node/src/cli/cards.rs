//! `card sign` and `card verify`.

use anyhow::Context as _;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentnet_did::card::{self, KeySource};
use agentnet_did::key::Jwk;
use agentnet_did::{text, DidUrl, Resolver, SecretKey};
use anyhow::bail;
use clap::Subcommand;
use serde_json::{json, Value};

use super::args::{resolver_options, DataDirArg, NetArgs};
use super::input::read_json;
use super::output::{json_line, json_text};
use crate::data_dir;

#[derive(Debug, Subcommand)]
pub(super) enum CardCommand {
    /// Sign a card (JWS, EdDSA, kid = DID URL) and print the signed card.
    Sign {
        /// The Agent Card JSON file (`-` for standard input).
        card: PathBuf,
        #[command(flatten)]
        dir: DataDirArg,
        /// Sign with this key file (a private Ed25519 JWK) instead of the node's key; not with
        /// a --data-dir on the command line (AGENTNET_DATA_DIR is then ignored).
        #[arg(long)]
        key: Option<PathBuf>,
        /// The kid (verification method DID URL); default: the key's did:key.
        #[arg(long)]
        kid: Option<String>,
    },
    /// Verify every signature on a card, resolving each kid's DID.
    Verify {
        /// The signed Agent Card JSON file (`-` for standard input).
        card: PathBuf,
        /// Verify with this public JWK instead of resolving the kid.
        #[arg(long)]
        jwk: Option<PathBuf>,
        #[command(flatten)]
        net: NetArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn sign_card(
    card_path: &Path,
    dir: Option<&Path>,
    key_path: Option<&Path>,
    kid: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let card = read_json(card_path)?;
    let key_path = match key_path {
        Some(k) => k.to_owned(),
        None => data_dir::key_file(&data_dir::resolve(dir)?),
    };
    let key = SecretKey::load(&key_path)
        .with_context(|| "loading the signing key (run `agentnet init` first?)")?;
    let kid = match kid {
        Some(k) => DidUrl::parse(k).with_context(|| format!("--kid {k:?}"))?,
        None => {
            let did = key.did_key();
            did.with_fragment(did.method_specific_id())
        }
    };
    if kid.fragment().is_none() {
        bail!("--kid must name a verification method (a DID URL with a #fragment)");
    }
    for path in agentnet_did::a2a::unknown_fields(&card) {
        say!("warning: {path} is not part of the A2A 1.0 Agent Card; the signature does not cover it");
    }
    let signed = card::sign(&card, &key, &kid)?;
    out!("{}", json_text(&signed)?)?;
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn verify_card(
    card_path: &Path,
    jwk: Option<&Path>,
    net: &NetArgs,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let card = read_json(card_path)?;
    let resolver = Resolver::new(resolver_options(net, net.local)?).map_err(anyhow::Error::msg)?;
    let jwk: Option<Jwk> = match jwk {
        Some(p) => Some(
            serde_json::from_value(read_json(p)?)
                .with_context(|| format!("{} is not a JWK", p.display()))?,
        ),
        None => None,
    };
    let source = match &jwk {
        Some(j) => KeySource::Jwk(j),
        None => KeySource::Did(&resolver),
    };
    match card::verify(&card, source).await {
        Ok(sigs) => {
            if json_out {
                let list: Vec<Value> = sigs
                    .iter()
                    .map(|s| json!({"kid": s.kid, "alg": s.alg}))
                    .collect();
                out!("{}", json_line(&json!({"ok": true, "signatures": list}))?)?;
            } else {
                for s in &sigs {
                    out!("ok: {} signature by {}", s.alg, s.kid)?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if json_out {
                out!(
                    "{}",
                    json_line(&json!({"ok": false, "error": e.to_string()}))?
                )?;
            }
            say!("error: {}", text::sanitize(&e.to_string()));
            Ok(ExitCode::FAILURE)
        }
    }
}
