//! A template leaf: where a value comes from (a JSON pointer or a `$` field of the record)
//! and the typed filters it passes through (`/Message|json|/customer`, `/amount|number|neg`,
//! `/time|epoch_ms`, `/x|default(0)`).

use dynamodb_exactly_once::__private::check_json_numbers;
use dynamodb_exactly_once::Number;
use serde_json::Value;

use crate::source::SourcePosition;

/// A value of the record's source position (`$name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Id,
    SequenceNumber,
    MessageId,
    PartitionKey,
    MessageGroupId,
    ArrivalTime,
    DeliveryId,
    Body,
    Topic,
    Partition,
    Offset,
    Timestamp,
    TimestampType,
    Key,
    Headers,
}

impl Field {
    const ALL: [(&'static str, Field); 15] = [
        ("id", Field::Id),
        ("sequenceNumber", Field::SequenceNumber),
        ("messageId", Field::MessageId),
        ("partitionKey", Field::PartitionKey),
        ("messageGroupId", Field::MessageGroupId),
        ("arrivalTime", Field::ArrivalTime),
        ("deliveryId", Field::DeliveryId),
        ("body", Field::Body),
        ("topic", Field::Topic),
        ("partition", Field::Partition),
        ("offset", Field::Offset),
        ("timestamp", Field::Timestamp),
        ("timestampType", Field::TimestampType),
        ("key", Field::Key),
        ("headers", Field::Headers),
    ];

    fn parse(name: &str) -> Result<Field, String> {
        Field::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                let known: Vec<String> = Field::ALL.iter().map(|(n, _)| format!("${n}")).collect();
                format!("`${name}` is not a source field ({})", known.join(", "))
            })
    }

    pub(crate) fn name(self) -> &'static str {
        Field::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("?", |(n, _)| n)
    }

    /// The field's value for a record (`None`: the record has none). The Kafka fields
    /// (`$topic`, `$partition`, `$offset`, `$timestamp` in epoch ms, `$timestampType`, `$key`
    /// and `$headers`) are absent on the other sources; `$key` and each header are read as
    /// UTF-8 text (a key that is not is absent, a header that is not is left out of
    /// `$headers`, an object of names to their last value).
    pub(crate) fn value(self, body: &Value, position: &SourcePosition) -> Option<Value> {
        if let Some(value) = self.kafka_value(position) {
            return value;
        }
        use crate::source::SourceKind::{Kafka, Kinesis, Sqs};
        let id = || match &position.sub_record {
            Some(sub) => format!("{}:{}", position.id, sub.sub_sequence_number),
            None => position.id.clone(),
        };
        let text = |s: Option<String>| s.map(Value::String);
        match self {
            Field::Id => text(Some(id())),
            Field::SequenceNumber => match position.kind {
                Sqs => text(position.sqs_sequence_number.clone()),
                Kafka => None,
                _ => text(Some(id())),
            },
            Field::MessageId => text((position.kind == Sqs).then(|| position.id.clone())),
            Field::PartitionKey => text(
                position
                    .partition_key
                    .clone()
                    .filter(|_| position.kind == Kinesis),
            ),
            Field::MessageGroupId => text(position.message_group_id.clone()),
            Field::ArrivalTime => position.arrived_at_ms.map(Value::from),
            Field::DeliveryId => text(Some(position.delivery_id())),
            Field::Body => Some(body.clone()),
            Field::Topic
            | Field::Partition
            | Field::Offset
            | Field::Timestamp
            | Field::TimestampType
            | Field::Key
            | Field::Headers => None,
        }
    }

    /// A Kafka field's value (`Some(None)`: the record has none), `None` for other fields.
    fn kafka_value(self, position: &SourcePosition) -> Option<Option<Value>> {
        let kafka = position.kafka.as_ref();
        let utf8 = |b: &[u8]| std::str::from_utf8(b).ok().map(str::to_string);
        let value = match self {
            Field::Topic => kafka.map(|k| Value::from(k.topic.clone())),
            Field::Partition => kafka.map(|k| Value::from(k.partition)),
            Field::Offset => kafka.map(|k| Value::from(k.offset)),
            Field::Timestamp => kafka.and_then(|k| k.timestamp_ms).map(Value::from),
            Field::TimestampType => kafka.and_then(|k| k.timestamp_type.clone().map(Value::from)),
            Field::Key => kafka.and_then(|k| k.key.as_deref().and_then(utf8).map(Value::from)),
            Field::Headers => kafka.map(|k| {
                let mut map = serde_json::Map::new();
                for h in &k.headers {
                    match utf8(&h.value) {
                        Some(text) => map.insert(h.name.clone(), Value::from(text)),
                        None => map.remove(&h.name),
                    };
                }
                Value::Object(map)
            }),
            _ => return None,
        };
        Some(value)
    }
}

/// Where one value comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    Pointer(String),
    Field(Field),
}

/// One filter of a leaf, applied left to right.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// `json`: a string holding JSON becomes that JSON (any other value is kept).
    Json,
    /// `/a/b`: the value at that pointer inside the value so far.
    At(String),
    /// `number`: a string of a number becomes that number (exactly); a number is kept.
    Number,
    /// `string`: a number becomes its canonical text; a string is kept.
    String,
    /// `epoch_ms`: an RFC 3339 time (`2024-05-01T12:00:00.250Z`) becomes epoch milliseconds.
    EpochMs,
    /// `neg`: a number negated (exactly).
    Neg,
    /// `default(json)`: the value when nothing was read (or `null`).
    Default(Value),
}

/// A leaf: its source and its filters.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Leaf {
    pub(crate) source: Source,
    pub(crate) steps: Vec<Step>,
    /// The leaf as written, for messages.
    text: String,
}

impl Leaf {
    /// Parse a leaf: `/pointer` or `$field`, then `|filter`s.
    pub(crate) fn parse(text: &str) -> Result<Leaf, String> {
        let mut parts = split_steps(text).into_iter();
        let head = parts.next().unwrap_or_default();
        let source = if head.starts_with('/') {
            check_pointer(&head)?;
            Source::Pointer(head)
        } else {
            match head.strip_prefix('$') {
                Some(name) => Source::Field(Field::parse(name)?),
                None => {
                    return Err(format!(
                        "{head:?} is neither a JSON pointer (`/…`) nor a source field (`$…`)"
                    ))
                }
            }
        };
        let steps = parts.map(|p| Step::parse(&p)).collect::<Result<_, _>>()?;
        Ok(Leaf {
            source,
            steps,
            text: text.to_string(),
        })
    }

    /// Whether the leaf reads the body (a pointer, `$body`).
    pub(crate) fn reads_body(&self) -> bool {
        matches!(self.source, Source::Pointer(_) | Source::Field(Field::Body))
    }

    /// The leaf as written.
    pub(crate) fn describe(&self) -> &str {
        &self.text
    }

    /// The value for one record: `Ok(None)` when nothing was read (a pointer that finds
    /// nothing, a field the record lacks) and no `default` filled it.
    pub(crate) fn read_opt(
        &self,
        body: &Value,
        position: &SourcePosition,
    ) -> Result<Option<Value>, String> {
        let mut value = match &self.source {
            Source::Pointer(p) => body.pointer(p).cloned(),
            Source::Field(f) => f.value(body, position),
        };
        for step in &self.steps {
            value = step
                .apply(value)
                .map_err(|why| format!("`{}`: {why}", self.text))?;
        }
        Ok(value)
    }

    /// The value for one record; nothing read is an error naming what was missing.
    pub(crate) fn read(&self, body: &Value, position: &SourcePosition) -> Result<Value, String> {
        self.read_opt(body, position)?
            .ok_or_else(|| match &self.source {
                Source::Pointer(p) if self.steps.is_empty() => {
                    format!("the body has no value at `{p}`")
                }
                Source::Pointer(_) => format!("`{}` reads nothing", self.text),
                Source::Field(f) => {
                    format!("a {} record has no `${}`", position.kind.as_str(), f.name())
                }
            })
    }
}

impl Step {
    const NAMES: &'static str = "json, /pointer, number, string, epoch_ms, neg, default(json)";

    fn parse(text: &str) -> Result<Step, String> {
        let text = text.trim();
        if text.starts_with('/') {
            check_pointer(text)?;
            return Ok(Step::At(text.to_string()));
        }
        if let Some(arg) = text
            .strip_prefix("default(")
            .and_then(|r| r.strip_suffix(')'))
        {
            let value = serde_json::from_str(arg).map_err(|e| {
                format!("`default({arg})`: the default is a JSON value (`0`, `\"x\"`): {e}")
            })?;
            return Ok(Step::Default(value));
        }
        Ok(match text {
            "json" => Step::Json,
            "number" => Step::Number,
            "string" => Step::String,
            "epoch_ms" => Step::EpochMs,
            "neg" => Step::Neg,
            other => {
                return Err(format!(
                    "`|{other}` is not a filter ({}); a `|` in a leaf starts a filter",
                    Step::NAMES
                ))
            }
        })
    }

    /// The value after this step; `None` in and out is "nothing read" (only `default`
    /// changes it).
    fn apply(&self, value: Option<Value>) -> Result<Option<Value>, String> {
        let value = match (self, value) {
            (Step::Default(d), None | Some(Value::Null)) => return Ok(Some(d.clone())),
            (_, None) => return Ok(None),
            (_, Some(v)) => v,
        };
        Ok(Some(match self {
            Step::Default(_) => value,
            Step::At(p) => return Ok(value.pointer(p).cloned()),
            Step::Json => match value {
                Value::String(s) => {
                    let parsed: Value = serde_json::from_str(&s)
                        .map_err(|e| format!("the text is not JSON ({e})"))?;
                    check_json_numbers(s.as_bytes()).map_err(|e| e.to_string())?;
                    parsed
                }
                other => other,
            },
            Step::Number => Value::Number(number_of(&value)?.to_json()),
            Step::String => match value {
                Value::String(s) => Value::String(s),
                Value::Number(n) => Value::String(canonical(&n)?),
                other => return Err(format!("`string` takes a number, not {}", kind_of(&other))),
            },
            Step::EpochMs => Value::from(epoch_ms(&value)?),
            Step::Neg => match value {
                Value::Number(n) => Value::Number(
                    Number::from_json(&n)
                        .map_err(|e| e.to_string())?
                        .negated()
                        .to_json(),
                ),
                other => return Err(format!("`neg` takes a number, not {}", kind_of(&other))),
            },
        }))
    }
}

/// The canonical text of a JSON number (`1.0` and `1e0` are `1`), the one spelling numbers
/// get in texts and keys.
pub(crate) fn canonical(n: &serde_json::Number) -> Result<String, String> {
    Number::from_json(n)
        .map(|n| n.canonical())
        .map_err(|e| e.to_string())
}

fn number_of(value: &Value) -> Result<Number, String> {
    match value {
        Value::Number(n) => Number::from_json(n).map_err(|e| e.to_string()),
        Value::String(s) => Number::parse(s.trim()).map_err(|e| e.to_string()),
        other => Err(format!(
            "`number` takes a string or a number, not {}",
            kind_of(other)
        )),
    }
}

/// An RFC 3339 time as epoch milliseconds (a finer fraction is truncated toward the past).
fn epoch_ms(value: &Value) -> Result<i64, String> {
    let Value::String(s) = value else {
        return Err(format!(
            "`epoch_ms` takes an RFC 3339 time (a string), not {}",
            kind_of(value)
        ));
    };
    chrono::DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.timestamp_millis())
        .map_err(|e| {
            format!(
                "{} is not an RFC 3339 time like 2024-05-01T12:00:00Z ({e})",
                dynamodb_exactly_once::__private::quote(s)
            )
        })
}

/// The leaf's parts split at `|`, except inside `default(…)`'s JSON.
fn split_steps(text: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' if depth > 0 => in_string = !in_string,
            '(' if !in_string => depth += 1,
            ')' if !in_string => depth = depth.saturating_sub(1),
            '|' if depth == 0 => {
                parts.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}

/// A JSON pointer's escapes are `~0` and `~1` only (RFC 6901).
fn check_pointer(pointer: &str) -> Result<(), String> {
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!(
                "`{pointer}` is not a JSON pointer: `~` is written `~0` and `/` inside a name `~1`"
            ));
        }
    }
    Ok(())
}

pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
