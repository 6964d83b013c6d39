//! Values of list and set records: JSON to attribute values, and set elements that are
//! distinct in DynamoDB's eyes (one spelling per number).

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;

use crate::ddb::number::Number;

use crate::rejection::{Rejection, RejectionCode};

/// The elements of a set operation: distinct, all strings or all numbers.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetValues {
    /// A string set (`SS`).
    Strings(Vec<String>),
    /// A number set (`NS`), each number in one canonical spelling.
    Numbers(Vec<String>),
}

impl SetValues {
    /// The set as an attribute value; `None` when empty (DynamoDB has no empty sets).
    pub fn to_attribute(&self) -> Option<AttributeValue> {
        match self {
            SetValues::Strings(v) if !v.is_empty() => Some(AttributeValue::Ss(v.clone())),
            SetValues::Numbers(v) if !v.is_empty() => Some(AttributeValue::Ns(v.clone())),
            _ => None,
        }
    }
}

pub(super) fn single_value(value: Option<&Value>) -> Result<AttributeValue, Rejection> {
    value
        .map(to_attribute)
        .unwrap_or_else(|| Err(reject(RejectionCode::InvalidValues, "`value` is missing")))
}

pub(super) fn to_attribute(value: &Value) -> Result<AttributeValue, Rejection> {
    crate::ddb::item::to_attribute_value(value)
        .map_err(|e| reject(RejectionCode::InvalidNumber, e.to_string()))
}

/// Distinct strings or distinct numbers (numbers spelled canonically: `1`, `1.0` and `1e0`
/// are one element, as DynamoDB sees them).
pub(super) fn set_values(values: Option<&Value>) -> Result<SetValues, Rejection> {
    let Some(Value::Array(items)) = values else {
        return Err(reject(
            RejectionCode::InvalidValues,
            "`values` must be an array",
        ));
    };
    let mixed = || {
        reject(
            RejectionCode::InvalidValues,
            "set elements must be all strings or all numbers",
        )
    };
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    let numbers = matches!(items.first(), Some(Value::Number(_)));
    for item in items {
        let element = match (item, numbers) {
            (Value::String(s), false) => s.clone(),
            (Value::Number(n), true) => canonical_number(n)?,
            _ => return Err(mixed()),
        };
        if !out.contains(&element) {
            out.push(element);
        }
    }
    Ok(if numbers {
        SetValues::Numbers(out)
    } else {
        SetValues::Strings(out)
    })
}

/// One spelling per number value ([`Number::canonical`]); a number DynamoDB refuses is
/// `invalid_number`.
fn canonical_number(n: &serde_json::Number) -> Result<String, Rejection> {
    Number::from_json(n)
        .map(|n| n.canonical())
        .map_err(|e| reject(RejectionCode::InvalidNumber, e.to_string()))
}

fn reject(code: RejectionCode, message: impl Into<String>) -> Rejection {
    Rejection::new(code, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_values_are_deduplicated_in_canonical_spelling() {
        let json: Value = serde_json::from_str("[1,1.0,1e0,2.5,2.50]").expect("json");
        let values = set_values(Some(&json)).expect("numbers");
        assert_eq!(values, SetValues::Numbers(vec!["1".into(), "2.5".into()]));
        assert_eq!(SetValues::Strings(vec![]).to_attribute(), None);
    }
}
