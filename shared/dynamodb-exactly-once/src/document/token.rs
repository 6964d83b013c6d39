//! Operation tokens: how a write recognises its own applied attempt, however many other writes
//! of the item landed in between.
//!
//! Every document write (guarded or not) carries a token (16 random bytes, or derived from the
//! record's delivery) and adds it to the item's token set of the current *token epoch* (the
//! writer's clock divided into [`TOKEN_EPOCH`] spans). The item keeps two sets: `doc_tok`, the
//! tokens of epoch `doc_toke`, and `doc_tokp`, the set before it. A write in a later epoch
//! rolls them (`doc_tokp = doc_tok`, `doc_tok = {token}`, `doc_toke = epoch`), dropping the
//! older set; a write in the same epoch (or an earlier one: a clock behind) adds to `doc_tok`.
//! So a token stays in the item until a writer's clock is two epochs past the one it was
//! written in: at least [`TOKEN_EPOCH`] after it landed (less the writers' clock skew), with no
//! bound on the number of writes in between.
//!
//! A write that is not guarded by a version is guarded by its token instead: it applies only
//! if neither set holds it (`NOT contains`). When DynamoDB applied a write but its response
//! was lost, the SDK's retry (the same request) fails that guard or the version guard, and the
//! `ALL_OLD` item shows the token: the write reports `applied`, once.
//!
//! ```text
//!  appender A:  SET l = list_append(l, :v) ADD tok :{tA} IF toke >= e AND NOT contains(tok|tokp, tA) ─► applied, response lost
//!  writers B…:  20,000 other appends in the same epoch  (each ADD tok :{tB…})
//!  appender A:  (SDK retry) the same request                               ─► fails: ALL_OLD tok ∋ tA → applied (once)
//! ```
//!
//! The two update shapes (add to the current set, or roll) are chosen by a condition on
//! `doc_toke`; an unguarded write guesses the shape from the epoch it last saw on the item and,
//! when the guess is wrong, learns the epoch from `ALL_OLD` and sends the other shape (one
//! failed conditional write, at most once per item and epoch and writer). A guarded write
//! chooses the shape from the item it read.
//!
//! **The bound.** Exact for a retry whose condition DynamoDB evaluates less than
//! [`TOKEN_EPOCH`] (30 s) after the first attempt landed, less the clock skew between writers.
//! The Lambda writers' client refuses an operation timeout over 20 s
//! (`DYNAMODB_OPERATION_TIMEOUT_MS`), after which the SDK sends no retry: 10 s remain for a
//! request in flight and clock skew.
//!
//! **Cost.** 16 bytes per token written in the last one to two epochs, plus the three
//! attribute names and the epoch (about 30 bytes): an item written once in a while holds one or
//! two tokens (about 60 bytes); an item written `r` times a second holds up to `60 × r` tokens
//! (`960 × r` bytes), which its writes are billed for (a write's units grow with the item).
//!
//! A record that comes through a batch source carries a token derived from its delivery
//! identity (stream, shard and sequence number, or queue and message id;
//! [`DocumentRecord::delivered_as`](super::DocumentRecord::delivered_as)), so the same holds
//! across deliveries: a write that landed while its delivery failed (a response lost on the
//! last SDK attempt, a write cut off at the deadline) is recognised when the source delivers
//! the record again within [`TOKEN_EPOCH`], or later while no write of the item in a later
//! epoch rolled its set out twice. (An SQS message moved back from a redrive queue is a new
//! message: it is not recognised.)

use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;

use super::config::TOKEN_EPOCH;
use super::Document;
use crate::ddb::{Item, ItemKey, Placeholders};

/// Items whose token epoch a writer remembers (the cache is cleared when it is full).
const EPOCH_CACHE_ITEMS: usize = 4096;

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

/// A token as stored: its bytes (a hex token), else its text.
fn token_bytes(token: &str) -> Vec<u8> {
    hex::decode(token).unwrap_or_else(|_| token.as_bytes().to_vec())
}

/// How a write stores its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// The item's epoch is this write's or later: add the token to the current set.
    Add,
    /// The item's epoch is earlier (or none): the current set becomes the previous one, the
    /// token starts the new current set.
    Roll,
}

impl Shape {
    /// The shape for an item at token epoch `stored` (`None`: no tokens) written in `epoch`.
    pub(super) fn for_item(stored: Option<u64>, epoch: u64) -> Shape {
        match stored {
            Some(e) if e >= epoch => Shape::Add,
            _ => Shape::Roll,
        }
    }
}

/// The token part of one update: `SET` terms, an `ADD` term, and the condition on the shape.
#[derive(Debug)]
pub(super) struct TokenTerms {
    /// `SET` terms (at least one).
    pub set: String,
    /// The `ADD` term of [`Shape::Add`].
    pub add: Option<String>,
    /// The condition that the item is of this shape.
    pub shape: &'static str,
}

impl TokenTerms {
    /// `{add}` for an update that has an `ADD` clause: `, <term>` or nothing.
    pub(super) fn add_in_clause(&self) -> String {
        self.add
            .as_ref()
            .map_or(String::new(), |a| format!(", {a}"))
    }

    /// `{add}` for an update without an `ADD` clause: ` ADD <term>` or nothing.
    pub(super) fn add_clause(&self) -> String {
        self.add
            .as_ref()
            .map_or(String::new(), |a| format!(" ADD {a}"))
    }
}

/// The token epoch each item was last seen at, by this writer.
#[derive(Debug, Default)]
pub(super) struct EpochCache(Mutex<HashMap<String, u64>>);

impl EpochCache {
    fn get(&self, key: &ItemKey) -> Option<u64> {
        self.0.lock().ok()?.get(key.canonical()).copied()
    }

    fn put(&self, key: &ItemKey, epoch: u64) {
        if let Ok(mut map) = self.0.lock() {
            if map.len() >= EPOCH_CACHE_ITEMS {
                map.clear();
            }
            map.insert(key.canonical().to_string(), epoch);
        }
    }
}

/// The condition of [`Shape::Add`] (placeholders `#toke`, `:toke`).
pub(super) const CONDITION_EPOCH_REACHED: &str = "#toke >= :toke";
/// The condition of [`Shape::Roll`] (placeholders `#toke`, `:toke`).
pub(super) const CONDITION_EPOCH_BEFORE: &str = "(attribute_not_exists(#toke) OR #toke < :toke)";
/// Neither set holds the token (placeholders `#tok`, `#tokp`, `:tok`).
pub(super) const CONDITION_TOKEN_ABSENT: &str =
    "NOT contains(#tok, :tok) AND NOT contains(#tokp, :tok)";

impl Document {
    /// The token epoch of the writer's clock.
    pub(super) fn epoch(&self) -> u64 {
        self.clock.now_ms() / (TOKEN_EPOCH.as_millis() as u64)
    }

    /// The shape an unguarded write of `key` tries first: [`Shape::Add`] when this writer saw
    /// the item in this epoch (or later), else [`Shape::Roll`].
    pub(super) fn guess_shape(&self, key: &ItemKey, epoch: u64) -> Shape {
        Shape::for_item(self.epochs.get(key), epoch)
    }

    /// Remember the token epoch of `key` after a write or a failed condition's `ALL_OLD`.
    pub(super) fn saw_epoch(&self, key: &ItemKey, epoch: Option<u64>) {
        if let Some(e) = epoch {
            self.epochs.put(key, e);
        }
    }

    /// The token epoch an item holds (`None`: no token sets).
    pub(super) fn stored_epoch(&self, item: &Item) -> Option<u64> {
        item.get(&self.config.token_epoch_attribute())
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
    }

    /// Whether a failed `shape` condition was only the shape (the item's epoch is of the other).
    pub(super) fn wrong_shape(&self, old: Option<&Item>, shape: Shape, epoch: u64) -> bool {
        Shape::for_item(old.and_then(|o| self.stored_epoch(o)), epoch) != shape
    }

    /// The token terms of a write of `token` in `epoch` (placeholders `#tok`, `#toke`,
    /// `:toks`, `:toke`, and `#tokp` when rolling), with the prefix marker's term.
    pub(super) fn token_terms(
        &self,
        p: &mut Placeholders,
        token: &str,
        shape: Shape,
        epoch: u64,
    ) -> TokenTerms {
        p.set_name("#tok", self.config.token_attribute())
            .set_name("#toke", self.config.token_epoch_attribute())
            .set_value(
                ":toks",
                AttributeValue::Bs(vec![Blob::new(token_bytes(token))]),
            )
            .set_value(":toke", AttributeValue::N(epoch.to_string()));
        if shape == Shape::Roll {
            p.set_name("#tokp", self.config.previous_tokens_attribute());
        }
        let mut set: Vec<&str> = match shape {
            // The epoch is the item's already (a no-op keeping one SET term in every shape).
            Shape::Add => vec!["#toke = if_not_exists(#toke, :toke)"],
            Shape::Roll => vec![
                "#tokp = if_not_exists(#tok, :toks)",
                "#tok = :toks",
                "#toke = :toke",
            ],
        };
        set.extend(self.marker.set_term(p));
        TokenTerms {
            set: set.join(", "),
            add: (shape == Shape::Add).then(|| "#tok :toks".to_string()),
            shape: match shape {
                Shape::Add => CONDITION_EPOCH_REACHED,
                Shape::Roll => CONDITION_EPOCH_BEFORE,
            },
        }
    }

    /// [`CONDITION_TOKEN_ABSENT`] for `token` (placeholders `#tok`, `#tokp`, `:tok`).
    pub(super) fn token_absent(&self, p: &mut Placeholders, token: &str) -> String {
        p.set_name("#tok", self.config.token_attribute())
            .set_name("#tokp", self.config.previous_tokens_attribute())
            .set_value(":tok", AttributeValue::B(Blob::new(token_bytes(token))));
        CONDITION_TOKEN_ABSENT.to_string()
    }

    /// The token attributes of a whole new item written over `state` with `token` in `epoch`
    /// (a replace), and the prefix marker.
    pub(super) fn token_attributes(&self, state: Option<&Item>, token: &str, epoch: u64) -> Item {
        let config = &self.config;
        let mut item: Item = self.marker.attribute().into_iter().collect();
        let ours = Blob::new(token_bytes(token));
        let stored = state.and_then(|s| self.stored_epoch(s));
        let set_of = |name: String| match state.and_then(|s| s.get(&name)) {
            Some(AttributeValue::Bs(set)) => Some(set.clone()),
            _ => None,
        };
        let current = set_of(config.token_attribute());
        let (tok, tokp, toke) = match Shape::for_item(stored, epoch) {
            Shape::Add => {
                let mut tok = current.unwrap_or_default();
                tok.push(ours);
                let previous = set_of(config.previous_tokens_attribute());
                (tok, previous, stored.unwrap_or(epoch))
            }
            Shape::Roll => (
                vec![ours.clone()],
                Some(current.unwrap_or_else(|| vec![ours])),
                epoch,
            ),
        };
        item.insert(config.token_attribute(), AttributeValue::Bs(tok));
        if let Some(previous) = tokp {
            item.insert(
                config.previous_tokens_attribute(),
                AttributeValue::Bs(previous),
            );
        }
        item.insert(
            config.token_epoch_attribute(),
            AttributeValue::N(toke.to_string()),
        );
        item
    }

    /// Whether `item` holds `token`: in one of its token sets.
    pub(super) fn holds_token(&self, item: &Item, token: &str) -> bool {
        let bytes = token_bytes(token);
        let in_set = |name: String| {
            matches!(item.get(&name), Some(AttributeValue::Bs(set))
                if set.iter().any(|b| b.as_ref() == bytes.as_slice()))
        };
        let config = &self.config;
        in_set(config.token_attribute()) || in_set(config.previous_tokens_attribute())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_adds_to_the_epoch_it_finds_and_rolls_an_earlier_one() {
        assert_eq!(Shape::for_item(None, 10), Shape::Roll);
        assert_eq!(Shape::for_item(Some(9), 10), Shape::Roll);
        assert_eq!(Shape::for_item(Some(10), 10), Shape::Add);
        assert_eq!(
            Shape::for_item(Some(11), 10),
            Shape::Add,
            "a clock behind adds"
        );
    }

    #[test]
    fn hex_tokens_are_stored_as_their_16_bytes() {
        assert_eq!(token_bytes(&delivery_token("q/m1")).len(), 16);
        assert_eq!(token_bytes(&new_token()).len(), 16);
        assert_eq!(token_bytes("not hex"), b"not hex".to_vec());
    }
}
