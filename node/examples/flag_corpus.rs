//! The flag rules against a labelled corpus: detection, false positives, and time per item.
//!
//! `cargo run -p agentnet-node --example flag_corpus [CORPUS.jsonl] [RULES.toml]`
//! (default: `corpus/flags/texts.jsonl` and the built-in rules; a RULES file is added to them,
//! as `[trust] flag_rules` adds it in the node). Two shapes of corpus:
//! - texts (`corpus/flags/texts.jsonl`, [`agentnet_node::trust::flags::corpus`]): precision, recall
//!   and false-positive rate per kind of text (card, tool, answer);
//! - items (`corpus/flags.jsonl`, `corpus/flags-heldout.jsonl`): each line
//!   `{"id", "kind": "card"|"tool", "label", "expect": [rule, …], "item": {…}}`, counted with
//!   the flags each item should get.

use std::collections::BTreeMap;
use std::time::Instant;

use agentnet_node::trust::flags::Rules;
use serde_json::Value;

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let corpus = args.next().unwrap_or_else(|| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../corpus/flags/texts.jsonl").into()
    });
    let rules = match args.next() {
        Some(f) => Rules::with_file(std::path::Path::new(&f))?,
        None => Rules::default(),
    };
    let text = std::fs::read_to_string(&corpus).map_err(|e| format!("reading {corpus}: {e}"))?;
    if !text.contains("\"item\"") {
        return texts(&rules, &corpus, &text);
    }
    let mut rows: BTreeMap<(String, String), (usize, usize, usize)> = BTreeMap::new();
    let mut notes = Vec::new();
    let mut per_rule: BTreeMap<String, usize> = BTreeMap::new();
    let (mut n, mut took) = (0u32, std::time::Duration::ZERO);
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let it: Value =
            serde_json::from_str(line).map_err(|e| format!("{corpus}:{}: {e}", i + 1))?;
        let kind = it["kind"].as_str().unwrap_or("?").to_string();
        let label = it["label"].as_str().unwrap_or("?").to_string();
        let start = Instant::now();
        let flags = if kind == "card" {
            rules.card(&it["item"])
        } else {
            rules.tool(&it["item"])
        };
        took += start.elapsed();
        n += 1;
        let want: Vec<&str> = it["expect"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let got: Vec<&str> = flags.iter().map(|f| f.rule.as_str()).collect();
        for g in &got {
            *per_rule.entry(g.to_string()).or_default() += 1;
        }
        let row = rows.entry((kind, label.clone())).or_default();
        row.0 += 1;
        if !got.is_empty() {
            row.1 += 1;
        }
        if !want.is_empty() && want.iter().all(|w| got.contains(w)) {
            row.2 += 1;
        }
        let wrong = if label == "benign" {
            !got.is_empty()
        } else {
            got.is_empty() || !want.iter().all(|w| got.contains(w))
        };
        if wrong {
            notes.push(format!("{}: expected {want:?}, flagged {got:?}", it["id"]));
        }
    }
    println!("corpus {corpus}: {n} items");
    println!("| kind | label | items | flagged | with the expected flags |");
    println!("|---|---|---|---|---|");
    for ((kind, label), (items, flagged, expected)) in &rows {
        println!("| {kind} | {label} | {items} | {flagged} | {expected} |");
    }
    println!("flags by rule: {per_rule:?}");
    println!(
        "time: {:.1} µs per item (debug builds are slower)",
        took.as_secs_f64() * 1e6 / f64::from(n.max(1))
    );
    for w in &notes {
        println!("wrong: {w}");
    }
    Ok(())
}

/// The table of a corpus of texts: per kind, precision, recall and false-positive rate.
fn texts(rules: &Rules, corpus: &str, jsonl: &str) -> Result<(), String> {
    use agentnet_node::trust::flags::corpus;
    let texts = corpus::parse(jsonl).map_err(|e| format!("{corpus}: {e}"))?;
    let start = Instant::now();
    let (by, wrong) = corpus::score(rules, &texts);
    let took = start.elapsed();
    println!("corpus {corpus}: {} texts", texts.len());
    println!("| kind | poisoned | caught | recall | benign | flagged | false-positive rate | precision |");
    println!("|---|---|---|---|---|---|---|---|");
    for (kind, c) in &by {
        println!(
            "| {kind} | {} | {} | {:.1} % | {} | {} | {:.1} % | {:.1} % |",
            c.poisoned,
            c.caught,
            100.0 * c.recall(),
            c.benign,
            c.false_flags,
            100.0 * c.false_positive_rate(),
            100.0 * c.precision()
        );
    }
    println!(
        "time: {:.1} µs per text (debug builds are slower)",
        took.as_secs_f64() * 1e6 / texts.len().max(1) as f64
    );
    for w in &wrong {
        println!("wrong: {w}");
    }
    Ok(())
}
