//! The window state's format 1 (JSON, each key whole, about 100 bytes a key), read only: a
//! state answered by an earlier version is still applied exactly after an upgrade (the
//! mapping gives it back at the window's next invocation). Format 2 (`window_state`) is
//! written instead.

use serde::Deserialize;

use super::event::{Event, Seq};
use crate::ddb::number::Number;
use crate::ddb::ItemKey;

/// The format's version field.
const VERSION: u8 = 1;

/// The state as kept: the keys by journal partition key and counter item.
#[derive(Debug, Deserialize)]
struct State {
    v: u8,
    g: Vec<Group>,
}

/// The keys of one journal partition key (a counter item, or one of its sub-partitions).
#[derive(Debug, Deserialize)]
struct Group {
    /// The journal partition key.
    p: String,
    /// The counter item's key.
    i: serde_json::Map<String, serde_json::Value>,
    /// Its keys.
    k: Vec<Key>,
}

/// One key: sequence number, key hash, deltas, first put (ms), arrival (s).
#[derive(Debug, Deserialize)]
struct Key(
    String,
    String,
    Vec<(String, String)>,
    Option<u64>,
    Option<u64>,
);

/// The keys of a format-1 state's text (lanes not yet assigned).
pub(super) fn decode(text: &str) -> Result<Vec<Event>, String> {
    let state: State = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if state.v != VERSION {
        return Err(format!("state version {} (this one reads {VERSION})", state.v));
    }
    let mut events = Vec::new();
    for group in state.g {
        let item = ItemKey::from_json(&serde_json::Value::Object(group.i))
            .map_err(|e| format!("counter item key: {e}"))?;
        for Key(seq_text, hash, add, at_ms, arrived) in group.k {
            let add = add
                .into_iter()
                .map(|(n, d)| Number::parse(&d).map(|d| (n, d)))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("delta: {e}"))?;
            events.push(Event {
                shard: 0,
                seq: Seq::parse(&seq_text).ok_or("sequence number")?,
                seq_text,
                item: item.clone(),
                add,
                hash,
                pk: group.p.clone(),
                at_ms,
                arrived,
            });
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state as the previous version of the roll-up answered it.
    const V1: &str = r#"{"v":1,"g":[{"p":"tag-a","i":{"PK":"a"},"k":[["100","h100",[["n","1"]],1800000000000,null],["300","h300",[["n","3"]],1800000000000,1700000000]]},{"p":"tag-b","i":{"PK":"b"},"k":[["200","h200",[["n","2"]],null,null]]}]}"#;

    #[test]
    fn a_state_of_format_1_reads_as_its_keys() {
        let events = decode(V1).expect("format 1");
        let seqs: Vec<&str> = events.iter().map(|e| e.seq_text.as_str()).collect();
        assert_eq!(seqs, ["100", "300", "200"]);
        assert_eq!(events[1].arrived, Some(1_700_000_000));
        assert_eq!(events[1].add["n"], Number::from(3));
        assert_eq!(events[2].pk, "tag-b");
        assert!(decode(r#"{"v":9,"g":[]}"#).is_err());
    }
}
