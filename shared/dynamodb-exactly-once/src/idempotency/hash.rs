//! How keys and payload hashes are spelled, in this layer's own format and in Powertools'.
//!
//! * [`RecordFormat::Native`]: the stored key is `<namespace>#<operation>#<key>` (the key's
//!   SHA-256 when the whole is over [`MAX_KEY_BYTES`](super::MAX_KEY_BYTES)); the payload hash
//!   is the SHA-256 (first 16 bytes, hex) of the payload's canonical JSON
//!   ([`canonical_json`]: keys sorted, numbers in their one DynamoDB spelling, whatever
//!   serde_json's `preserve_order` or the producer's spelling).
//! * [`RecordFormat::Powertools`]: as aws-lambda-powertools (Python) 3.x spells them: the key
//!   is `<namespace>.<operation>#<md5 hex of json.dumps(key, sort_keys=True)>` (the key's
//!   JSON value: a string given to `run`, what a `KeySource` read for `run_record`), the payload
//!   hash the MD5 hex of `json.dumps(part, sort_keys=True)`, with Python's default separators
//!   (`", "`, `": "`) and `ensure_ascii`. [`python_json`] writes that text; it equals
//!   Python's for strings, booleans, `null`, integers (within i64/u64, or any size under
//!   serde_json's `arbitrary_precision`), and numbers with a fraction or an
//!   exponent that an f64 holds exactly as written (Python parses them as `float` and
//!   prints its shortest repr).
//! * [`RecordFormat::PowertoolsTypeScript`]: as `@aws-lambda-powertools/idempotency` 2.35.0
//!   spells them: `<operation>#<base64 md5 of JSON.stringify(deepSort(key))>`, the payload
//!   hash the base64 MD5 of the same text of the part (see `js_json`).

use crate::ddb::item::canonical_json;
use crate::ddb::json_style::{sorted_entries, JsonStyle};
use md5::Md5;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::java_text::java_text;
use super::js_json::js_json;
use super::MAX_KEY_BYTES;

/// How a store's records spell keys and payload hashes (see the module documentation).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordFormat {
    /// `<namespace>#<operation>#<key>`, SHA-256 of canonical JSON.
    #[default]
    Native,
    /// aws-lambda-powertools' `<function>.<operation>#<md5>`, MD5 of Python's `json.dumps`.
    Powertools,
    /// TypeScript Powertools' (`@aws-lambda-powertools/idempotency` 2.35.0)
    /// `<operation>#<base64 md5>` (the operation is its key prefix: the TypeScript function's
    /// `AWS_LAMBDA_FUNCTION_NAME`, or its `keyPrefix`), MD5 of `JSON.stringify` over keys
    /// sorted case-insensitively (`js_json`), results as native DynamoDB
    /// values.
    PowertoolsTypeScript,
    /// Powertools for Java's (`powertools-idempotency` 2.10.0) `<function>.<method>#<md5 hex>`
    /// of the text `generateHash` digests (`java_text`: a string
    /// without quotes, an object as Jackson's compact JSON); a `String` result stored raw.
    /// Read from its source: Java cannot run here, a corpus of keys is checked instead.
    PowertoolsJava,
}

impl RecordFormat {
    /// The stored key of `key` (read as the JSON value `json`) for `operation` under
    /// `namespace`.
    pub fn stored_key(self, namespace: &str, operation: &str, key: &str, json: &Value) -> String {
        let prefix = match self {
            RecordFormat::Native => format!("{namespace}#{operation}"),
            RecordFormat::Powertools => format!("{namespace}.{operation}"),
            RecordFormat::PowertoolsTypeScript => operation.to_string(),
            RecordFormat::PowertoolsJava => format!("{namespace}.{operation}"),
        };
        self.prefixed_key(&prefix, key, json)
    }

    /// The stored key of `key` (read as the JSON value `json`) under a whole key `prefix`
    /// (Powertools' `key_prefix`): `<prefix>#<key>` (native), `<prefix>#<md5>` (Powertools).
    pub fn prefixed_key(self, prefix: &str, key: &str, json: &Value) -> String {
        match self {
            RecordFormat::Native => {
                let full = format!("{prefix}#{key}");
                if full.len() <= MAX_KEY_BYTES {
                    return full;
                }
                let digest = hex::encode(Sha256::digest(key.as_bytes()));
                format!("{prefix}#sha256:{digest}")
            }
            RecordFormat::Powertools => format!("{prefix}#{}", md5_hex(&python_json(json))),
            RecordFormat::PowertoolsTypeScript => {
                format!("{prefix}#{}", md5_base64(&js_json(json)))
            }
            RecordFormat::PowertoolsJava => format!("{prefix}#{}", md5_hex(&java_text(json))),
        }
    }

    /// Whether the records are a Powertools library's (its attribute names and status
    /// values; a `#` allowed in the key's prefix: the key after it is a fixed-length digest).
    pub(super) fn is_powertools(self) -> bool {
        matches!(
            self,
            RecordFormat::Powertools
                | RecordFormat::PowertoolsTypeScript
                | RecordFormat::PowertoolsJava
        )
    }

    /// The hash of a payload (or of the part of it that is validated).
    pub fn payload_hash(self, part: &Value) -> String {
        match self {
            RecordFormat::Native => {
                hex::encode(&Sha256::digest(canonical_json(part).as_bytes())[..16])
            }
            RecordFormat::Powertools => md5_hex(&python_json(part)),
            RecordFormat::PowertoolsTypeScript => md5_base64(&js_json(part)),
            RecordFormat::PowertoolsJava => md5_hex(&java_text(part)),
        }
    }
}

fn md5_hex(text: &str) -> String {
    hex::encode(Md5::digest(text.as_bytes()))
}

fn md5_base64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(Md5::digest(text.as_bytes()))
}

/// `json.dumps(value, sort_keys=True)` as CPython writes it (see the module documentation
/// for the numbers this is exact for).
pub(super) fn python_json(value: &Value) -> String {
    Python.text(value)
}

/// CPython's `json.dumps(.., sort_keys=True)`: `", "` and `": "`, sorted keys, `ensure_ascii`.
struct Python;

impl JsonStyle for Python {
    const ITEM_SEPARATOR: &'static str = ", ";
    const KEY_SEPARATOR: &'static str = ": ";

    fn number(&self, n: &serde_json::Number, out: &mut String) {
        out.push_str(&python_number(&n.to_string()));
    }

    fn string(&self, s: &str, out: &mut String) {
        write_python_str(s, out);
    }

    fn entries<'a>(&self, map: &'a Map<String, Value>) -> Vec<(&'a String, &'a Value)> {
        // Python sorts str keys by code point: the order of their UTF-8 bytes.
        sorted_entries(map)
    }
}

/// `ensure_ascii` escaping: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, and `\uxxxx`
/// (lowercase; UTF-16 surrogate pairs above U+FFFF) for everything outside ` `..=`~`.
fn write_python_str(s: &str, out: &mut String) {
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
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

/// A JSON number as Python prints what `json.loads` made of it: an integer's digits as they
/// are; anything with a fraction or an exponent as a float's repr (shortest round trip,
/// exponent form below 1e-4 or from 1e16, `.0` on whole numbers).
fn python_number(text: &str) -> String {
    if !text.contains(['.', 'e', 'E']) {
        // Python's int: `-0` is 0.
        return if text == "-0" {
            "0".into()
        } else {
            text.to_string()
        };
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => python_float_repr(f),
        Ok(f) if f > 0.0 => "Infinity".into(),
        Ok(_) => "-Infinity".into(),
        Err(_) => text.to_string(),
    }
}

fn python_float_repr(f: f64) -> String {
    // Rust's `{:e}` gives the shortest round-trip digits: `d[.ddd]e<exp>`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if f == 0.0 {
        return format!("{sign}0.0");
    }
    if !(-4..16).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        let zeros = "0".repeat(usize::try_from(-point).unwrap_or(0));
        return format!("{sign}0.{zeros}{digits}");
    }
    let point = usize::try_from(point).unwrap_or(0);
    if digits.len() <= point {
        let zeros = "0".repeat(point - digits.len());
        return format!("{sign}{digits}{zeros}.0");
    }
    let (int, frac) = digits.split_at(point);
    format!("{sign}{int}.{frac}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_are_spelled_as_python_repr_spells_them() {
        for (json, python) in [
            ("1.0", "1.0"),
            ("1e2", "100.0"),
            ("0.1", "0.1"),
            ("1e16", "1e+16"),
            ("1e15", "1000000000000000.0"),
            ("0.0001", "0.0001"),
            ("0.00001", "1e-05"),
            ("-2.5e-7", "-2.5e-07"),
            ("1.5e300", "1.5e+300"),
            ("123.456", "123.456"),
            ("-0.0", "-0.0"),
            ("12345678901234567890", "12345678901234567890"),
        ] {
            assert_eq!(python_number(json), python, "{json}");
        }
    }

    #[test]
    fn text_is_escaped_as_ensure_ascii_escapes_it() {
        let v = json!({"b": "é\u{1F600}\"\\\n\u{7f}", "a": [1, true, null]});
        assert_eq!(
            python_json(&v),
            r#"{"a": [1, true, null], "b": "\u00e9\ud83d\ude00\"\\\n\u007f"}"#
        );
    }

    #[test]
    fn one_hash_for_one_value_whatever_the_spelling_or_order() {
        let f = RecordFormat::Native;
        let a: Value = serde_json::from_str(r#"{"x": 1, "y": {"b": 2, "a": 1.0}}"#).expect("json");
        let b: Value =
            serde_json::from_str(r#"{"y": {"a": 1, "b": 2e0}, "x": 1.00}"#).expect("json");
        assert_eq!(f.payload_hash(&a), f.payload_hash(&b));
        assert_ne!(f.payload_hash(&a), f.payload_hash(&json!({"x": 2})));
    }
}
