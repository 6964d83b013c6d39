//! The text of a tumbling window's state: the keys held, each whole, in a compact binary form,
//! deflated and base64url-encoded (format 2), so that a window of a shard at production rates
//! stays far under Lambda's 1 MB per shard. The previous format (1: JSON, about 100 bytes a
//! key) is still read, so a state an earlier version answered is applied exactly after an
//! upgrade; only format 2 is written.
//!
//! Format 2 is `2.` followed by base64url (no padding) of the raw deflate of:
//!
//! ```text
//! names   varint n, then n strings            counter names, indexed by the keys' deltas
//! groups  varint n, then per group:           one journal partition key and counter item
//!           partition  byte 0: the item's tag; 1: tag # string; 2: the string itself
//!           item       string                 the counter item's key (JSON)
//!           keys       varint n, then per key:
//!             flags    byte: 1 hash as 16 bytes (else a string), 2 first put, 4 arrival
//!             seq      varint shared digits with the previous key's, string of the rest
//!             hash     16 bytes or a string
//!             deltas   varint n, then per delta: varint name index, string (canonical N)
//!             put      zigzag varint: first put (ms) minus the previous key's (if flag 2)
//!             arrival  zigzag varint: arrival (s) minus the previous key's (if flag 4)
//! ```
//!
//! Strings are a varint length and UTF-8 bytes; varints are LEB128. 25 to 37 bytes a key once
//! encoded (the key hash's 16 random bytes, 21 in base64, are most of it and do not
//! compress; sequence numbers with gaps take more than consecutive ones).

use std::collections::BTreeMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use super::entry::journal_partition;
use super::event::{Event, Seq};
use super::shard_batch::ByItem;
use crate::ddb::number::Number;
use crate::ddb::ItemKey;

/// The prefix of a format-2 state's text.
const PREFIX: &str = "2.";
/// The largest a state's payload may inflate to (a state is under 1 MB; deflate expands at
/// most ~1,000 times).
const MAX_PAYLOAD_BYTES: usize = 64 << 20;
/// Deflate level (miniz's default: 10% smaller than its fastest at the issue's shapes).
const LEVEL: u8 = 6;
/// Bytes of a key hash held raw (22 base64url characters of the journal's sort key).
const HASH_BYTES: usize = 16;

const FLAG_RAW_HASH: u8 = 1;
const FLAG_AT: u8 = 2;
const FLAG_ARRIVED: u8 = 4;

/// The keys of `by_item` as the state's text (format 2).
pub(super) fn encode(by_item: &ByItem) -> String {
    let mut names: BTreeMap<&str, u128> = BTreeMap::new();
    for (_, events) in by_item.values() {
        for name in events.iter().flat_map(|e| e.add.keys()) {
            let next = names.len() as u128;
            names.entry(name).or_insert(next);
        }
    }
    let mut out = Vec::new();
    put_varint(&mut out, names.len() as u128);
    let mut ordered: Vec<(&str, u128)> = names.iter().map(|(n, i)| (*n, *i)).collect();
    ordered.sort_by_key(|(_, i)| *i);
    for (name, _) in ordered {
        put_str(&mut out, name);
    }
    let groups = groups(by_item);
    put_varint(&mut out, groups.len() as u128);
    let mut prev = Prev::default();
    for (key, events) in groups {
        put_partition(&mut out, key, &events[0].pk);
        put_str(&mut out, &serde_json::Value::Object(key.json().clone()).to_string());
        put_varint(&mut out, events.len() as u128);
        for event in events {
            put_event(&mut out, event, &names, &mut prev);
        }
    }
    let deflated = miniz_oxide::deflate::compress_to_vec(&out, LEVEL);
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(deflated))
}

/// The keys of a state's text, of either format (lanes not yet assigned).
pub(super) fn decode(text: &str) -> Result<Vec<Event>, String> {
    let Some(body) = text.strip_prefix(PREFIX) else {
        return match text.starts_with('{') {
            true => super::window_v1::decode(text),
            false => Err("not a state of format 1 or 2".into()),
        };
    };
    let deflated = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|e| format!("base64: {e}"))?;
    let payload =
        miniz_oxide::inflate::decompress_to_vec_with_limit(&deflated, MAX_PAYLOAD_BYTES)
            .map_err(|e| format!("inflate: {e:?}"))?;
    let mut r = Reader(&payload);
    let names = (0..r.size()?)
        .map(|_| r.string())
        .collect::<Result<Vec<String>, String>>()?;
    let mut events = Vec::new();
    let mut prev = Prev::default();
    for _ in 0..r.size()? {
        let (item, pk) = r.group()?;
        for _ in 0..r.size()? {
            events.push(r.event(&item, &pk, &names, &mut prev)?);
        }
    }
    match r.0.is_empty() {
        true => Ok(events),
        false => Err("bytes after the last key".into()),
    }
}

/// The events of `by_item` by (journal partition, counter item), in the map's order.
fn groups(by_item: &ByItem) -> Vec<(&ItemKey, Vec<&Event>)> {
    let mut groups: Vec<(&ItemKey, Vec<&Event>)> = Vec::new();
    for (key, events) in by_item.values() {
        for event in events {
            match groups.last_mut() {
                Some((k, g)) if k.canonical() == key.canonical() && g[0].pk == event.pk => {
                    g.push(event)
                }
                _ => groups.push((key, vec![event])),
            }
        }
    }
    groups
}

/// What a key is encoded against: the previous key's.
#[derive(Default)]
struct Prev {
    seq: String,
    at_ms: u64,
    arrived: u64,
}

fn put_partition(out: &mut Vec<u8>, key: &ItemKey, pk: &str) {
    let tag = journal_partition(key, "", 1);
    match pk.strip_prefix(tag.as_str()) {
        Some("") => out.push(0),
        Some(rest) if rest.starts_with('#') => {
            out.push(1);
            put_str(out, &rest[1..]);
        }
        _ => {
            out.push(2);
            put_str(out, pk);
        }
    }
}

fn put_event(out: &mut Vec<u8>, e: &Event, names: &BTreeMap<&str, u128>, prev: &mut Prev) {
    let raw = raw_hash(&e.hash);
    let flag = |on: bool, flag: u8| if on { flag } else { 0 };
    let flags = flag(raw.is_some(), FLAG_RAW_HASH)
        | flag(e.at_ms.is_some(), FLAG_AT)
        | flag(e.arrived.is_some(), FLAG_ARRIVED);
    out.push(flags);
    let shared = shared_prefix(&prev.seq, &e.seq_text);
    put_varint(out, shared as u128);
    put_str(out, &e.seq_text[shared..]);
    prev.seq.clone_from(&e.seq_text);
    match raw {
        Some(bytes) => out.extend_from_slice(&bytes),
        None => put_str(out, &e.hash),
    }
    put_varint(out, e.add.len() as u128);
    for (name, delta) in &e.add {
        put_varint(out, names.get(name.as_str()).copied().unwrap_or_default());
        put_str(out, &delta.canonical());
    }
    if let Some(at) = e.at_ms {
        put_varint(out, zigzag(i128::from(at) - i128::from(prev.at_ms)));
        prev.at_ms = at;
    }
    if let Some(arrived) = e.arrived {
        put_varint(out, zigzag(i128::from(arrived) - i128::from(prev.arrived)));
        prev.arrived = arrived;
    }
}

/// The 16 bytes a key hash spells, when it is exactly their base64url.
fn raw_hash(hash: &str) -> Option<[u8; HASH_BYTES]> {
    let bytes = URL_SAFE_NO_PAD.decode(hash).ok()?;
    let raw: [u8; HASH_BYTES] = bytes.try_into().ok()?;
    (URL_SAFE_NO_PAD.encode(raw) == hash).then_some(raw)
}

/// The length of the common prefix of `a` and `b` (ASCII digits: a char boundary).
fn shared_prefix(a: &str, b: &str) -> usize {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    (0..=n).rev().find(|i| b.is_char_boundary(*i)).unwrap_or(0)
}

/// A difference of two u64 (65 bits at most) as an unsigned number, small when it is.
fn zigzag(v: i128) -> u128 {
    ((v << 1) ^ (v >> 127)) as u128
}

fn unzigzag(z: u128) -> i128 {
    ((z >> 1) as i128) ^ -((z & 1) as i128)
}

fn put_varint(out: &mut Vec<u8>, v: impl Into<u128>) {
    let mut v: u128 = v.into();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u128);
    out.extend_from_slice(s.as_bytes());
}

/// A format-2 payload being read.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("the state ends early".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }

    fn varint(&mut self) -> Result<u128, String> {
        let mut v: u128 = 0;
        for shift in (0..128).step_by(7) {
            let b = self.byte()?;
            v |= u128::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint past 128 bits".into())
    }

    /// A count or an index.
    fn size(&mut self) -> Result<usize, String> {
        usize::try_from(self.varint()?).map_err(|e| e.to_string())
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.size()?;
        String::from_utf8(self.bytes(n)?.to_vec()).map_err(|e| e.to_string())
    }

    fn group(&mut self) -> Result<(ItemKey, String), String> {
        let mode = self.byte()?;
        let suffix = match mode {
            0 => None,
            1 | 2 => Some(self.string()?),
            m => return Err(format!("partition mode {m}")),
        };
        let json: serde_json::Value =
            serde_json::from_str(&self.string()?).map_err(|e| e.to_string())?;
        let item = ItemKey::from_json(&json).map_err(|e| format!("counter item key: {e}"))?;
        let tag = journal_partition(&item, "", 1);
        let pk = match (mode, suffix) {
            (1, Some(sub)) => format!("{tag}#{sub}"),
            (2, Some(pk)) => pk,
            _ => tag,
        };
        Ok((item, pk))
    }

    fn event(
        &mut self,
        item: &ItemKey,
        pk: &str,
        names: &[String],
        prev: &mut Prev,
    ) -> Result<Event, String> {
        let flags = self.byte()?;
        let shared = self.size()?;
        let head = prev.seq.get(..shared).ok_or("sequence number")?.to_string();
        let seq_text = head + &self.string()?;
        prev.seq.clone_from(&seq_text);
        let hash = match flags & FLAG_RAW_HASH {
            0 => self.string()?,
            _ => URL_SAFE_NO_PAD.encode(self.bytes(HASH_BYTES)?),
        };
        let mut add = BTreeMap::new();
        for _ in 0..self.size()? {
            let index = self.size()?;
            let name = names.get(index).ok_or("counter name")?.clone();
            let delta = Number::parse(&self.string()?).map_err(|e| format!("delta: {e}"))?;
            add.insert(name, delta);
        }
        let mut next = |prev: &mut u64| -> Result<Option<u64>, String> {
            let v = i128::from(*prev) + unzigzag(self.varint()?);
            *prev = u64::try_from(v).map_err(|_| "a time out of range")?;
            Ok(Some(*prev))
        };
        let at_ms = match flags & FLAG_AT {
            0 => None,
            _ => next(&mut prev.at_ms)?,
        };
        let arrived = match flags & FLAG_ARRIVED {
            0 => None,
            _ => next(&mut prev.arrived)?,
        };
        Ok(Event {
            shard: 0,
            seq: Seq::parse(&seq_text).ok_or("sequence number")?,
            seq_text,
            item: item.clone(),
            add,
            hash,
            pk: pk.to_string(),
            at_ms,
            arrived,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::journal::shard_batch::{add_event, sort_events, Lanes};
    use sha2::{Digest, Sha256};

    fn hash(i: u64) -> String {
        URL_SAFE_NO_PAD.encode(&Sha256::digest(i.to_be_bytes())[..16])
    }

    fn event(seq: u64, item: &ItemKey, hash: String, n: i64, at_ms: Option<u64>) -> Event {
        let seq_text = format!("4000000000{seq:021}");
        Event {
            shard: 0,
            seq: Seq::parse(&seq_text).expect("seq"),
            seq_text,
            item: item.clone(),
            add: BTreeMap::from([("n".to_string(), Number::from(n))]),
            pk: journal_partition(item, &hash, 1),
            hash,
            at_ms,
            arrived: at_ms.map(|ms| ms / 1000 - 3),
        }
    }

    fn by_item(events: Vec<Event>) -> ByItem {
        let mut by_item = ByItem::new();
        let mut lanes: Lanes = (Vec::new(), Vec::new());
        for e in events {
            add_event(&mut by_item, &mut lanes, "ctr_", "shardId-1", e);
        }
        sort_events(&mut by_item);
        by_item
    }

    fn sorted(mut events: Vec<Event>) -> Vec<Event> {
        for e in &mut events {
            e.shard = 0;
        }
        events.sort_by(|a, b| (&a.seq, &a.pk).cmp(&(&b.seq, &b.pk)));
        events
    }

    #[test]
    fn a_state_reads_back_as_the_keys_it_holds() {
        let a = ItemKey::partition("PK", "a").expect("key");
        let b = ItemKey::partition("PK", "b")
            .and_then(|k| k.with_sort("SK", 7))
            .expect("key");
        let mut spread = event(5, &a, hash(5), -2, None);
        spread.pk.push_str("#3");
        let mut foreign = event(6, &b, "not base64!".into(), 3, Some(1_800_000_000_000));
        foreign.pk = "some-other-partition".into();
        foreign.add.insert("m".into(), Number::parse("1.5e30").expect("n"));
        let mut huge = event(7, &a, hash(7), 1, Some(u64::MAX));
        huge.seq_text = "9".repeat(40);
        huge.seq = Seq::parse(&huge.seq_text).expect("seq");
        let want = vec![
            event(1, &a, hash(1), 1, Some(1_800_000_000_000)),
            event(2, &b, hash(2), 2, Some(1_700_000_000_000)),
            event(3, &a, hash(3), 3, Some(1_800_000_060_000)),
            spread,
            foreign,
            huge,
        ];
        let text = encode(&by_item(want.clone()));
        assert!(text.starts_with(PREFIX), "{text}");
        assert_eq!(sorted(decode(&text).expect("state")), sorted(want));
        assert!(decode("2.AAAA").is_err() && decode("x").is_err());
    }

    /// A fifth of a shard's 15-minute window at the issue's shapes (33.3 keys/s: 6,000 of its
    /// 30,000 keys), its keys spread over a fifth of the shard's counter items (`cust#<i>`,
    /// `day`) as the bench spreads them; the state's bytes. A whole window's state is five
    /// times as large (per key and per item: deflate's 32 KB window keeps it local).
    fn fifth_of_a_window(items: u64, pick: impl Fn(u64) -> u64) -> usize {
        let keys: Vec<ItemKey> = (0..items)
            .map(|i| {
                ItemKey::partition("PK", format!("cust#{i:06}"))
                    .and_then(|k| k.with_sort("SK", "day"))
                    .expect("key")
            })
            .collect();
        let t0 = 1_800_000_000_000;
        let events = (0..6_000)
            .map(|i| {
                // Sequence numbers as DynamoDB Streams spells them, with gaps.
                let seq = i * 1_000_003 % 9_973_000 + i * 10_000_000;
                let item = &keys[usize::try_from(pick(i) % items).expect("index")];
                event(seq, item, hash(i), 1, Some(t0 + i * 150))
            })
            .collect();
        encode(&by_item(events)).len()
    }

    #[test]
    fn a_window_at_the_issues_shapes_is_applied_in_two_parts_at_most() {
        // 1 key a minute: 2,000 items, each with 15 keys a window.
        let minute = 5 * fifth_of_a_window(400, |i| i);
        // 6 keys an hour: 20,000 items, ~15,500 of them with keys in a window.
        let hour = 5 * fifth_of_a_window(4_000, |i| {
            i.wrapping_mul(6_364_136_223_846_793_005) >> 40
        });
        eprintln!("a window of 30,000 keys: {minute} bytes at 1 key/min, {hour} at 6 keys/h");
        let limit = super::super::window::APPLY_AT_BYTES;
        assert!(minute < 2 * limit && hour < 2 * limit, "{minute} / {hour} of {limit}");
    }
}
