//! Numbers as DynamoDB defines them: at most 38 significant digits, magnitude from `1E-130`
//! to `9.99…E+125` (or zero), compared by value, so `1`, `1.0`, `1e0` and `10E-1` are one
//! number (one key, one set element).
//!
//! A [`Number`] is an exact decimal (sign, significant digits, scale) parsed from a number's
//! text, never through `f64`; [`Number::canonical`] spells each value one way (plain decimal,
//! no exponent, no leading or trailing zeros, no `-0`), the string item identity is built from.
//!
//! Record bodies are parsed into `serde_json::Value`, whose numbers are 64-bit integers or
//! `f64` (the crate does not turn on serde_json's `arbitrary_precision`: it changes how every
//! `serde_json::Number` serializes, and `serde_dynamo` would then marshal numbers as maps, in
//! every crate linking serde_json). [`check_json_numbers`] therefore reads every number of a
//! body from its text and refuses, with a bounded reason, one that DynamoDB refuses and one
//! that the parsed value does not carry exactly (more than 15 significant digits unless a
//! 64-bit integer): no number is ever rounded into another value, another key or another item.

use std::fmt;

/// DynamoDB's precision: significant digits of a number.
pub const MAX_DIGITS: usize = 38;
/// The smallest adjusted exponent of a non-zero number (`1E-130`).
pub const MIN_EXPONENT: i64 = -130;
/// The largest adjusted exponent of a number (`9.99…E+125`).
pub const MAX_EXPONENT: i64 = 125;
/// Significant digits an `f64` always carries exactly (a decimal of at most 15 digits
/// survives the round trip through the nearest `f64` and its shortest spelling).
pub const F64_DIGITS: usize = 15;

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
    /// Valid for DynamoDB, but the parsed JSON value does not hold it exactly.
    #[error(
        "{0} cannot be carried exactly: numbers are written with at most {F64_DIGITS} \
         significant digits, or as 64-bit integers"
    )]
    NotCarried(String),
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

    /// This number as a `serde_json::Number` holding it exactly, if there is one (a 64-bit
    /// integer, or a number of at most [`F64_DIGITS`] significant digits).
    pub fn to_json(&self) -> Option<serde_json::Number> {
        let n: serde_json::Number = serde_json::from_str(&self.canonical()).ok()?;
        matches!(Number::from_json(&n), Ok(back) if back == *self).then_some(n)
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
/// DynamoDB accepts and that serde_json's parsed value holds exactly. The first that is not
/// is the error.
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
                let number = Number::parse(&text)?;
                if number.to_json().is_none() {
                    return Err(NumberError::NotCarried(crate::text::quote(&text)));
                }
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
    fn numbers_a_parsed_value_cannot_hold_are_refused() {
        assert!(
            check_json_numbers(br#"{"a":[1,1.0,-2.5e3,18446744073709551615],"s":"1e999"}"#).is_ok()
        );
        assert!(check_json_numbers(br#"{"s":"\"12345678901234567890123"}"#).is_ok());
        let err = check_json_numbers(br#"{"PK":12345678901234567890123}"#).expect_err("too long");
        assert!(matches!(err, NumberError::NotCarried(_)), "{err}");
        let err = check_json_numbers(br#"[0.1234567890123456789]"#).expect_err("too precise");
        assert!(matches!(err, NumberError::NotCarried(_)), "{err}");
        assert!(matches!(
            check_json_numbers(b"[1e126]"),
            Err(NumberError::OutOfRange(_))
        ));
        assert!(err.to_string().len() < 200);
    }
}
