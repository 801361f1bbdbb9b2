//! Ed25519 verification in batches, across concurrent callers.
//!
//! `ed25519-dalek`'s `verify_batch` checks n signatures with one multiscalar multiplication:
//! on this project's machine a signature costs 55 µs alone, 28 µs in a batch of 4 and 22 µs in
//! a batch of 16 (docs/BENCHMARKS.md). Requests arrive one by one, so a [`Batcher`] gathers
//! them: a caller queues its signature and waits; a runner on a blocking thread takes what is
//! queued (up to the batch size) and verifies it together. (Verifying the batch on the task of
//! the caller that found none under way, instead, was slower still on two cores: that worker
//! stops serving requests while it verifies; docs/BENCHMARKS.md.) Nothing waits for a batch to fill:
//! a lone request is verified at once, alone, and batches grow only when signatures arrive
//! faster than they are verified, which is when batching pays.
//!
//! What a batch accepts. Each signature is first checked as `verify_strict` does, apart from
//! its equation: `S` canonical, `R` a valid point, neither `R` nor the key of small order. Then
//! the batch equation (cofactorless, random coefficients) stands for the n single equations.
//! They differ in one case only: a signature whose `R` carries a small-order component, which
//! its signer can make, or anyone altering a signature they saw; `verify_strict` refuses it and
//! a batch may accept it. The request it signs is the same request, byte for byte (the
//! signature covers it), and its nonce is spent either way, so this module is for request
//! signatures (RFC 9421), where a signature is checked and then thrown away. Delegation link
//! proofs and receipts, whose digests cover the signature bytes, are verified one by one.
//!
//! A batch that fails is verified again one signature at a time, so one bad signature costs
//! the others nothing but time; and after a failure the next [`SINGLES_AFTER_FAILURE`]
//! signatures are verified singly, so that a stream of bad signatures (anyone can send them)
//! costs no more than it did before batching.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use ed25519_dalek::{Signature, VerifyingKey};
use tokio::sync::oneshot;

/// Signatures verified one by one after a batch fails.
pub const SINGLES_AFTER_FAILURE: usize = 64;
/// Most signatures waiting at once; more are verified by their callers, each alone.
pub const MAX_QUEUED: usize = 4096;
/// The largest batch allowed (a batch of 64 keeps a blocking thread about 1.4 ms).
pub const MAX_BATCH: usize = 64;

/// Verifies Ed25519 signatures in batches (see the module doc). Clones share one queue.
#[derive(Clone)]
pub struct Batcher {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("max_batch", &self.inner.max_batch)
            .finish_non_exhaustive()
    }
}

struct Inner {
    max_batch: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// A runner is taking jobs from the queue.
    running: bool,
    /// Signatures still to verify one by one after a failed batch.
    singles: usize,
    stats: Stats,
}

/// What a [`Batcher`] has done so far (for benchmarks and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Signatures verified.
    pub signatures: u64,
    /// Batches of two or more verified together.
    pub batches: u64,
    /// Signatures in those batches.
    pub batched: u64,
    /// Batches that failed and were verified again one by one.
    pub failed_batches: u64,
}

struct Job {
    key: VerifyingKey,
    msg: Vec<u8>,
    sig: Signature,
    reply: oneshot::Sender<bool>,
}

impl Batcher {
    /// A batcher verifying up to `max_batch` signatures together (at most [`MAX_BATCH`]; 0
    /// and 1 verify each alone, on the caller's thread).
    pub fn new(max_batch: usize) -> Self {
        Batcher {
            inner: Arc::new(Inner {
                max_batch: max_batch.min(MAX_BATCH),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The batch size this batcher was made with.
    pub fn max_batch(&self) -> usize {
        self.inner.max_batch
    }

    /// What it has done so far.
    pub fn stats(&self) -> Stats {
        self.inner.lock().stats
    }

    /// Whether `sig` is `key`'s signature of `msg`.
    pub async fn verify(&self, key: &VerifyingKey, msg: &[u8], sig: &[u8]) -> bool {
        let Ok(sig) = Signature::from_slice(sig) else {
            return false;
        };
        let runtime = tokio::runtime::Handle::try_current();
        if self.inner.max_batch < 2 || runtime.is_err() {
            self.inner.lock().stats.signatures += 1;
            return key.verify_strict(msg, &sig).is_ok();
        }
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut st = self.inner.lock();
            if st.queue.len() >= MAX_QUEUED {
                st.stats.signatures += 1;
                drop(st);
                return key.verify_strict(msg, &sig).is_ok();
            }
            st.queue.push_back(Job {
                key: *key,
                msg: msg.to_vec(),
                sig,
                reply,
            });
            !std::mem::replace(&mut st.running, true)
        };
        if start {
            let inner = self.inner.clone();
            if let Ok(rt) = runtime {
                rt.spawn_blocking(move || inner.run());
            }
        }
        // The runner answers every job it takes; were it to die, its guard drops the queue,
        // and with it this sender: refused, never accepted.
        answer.await.unwrap_or(false)
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take and verify batches until the queue is empty.
    fn run(&self) {
        struct Guard<'a>(&'a Inner);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                // Reached with jobs queued only if verification panicked: their callers are
                // answered "no" (their senders dropped) and the next caller starts a runner.
                let mut st = self.0.lock();
                st.running = false;
                st.queue.clear();
            }
        }
        let guard = Guard(self);
        loop {
            let (jobs, alone) = {
                let mut st = self.lock();
                if st.queue.is_empty() {
                    st.running = false;
                    std::mem::forget(guard);
                    return;
                }
                let alone = st.singles > 0;
                let n = if alone { 1 } else { self.max_batch };
                let n = n.min(st.queue.len());
                st.singles = st.singles.saturating_sub(n);
                // Counted when taken, before anyone is answered: a caller that reads the
                // stats after its answer finds its signature in them.
                st.stats.signatures += n as u64;
                (st.queue.drain(..n).collect::<Vec<_>>(), alone)
            };
            let done = verify_jobs(jobs, alone);
            let mut st = self.lock();
            if done.batched > 0 {
                st.stats.batches += 1;
                st.stats.batched += done.batched as u64;
            }
            if done.failed {
                st.stats.failed_batches += 1;
                st.singles = SINGLES_AFTER_FAILURE;
            }
        }
    }
}

/// What one [`verify_jobs`] did.
struct Done {
    /// Signatures verified together (0: none).
    batched: usize,
    /// The batch failed and was verified again one by one.
    failed: bool,
}

/// Verify `jobs` and answer each: alone when `alone`, else together, apart from those that
/// fail [`precheck`].
fn verify_jobs(jobs: Vec<Job>, alone: bool) -> Done {
    let single = |job: Job| {
        let ok = job.key.verify_strict(&job.msg, &job.sig).is_ok();
        let _ = job.reply.send(ok);
    };
    let mut ready = Vec::with_capacity(jobs.len());
    for job in jobs {
        if alone || !precheck(&job) {
            single(job);
        } else {
            ready.push(job);
        }
    }
    let mut done = Done {
        batched: 0,
        failed: false,
    };
    if ready.len() < 2 {
        ready.into_iter().for_each(single);
        return done;
    }
    let msgs: Vec<&[u8]> = ready.iter().map(|j| j.msg.as_slice()).collect();
    let sigs: Vec<Signature> = ready.iter().map(|j| j.sig).collect();
    let keys: Vec<VerifyingKey> = ready.iter().map(|j| j.key).collect();
    done.batched = ready.len();
    if ed25519_dalek::verify_batch(&msgs, &sigs, &keys).is_ok() {
        for job in ready {
            let _ = job.reply.send(true);
        }
    } else {
        done.failed = true;
        ready.into_iter().for_each(single);
    }
    done
}

/// What `verify_strict` checks besides its equation: `S` canonical, `R` a point, neither `R`
/// nor the key of small order. A job that fails is verified alone (and refused there).
fn precheck(job: &Job) -> bool {
    let s_canonical = Option::<curve25519_dalek::Scalar>::from(
        curve25519_dalek::Scalar::from_canonical_bytes(job.sig.s_bytes().to_owned()),
    )
    .is_some();
    let r = curve25519_dalek::edwards::CompressedEdwardsY(job.sig.r_bytes().to_owned());
    s_canonical && r.decompress().is_some_and(|r| !r.is_small_order()) && !job.key.is_weak()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    /// The identity point, compressed (y = 1): of small order.
    const IDENTITY: [u8; 32] = {
        let mut b = [0u8; 32];
        b[0] = 1;
        b
    };

    fn signed(seed: u8, msg: &str) -> (VerifyingKey, Vec<u8>, Signature) {
        let k = SigningKey::from_bytes(&[seed; 32]);
        (
            k.verifying_key(),
            msg.as_bytes().to_vec(),
            k.sign(msg.as_bytes()),
        )
    }

    fn job(k: VerifyingKey, msg: Vec<u8>, sig: Signature) -> (Job, oneshot::Receiver<bool>) {
        let (reply, rx) = oneshot::channel();
        (
            Job {
                key: k,
                msg,
                sig,
                reply,
            },
            rx,
        )
    }

    fn answers(rxs: Vec<oneshot::Receiver<bool>>) -> Vec<bool> {
        rxs.into_iter().map(|mut r| r.try_recv().unwrap()).collect()
    }

    #[test]
    fn a_good_batch_is_accepted_together() {
        let (jobs, rxs): (Vec<_>, Vec<_>) = (0..8u8)
            .map(|i| {
                let (k, m, s) = signed(i, &format!("request {i}"));
                job(k, m, s)
            })
            .unzip();
        let done = verify_jobs(jobs, false);
        assert_eq!((done.batched, done.failed), (8, false));
        assert_eq!(answers(rxs), vec![true; 8]);
    }

    #[test]
    fn one_bad_signature_fails_the_batch_and_nobody_else() {
        let mut jobs = Vec::new();
        let mut rxs = Vec::new();
        for i in 0..8u8 {
            let (k, mut m, s) = signed(i, &format!("request {i}"));
            if i == 5 {
                m.push(b'!'); // signed another message
            }
            let (j, r) = job(k, m, s);
            jobs.push(j);
            rxs.push(r);
        }
        let done = verify_jobs(jobs, false);
        assert!(done.failed);
        let mut want = vec![true; 8];
        want[5] = false;
        assert_eq!(answers(rxs), want);
    }

    #[test]
    fn what_verify_strict_refuses_outside_its_equation_is_refused_before_the_batch() {
        let (k, m, s) = signed(1, "hello");
        // S not reduced: S + L.
        let mut bytes = s.to_bytes();
        // ℓ = 2^252 + 27742317777372353535851937790883648493, little-endian.
        let mut l = [0u8; 32];
        l[..16].copy_from_slice(&[
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14,
        ]);
        l[31] = 0x10;
        let mut carry = 0u16;
        for i in 0..32 {
            let v = bytes[32 + i] as u16 + l[i] as u16 + carry;
            bytes[32 + i] = v as u8;
            carry = v >> 8;
        }
        let non_canonical = Signature::from_bytes(&bytes);
        // R the identity (small order), S anything.
        let mut small = s.to_bytes();
        small[..32].copy_from_slice(&IDENTITY);
        let small_r = Signature::from_bytes(&small);
        // The identity as the key: weak.
        let weak = VerifyingKey::from_bytes(&IDENTITY).unwrap();
        let cases = [
            (k, m.clone(), non_canonical),
            (k, m.clone(), small_r),
            (weak, m.clone(), s),
        ];
        for (key, msg, sig) in cases.iter().cloned() {
            let (j, _) = job(key, msg, sig);
            assert!(!precheck(&j));
        }
        let (mut jobs, mut rxs): (Vec<_>, Vec<_>) =
            cases.into_iter().map(|(k, m, s)| job(k, m, s)).unzip();
        for i in 0..4u8 {
            let (k, m, s) = signed(10 + i, "fine");
            let (j, r) = job(k, m, s);
            jobs.push(j);
            rxs.push(r);
        }
        let done = verify_jobs(jobs, false);
        // The three were verified alone (and refused); the four good ones made the batch.
        assert_eq!((done.batched, done.failed), (4, false));
        assert_eq!(
            answers(rxs),
            vec![false, false, false, true, true, true, true]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_each_get_their_own_answer() {
        let b = Batcher::new(16);
        let mut tasks = Vec::new();
        for i in 0..400u32 {
            let b = b.clone();
            tasks.push(tokio::spawn(async move {
                let (k, m, s) = signed((i % 32) as u8, &format!("request {i}"));
                let good = i % 3 != 0;
                let msg = if good { m } else { b"another request".to_vec() };
                (good, b.verify(&k, &msg, &s.to_bytes()).await)
            }));
        }
        for t in tasks {
            let (good, ok) = t.await.unwrap();
            assert_eq!(good, ok);
        }
        let st = b.stats();
        assert_eq!(st.signatures, 400);
        // A signature of the wrong length is no signature.
        assert!(!b.verify(&signed(1, "x").0, b"x", &[0u8; 10]).await);
    }

    #[test]
    fn without_a_runtime_or_with_batches_of_one_each_is_verified_alone() {
        let (k, m, s) = signed(3, "alone");
        for b in [Batcher::new(1), Batcher::new(16)] {
            let sig = s.to_bytes();
            assert!(block_on(b.verify(&k, &m, &sig)));
            assert_eq!(b.stats().signatures, 1);
            assert_eq!(b.stats().batches, 0);
        }
    }

    /// Poll a future that never waits (the no-runtime path) to its end.
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("verification waited without a runtime"),
        }
    }
}
