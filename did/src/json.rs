//! Strict JSON intake for bytes that arrive from others (advertisements, Agent Cards, DID
//! documents, JWS headers): bounded depth, a bounded number of values, and no object with a
//! repeated member name.
//!
//! Why duplicate names matter: serde_json keeps the last of two equal names, other parsers keep
//! the first or refuse. A signed object carrying `"seq":1,"seq":9` would mean one thing to the
//! node that verified it and another to the node that reads the stored bytes later, so we refuse
//! it everywhere bytes are parsed (RFC 8259 §4 says names SHOULD be unique; I-JSON, RFC 7493,
//! makes it MUST).
//!
//! The check is a walk of serde_json's own tokenizer with a [`DeserializeSeed`] that builds
//! nothing: no existing crate offers "refuse duplicate keys" for `serde_json::Value` (serde_json
//! has no such option), and the walk is the smallest way to get it with the parser we already
//! trust. It also counts values and string bytes, which gives an estimate of what the parsed
//! `Value` will cost in memory ([`Stats::estimated_heap`]) before anything is built.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Bounds for [`check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of arrays and objects.
    pub max_depth: usize,
    /// Most JSON values (every scalar, array and object counts one; member names do not).
    pub max_values: usize,
}

/// Limits for a JWS protected header (a few members, perhaps a JWK).
pub const JWS_HEADER: Limits = Limits {
    max_depth: 8,
    max_values: 256,
};

/// What [`check`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// JSON values.
    pub values: usize,
    /// Object members.
    pub members: usize,
    /// Bytes of all strings and member names, decoded.
    pub string_bytes: usize,
}

impl Stats {
    /// Estimated heap bytes of the `serde_json::Value` these bytes parse into: a `Value` is 32
    /// bytes, an object member costs its name's `String` (24) plus B-tree node overhead (about
    /// 16), strings cost their bytes. An estimate, good to a small factor, which is what a memory
    /// budget needs.
    pub fn estimated_heap(&self) -> usize {
        self.values
            .saturating_mul(32)
            .saturating_add(self.members.saturating_mul(40))
            .saturating_add(self.string_bytes)
    }
}

/// Why bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// Nested deeper than allowed.
    #[error("JSON nested deeper than {0} levels")]
    TooDeep(usize),
    /// More values than allowed.
    #[error("JSON with more than {0} values")]
    TooManyValues(usize),
    /// An object names a member twice.
    #[error("duplicate member name {0:?} in a JSON object")]
    DuplicateKey(String),
    /// Not JSON.
    #[error("not JSON: {0}")]
    Syntax(String),
}

/// Check `bytes` against `limits` and for duplicate member names, without building anything.
/// Cost: one pass, allocating only member names that contain escapes (and a list of a member
/// name slices per object while it is open).
pub fn check(bytes: &[u8], limits: Limits) -> Result<Stats, JsonError> {
    // The byte scan first: it never recurses, so deep input is refused before serde_json's own
    // recursion (bounded at 128 anyway) starts.
    check_json_depth(bytes, limits.max_depth).map_err(|_| JsonError::TooDeep(limits.max_depth))?;
    let state = RefCell::new(State {
        limits,
        stats: Stats::default(),
        failure: None,
    });
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let walked = Walk {
        state: &state,
        depth: 0,
    }
    .deserialize(&mut de);
    let walked = walked.and_then(|()| de.end());
    let state = state.into_inner();
    match (walked, state.failure) {
        (_, Some(failure)) => Err(failure),
        (Err(e), None) => Err(JsonError::Syntax(e.to_string())),
        (Ok(()), None) => Ok(state.stats),
    }
}

/// [`check`], then parse into a `Value`.
pub fn from_slice(bytes: &[u8], limits: Limits) -> Result<Value, JsonError> {
    check(bytes, limits)?;
    serde_json::from_slice(bytes).map_err(|e| JsonError::Syntax(e.to_string()))
}

/// [`check`], then deserialize into `T`.
pub fn from_slice_as<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    limits: Limits,
) -> Result<T, JsonError> {
    check(bytes, limits)?;
    serde_json::from_slice(bytes).map_err(|e| JsonError::Syntax(e.to_string()))
}

/// Refuse JSON nested deeper than `max` before handing it to a parser. Strings are skipped
/// properly, so brackets inside them do not count.
pub fn check_json_depth(bytes: &[u8], max: usize) -> Result<(), String> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Err(format!("JSON nested deeper than {max} levels"));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

struct State {
    limits: Limits,
    stats: Stats,
    /// Our own refusal, kept typed (serde errors are strings).
    failure: Option<JsonError>,
}

#[derive(Clone, Copy)]
struct Walk<'s> {
    state: &'s RefCell<State>,
    depth: usize,
}

impl Walk<'_> {
    fn fail<E: de::Error>(&self, e: JsonError) -> E {
        let msg = e.to_string();
        self.state.borrow_mut().failure = Some(e);
        E::custom(msg)
    }

    fn count<E: de::Error>(&self, string_bytes: usize) -> Result<(), E> {
        let over = {
            let mut s = self.state.borrow_mut();
            s.stats.values += 1;
            s.stats.string_bytes += string_bytes;
            (s.stats.values > s.limits.max_values).then_some(s.limits.max_values)
        };
        match over {
            Some(max) => Err(self.fail(JsonError::TooManyValues(max))),
            None => Ok(()),
        }
    }

    fn nested<E: de::Error>(&self) -> Result<Self, E> {
        let max = self.state.borrow().limits.max_depth;
        if self.depth >= max {
            return Err(self.fail(JsonError::TooDeep(max)));
        }
        Ok(Walk {
            state: self.state,
            depth: self.depth + 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.count(0)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.count(0)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.count(0)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.count(0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.count(v.len())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.count(0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.count(0)?;
        let inner = self.nested()?;
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.count(0)?;
        let inner = self.nested()?;
        let mut names: Vec<Cow<'de, str>> = Vec::new();
        while let Some(name) = map.next_key_seed(Name)? {
            {
                let mut s = self.state.borrow_mut();
                s.stats.members += 1;
                s.stats.string_bytes += name.len();
            }
            names.push(name);
            map.next_value_seed(inner)?;
        }
        // Sorting the names of one object, then one look at neighbours: O(n log n) whatever
        // the names are (a hash set would do too; this allocates nothing more).
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            let shown: String = w[0].chars().take(64).collect();
            return Err(self.fail(JsonError::DuplicateKey(shown)));
        }
        Ok(())
    }
}

/// A member name, borrowed from the input when it has no escapes.
struct Name;

impl<'de> DeserializeSeed<'de> for Name {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const L: Limits = Limits {
        max_depth: 8,
        max_values: 100,
    };

    #[test]
    fn refuses_a_repeated_member_name_at_any_depth() {
        for bad in [
            r#"{"seq":1,"seq":9}"#,
            r#"{"a":{"b":1,"c":2,"b":3}}"#,
            r#"[{"x":1},{"y":[{"z":1,"z":1}]}]"#,
            // The same name spelled with an escape is the same name.
            r#"{"did":1,"d\u0069d":2}"#,
        ] {
            assert!(
                matches!(check(bad.as_bytes(), L), Err(JsonError::DuplicateKey(_))),
                "{bad}"
            );
        }
        // Equal names in different objects are fine.
        let ok = check(br#"{"a":{"x":1},"b":{"x":1},"x":[1,"x"]}"#, L).unwrap();
        assert_eq!((ok.values, ok.members), (8, 5));
    }

    #[test]
    fn refuses_too_many_values_and_too_deep() {
        let many = format!("[{}0]", "0,".repeat(100));
        assert_eq!(
            check(many.as_bytes(), L),
            Err(JsonError::TooManyValues(100))
        );
        let deep = format!("{}{}", "[".repeat(9), "]".repeat(9));
        assert_eq!(check(deep.as_bytes(), L), Err(JsonError::TooDeep(8)));
        assert!(check(b"[[[[[[[[]]]]]]]]", L).is_ok());
    }

    #[test]
    fn syntax_errors_and_trailing_bytes_are_syntax() {
        for bad in [&b"{"[..], b"{\"a\":1} x", b"\xff", b""] {
            assert!(
                matches!(check(bad, L), Err(JsonError::Syntax(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_estimate_sees_what_small_values_cost() {
        // 64 KiB of one-digit numbers: ~32K values, ~1 MiB parsed. The estimate must say so.
        let n = 32 * 1024;
        let arr = format!("[{}0]", "0,".repeat(n - 1));
        let stats = check(
            arr.as_bytes(),
            Limits {
                max_depth: 2,
                max_values: usize::MAX,
            },
        )
        .unwrap();
        assert!(stats.estimated_heap() >= 16 * arr.len(), "{stats:?}");
    }

    proptest! {
        #[test]
        fn agrees_with_serde_json_on_unique_input(v in proptest_json()) {
            let bytes = serde_json::to_vec(&v).unwrap();
            let lim = Limits { max_depth: 64, max_values: 1 << 20 };
            prop_assert!(check(&bytes, lim).is_ok());
            prop_assert_eq!(from_slice(&bytes, lim).unwrap(), v);
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = check(&bytes, L);
        }
    }

    fn proptest_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z\\\\\"é]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                proptest::collection::btree_map("[a-z\"]{0,4}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
