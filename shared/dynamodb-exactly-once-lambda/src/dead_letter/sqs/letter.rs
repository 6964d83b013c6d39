//! A dead letter as an SQS message: JSON with the fields the dead-letter table keeps (the id,
//! function, deployment, reason, source position, time of rejection) and the record's body,
//! as text when it is UTF-8, else base64, cut to fit the queue's message size.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Serialize};

use dynamodb_exactly_once::Rejection;

use crate::source::SourcePosition;

/// The `MaximumMessageSize` of a queue created without one (256 KiB): the default limit of a
/// letter's message.
pub(crate) const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// The largest `MaximumMessageSize` a queue can be given (1 MiB).
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// The smallest limit a sink accepts: room for every field but the body at its largest (see
/// the unit test), so that a letter always fits once its body is cut.
pub(crate) const MIN_MESSAGE_BYTES: usize = 16 * 1024;

/// One dead letter as the JSON body of an SQS message. Decode a received message with
/// `serde_json::from_str::<SqsLetter>(&body)`.
///
/// The field names are the dead-letter table's attribute names (`Id`, `Function`,
/// `Deployment`, `Reason`, `Position`, `RejectedAt`); the body is `Body` (text) or
/// `BodyBase64`, with its size in `BodyBytes` and `BodyTruncated: true` when only its first
/// part fitted in the message.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SqsLetter {
    /// The record's letter id, the same on every delivery of it
    /// ([`letter_id`](crate::dead_letter::letter_id)): de-duplicate letters by it.
    pub id: String,
    /// The function that rejected the record.
    pub function: String,
    /// The deployment that rejected it, when named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// Why (the message cut to `MAX_REASON_CHARS`).
    pub reason: Rejection,
    /// Where the record came from.
    pub position: SourcePosition,
    /// When it was rejected, epoch seconds.
    pub rejected_at: u64,
    /// The body as text, when it is UTF-8 (its first part when truncated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The body in base64, when it is not UTF-8 (its first part when truncated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// The size of the whole body, in bytes.
    pub body_bytes: usize,
    /// `true` when `Body` or `BodyBase64` holds only the body's first part.
    #[serde(default)]
    pub body_truncated: bool,
}

impl SqsLetter {
    /// The body (or its first part, when truncated) as bytes; `None` if `BodyBase64` is not
    /// base64.
    pub fn payload(&self) -> Option<Vec<u8>> {
        match (&self.body, &self.body_base64) {
            (Some(text), _) => Some(text.as_bytes().to_vec()),
            (None, Some(encoded)) => BASE64.decode(encoded).ok(),
            (None, None) => Some(Vec::new()),
        }
    }
}

/// The message body of `letter` (its `Body*` fields are set here) carrying `body`: at most
/// `limit` bytes, the body cut when the whole does not fit. Only a letter whose other fields
/// alone exceed `limit` (not possible above [`MIN_MESSAGE_BYTES`] with the sources' values)
/// comes out longer.
pub(crate) fn message(
    mut letter: SqsLetter,
    body: &[u8],
    limit: usize,
) -> Result<String, serde_json::Error> {
    let text = std::str::from_utf8(body).ok();
    letter.body_bytes = body.len();
    if body.len() <= limit {
        set_body(&mut letter, text, body, usize::MAX);
        let whole = to_json(&letter)?;
        if whole.len() <= limit {
            return Ok(whole);
        }
    }
    letter.body_truncated = true;
    set_body(&mut letter, text, body, 0);
    let empty = to_json(&letter)?;
    let room = limit.saturating_sub(empty.len());
    set_body(&mut letter, text, body, room);
    let cut = to_json(&letter)?;
    Ok(if cut.len() <= limit { cut } else { empty })
}

/// Put the longest first part of `body` whose encoding takes at most `room` bytes of JSON
/// into `letter`.
fn set_body(letter: &mut SqsLetter, text: Option<&str>, body: &[u8], room: usize) {
    match text {
        Some(text) => {
            let mut used = 0;
            let end = text
                .char_indices()
                .find_map(|(i, c)| {
                    used += encoded_len(c);
                    (used > room).then_some(i)
                })
                .unwrap_or(text.len());
            letter.body = Some(text[..end].to_string());
            letter.body_base64 = None;
        }
        None => {
            let raw = body.len().min(room / 4 * 3);
            letter.body = None;
            letter.body_base64 = Some(BASE64.encode(&body[..raw]));
        }
    }
}

/// The bytes `c` takes inside a JSON string as [`to_json`] writes it.
fn encoded_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => 6,
        _ => c.len_utf8(),
    }
}

/// The letter as JSON that SQS accepts: SQS refuses a message containing a character outside
/// `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF`. serde_json escapes the
/// control characters; the two non-characters U+FFFE and U+FFFF, which it writes as they are
/// (they can only be inside strings), become `\ufffe` and `\uffff`: the same JSON value.
fn to_json(letter: &SqsLetter) -> Result<String, serde_json::Error> {
    let json = serde_json::to_string(letter)?;
    if json.contains(['\u{fffe}', '\u{ffff}']) {
        Ok(json
            .replace('\u{fffe}', "\\ufffe")
            .replace('\u{ffff}', "\\uffff"))
    } else {
        Ok(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{SourceKind, SubRecord};
    use dynamodb_exactly_once::RejectionCode;

    fn position() -> SourcePosition {
        SourcePosition {
            kind: SourceKind::Sqs,
            source_arn: Some("arn:aws:sqs:us-east-1:1:orders".into()),
            id: "m-1".into(),
            shard_id: None,
            partition_key: None,
            message_group_id: None,
            sqs_sequence_number: None,
            sub_record: None,
            event_id: None,
            arrived_at_ms: Some(1_764_000_000_000),
            kafka: None,
        }
    }

    fn letter(position: SourcePosition) -> SqsLetter {
        SqsLetter {
            id: "orders|sqs|arn:aws:sqs:us-east-1:1:orders|m-1".into(),
            function: "orders".into(),
            deployment: None,
            reason: Rejection::new(RejectionCode::BadJson, "expected value at line 1"),
            position,
            rejected_at: 1_764_000_001,
            body: None,
            body_base64: None,
            body_bytes: 0,
            body_truncated: false,
        }
    }

    fn decode(message: &str) -> SqsLetter {
        serde_json::from_str(message).expect("a letter")
    }

    #[test]
    fn a_utf8_body_is_carried_as_text_with_the_reason_and_the_position() {
        let message = message(letter(position()), b"{\"amount\": oops}", 4096).expect("json");
        let json: serde_json::Value = serde_json::from_str(&message).expect("json");
        assert_eq!(json["Body"], "{\"amount\": oops}");
        assert_eq!(json["BodyBytes"], 16);
        assert_eq!(json["BodyTruncated"], false);
        assert_eq!(json["Reason"]["code"], "bad_json");
        assert_eq!(json["Position"]["id"], "m-1");
        assert_eq!(json["Position"]["arrived_at_ms"], 1_764_000_000_000u64);
        assert_eq!(json["Id"], "orders|sqs|arn:aws:sqs:us-east-1:1:orders|m-1");
        assert!(json.get("BodyBase64").is_none());
        assert_eq!(
            decode(&message).payload(),
            Some(b"{\"amount\": oops}".to_vec())
        );
    }

    #[test]
    fn a_binary_body_is_carried_in_base64() {
        let body = [0xff, 0x00, 0xfe, 0x41];
        let letter = decode(&message(letter(position()), &body, 4096).expect("json"));
        assert_eq!(letter.body, None);
        assert_eq!(letter.body_base64.as_deref(), Some("/wD+QQ=="));
        assert_eq!(letter.payload(), Some(body.to_vec()));
        assert!(!letter.body_truncated);
    }

    #[test]
    fn characters_sqs_refuses_are_escaped_and_decode_to_the_same_body() {
        let body = "a\u{0}b\u{1f}c\u{fffe}d\u{ffff}e\"\\";
        let message = message(letter(position()), body.as_bytes(), 4096).expect("json");
        let allowed = |c: char| {
            matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
                || c >= '\u{10000}'
        };
        assert!(message.chars().all(allowed), "{message:?}");
        assert_eq!(decode(&message).body.as_deref(), Some(body));
    }

    #[test]
    fn a_body_over_the_limit_is_cut_to_fit_with_its_size() {
        for (body, limit) in [
            ("é".repeat(300_000).into_bytes(), DEFAULT_MAX_MESSAGE_BYTES),
            (
                "\"\u{1}x".repeat(100_000).into_bytes(),
                DEFAULT_MAX_MESSAGE_BYTES,
            ),
            ("\u{ffff}".repeat(200_000).into_bytes(), MIN_MESSAGE_BYTES),
            (vec![0xff; 1024 * 1024], DEFAULT_MAX_MESSAGE_BYTES),
            (vec![0xff; 1024 * 1024], MAX_MESSAGE_BYTES),
        ] {
            let message = message(letter(position()), &body, limit).expect("json");
            assert!(message.len() <= limit, "{} > {limit}", message.len());
            assert!(
                message.len() > limit - 8,
                "{} bytes left unused",
                limit - message.len()
            );
            let letter = decode(&message);
            assert!(letter.body_truncated);
            assert_eq!(letter.body_bytes, body.len());
            let part = letter.payload().expect("decodes");
            assert!(!part.is_empty() && body.starts_with(&part));
        }
    }

    #[test]
    fn a_body_that_fits_only_unescaped_is_cut_not_sent_whole() {
        // 1,000 quotes are 1,000 bytes of body but 2,000 of JSON.
        let body = "\"".repeat(1000);
        let message = message(letter(position()), body.as_bytes(), 1500).expect("json");
        assert!(message.len() <= 1500);
        assert!(decode(&message).body_truncated);
    }

    #[test]
    fn the_largest_letter_without_its_body_leaves_room_under_the_smallest_limit() {
        // The sources' largest values: ARNs ≤ 2 KB, partition keys ≤ 256 characters, sequence
        // numbers 56 digits; names of 64 characters; the reason at its bound, every character
        // escaped.
        let position = SourcePosition {
            kind: SourceKind::Kinesis,
            source_arn: Some("a".repeat(2048)),
            id: "9".repeat(128),
            shard_id: Some("s".repeat(128)),
            partition_key: Some("\u{1}".repeat(256)),
            message_group_id: Some("g".repeat(128)),
            sqs_sequence_number: Some("9".repeat(20)),
            sub_record: Some(SubRecord {
                sub_sequence_number: u64::MAX,
                explicit_hash_key: Some("9".repeat(39)),
            }),
            event_id: Some("e".repeat(64)),
            arrived_at_ms: Some(u64::MAX),
            kafka: None,
        };
        let mut letter = letter(position);
        letter.id = "i".repeat(2048 + 3 * 128 + 64 * 2 + 64);
        letter.function = "f".repeat(64);
        letter.deployment = Some("d".repeat(64));
        letter.reason = serde_json::from_value(serde_json::json!({
            "code": "invalid_item",
            "message": "\u{ffff}".repeat(crate::dead_letter::MAX_REASON_CHARS),
        }))
        .expect("a rejection");
        let body = vec![b'x'; MAX_MESSAGE_BYTES];
        let message = message(letter, &body, MIN_MESSAGE_BYTES).expect("json");
        assert!(message.len() <= MIN_MESSAGE_BYTES);
        let part = decode(&message).payload().expect("decodes");
        // About 13 KB of the 16 KiB are the other fields at their worst.
        assert!(part.len() > 2048, "{} bytes of body", part.len());
    }
}
