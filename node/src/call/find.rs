//! Finding an agent and verifying its card: the card by DID in the node's index, by skill
//! through the node's `discover`, or in hand; every signature checked and one of them by the
//! agent's DID ([`Verified`]); its pin read, its interface chosen and its address checked.

use std::net::SocketAddr;

use agentnet_a2a::client;
use agentnet_did::card::{self, KeySource};
use agentnet_did::{Did, DidUrl};
use serde_json::Value;

use super::{check_url, Agent, CallError, Caller, Progress, Target, MAX_CANDIDATES};
use crate::network::directory::Found;

/// A card whose signatures verify, one of them by the agent's DID.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The agent's DID.
    pub did: Did,
    /// Its card.
    pub card: Value,
    /// The `kid`s of the card's signatures.
    pub signers: Vec<String>,
}

impl Caller {
    /// [`Caller::find`] without its deadline: `target`'s card, verified, its interface chosen.
    pub(super) async fn find_inner(
        &self,
        target: &Target,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Agent, CallError> {
        match target {
            Target::Card { did, card } => self.check(did, card.clone(), false, progress).await,
            Target::Did(did) => {
                let card = self.card_of(did).await?;
                self.check(did, card, true, progress).await
            }
            Target::Skill { tags, did } => {
                let found = self.candidates(tags).await?;
                let mut last = None;
                for f in found
                    .into_iter()
                    .filter(|f| did.as_ref().is_none_or(|d| *d == f.did))
                {
                    match self.check(&f.did, f.card, true, progress).await {
                        Ok(a) => return Ok(a),
                        Err(e) => {
                            progress(Progress::Skipped {
                                did: f.did.clone(),
                                reason: e.to_string(),
                            });
                            last = Some(e);
                        }
                    }
                }
                Err(last.unwrap_or_else(|| {
                    CallError::NotFound(format!(
                        "no agent found with skill {}{}",
                        tags.join(" + "),
                        did.as_ref()
                            .map(|d| format!(" and DID {d}"))
                            .unwrap_or_default()
                    ))
                }))
            }
        }
    }

    /// Agents with all of `tags` (the node's index, then the network), at most
    /// [`MAX_CANDIDATES`]; their cards are not verified yet.
    pub async fn candidates(&self, tags: &[String]) -> Result<Vec<Found>, CallError> {
        let admin = self.admin.as_ref().ok_or(CallError::NoNode)?;
        Ok(admin.discover(tags, MAX_CANDIDATES).await?)
    }

    /// The card of `did` in the node's index (not verified: [`Caller::verify`] does it).
    pub async fn card_of(&self, did: &str) -> Result<Value, CallError> {
        let admin = self.admin.as_ref().ok_or(CallError::NoNode)?;
        let ad = admin.advert(did).await?.ok_or_else(|| {
            CallError::NotFound(format!(
                "the node knows no live advertisement of {did}; find it with --skill \
                 (the node's index, then the network)"
            ))
        })?;
        if ad.get("did").and_then(Value::as_str) != Some(did) {
            return Err(CallError::Protocol(format!(
                "the node's advertisement of {did} names another DID"
            )));
        }
        Ok(ad.get("card").cloned().unwrap_or(Value::Null))
    }

    /// Verify `card` as `did`'s (checked against its pin when it came `from_node`) and choose
    /// its interface.
    async fn check(
        &self,
        did: &str,
        card: Value,
        from_node: bool,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Agent, CallError> {
        let Verified {
            did: parsed,
            card,
            signers,
        } = self.verify(did, card, progress).await?;
        // A pin that cannot be read is no reason to fail the call: the node says why in
        // `discover`.
        let pin = match (&self.admin, from_node) {
            (Some(admin), true) => admin.pin(did).await.ok().flatten(),
            _ => None,
        };
        if let Some(crate::trust::pins::PinState::Changed { diff, .. }) = &pin {
            progress(Progress::Changed {
                did: did.to_owned(),
                diff: diff.clone(),
            });
        }
        let endpoint = client::choose_interface(&card).map_err(CallError::Interface)?;
        let addrs = self.check_address(&endpoint.url).await?;
        progress(Progress::Interface {
            url: endpoint.url.to_string(),
            binding: endpoint.binding.name(),
        });
        Ok(Agent {
            did: parsed,
            card,
            signers,
            endpoint,
            addrs,
            pin,
        })
    }

    /// Verify every signature on `card` and that one signer is `did`: the card is `did`'s.
    /// Nothing is sent to the agent.
    pub async fn verify(
        &self,
        did: &str,
        card: Value,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Verified, CallError> {
        let parsed =
            Did::parse(did).map_err(|_| CallError::BadDid(did.chars().take(200).collect()))?;
        let sigs = card::verify(&card, KeySource::Did(&self.resolver))
            .await
            .map_err(|source| CallError::CardSignature {
                did: did.to_owned(),
                source,
            })?;
        let signers: Vec<String> = sigs.into_iter().map(|s| s.kid).collect();
        let by_agent = signers
            .iter()
            .any(|k| DidUrl::parse(k).is_ok_and(|u| u.did() == &parsed));
        if !by_agent {
            return Err(CallError::NotTheAgents {
                did: did.to_owned(),
                signers,
            });
        }
        progress(Progress::Verified {
            did: did.to_owned(),
            signers: signers.clone(),
        });
        Ok(Verified {
            did: parsed,
            card,
            signers,
        })
    }

    /// Where an endpoint points: [`check_url`] under this caller's `allow_private`.
    pub async fn check_address(&self, url: &url::Url) -> Result<Vec<SocketAddr>, CallError> {
        check_url(url, self.opts.allow_private).await
    }
}
