//! Operation tokens: how a write recognises its own applied attempt.
//!
//! Every document write (guarded or not) carries a fresh random token, puts it in the op slot
//! `doc_op0` and shifts the tokens before it down one slot (`doc_op1 = doc_op0`, …; the
//! oldest falls out), so the item holds the tokens of its last [`OP_SLOTS`] writes. A write
//! that is not guarded by a version is guarded by its token instead: it applies only if no
//! slot holds it. When DynamoDB applied a write but its response was lost, the SDK's retry
//! (the same request) fails that guard or the version guard, and the `ALL_OLD` item shows the
//! token: the write reports `applied`, once.
//!
//! ```text
//!  appender A:  SET l = list_append(l, :v), op0 = tA, op1 = op0, … IF no slot = tA ─► applied, response lost
//!  appender A:  (SDK retry) the same request                           ─► fails: ALL_OLD op0 = tA → applied (once)
//! ```
//!
//! The answer is exact while fewer than [`OP_SLOTS`] other writes of the item land between
//! the lost response and the retry (the SDK retries within seconds).
//!
//! A record that comes through a batch source carries a token derived from its delivery
//! identity (stream, shard and sequence number, or queue and message id;
//! [`DocumentRecord::delivered_as`](super::DocumentRecord::delivered_as)), so the same holds
//! across deliveries: a write that landed while its delivery failed (a response lost on the
//! last SDK attempt, a write cut off at the deadline) is recognised when the source delivers
//! the record again, as long as fewer than [`OP_SLOTS`] other writes of the item landed since.
//! (An SQS message moved back from a redrive queue is a new message: it is not recognised.)

use aws_sdk_dynamodb::types::AttributeValue;

use super::config::OP_SLOTS;
use super::Document;
use crate::ddb::{Item, Placeholders};

/// A fresh operation token (128 random bits, hex).
pub(super) fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The operation token of a record delivered as `delivery`: 128 bits of its SHA-256, hex
/// (the same on every delivery; another record's differs).
pub(super) fn delivery_token(delivery: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(delivery.as_bytes())[..16])
}

impl Document {
    /// `SET` terms putting `:token` in slot 0 and shifting the others down (placeholders
    /// `#op<n>`, `:token`): `#op3 = if_not_exists(#op2, :token), …, #op0 = :token`.
    pub(super) fn shift_tokens(&self, p: &mut Placeholders, token: &str) -> String {
        self.name_slots(p);
        p.set_value(":token", AttributeValue::S(token.to_string()));
        let mut terms: Vec<String> = (1..OP_SLOTS)
            .rev()
            .map(|n| format!("#op{n} = if_not_exists(#op{}, :token)", n - 1))
            .collect();
        terms.push("#op0 = :token".into());
        terms.extend(self.marker.set_term(p).map(String::from));
        terms.join(", ")
    }

    /// The condition that no slot holds `:token` (set by [`Document::shift_tokens`]).
    pub(super) fn token_absent(&self) -> String {
        (0..OP_SLOTS)
            .map(|n| format!("(attribute_not_exists(#op{n}) OR #op{n} <> :token)"))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// The slots of a whole new item written over `state` with `token` (a replace), and the
    /// prefix marker.
    pub(super) fn shifted_slots(&self, state: Option<&Item>, token: &str) -> Item {
        let mut slots: Item = self.marker.attribute().into_iter().collect();
        slots.insert(self.config.op_slot(0), AttributeValue::S(token.to_string()));
        for n in 1..OP_SLOTS {
            if let Some(older) = state.and_then(|s| s.get(&self.config.op_slot(n - 1))) {
                slots.insert(self.config.op_slot(n), older.clone());
            }
        }
        slots
    }

    fn name_slots(&self, p: &mut Placeholders) {
        for n in 0..OP_SLOTS {
            p.set_name(&format!("#op{n}"), self.config.op_slot(n));
        }
    }

    /// Whether `item` holds `token` in one of its op slots.
    pub(super) fn holds_token(&self, item: &Item, token: &str) -> bool {
        self.config
            .op_slots()
            .any(|slot| matches!(item.get(&slot), Some(AttributeValue::S(t)) if t == token))
    }
}
