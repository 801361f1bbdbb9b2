//! RFC 8785 JSON Canonicalization Scheme.
//!
//! Written here rather than taken from `serde_jcs` (0.1): that crate orders object members by
//! their escaped UTF-8 bytes, not by UTF-16 code units as RFC 8785 §3.2.3 requires, so keys such
//! as `"a"`/`"a "`, `"\n"`/`"A"` or U+10000/U+FB01 come out in another order than the A2A SDKs
//! write them, and signatures over them fail. Numbers are formatted with `ryu-js`, which
//! implements ECMAScript's Number-to-String, as RFC 8785 §3.2.2.3 requires.

use serde_json::Value;

/// The RFC 8785 canonical bytes of a JSON value.
pub fn canonicalize(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| utf16_order(a.0, b.0));
            out.push(b'{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(k, out);
                out.push(b':');
                write(v, out);
            }
            out.push(b'}');
        }
    }
}

fn write_number(n: &serde_json::Number, out: &mut Vec<u8>) {
    // Every JSON number is an IEEE 754 double here (RFC 8785 §3.2.2.3); integers beyond 2^53
    // round like they do in the SDKs' JavaScript and Python implementations.
    let f = n.as_f64().unwrap_or(f64::NAN);
    if f == 0.0 {
        out.push(b'0'); // also -0, as ECMAScript writes it
    } else if f.is_finite() {
        out.extend_from_slice(ryu_js::Buffer::new().format_finite(f).as_bytes());
    } else {
        // serde_json cannot hold NaN or infinities; keep the output valid JSON regardless.
        out.extend_from_slice(b"null");
    }
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    // Runs of bytes that need no escape are copied whole: a byte below 0x20, a quote or a
    // backslash is never part of a multi-byte UTF-8 sequence, so a byte scan finds every escape.
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(format!("\\u{:04x}", b).as_bytes());
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// RFC 8785 §3.2.3 orders members by the UTF-16 code units of their names. For two ASCII
/// names that is their byte order, which needs no re-encoding (and serde_json's map already
/// iterates in it, so the sort finds the members in order).
fn utf16_order(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.as_bytes().cmp(b.as_bytes())
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(s: &str) -> String {
        String::from_utf8(canonicalize(&serde_json::from_str(s).unwrap())).unwrap()
    }

    #[test]
    fn rfc8785_examples() {
        assert_eq!(
            c(
                r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#
            ),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
        // RFC 8785 §3.2.3's sorting example.
        assert_eq!(
            c(r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
    }

    #[test]
    fn keys_sort_by_utf16_code_units_not_escaped_bytes() {
        assert_eq!(c(r#"{"a!":3,"a":1,"a ":2}"#), r#"{"a":1,"a ":2,"a!":3}"#);
        assert_eq!(c(r#"{"A":1,"\n":2}"#), r#"{"\n":2,"A":1}"#);
        assert_eq!(c(r#"{"q#":1,"q\"":2}"#), r#"{"q\"":2,"q#":1}"#);
        assert_eq!(
            c("{\"\u{fb01}\":1,\"\u{10000}\":2}"),
            "{\"\u{10000}\":2,\"\u{fb01}\":1}"
        );
    }

    #[test]
    fn numbers_are_written_the_ecmascript_way() {
        assert_eq!(
            c("[1.0,-0.0,1e21,1e20,0.1,1e-7,1e-6,9007199254740993,5e-324,-1.5]"),
            "[1,0,1e+21,100000000000000000000,0.1,1e-7,0.000001,9007199254740992,5e-324,-1.5]"
        );
    }

    proptest! {
        #[test]
        fn canonical_output_is_json_with_the_same_value(s in "\\PC{0,200}") {
            if let Ok(v) = serde_json::from_str::<Value>(&s) {
                let out = canonicalize(&v);
                let back: Value = serde_json::from_slice(&out).unwrap();
                // Same value up to number rounding: canonicalizing again changes nothing.
                prop_assert_eq!(canonicalize(&back), out);
            }
        }
    }
}
