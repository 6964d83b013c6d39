//! Ratchet timestamps of any size: [`Ts`], and how each one is stored so that DynamoDB compares
//! it correctly.
//!
//! # Encoding
//!
//! A timestamp is an integer in `[-2^63, 10^64)`:
//!
//! | value | stored as | example |
//! |---|---|---|
//! | `-2^63 ..= 2^64 - 1` (what `i64` and `u64` hold) | a number (`N`), exactly as before | `1721770090000` |
//! | `2^64 ..< 10^64` | a string (`S`) of [`BIG_TS_DIGITS`] digits, zero-padded | `0000000049590338271490256608559692538361571095921575989136588898` |
//!
//! DynamoDB compares numbers numerically and strings bytewise; fixed-width digit strings sort
//! exactly as their values. It never orders a number against a string (`<` and `=` across
//! types are false), so the write condition of a string timestamp adds
//! `attribute_type(#ts, :numeric)`: every stored number is smaller than every string
//! ([`super::CONDITION_NEWER_BIG`]). A number timestamp keeps [`super::CONDITION_NEWER`]
//! unchanged: against a stored string it is false, which is right (the string is greater).
//!
//! Each value has exactly one representation (`"17"` and `17` are the same timestamp and are
//! stored as the number `17`), so a redelivery is recognised whichever JSON type carried it.
//!
//! # Compatibility
//!
//! Items written before string timestamps existed hold numbers and keep comparing as they did;
//! the requests for number timestamps are byte for byte the old ones. A key may move from
//! number timestamps to string ones (a source whose counter grows past `u64`) and never back.
//! A writer of the earlier version that meets a string timestamp fails its condition (cross-type
//! comparisons are false), reports the record `stale` and leaves the newer item alone; it
//! cannot parse a string `ts` from a body (`invalid_timestamp`, kept as a dead letter), so
//! deploy the new version before producers send timestamps above `u64`.

use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;

/// Digits of a stored string timestamp (enough for Kinesis sequence numbers, 56 digits, and
/// DynamoDB Streams sequence numbers, up to 40).
pub(crate) const BIG_TS_DIGITS: usize = 64;

/// A ratchet timestamp: an integer from `-2^63` up to 64 digits, ordered numerically.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ts(Repr);

/// Variant order is value order: every `Number` is below every `Digits`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Repr {
    /// `-2^63 ..= 2^64 - 1`, stored as `N`.
    Number(i128),
    /// Above `2^64 - 1`: [`BIG_TS_DIGITS`] digits, zero-padded, stored as `S`.
    Digits(String),
}

/// Why a value is not a timestamp (a human-readable reason, never echoing the value whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TsError(String);

impl Ts {
    /// A timestamp from decimal digits (leading zeros allowed), e.g. a sequence number.
    pub fn from_digits(digits: &str) -> Result<Ts, TsError> {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(TsError(format!(
                "a string timestamp must be decimal digits only, got a string of {} bytes that is not",
                digits.len()
            )));
        }
        let significant = digits.trim_start_matches('0');
        if significant.len() > BIG_TS_DIGITS {
            return Err(TsError(format!(
                "a timestamp has at most {BIG_TS_DIGITS} digits, got {}",
                significant.len()
            )));
        }
        match significant.parse::<u64>() {
            Ok(small) => Ok(Ts::from(small)),
            Err(_) if significant.is_empty() => Ok(Ts::from(0u64)),
            Err(_) => Ok(Ts(Repr::Digits(format!(
                "{significant:0>width$}",
                width = BIG_TS_DIGITS
            )))),
        }
    }

    /// A timestamp from a JSON value: an integer number, or a string of decimal digits (for
    /// values beyond what JSON numbers carry exactly).
    pub fn from_json(value: &Value) -> Result<Ts, TsError> {
        match value {
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Ok(Ts::from(i)),
                (None, Some(u)) => Ok(Ts::from(u)),
                _ => Err(TsError(format!(
                    "`ts` must be an integer, got the number {}; send larger ones as a string of digits",
                    crate::rejection::quote(&n.to_string())
                ))),
            },
            Value::String(s) => Ts::from_digits(s),
            other => Err(TsError(format!(
                "`ts` must be an integer or a string of digits, got {}",
                crate::rejection::describe(other)
            ))),
        }
    }

    /// A stored timestamp: a number within `i64`/`u64`, or a string of digits.
    pub fn from_attribute(value: &AttributeValue) -> Option<Ts> {
        match value {
            AttributeValue::N(n) => {
                let v: i128 = n.parse().ok()?;
                (i128::from(i64::MIN)..=i128::from(u64::MAX))
                    .contains(&v)
                    .then_some(Ts(Repr::Number(v)))
            }
            AttributeValue::S(s) => Ts::from_digits(s).ok(),
            _ => None,
        }
    }

    /// The attribute value stored for this timestamp (see the module's table).
    pub fn to_attribute(&self) -> AttributeValue {
        match &self.0 {
            Repr::Number(n) => AttributeValue::N(n.to_string()),
            Repr::Digits(d) => AttributeValue::S(d.clone()),
        }
    }

    /// Whether it is stored as a string (above `u64`).
    pub fn is_big(&self) -> bool {
        matches!(self.0, Repr::Digits(_))
    }

    /// The value as `i128` when it is stored as a number.
    pub fn as_i128(&self) -> Option<i128> {
        match self.0 {
            Repr::Number(n) => Some(n),
            Repr::Digits(_) => None,
        }
    }

    /// The value in JSON: a number when stored as a number, else the string of digits
    /// without padding.
    pub fn to_json(&self) -> Value {
        match &self.0 {
            Repr::Number(n) => match (i64::try_from(*n), u64::try_from(*n)) {
                (Ok(i), _) => Value::from(i),
                (_, Ok(u)) => Value::from(u),
                _ => Value::String(n.to_string()),
            },
            Repr::Digits(_) => Value::String(self.to_string()),
        }
    }

    /// The part of a history sort key that orders versions: numbers as before (20 digits,
    /// negatives `-` and `ts + 2^63` on 20 digits), strings as `~` and their 64 digits (`~`
    /// sorts after every digit, so above every number).
    pub(crate) fn sort_key(&self) -> String {
        match &self.0 {
            Repr::Number(ts) if *ts < 0 => format!("-{:020}", ts + (1i128 << 63)),
            Repr::Number(ts) => format!("{ts:020}"),
            Repr::Digits(d) => format!("~{d}"),
        }
    }
}

impl fmt::Display for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Number(n) => write!(f, "{n}"),
            Repr::Digits(d) => f.write_str(d.trim_start_matches('0')),
        }
    }
}

impl From<i64> for Ts {
    fn from(v: i64) -> Ts {
        Ts(Repr::Number(i128::from(v)))
    }
}

impl From<u64> for Ts {
    fn from(v: u64) -> Ts {
        Ts(Repr::Number(i128::from(v)))
    }
}

impl std::str::FromStr for Ts {
    type Err = TsError;

    /// Decimal digits, or a negative `i64`.
    fn from_str(s: &str) -> Result<Ts, TsError> {
        match s.strip_prefix('-') {
            Some(_) => s
                .parse::<i64>()
                .map(Ts::from)
                .map_err(|e| TsError(format!("a negative timestamp must fit i64: {e}"))),
            None => Ts::from_digits(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn digits(n: usize, lead: char) -> String {
        std::iter::once(lead)
            .chain(std::iter::repeat_n('0', n - 1))
            .collect()
    }

    #[test]
    fn one_representation_per_value() {
        assert_eq!(Ts::from_digits("0017").ok(), Some(Ts::from(17i64)));
        assert_eq!(
            Ts::from_json(&Value::from("18446744073709551615")).ok(),
            Some(Ts::from(u64::MAX))
        );
        assert_eq!(Ts::from_digits("000").ok(), Some(Ts::from(0u64)));
        let big = Ts::from_digits("18446744073709551616").expect("2^64");
        assert!(big.is_big());
        assert_eq!(big.to_string(), "18446744073709551616");
        assert_eq!(Ts::from_attribute(&big.to_attribute()), Some(big));
        assert_eq!(
            Ts::from_attribute(&AttributeValue::N("-5".into())),
            Some(Ts::from(-5i64))
        );
    }

    #[test]
    fn sizes_and_shapes_are_bounded() {
        assert!(Ts::from_digits(&digits(64, '9')).is_ok());
        assert!(Ts::from_digits(&digits(65, '1')).is_err());
        assert!(Ts::from_digits(&format!("000{}", digits(64, '1'))).is_ok());
        for bad in ["", "-1", "1.5", "1e3", " 1", "x"] {
            assert!(Ts::from_digits(bad).is_err(), "{bad:?}");
        }
        assert!(Ts::from_json(&Value::from(1.5)).is_err());
        assert!(Ts::from_json(&Value::Bool(true)).is_err());
    }

    proptest! {
        /// Ordering of values, of stored strings (bytewise, as DynamoDB compares them) and of
        /// history sort keys agree, across the number/string boundary.
        #[test]
        fn stored_forms_sort_as_values(a in "[0-9]{1,60}", b in "[0-9]{1,60}", neg in -1000i64..0) {
            let (ta, tb) = (Ts::from_digits(&a).expect("a"), Ts::from_digits(&b).expect("b"));
            let value = |s: &str| {
                let t = s.trim_start_matches('0');
                (t.len(), t.to_string())
            };
            prop_assert_eq!(ta.cmp(&tb), value(&a).cmp(&value(&b)));
            prop_assert_eq!(ta.cmp(&tb), ta.sort_key().cmp(&tb.sort_key()));
            if let (AttributeValue::S(x), AttributeValue::S(y)) = (ta.to_attribute(), tb.to_attribute()) {
                prop_assert_eq!(ta.cmp(&tb), x.cmp(&y));
            }
            let n = Ts::from(neg);
            prop_assert!(n < ta && n.sort_key() < ta.sort_key());
        }
    }
}
