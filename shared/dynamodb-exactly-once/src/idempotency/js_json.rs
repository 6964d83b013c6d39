//! `JSON.stringify(deepSort(value))` as Node writes it for TypeScript Powertools
//! (`@aws-lambda-powertools/idempotency` 2.35.0, `deepSort.js`, `BasePersistenceLayer.js`):
//! object keys sorted case-insensitively (`a.toLowerCase() < b.toLowerCase()`, UTF-16 code
//! units), then laid out as a JavaScript object lays them out (keys that are array indices
//! first, in numeric order); no spaces; strings raw UTF-8 with `"`, `\`, and the control
//! characters escaped (`\n`, `\u0001`); every number a JavaScript `Number` (a double: the
//! text parsed to the nearest `f64`, printed as `Number.prototype.toString` prints it:
//! `1`, `1e+21`, `1e-7`, `0.000001`, `123456789012345680000`).

use serde_json::{Map, Value};

use crate::ddb::json_style::JsonStyle;

/// `JSON.stringify(deepSort(value))`.
pub(super) fn js_json(value: &Value) -> String {
    Js.text(value)
}

/// `JSON.stringify`'s spelling of what `deepSort` built.
struct Js;

impl JsonStyle for Js {
    fn number(&self, n: &serde_json::Number, out: &mut String) {
        out.push_str(&js_number(&n.to_string()));
    }

    fn string(&self, s: &str, out: &mut String) {
        write_js_str(s, out);
    }

    fn entries<'a>(&self, map: &'a Map<String, Value>) -> Vec<(&'a String, &'a Value)> {
        js_key_order(map)
    }
}

/// The order `JSON.stringify` gives the keys of the object `deepSort` built: array-index
/// keys (`0` .. `4294967294`, no leading zeros) in numeric order, then the others in
/// `deepSort`'s case-insensitive order (a stable sort: keys equal but for case keep the
/// map's order).
fn js_key_order(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let (mut indices, mut names): (Vec<_>, Vec<_>) =
        map.iter().partition(|(k, _)| array_index(k).is_some());
    indices.sort_by_key(|(k, _)| array_index(k));
    names.sort_by(|(a, _), (b, _)| {
        let (a, b) = (a.to_lowercase(), b.to_lowercase());
        a.encode_utf16().cmp(b.encode_utf16())
    });
    indices.extend(names);
    indices
}

fn array_index(key: &str) -> Option<u32> {
    let canonical = key == "0" || (!key.starts_with('0') && !key.is_empty());
    if !canonical || !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    key.parse::<u32>().ok().filter(|&i| i != u32::MAX)
}

/// `JSON.stringify`'s string: `"`, `\`, `\b`, `\f`, `\n`, `\r`, `\t`, other control characters
/// as `\u00xx`; everything else as it is.
fn write_js_str(s: &str, out: &mut String) {
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
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON number as `JSON.parse` then `JSON.stringify` give it back.
fn js_number(text: &str) -> String {
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => js_double(f),
        _ => "null".into(),
    }
}

/// `Number.prototype.toString()` (ECMA-262 Number::toString, radix 10).
fn js_double(f: f64) -> String {
    if f == 0.0 {
        return "0".into();
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let n = exp.parse::<i32>().unwrap_or(0) + 1; // the decimal point after n digits
    let sign = if f < 0.0 { "-" } else { "" };
    let body = if k <= n && n <= 21 {
        format!(
            "{digits}{}",
            "0".repeat(usize::try_from(n - k).unwrap_or(0))
        )
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(usize::try_from(n).unwrap_or(0));
        format!("{int}.{frac}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat(usize::try_from(-n).unwrap_or(0)))
    } else {
        let e = n - 1;
        let esign = if e < 0 { '-' } else { '+' };
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        format!("{first}{rest}e{esign}{}", e.abs())
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node 20's `JSON.stringify` of the same value (`node -e`).
    #[test]
    fn values_are_written_as_node_writes_them() {
        let value: Value = serde_json::from_str(
            r#"{"b": 1, "A": [1.0, 1e21, 1e-7, 0.000001, 123456789012345678901, "é\n\u0001\u007f", -0.0], "10": true, "2": null, "a": 2}"#,
        )
        .expect("json");
        assert_eq!(
            js_json(&value),
            "{\"2\":null,\"10\":true,\"A\":[1,1e+21,1e-7,0.000001,123456789012345680000,\"é\\n\\u0001\u{7f}\",0],\"a\":2,\"b\":1}"
        );
        for (json, js) in [
            ("0.1", "0.1"),
            ("1e300", "1e+300"),
            ("-2.5e-7", "-2.5e-7"),
            ("123.456", "123.456"),
            ("1e20", "100000000000000000000"),
            ("5", "5"),
        ] {
            assert_eq!(js_number(json), js, "{json}");
        }
    }
}
