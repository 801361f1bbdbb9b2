//! The short pass's mutations: a fixed, seeded batch of the edits AFL's deterministic and havoc
//! stages start with (bit flips, interesting bytes, truncations, duplications, splices of two
//! seeds), so that `cargo test` runs each target over a few thousand inputs near its corpus
//! without AFL. Same seed, same inputs, on every machine.

/// A small xorshift generator: reproducible, no dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced, xorshift needs a non-zero state).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// The next 64 bits.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bytes that JSON, JWS and header parsers treat specially.
const INTERESTING: &[&[u8]] = &[
    b"\x00",
    b"\xff",
    b"\"",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b".",
    b"=",
    b";",
    b"\n",
    b"-1",
    b"0",
    b"1e999",
    b"18446744073709551616",
    b"null",
    b"true",
    b"\"\"",
    b"{}",
    b"[]",
    b"\\u0000",
    b"\\ud800",
    b"\xc3\x28",
    b"\xe2\x80\xae",
    b"did:key:",
    b"did:web:",
    b"did:wba:",
    b"#",
    b"%",
    b"%00",
];

/// One mutation of `input`, `other` being another seed to splice with.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    // One to four stacked edits, as AFL's havoc stage stacks them.
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = rng.next() as u8;
            }
            2 if len > 0 => out.truncate(rng.below(len)),
            3 => {
                let at = rng.below(len + 1);
                let token = INTERESTING[rng.below(INTERESTING.len())];
                out.splice(at..at, token.iter().copied());
            }
            4 if len > 0 => {
                // Delete a run.
                let a = rng.below(len);
                let b = (a + 1 + rng.below(16)).min(len);
                out.drain(a..b);
            }
            5 if len > 0 => {
                // Duplicate a run in place (repeated members, nesting).
                let a = rng.below(len);
                let b = (a + 1 + rng.below(64)).min(len);
                let run = out[a..b].to_vec();
                out.splice(b..b, run);
            }
            6 if !other.is_empty() => {
                // Splice: a head of this input and a tail of the other.
                let cut = rng.below(len + 1);
                let from = rng.below(other.len());
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            _ => {
                // Overwrite a run with bytes copied from elsewhere in the input.
                if len > 1 {
                    let a = rng.below(len);
                    let b = rng.below(len);
                    let n = (1 + rng.below(8)).min(len - a.max(b));
                    out.copy_within(b..b + n, a);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_makes_the_same_inputs() {
        let run = || {
            let mut rng = Rng::new(42);
            (0..100)
                .map(|_| mutate(&mut rng, b"{\"a\":[1,2,3]}", b"[true]"))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
        assert!(run().iter().any(|m| m != b"{\"a\":[1,2,3]}"));
    }
}
