//! Schema-registry headers: Confluent's wire format and AWS Glue Schema Registry's (see the
//! parent module's table), recognised and stripped.

use std::borrow::Cow;

use super::{Framing, MAX_DECODED_BYTES};

/// Whether the header carries Protobuf message indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(all(feature = "avro", feature = "protobuf")), allow(dead_code))]
pub(super) enum Indexes {
    /// Avro: no indexes.
    Absent,
    /// Protobuf: Confluent's index path, Glue's index among the sorted messages.
    Protobuf,
}

/// Which message of the schema a Protobuf value holds, as its header names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(feature = "protobuf"), allow(dead_code))]
pub(super) enum MessageRef {
    /// No header (or Avro): the configured message.
    Configured,
    /// Confluent: the path of indexes from the file's top-level messages through nested ones.
    Path(Vec<usize>),
    /// Glue: the index among all of the file's messages (nested too) sorted by full name.
    Sorted(usize),
}

/// A value with its header stripped.
#[derive(Debug)]
pub(super) struct Frame<'a> {
    /// The encoded value (inflated, for a compressed Glue value).
    pub(super) payload: Cow<'a, [u8]>,
    /// The message the header names.
    #[cfg_attr(not(feature = "protobuf"), allow(dead_code))]
    pub(super) message: MessageRef,
}

const CONFLUENT_MAGIC: u8 = 0;
const GLUE_VERSION: u8 = 3;
const GLUE_UNCOMPRESSED: u8 = 0;
const GLUE_ZLIB: u8 = 5;

/// `value` without its header.
pub(super) fn unframe(
    value: &[u8],
    framing: Framing,
    indexes: Indexes,
) -> Result<Frame<'_>, String> {
    if framing == Framing::None {
        return Ok(Frame {
            payload: Cow::Borrowed(value),
            message: MessageRef::Configured,
        });
    }
    match value.first() {
        Some(&CONFLUENT_MAGIC) => confluent(&value[1..], indexes),
        Some(&GLUE_VERSION) => glue(&value[1..], indexes),
        Some(other) => Err(format!(
            "its first byte is {other}: neither Confluent's magic byte 0 nor AWS Glue's header \
             version 3 (a value without a schema-registry header needs the framing `none`)"
        )),
        None => Err("it is empty".into()),
    }
}

/// After the magic byte: the schema id, the Protobuf indexes, the value.
fn confluent(rest: &[u8], indexes: Indexes) -> Result<Frame<'_>, String> {
    let body = rest
        .get(4..)
        .ok_or("its Confluent header is truncated (no 4-byte schema id)")?;
    let (message, body) = match indexes {
        Indexes::Absent => (MessageRef::Configured, body),
        Indexes::Protobuf => {
            let mut cursor = body;
            let count = zigzag(varint(&mut cursor)?);
            let count = usize::try_from(count)
                .ok()
                .filter(|n| *n <= 64)
                .ok_or_else(|| {
                    format!("its Confluent message index count {count} is out of range")
                })?;
            let mut path = Vec::with_capacity(count.max(1));
            for _ in 0..count {
                let index = zigzag(varint(&mut cursor)?);
                path.push(usize::try_from(index).map_err(|_| format!("message index {index}"))?);
            }
            if path.is_empty() {
                path.push(0);
            }
            (MessageRef::Path(path), cursor)
        }
    };
    Ok(Frame {
        payload: Cow::Borrowed(body),
        message,
    })
}

/// After the header version: compression, the schema version UUID, the value.
fn glue(rest: &[u8], indexes: Indexes) -> Result<Frame<'_>, String> {
    let (&compression, rest) = rest.split_first().ok_or("its Glue header is truncated")?;
    let body = rest
        .get(16..)
        .ok_or("its Glue header is truncated (no 16-byte schema version id)")?;
    let payload = match compression {
        GLUE_UNCOMPRESSED => Cow::Borrowed(body),
        GLUE_ZLIB => Cow::Owned(
            miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(body, MAX_DECODED_BYTES)
                .map_err(|e| {
                    format!(
                        "its zlib body does not inflate (at most {MAX_DECODED_BYTES} bytes): {e}"
                    )
                })?,
        ),
        other => {
            return Err(format!(
                "its Glue compression byte is {other}: 0 (none) or 5 (zlib)"
            ))
        }
    };
    match indexes {
        Indexes::Absent => Ok(Frame {
            payload,
            message: MessageRef::Configured,
        }),
        Indexes::Protobuf => {
            let mut cursor: &[u8] = &payload;
            let index = varint(&mut cursor)?;
            let consumed = payload.len() - cursor.len();
            let index = usize::try_from(index).map_err(|_| format!("message index {index}"))?;
            let payload = match payload {
                Cow::Borrowed(b) => Cow::Borrowed(&b[consumed..]),
                Cow::Owned(mut v) => Cow::Owned(v.split_off(consumed)),
            };
            Ok(Frame {
                payload,
                message: MessageRef::Sorted(index),
            })
        }
    }
}

/// An unsigned LEB128 varint (at most 10 bytes) from the front of `cursor`.
fn varint(cursor: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for (i, &byte) in cursor.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *cursor = &cursor[i + 1..];
            return Ok(value);
        }
    }
    Err("its message indexes are truncated".into())
}

/// A zig-zag encoded signed number.
fn zigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}
