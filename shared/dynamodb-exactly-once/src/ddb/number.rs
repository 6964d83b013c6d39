//! Numbers as DynamoDB defines them: at most 38 significant digits, magnitude from `1E-130`
//! to `9.99…E+125` (or zero), compared by value, so `1`, `1.0`, `1e0` and `10E-1` are one
//! number (one key, one set element).
//!
//! A [`Number`] is an exact decimal (sign, significant digits, scale) parsed from a number's
//! text, never through `f64`; [`Number::canonical`] spells each value one way (plain decimal,
//! no exponent, no leading or trailing zeros, no `-0`), the string item identity is built from;
//! [`Number::checked_add`] adds exactly (the counter's in-process sums of deltas).
//!
//! Record bodies are parsed into `serde_json::Value` with serde_json's `arbitrary_precision`
//! (turned on in the workspace's `Cargo.toml`): a `serde_json::Number` keeps its text, so every
//! number reaches [`Number::from_json`] as the producer wrote it. That feature makes
//! `serde_json::Number` serialize as a one-field struct, which `serde_dynamo` (4.3) marshals
//! as a map, so JSON never goes to attribute values through `serde_dynamo`: the conversions of
//! [`crate::ddb::item`] (`to_attribute_value`, `json_to_item`, `item_to_json`) carry numbers
//! as `N` in their canonical spelling. [`check_json_numbers`] refuses, with a bounded reason
//! naming the rule, a number DynamoDB refuses: no number is ever rounded into another value,
//! another key or another item.
use std::fmt;

/// DynamoDB's precision: significant digits of a number.
pub(crate) const MAX_DIGITS: usize = 38;
/// The smallest adjusted exponent of a non-zero number (`1E-130`).
pub(crate) const MIN_EXPONENT: i64 = -130;
/// The largest adjusted exponent of a number (`9.99…E+125`).
pub(crate) const MAX_EXPONENT: i64 = 125;

/// An exact decimal number that DynamoDB accepts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Number {
    negative: bool,
    /// Significant digits without leading or trailing zeros; empty for zero.
    digits: String,
    /// The value is `digits × 10^scale`.
    scale: i64,
}

/// Why a number cannot be written (a bounded, human-readable reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NumberError {
    /// Not a number's text.
    #[error("{0} is not a number")]
    NotANumber(String),
    /// More significant digits than DynamoDB keeps.
    #[error("{text} has {digits} significant digits; DynamoDB keeps at most {MAX_DIGITS}")]
    TooPrecise {
        /// The number, quoted and bounded.
        text: String,
        /// Its significant digits.
        digits: usize,
    },
    /// Outside DynamoDB's range.
    #[error("{0} is outside DynamoDB's range (1E-130 to 9.99E+125 in magnitude, or 0)")]
    OutOfRange(String),
}

impl Number {
    /// Parse a number's text (JSON's grammar; DynamoDB's own spellings too) and check it
    /// against DynamoDB's limits.
    pub fn parse(text: &str) -> Result<Number, NumberError> {
        let quoted = || crate::text::quote(text);
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() && frac.is_empty() || !all_digits(int) || !all_digits(frac) {
            return Err(NumberError::NotANumber(quoted()));
        }
        let exponent = match exponent {
            None => 0,
            Some(e) => parse_exponent(e).ok_or_else(|| NumberError::OutOfRange(quoted()))?,
        };
        let joined = format!("{int}{frac}");
        let trimmed = joined.trim_start_matches('0');
        let significant = trimmed.trim_end_matches('0');
        let trailing = (trimmed.len() - significant.len()) as i64;
        let scale = exponent - frac.len() as i64 + trailing;
        let number = Number {
            negative: negative && !significant.is_empty(),
            digits: significant.to_string(),
            scale: if significant.is_empty() { 0 } else { scale },
        };
        number.check(text)
    }

    /// A parsed JSON number (whatever its in-memory form), checked as [`Number::parse`].
    pub fn from_json(n: &serde_json::Number) -> Result<Number, NumberError> {
        Number::parse(&n.to_string())
    }

    fn check(self, text: &str) -> Result<Number, NumberError> {
        if self.digits.len() > MAX_DIGITS {
            return Err(NumberError::TooPrecise {
                text: crate::text::quote(text),
                digits: self.digits.len(),
            });
        }
        if !self.digits.is_empty() {
            let adjusted = self.scale + self.digits.len() as i64 - 1;
            if !(MIN_EXPONENT..=MAX_EXPONENT).contains(&adjusted) {
                return Err(NumberError::OutOfRange(crate::text::quote(text)));
            }
        }
        Ok(self)
    }

    /// The one spelling of this value: plain decimal, no exponent, no leading or trailing
    /// zeros, `0` for zero (`1.0`, `1e0`, `10E-1` → `1`; `1.50` → `1.5`; `1e3` → `1000`).
    pub fn canonical(&self) -> String {
        if self.digits.is_empty() {
            return "0".into();
        }
        let sign = if self.negative { "-" } else { "" };
        let len = self.digits.len() as i64;
        // The scale is bounded by the range check: at most a few hundred zeros.
        let zeros = |n: i64| "0".repeat(usize::try_from(n).unwrap_or(0));
        if self.scale >= 0 {
            return format!("{sign}{}{}", self.digits, zeros(self.scale));
        }
        let point = len + self.scale;
        if point <= 0 {
            format!("{sign}0.{}{}", zeros(-point), self.digits)
        } else {
            let (int, frac) = self.digits.split_at(usize::try_from(point).unwrap_or(0));
            format!("{sign}{int}.{frac}")
        }
    }

    /// Significant digits (0 for zero).
    pub fn significant_digits(&self) -> usize {
        self.digits.len()
    }

    /// This number as a `serde_json::Number` (exact: serde_json keeps its canonical text).
    pub fn to_json(&self) -> serde_json::Number {
        let text = self.canonical();
        text.parse().unwrap_or_else(|_| unreachable_number(&text))
    }

    /// This number with its sign flipped (zero stays zero).
    pub fn negated(&self) -> Number {
        Number {
            negative: !self.negative && !self.is_zero(),
            ..self.clone()
        }
    }

    /// This number as an `i64`, when it is an integer in range.
    pub fn to_i64(&self) -> Option<i64> {
        if self.scale < 0 {
            return None;
        }
        self.canonical().parse().ok()
    }

    /// Whether this number is zero.
    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// The exact sum, or the rule it breaks when DynamoDB could not store it (more than
    /// 38 significant digits, or out of range): `ADD` would refuse it too.
    pub fn checked_add(&self, other: &Number) -> Result<Number, NumberError> {
        if self.is_zero() {
            return Ok(other.clone());
        }
        if other.is_zero() {
            return Ok(self.clone());
        }
        let scale = self.scale.min(other.scale);
        let too_precise = || NumberError::TooPrecise {
            text: format!("the sum of {self} and {other}"),
            digits: MAX_DIGITS + 1,
        };
        // Each significand has at most 38 digits (< 10^38). The one shifted to the common
        // scale is a multiple of 10 and the other is not, so the sum ends in a non-zero digit:
        // a shifted significand of 2·10^38 or more makes a sum of 39 digits or more.
        let limit = 2 * 10u128.pow(MAX_DIGITS as u32);
        let a = self
            .shifted(scale)
            .filter(|a| *a < limit)
            .ok_or_else(too_precise)?;
        let b = other
            .shifted(scale)
            .filter(|b| *b < limit)
            .ok_or_else(too_precise)?;
        let (negative, magnitude) = match (self.negative == other.negative, a >= b) {
            (true, _) => (self.negative, a + b),
            (false, true) => (self.negative, a - b),
            (false, false) => (other.negative, b - a),
        };
        let text = format!("{}{magnitude}e{scale}", if negative { "-" } else { "" });
        Number::parse(&text).map_err(|e| match e {
            NumberError::TooPrecise { digits, .. } => NumberError::TooPrecise {
                text: format!("the sum of {self} and {other}"),
                digits,
            },
            _ => NumberError::OutOfRange(format!("the sum of {self} and {other}")),
        })
    }

    /// The significand's magnitude at `scale` (at most this number's scale), if it fits.
    fn shifted(&self, scale: i64) -> Option<u128> {
        let digits: u128 = self.digits.parse().ok()?;
        let shift = u32::try_from(self.scale - scale).ok()?;
        10u128.checked_pow(shift)?.checked_mul(digits)
    }
}

/// A canonical spelling is always a JSON number; this is never reached.
#[cold]
fn unreachable_number(text: &str) -> serde_json::Number {
    tracing::error!(text, "a canonical number is not JSON");
    serde_json::Number::from(0)
}

impl From<i64> for Number {
    fn from(n: i64) -> Number {
        let digits = n.unsigned_abs().to_string();
        let significant = digits.trim_end_matches('0');
        Number {
            negative: n < 0,
            scale: (digits.len() - significant.len()) as i64,
            digits: if n == 0 {
                String::new()
            } else {
                significant.to_string()
            },
        }
    }
}

/// A number serializes as the JSON number it is (exact: its canonical text).
impl serde::Serialize for Number {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

/// An exponent's text (`+5`, `-130`, `007`), or `None` when it is far outside any range.
fn parse_exponent(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = digits.trim_start_matches('0');
    if digits.len() > 9 {
        return None;
    }
    let value: i64 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    Some(if negative { -value } else { value })
}

/// Check every number of a JSON text (already parsed, so well-formed): each is a number
/// DynamoDB accepts. The first that is not is the error.
pub fn check_json_numbers(body: &[u8]) -> Result<(), NumberError> {
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => i = skip_string(body, i + 1),
            b'-' | b'0'..=b'9' => {
                let end = body[i..]
                    .iter()
                    .position(|b| !matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .map_or(body.len(), |n| i + n);
                let text = String::from_utf8_lossy(&body[i..end]);
                Number::parse(&text)?;
                i = end;
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// The index after the string whose content starts at `i` (escapes skipped).
fn skip_string(body: &[u8], mut i: usize) -> usize {
    while i < body.len() {
        match body[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        Number::parse(text).expect(text).canonical()
    }

    #[test]
    fn one_spelling_per_value() {
        for text in ["1", "1.0", "1e0", "10E-1", "0.1e1", "+1", "001.000"] {
            assert_eq!(canonical(text), "1", "{text}");
        }
        assert_eq!(canonical("-0.0"), "0");
        assert_eq!(canonical("1.50"), "1.5");
        assert_eq!(canonical("1e3"), "1000");
        assert_eq!(canonical("-12.5e-3"), "-0.0125");
        assert_eq!(canonical("123.456"), "123.456");
        assert_eq!(
            canonical("12345678901234567890123"),
            "12345678901234567890123"
        );
    }

    #[test]
    fn dynamodb_limits_are_enforced() {
        assert!(Number::parse(&"9".repeat(38)).is_ok());
        assert!(matches!(
            Number::parse(&"9".repeat(39)),
            Err(NumberError::TooPrecise { digits: 39, .. })
        ));
        assert!(Number::parse(&format!("1{}", "0".repeat(60))).is_ok());
        assert!(Number::parse("9.9e125").is_ok());
        assert!(Number::parse("1e-130").is_ok());
        for text in ["1e126", "1e-131", "1e999999999999", "-1e126"] {
            assert!(
                matches!(Number::parse(text), Err(NumberError::OutOfRange(_))),
                "{text}"
            );
        }
        for text in ["", "-", "1.2.3", "abc", "1e", "."] {
            assert!(Number::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn every_number_dynamodb_stores_is_carried_and_the_others_are_refused() {
        assert!(check_json_numbers(
            br#"{"a":[1,1.0,-2.5e3,18446744073709551617,0.1234567890123456789],"s":"1e999"}"#
        )
        .is_ok());
        assert!(
            check_json_numbers(br#"{"s":"\"1234567890123456789012345678901234567890"}"#).is_ok()
        );
        let err = check_json_numbers(br#"{"PK":1234567890123456789012345678901234567890}"#)
            .expect_err("too precise");
        assert!(
            matches!(err, NumberError::TooPrecise { digits: 39, .. }),
            "{err}"
        );
        assert!(matches!(
            check_json_numbers(b"[1e126]"),
            Err(NumberError::OutOfRange(_))
        ));
        assert!(err.to_string().len() < 200);
        // serde_json keeps the text (arbitrary_precision): nothing is rounded through f64.
        let v: serde_json::Value = serde_json::from_str("[18446744073709551617]").expect("json");
        let n = v[0].as_number().expect("number");
        assert_eq!(
            Number::from_json(n).expect("n").canonical(),
            "18446744073709551617"
        );
    }

    fn sum(a: &str, b: &str) -> Result<String, NumberError> {
        let n = |t: &str| Number::parse(t).expect(t);
        n(a).checked_add(&n(b)).map(|s| s.canonical())
    }

    #[test]
    fn sums_are_exact_to_38_digits_and_refused_beyond() {
        let half = "6172839450617283945.0617283945061728390";
        let whole = "12345678901234567890.123456789012345678";
        assert_eq!(
            sum(half, half).expect("sum"),
            "12345678901234567890.123456789012345678"
        );
        assert_eq!(sum(whole, &format!("-{whole}")).expect("sum"), "0");
        assert_eq!(sum("0.1", "0.2").expect("sum"), "0.3");
        assert_eq!(sum("-5", "3").expect("sum"), "-2");
        assert_eq!(sum("1e125", "-1e125").expect("sum"), "0");
        assert_eq!(sum(&"9".repeat(38), "-1").expect("sum").len(), 38);
        assert_eq!(
            sum(&"9".repeat(38), "1").expect("sum"),
            format!("1{}", "0".repeat(38))
        );
        assert!(matches!(
            sum(&"9".repeat(38), "0.1"),
            Err(NumberError::TooPrecise { .. })
        ));
        assert!(matches!(
            sum("1e100", "1e-100"),
            Err(NumberError::TooPrecise { .. })
        ));
        assert!(matches!(
            sum("9e125", "9e125"),
            Err(NumberError::OutOfRange(_))
        ));
    }
}
