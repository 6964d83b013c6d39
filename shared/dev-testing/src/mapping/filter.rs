//! `FilterCriteria`: Lambda's event-pattern grammar
//! (<https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/with-ddb-filtering.html>), the part stream
//! mappings use. A record is sent to the function when any pattern matches it; a pattern
//! matches when every field it names matches. A field's rule is a nested object (a pattern
//! over the record's object there) or an array of alternatives: a literal (equality, exact
//! for numbers), `{"prefix": s}`, `{"suffix": s}`, `{"equals-ignore-case": s}`,
//! `{"anything-but": v | [v…]}`, `{"exists": bool}`, `{"numeric": [op, n, (op, n)]}`.
//! A record field holding an array matches when one of its elements does. DynamoDB numbers
//! (`{"N": "12"}` text) are compared exactly (`Number`, never f64).

use std::cmp::Ordering;
use std::fmt;

use dynamodb_exactly_once::Number;
use serde_json::{Map, Value};

/// Lambda's limit on one pattern's text.
const PATTERN_MAX_CHARS: usize = 4096;

/// Why a pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError(pub String);

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The patterns of a mapping (none: every record is sent).
#[derive(Debug, Clone, Default)]
pub struct FilterCriteria {
    patterns: Vec<Map<String, Value>>,
}

impl FilterCriteria {
    /// Checks each pattern against the grammar.
    pub fn new(patterns: Vec<Value>) -> Result<FilterCriteria, FilterError> {
        let mut out = Vec::with_capacity(patterns.len());
        for p in patterns {
            if p.to_string().len() > PATTERN_MAX_CHARS {
                return Err(FilterError(format!(
                    "a pattern is longer than {PATTERN_MAX_CHARS} characters"
                )));
            }
            let Value::Object(map) = p else {
                return Err(FilterError(format!("a pattern must be an object: {p}")));
            };
            check_object(&map)?;
            out.push(map);
        }
        Ok(FilterCriteria { patterns: out })
    }

    /// Whether `record` (Lambda's JSON of one stream record) is sent to the function.
    pub fn accepts(&self, record: &Value) -> bool {
        self.patterns.is_empty() || self.patterns.iter().any(|p| matches_object(p, record))
    }

    /// No pattern.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
}

fn check_object(map: &Map<String, Value>) -> Result<(), FilterError> {
    if map.is_empty() {
        return Err(FilterError("an empty object in a pattern".into()));
    }
    for (field, rule) in map {
        match rule {
            Value::Object(inner) => check_object(inner)?,
            Value::Array(alternatives) if !alternatives.is_empty() => {
                alternatives.iter().try_for_each(check_alternative)?
            }
            other => {
                return Err(FilterError(format!(
                    "{field}: a rule must be an array or an object, not {other}"
                )))
            }
        }
    }
    Ok(())
}

fn check_alternative(alt: &Value) -> Result<(), FilterError> {
    let Value::Object(op) = alt else {
        return Ok(()); // a literal
    };
    let bad = || FilterError(format!("unknown or malformed operator {alt}"));
    let (name, arg) = op.iter().next().filter(|_| op.len() == 1).ok_or_else(bad)?;
    let ok = match name.as_str() {
        "prefix" | "suffix" | "equals-ignore-case" => arg.is_string(),
        "exists" => arg.is_boolean(),
        "anything-but" => true,
        "numeric" => numeric_ranges(arg).is_some(),
        _ => false,
    };
    ok.then_some(()).ok_or_else(bad)
}

fn matches_object(pattern: &Map<String, Value>, record: &Value) -> bool {
    pattern.iter().all(|(field, rule)| {
        let value = record.get(field);
        match rule {
            Value::Object(inner) => value.is_some_and(|v| matches_object(inner, v)),
            Value::Array(alternatives) => alternatives.iter().any(|a| matches_rule(a, value)),
            _ => false,
        }
    })
}

/// One alternative against the record's value at that field (`None`: absent).
fn matches_rule(alt: &Value, value: Option<&Value>) -> bool {
    if let Some(Value::Object(op)) = Some(alt) {
        if let Some(("exists", Value::Bool(want))) = op.iter().next().map(|(k, v)| (k.as_str(), v))
        {
            return value.is_some() == *want;
        }
    }
    match value {
        None => false,
        Some(Value::Array(items)) => items.iter().any(|v| matches_one(alt, v)),
        Some(v) => matches_one(alt, v),
    }
}

fn matches_one(alt: &Value, v: &Value) -> bool {
    let Value::Object(op) = alt else {
        return literal_eq(alt, v);
    };
    let Some((name, arg)) = op.iter().next() else {
        return false;
    };
    let text = v.as_str();
    match (name.as_str(), arg) {
        ("prefix", Value::String(p)) => text.is_some_and(|t| t.starts_with(p.as_str())),
        ("suffix", Value::String(s)) => text.is_some_and(|t| t.ends_with(s.as_str())),
        ("equals-ignore-case", Value::String(s)) => {
            text.is_some_and(|t| t.to_lowercase() == s.to_lowercase())
        }
        ("anything-but", Value::Array(not)) => !not.iter().any(|n| literal_eq(n, v)),
        ("anything-but", single) => !literal_eq(single, v),
        ("numeric", ranges) => numeric_ranges(ranges)
            .zip(number_of(v))
            .is_some_and(|(ranges, n)| ranges.iter().all(|(op, bound)| compare(op, &n, bound))),
        _ => false,
    }
}

fn literal_eq(literal: &Value, v: &Value) -> bool {
    match (literal, number_of(literal), number_of(v)) {
        (Value::Number(_), Some(a), Some(b)) => cmp(&a, &b) == Some(Ordering::Equal),
        _ => literal == v,
    }
}

/// A JSON number, or a string holding one (DynamoDB's `N` text).
fn number_of(v: &Value) -> Option<Number> {
    match v {
        Value::Number(n) => Number::from_json(n).ok(),
        Value::String(s) => Number::parse(s).ok(),
        _ => None,
    }
}

fn cmp(a: &Number, b: &Number) -> Option<Ordering> {
    let diff = a.checked_add(&b.negated()).ok()?;
    Some(if diff.is_zero() {
        Ordering::Equal
    } else if diff.canonical().starts_with('-') {
        Ordering::Less
    } else {
        Ordering::Greater
    })
}

fn numeric_ranges(arg: &Value) -> Option<Vec<(String, Number)>> {
    let items = arg.as_array()?;
    if items.is_empty() || items.len() % 2 != 0 || items.len() > 4 {
        return None;
    }
    items
        .chunks(2)
        .map(|pair| {
            let op = pair[0].as_str()?;
            matches!(op, "=" | "<" | "<=" | ">" | ">=").then_some(())?;
            let Value::Number(n) = &pair[1] else {
                return None;
            };
            Some((op.to_string(), Number::from_json(n).ok()?))
        })
        .collect()
}

fn compare(op: &str, n: &Number, bound: &Number) -> bool {
    let Some(o) = cmp(n, bound) else {
        return false;
    };
    match op {
        "=" => o == Ordering::Equal,
        "<" => o == Ordering::Less,
        "<=" => o != Ordering::Greater,
        ">" => o == Ordering::Greater,
        ">=" => o != Ordering::Less,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(name: &str, n: &str) -> Value {
        json!({
            "eventName": name,
            "dynamodb": {
                "Keys": {"pk": {"S": "user#1"}},
                "NewImage": {"pk": {"S": "user#1"}, "qty": {"N": n}, "tags": {"SS": ["a", "b"]}}
            }
        })
    }

    fn accepts(pattern: Value, r: &Value) -> bool {
        FilterCriteria::new(vec![pattern])
            .expect("valid")
            .accepts(r)
    }

    #[test]
    fn event_name_insert_passes_inserts_only() {
        let p = json!({"eventName": ["INSERT"]});
        assert!(accepts(p.clone(), &record("INSERT", "1")));
        assert!(!accepts(p, &record("REMOVE", "1")));
    }

    #[test]
    fn nested_patterns_and_operators() {
        let r = record("INSERT", "12.5");
        let key = |rule: Value| json!({"dynamodb": {"Keys": {"pk": {"S": rule}}}});
        assert!(accepts(key(json!([{"prefix": "user#"}])), &r));
        assert!(!accepts(key(json!([{"prefix": "order#"}])), &r));
        assert!(accepts(key(json!([{"suffix": "#1"}])), &r));
        assert!(accepts(key(json!([{"equals-ignore-case": "USER#1"}])), &r));
        assert!(accepts(key(json!([{"anything-but": ["x", "y"]}])), &r));
        assert!(!accepts(key(json!([{"anything-but": "user#1"}])), &r));
        let qty = |rule: Value| json!({"dynamodb": {"NewImage": {"qty": {"N": rule}}}});
        assert!(accepts(qty(json!([{"numeric": [">", 12, "<=", 13]}])), &r));
        assert!(!accepts(qty(json!([{"numeric": [">=", 13]}])), &r));
        let tags = json!({"dynamodb": {"NewImage": {"tags": {"SS": ["b"]}}}});
        assert!(accepts(tags, &r));
        let exists = |b: bool| json!({"dynamodb": {"OldImage": [{"exists": b}]}});
        assert!(accepts(exists(false), &r));
        assert!(!accepts(exists(true), &r));
    }

    #[test]
    fn several_patterns_are_alternatives_and_none_accepts_all() {
        let f = FilterCriteria::new(vec![
            json!({"eventName": ["MODIFY"]}),
            json!({"eventName": ["INSERT"]}),
        ])
        .expect("valid");
        assert!(f.accepts(&record("INSERT", "1")));
        assert!(!f.accepts(&record("REMOVE", "1")));
        assert!(FilterCriteria::default().accepts(&record("REMOVE", "1")));
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in [
            json!(["INSERT"]),
            json!({"eventName": "INSERT"}),
            json!({"eventName": []}),
            json!({"eventName": [{"nope": 1}]}),
            json!({"n": [{"numeric": [">"]}]}),
            json!({}),
        ] {
            assert!(FilterCriteria::new(vec![bad.clone()]).is_err(), "{bad}");
        }
    }
}
