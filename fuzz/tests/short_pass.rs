//! The fuzzers' short pass, run by the README's test command: every target over its committed
//! corpus (`fuzz/corpus/<target>/`), its regression inputs (`fuzz/regressions/<target>/`, each a
//! crash AFL found, fixed since) and a fixed batch of mutations of the corpus
//! ([`agentnet_fuzz::mutate`]). A panic in a target fails the test and names the input. The long
//! runs are `scripts/fuzz.sh` (AFL++), with their figures in docs/BENCHMARKS.md.

use std::path::{Path, PathBuf};

use agentnet_fuzz::mutate::{mutate, Rng};

/// Mutated inputs per target: a few thousand, seconds per target in a debug build.
const MUTATIONS: usize = 3000;

fn inputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("a readable input");
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

fn run(name: &str, target: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = inputs(&root.join("corpus").join(name));
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{name}/ has no seed; run `cargo run -p agentnet-fuzz --bin seeds`"
    );
    for (path, bytes) in corpus
        .iter()
        .chain(&inputs(&root.join("regressions").join(name)))
    {
        eprintln!("{name}: {}", path.display());
        target(bytes);
    }
    // The seed is the target's name, so each target gets its own, stable inputs.
    let mut rng = Rng::new(name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }));
    for i in 0..MUTATIONS {
        let (_, a) = &corpus[rng.below(corpus.len())];
        let (_, b) = &corpus[rng.below(corpus.len())];
        let input = mutate(&mut rng, a, b);
        let caught = std::panic::catch_unwind(|| target(&input));
        if caught.is_err() {
            panic!(
                "{name}: mutation {i} panicked; its input (hex): {}",
                input.iter().map(|b| format!("{b:02x}")).collect::<String>()
            );
        }
    }
}

#[test]
fn every_target_has_a_test_here() {
    let names: Vec<&str> = agentnet_fuzz::targets().iter().map(|t| t.0).collect();
    let this = include_str!("short_pass.rs");
    for n in names {
        assert!(
            this.contains(&format!("    {n},\n")),
            "target {n} has no test in tests/short_pass.rs"
        );
    }
}

macro_rules! short_pass {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        #[test]
        fn $name() {
            run(stringify!($name), agentnet_fuzz::$name);
        }
    )*};
}

short_pass!(
    jcs,
    did_document,
    httpsig,
    card,
    delegation,
    receipt,
    endorsement,
    a2a_jsonrpc,
    #[cfg(feature = "node")]
    advert,
    #[cfg(feature = "node")]
    anp_jsonrpc,
    #[cfg(feature = "node")]
    ard_query,
);
