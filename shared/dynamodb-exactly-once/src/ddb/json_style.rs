//! One writer of JSON text for the spellings the crate must reproduce byte for byte: its own
//! canonical JSON ([`super::item::canonical_json`]) and the texts Powertools for Python,
//! TypeScript and Java hash (`idempotency`). The structure is written once; a style says how
//! numbers, strings and an object's keys are spelled and ordered, and what separates items
//! and a key from its value.

use serde_json::{Map, Number, Value};

/// How one spelling of JSON writes the parts it spells its own way.
pub(crate) trait JsonStyle {
    /// Between two items of an array or an object.
    const ITEM_SEPARATOR: &'static str = ",";
    /// Between an object's key and its value.
    const KEY_SEPARATOR: &'static str = ":";

    /// A number.
    fn number(&self, n: &Number, out: &mut String);
    /// A string, quoted and escaped (also an object's key).
    fn string(&self, s: &str, out: &mut String);
    /// An object's entries, in the order they are written.
    fn entries<'a>(&self, map: &'a Map<String, Value>) -> Vec<(&'a String, &'a Value)>;

    /// `value` as this style's text.
    fn text(&self, value: &Value) -> String {
        let mut out = String::new();
        self.write(value, &mut out);
        out
    }

    /// `value` written at the end of `out`.
    fn write(&self, value: &Value, out: &mut String) {
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => self.number(n, out),
            Value::String(s) => self.string(s, out),
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(Self::ITEM_SEPARATOR);
                    }
                    self.write(v, out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                out.push('{');
                for (i, (k, v)) in self.entries(map).into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(Self::ITEM_SEPARATOR);
                    }
                    self.string(k, out);
                    out.push_str(Self::KEY_SEPARATOR);
                    self.write(v, out);
                }
                out.push('}');
            }
        }
    }
}

/// An object's entries with the keys sorted by their UTF-8 bytes (Python's code point order).
pub(crate) fn sorted_entries(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_by_key(|(k, _)| *k);
    entries
}
