//! The labelled corpus the flag rules are measured on (`corpus/flags/texts.jsonl`,
//! docs/BENCHMARKS.md, "Flags"), shared by the benchmark (`cargo run -p agentnet-node --example
//! flag_corpus`) and the test that holds the rules to its figures.
//!
//! Each line is `{"id", "kind": "card"|"tool"|"answer", "label": "poisoned"|"benign",
//! "source", "at"?, "text"}`: the text is placed where `at` says in a minimal card or tool
//! (`skills[0].id`, `documentationUrl`, `inputSchema.properties.x.description`; the description
//! when absent) and read as the node reads that kind; an answer is read as a remote agent's
//! answer text.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{Flag, Rules};

/// One line of the corpus.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Text {
    /// Its id.
    pub id: String,
    /// `card`, `tool` or `answer`.
    pub kind: String,
    /// `poisoned` or `benign`.
    pub label: String,
    /// Which public report it follows (a key of `corpus/flags/sources.json`).
    pub source: String,
    /// Where in the card or tool the text goes.
    #[serde(default)]
    pub at: Option<String>,
    /// The text.
    pub text: String,
}

/// The figures of one kind of text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Poisoned texts.
    pub poisoned: usize,
    /// Poisoned texts flagged (true positives).
    pub caught: usize,
    /// Benign texts.
    pub benign: usize,
    /// Benign texts flagged (false positives).
    pub false_flags: usize,
}

impl Counts {
    /// Caught of poisoned.
    pub fn recall(&self) -> f64 {
        self.caught as f64 / self.poisoned.max(1) as f64
    }
    /// Caught of everything flagged.
    pub fn precision(&self) -> f64 {
        self.caught as f64 / (self.caught + self.false_flags).max(1) as f64
    }
    /// Benign flagged of benign.
    pub fn false_positive_rate(&self) -> f64 {
        self.false_flags as f64 / self.benign.max(1) as f64
    }
    fn add(&mut self, o: Counts) {
        self.poisoned += o.poisoned;
        self.caught += o.caught;
        self.benign += o.benign;
        self.false_flags += o.false_flags;
    }
}

/// The corpus in `jsonl`, line by line.
pub fn parse(jsonl: &str) -> Result<Vec<Text>, String> {
    jsonl
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// The flags `rules` give `t`, read as the node reads its kind.
pub fn flags(rules: &Rules, t: &Text) -> Vec<Flag> {
    match t.kind.as_str() {
        "answer" => rules.answer(&[("texts[0]".into(), t.text.as_str())]),
        "tool" => {
            let mut tool = json!({"name": "tool", "description": "Does one thing.",
                "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}});
            place(&mut tool, t.at.as_deref().unwrap_or("description"), &t.text);
            rules.tool(&tool)
        }
        _ => {
            let mut card = json!({
                "name": "Agent", "description": "Does one thing.", "version": "1.0.0",
                "supportedInterfaces": [{"url": "https://agents.example.com/a2a",
                    "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {"extensions": [{"uri": "https://ext.example.com/v1"}]},
                "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
                "provider": {"organization": "Example", "url": "https://example.com"},
                "skills": [{"id": "s0", "name": "Skill", "description": "Does it.",
                    "tags": ["t"], "examples": ["Do it."]}],
            });
            place(&mut card, t.at.as_deref().unwrap_or("description"), &t.text);
            rules.card(&card)
        }
    }
}

/// `v` with `text` at `path` (`a.b[0].c`), objects made on the way; a `properties.NAME` path
/// whose last step is not `description` names a property.
fn place(v: &mut Value, path: &str, text: &str) {
    let mut cur = v;
    let steps: Vec<&str> = path.split('.').collect();
    for (n, step) in steps.iter().enumerate() {
        let (key, index) = match step.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (*step, None),
        };
        let last = n + 1 == steps.len();
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(obj) = cur.as_object_mut() else {
            return;
        };
        let slot = obj.entry(key.to_string()).or_insert(Value::Null);
        cur = match index {
            Some(i) => {
                if !slot.is_array() {
                    *slot = json!([]);
                }
                let Some(a) = slot.as_array_mut() else { return };
                while a.len() <= i {
                    a.push(if last { Value::Null } else { json!({}) });
                }
                &mut a[i]
            }
            None => slot,
        };
        if last {
            *cur = Value::String(text.to_string());
        }
    }
}

/// Counts by kind (`card`, `tool`, `answer`) and in all (`all`); the texts scored wrong, with
/// their flags.
pub fn score(rules: &Rules, texts: &[Text]) -> (BTreeMap<String, Counts>, Vec<String>) {
    let mut by: BTreeMap<String, Counts> = BTreeMap::new();
    let mut wrong = Vec::new();
    for t in texts {
        let got = flags(rules, t);
        let poisoned = t.label == "poisoned";
        let c = Counts {
            poisoned: usize::from(poisoned),
            caught: usize::from(poisoned && !got.is_empty()),
            benign: usize::from(!poisoned),
            false_flags: usize::from(!poisoned && !got.is_empty()),
        };
        if poisoned == got.is_empty() {
            let rules: Vec<&str> = got.iter().map(|f| f.rule.as_str()).collect();
            wrong.push(format!("{} ({}): flagged {rules:?}", t.id, t.label));
        }
        by.entry(t.kind.clone()).or_default().add(c);
        by.entry("all".into()).or_default().add(c);
    }
    (by, wrong)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_placed_where_its_path_says() {
        let mut v = json!({"skills": [{"id": "s0"}]});
        place(&mut v, "skills[0].id", "x");
        place(&mut v, "capabilities.extensions[0].description", "y");
        place(&mut v, "inputSchema.properties.p_q.description", "z");
        assert_eq!(v["skills"][0]["id"], "x");
        assert_eq!(v["capabilities"]["extensions"][0]["description"], "y");
        assert_eq!(v["inputSchema"]["properties"]["p_q"]["description"], "z");
    }
}
