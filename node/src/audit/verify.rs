//! Checking a log: an export or the node's own entries against their chain, their receipts and
//! the node's signed checkpoint ([`Verifier`], [`Report`]), and the checks an entry passes before
//! it is appended ([`verify_entry`], [`verify_and_append`]).

use std::sync::Arc;

use agentnet_did::checkpoint;
use agentnet_did::receipt::{self, Expected, Receipt};
use agentnet_did::Resolver;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{backend, AuditError, AuditLog, Entry, NewEntry, EXPORT_FORMAT, GENESIS};

/// Whose signature an export's checkpoint must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust<'a> {
    /// The node's DID, known to the verifier (`--did`): the checkpoint must be signed by it.
    Given(&'a str),
    /// Whatever DID the checkpoint names: proves only that the file is self-consistent.
    FromFile,
}

/// The result of `audit verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Every entry and link checked out.
    pub ok: bool,
    /// Entries checked.
    pub entries: u64,
    /// The first bad entry: its seq.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bad_entry: Option<u64>,
    /// What is wrong with it (or with the checkpoint, when `bad_entry` is absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The DID whose signed checkpoint the chain ends at; absent when unsigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    /// When that checkpoint was signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_at: Option<String>,
    /// What an `ok` proves, when it proves less than "the log the node signed": an unsigned
    /// export, or a signer's DID taken from the file itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Checks entries in order: each is canonical JSON of an [`Entry`], its seq follows the last
/// one's, its `prev` is the last one's digest, its receipt verifies for its task, agent and
/// caller, and its copied members match the receipt and the request. The first failure is
/// kept; later entries are not checked.
#[derive(Debug)]
pub struct Verifier {
    seq: u64,
    digest: String,
    entries: u64,
    bytes: u64,
    pub(super) bad: Option<(u64, String)>,
}

impl Default for Verifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Verifier {
    /// Before the first entry.
    pub fn new() -> Self {
        Verifier {
            seq: 0,
            digest: GENESIS.into(),
            entries: 0,
            bytes: 0,
            bad: None,
        }
    }

    pub(super) fn fail(mut self, seq: u64, why: String) -> Report {
        self.bad.get_or_insert((seq, why));
        self.finish(None)
    }

    /// Check the entry stored under `key_seq`.
    pub async fn check(&mut self, key_seq: u64, bytes: &[u8], resolver: &Resolver) {
        if self.bad.is_some() {
            return;
        }
        if let Err(why) = self.check_inner(key_seq, bytes, resolver).await {
            self.bad = Some((key_seq, why));
        }
    }

    async fn check_inner(
        &mut self,
        key_seq: u64,
        bytes: &[u8],
        resolver: &Resolver,
    ) -> Result<(), String> {
        let expected = self.seq + 1;
        if key_seq != expected {
            self.bad = Some((
                expected,
                format!(
                    "entry {expected} is missing (entry {key_seq} follows entry {}): the chain is broken",
                    self.seq
                ),
            ));
            return Ok(());
        }
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("not JSON ({e}): the stored bytes were changed"))?;
        if agentnet_did::jcs::canonicalize(&value) != bytes {
            return Err("not in its canonical form: the stored bytes were changed".into());
        }
        let e: Entry = serde_json::from_value(value)
            .map_err(|e| format!("not an audit entry ({e}): the stored bytes were changed"))?;
        if e.seq != key_seq {
            return Err(format!("says seq {} but is stored as {key_seq}", e.seq));
        }
        if e.prev != self.digest {
            return Err(format!(
                "its prev {} is not the digest of entry {} ({}): an entry before it was changed or removed, or this one was",
                e.prev, self.seq, self.digest
            ));
        }
        let expect = Expected {
            task_id: &e.task_id,
            agent: &e.agent,
            caller: e.caller.as_deref(),
            message: None,
        };
        let r = receipt::verify(&e.receipt, resolver, &expect)
            .await
            .map_err(|err| format!("its receipt does not verify: {err}"))?;
        if e.receipt_digest != receipt::receipt_digest(&e.receipt) {
            return Err("its receiptDigest is not the digest of its receipt".into());
        }
        if e.sub_receipts != r.sub_receipts || e.state != r.state {
            return Err("its subReceipts or state differ from its receipt's".into());
        }
        if let (Some(m), Some(d)) = (&e.request.message, &e.request.message_digest) {
            if &receipt::digest_json(m) != d {
                return Err("its request message does not match its digest".into());
            }
        }
        let Some(d) = &e.request.message_digest else {
            return Err("it records no request (messageDigest is null), so its receipt cannot be shown to cover one".into());
        };
        if !r.covers(d) {
            return Err(format!(
                "its receipt does not cover its request: the receipt's messages do not list the request's digest {d} (a receipt for other work)"
            ));
        }
        self.seq = key_seq;
        self.digest = receipt::digest(bytes);
        self.entries += 1;
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    /// The report; `head`, when known, must be the last entry checked.
    pub fn finish(self, head: Option<(u64, &str)>) -> Report {
        let mut bad = self.bad;
        if bad.is_none() {
            if let Some((seq, digest)) = head {
                if seq != self.seq {
                    bad = Some((
                        self.seq + 1,
                        format!(
                            "the log's head says {seq} entries, {} were found: entries after {} were removed",
                            self.seq, self.seq
                        ),
                    ));
                } else if digest != self.digest {
                    bad = Some((
                        self.seq,
                        "the last entry is not the one the head names: it was changed".into(),
                    ));
                }
            }
        }
        Report {
            ok: bad.is_none(),
            entries: self.entries,
            bad_entry: bad.as_ref().map(|b| b.0),
            reason: bad.map(|b| b.1),
            signed_by: None,
            signed_at: None,
            note: None,
        }
    }

    /// The report ([`Verifier::finish`]), and the chain held against `signed`, the node's
    /// checkpoint: it must verify as `trust` says and name the chain's last entry, its count
    /// and its bytes. Without a checkpoint the report says the log is unsigned, or, when the
    /// verifier was given a DID, refuses it.
    pub async fn finish_signed(
        self,
        head: (u64, &str),
        signed: Option<&str>,
        trust: Trust<'_>,
        resolver: &Resolver,
    ) -> Report {
        let (seq, digest, bytes) = (self.seq, self.digest.clone(), self.bytes);
        let mut report = self.finish(Some(head));
        if !report.ok {
            return report;
        }
        let refuse = |mut r: Report, why: String| {
            r.ok = false;
            r.reason = Some(why);
            r
        };
        let Some(jws) = signed else {
            return match trust {
                Trust::Given(did) => refuse(
                    report,
                    format!("the log carries no signed checkpoint, so nothing shows that {did} kept it: its chain could have been recomputed by whoever held the file"),
                ),
                Trust::FromFile => {
                    report.note = Some("unsigned: the log carries no checkpoint (an older node's export); its chain is self-consistent, which anyone who holds the file can make it".into());
                    report
                }
            };
        };
        let expected = match trust {
            Trust::Given(d) => Some(d),
            Trust::FromFile => None,
        };
        let c = match checkpoint::verify(jws, resolver, expected).await {
            Ok(c) => c,
            Err(e) => return refuse(report, format!("its checkpoint does not verify: {e}")),
        };
        if c.seq != seq || c.digest != digest || c.bytes != bytes {
            return refuse(
                report,
                format!(
                    "the chain does not end where {} signed that it ended ({} entries, {} bytes, last digest {}; found {seq} entries, {bytes} bytes, last digest {digest}): entries were cut, removed, reordered, replaced or added and the chain recomputed",
                    c.node, c.seq, c.bytes, c.digest
                ),
            );
        }
        if trust == Trust::FromFile {
            report.note = Some(format!(
                "signed by {}, a DID taken from the file itself: this proves only that the file is self-consistent; pass --did with the node's DID, learnt elsewhere, to check that the node signed it",
                c.node
            ));
        }
        report.signed_by = Some(c.node);
        report.signed_at = Some(c.at);
        report
    }
}

/// Verify an export file (`agentnet audit export`): JSON lines, the first
/// `{"format": "agentnet-audit/v1", "head": {"seq", "digest"}, "checkpoint": "<JWS>"}`, then
/// each entry's stored bytes; the chain must end at the checkpoint, signed as `trust` says
/// ([`Verifier::finish_signed`]).
pub async fn verify_export(
    text: &str,
    resolver: &Resolver,
    trust: Trust<'_>,
) -> Result<Report, String> {
    let mut lines = text.lines();
    let first = lines
        .next()
        .ok_or("the file is empty: write one with `agentnet audit export FILE`")?;
    let header: Value = serde_json::from_str(first)
        .map_err(|e| format!("the first line is not the export header: {e}"))?;
    if header["format"] != EXPORT_FORMAT {
        return Err(format!(
            "not an agentnet audit export (the first line's format is not {EXPORT_FORMAT:?})"
        ));
    }
    let head_seq = header["head"]["seq"].as_u64().unwrap_or(0);
    let head_digest = header["head"]["digest"]
        .as_str()
        .unwrap_or(GENESIS)
        .to_string();
    let mut v = Verifier::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let seq = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|e| e["seq"].as_u64())
            .unwrap_or(v.seq + 1);
        v.check(seq, line.as_bytes(), resolver).await;
    }
    let signed = match header.get("checkpoint") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err("the header's checkpoint is not a string (a compact JWS)".into()),
    };
    Ok(
        v.finish_signed((head_seq, &head_digest), signed, trust, resolver)
            .await,
    )
}

/// The export header line for a log whose head is `(seq, digest)`, with the node's signed
/// checkpoint of it when the log keeps them.
pub fn export_header(seq: u64, digest: &str, checkpoint: Option<&str>) -> String {
    let mut h = json!({"format": EXPORT_FORMAT, "head": {"seq": seq, "digest": digest}});
    if let Some(c) = checkpoint {
        h["checkpoint"] = json!(c);
    }
    h.to_string()
}

/// Verify `new`'s receipt as a writer must before it appends: it names `new`'s task, agent and
/// caller, and covers `new`'s request ([`Receipt::covers`]); without a request,
/// [`AuditError::NoRequest`].
pub async fn verify_entry(new: &NewEntry, resolver: &Resolver) -> Result<Receipt, AuditError> {
    let digest = new
        .message
        .as_ref()
        .map(receipt::digest_json)
        .ok_or(AuditError::NoRequest)?;
    let expect = Expected {
        task_id: &new.task_id,
        agent: &new.agent,
        caller: new.caller.as_deref(),
        message: Some(&digest),
    };
    Ok(receipt::verify(&new.receipt, resolver, &expect).await?)
}

/// Verify `new`'s receipt ([`verify_entry`]) and append it.
pub async fn verify_and_append(
    log: &Arc<AuditLog>,
    resolver: &Resolver,
    new: NewEntry,
) -> Result<Entry, AuditError> {
    let verified = verify_entry(&new, resolver).await?;
    let log = log.clone();
    tokio::task::spawn_blocking(move || log.append(new, &verified))
        .await
        .map_err(backend)?
}
