//! `card sign` and `card verify`.

use anyhow::Context as _;

use super::{
    bail, card, data_dir, json, json_line, json_text, read_json, resolver_options, text, DidUrl,
    ExitCode, Jwk, KeySource, NetArgs, Path, Resolver, SecretKey, Value,
};

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
