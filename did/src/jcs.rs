//! RFC 8785 JSON Canonicalization Scheme, through the `serde_jcs` crate.

use serde_json::Value;

/// The RFC 8785 canonical bytes of a JSON value.
pub fn canonicalize(value: &Value) -> Vec<u8> {
    // serde_jcs sorts keys by UTF-16 code units and formats numbers the ECMAScript way; it only
    // fails on non-JSON input (NaN), which a serde_json::Value cannot hold.
    serde_jcs::to_vec(value).expect("a serde_json::Value always canonicalizes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8785_examples() {
        let v: Value = serde_json::from_str(
            r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(canonicalize(&v)).unwrap(),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
        let sorted: Value =
            serde_json::from_str(r#"{"b":1,"a":{"d":1,"c":2},"\u00e9":0,"Z":3}"#).unwrap();
        assert_eq!(
            String::from_utf8(canonicalize(&sorted)).unwrap(),
            r#"{"Z":3,"a":{"c":2,"d":1},"b":1,"é":0}"#
        );
    }
}
