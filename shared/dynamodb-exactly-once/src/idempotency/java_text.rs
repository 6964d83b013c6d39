//! The text Powertools for Java (`powertools-idempotency-core` 2.10.0,
//! `BasePersistenceStore.generateHash`) hashes for a key or a validated part, read from its
//! source: a string's own characters (**no quotes**); an integer's digits (`IntNode`,
//! `LongNode`, `BigIntegerNode`); a number with a fraction or an exponent as Java's
//! `Double.toString` prints the double (`1.5`, `1.0`, `1.0E21`, `1.0E-7`); `true`/`false`;
//! an array or object as Jackson's compact JSON (`JsonNode.toString()`: keys in the
//! document's order, strings escaped as Jackson escapes them, numbers as above). The digest
//! is the MD5 as 32 lowercase hex digits (`String.format("%032x", ..)`).

use serde_json::{Map, Value};

use crate::ddb::json_style::JsonStyle;

/// The text Java's `generateHash` digests for `value`.
pub(super) fn java_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => Jackson.text(other),
    }
}

/// Jackson's compact JSON (`JsonNode.toString()`): keys in the map's order (the document's
/// only with serde_json's `preserve_order`), numbers as Java prints them.
struct Jackson;

impl JsonStyle for Jackson {
    fn number(&self, n: &serde_json::Number, out: &mut String) {
        out.push_str(&java_number(&n.to_string()));
    }

    fn string(&self, s: &str, out: &mut String) {
        write_jackson_str(s, out);
    }

    fn entries<'a>(&self, map: &'a Map<String, Value>) -> Vec<(&'a String, &'a Value)> {
        map.iter().collect()
    }
}

/// Jackson's quoted string: `"`, `\`, and control characters escaped (`\n`, `\t`, ...,
/// else `\u00XX` with upper-case hex); everything else as it is.
fn write_jackson_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// An integer's digits as they are; anything with a fraction or an exponent as
/// `Double.toString` prints the nearest double.
fn java_number(text: &str) -> String {
    if !text.contains(['.', 'e', 'E']) {
        return text.to_string();
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => java_double(f),
        _ => text.to_string(),
    }
}

/// `Double.toString(d)` (JDK 19+: the shortest digits that round-trip): `d.ddd` when
/// 10^-3 <= |d| < 10^7, else `d.dddE<exp>`; always at least one digit after the point.
fn java_double(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    let sign = if f < 0.0 { "-" } else { "" };
    if (-3..7).contains(&exp) {
        let point = exp + 1;
        let body = if point <= 0 {
            format!(
                "0.{}{digits}",
                "0".repeat(usize::try_from(-point).unwrap_or(0))
            )
        } else {
            let point = usize::try_from(point).unwrap_or(0);
            if digits.len() <= point {
                format!("{digits}{}.0", "0".repeat(point - digits.len()))
            } else {
                let (int, frac) = digits.split_at(point);
                format!("{int}.{frac}")
            }
        };
        return format!("{sign}{body}");
    }
    let (first, rest) = digits.split_at(1);
    let rest = if rest.is_empty() { "0" } else { rest };
    format!("{sign}{first}.{rest}E{exp}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5::{Digest, Md5};
    use serde_json::json;

    fn md5_hex(text: &str) -> String {
        hex::encode(Md5::digest(text.as_bytes()))
    }

    /// A corpus computed from the source's rules (`generateHash`: the text; the digest as
    /// `%032x`), the digests taken independently with Python's `hashlib.md5`.
    #[test]
    fn keys_hash_as_powertools_for_java_hashes_them() {
        let number = |text: &str| serde_json::from_str::<Value>(text).expect("json");
        for (value, text, digest) in [
            (json!("o-1"), "o-1", "ab8e7263ab3ab8220b9ada31fa9c435c"),
            (json!(5), "5", "e4da3b7fbbce2345d7772b0674a318d5"),
            (number("1.5"), "1.5", "6008647277c4454cecd97d33c069f0ca"),
            (number("1e21"), "1.0E21", "48dc38026ea665f5613b82c1b9fdeab4"),
            (
                number("0.0000001"),
                "1.0E-7",
                "6c2896420f8aa54ab7cbad9692edca5e",
            ),
            (number("0.001"), "0.001", "8f4e22c93710008b7ea050514a32ecdd"),
            (
                number("1234567.0"),
                "1234567.0",
                "57476b9646a304232cb213d386b50bed",
            ),
            (
                number("12345678.0"),
                "1.2345678E7",
                "484ddebde877f03f90b213f9d3e64348",
            ),
            (
                number("12345678901234567890"),
                "12345678901234567890",
                "fd85e62d9beb45428771ec688418b271",
            ),
            (json!(true), "true", "b326b5062b2f0e69046810717534cb09"),
            (
                json!(["a", 1, null]),
                "[\"a\",1,null]",
                "3d70956a1c814c5b14a1ecf57be07b55",
            ),
            (
                json!({"orderId": "é\u{1}"}),
                "{\"orderId\":\"é\\u0001\"}",
                "136307402e5198167c9b64b945477b38",
            ),
        ] {
            assert_eq!(java_text(&value), text, "{value}");
            assert_eq!(md5_hex(text), digest, "{value}");
        }
    }
}
