//! A compiled template: every leaf string already parsed into where its value comes from, so
//! a record costs no template parsing.

use serde_json::{Map, Value};

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
}

impl Field {
    const ALL: [(&'static str, Field); 8] = [
        ("id", Field::Id),
        ("sequenceNumber", Field::SequenceNumber),
        ("messageId", Field::MessageId),
        ("partitionKey", Field::PartitionKey),
        ("messageGroupId", Field::MessageGroupId),
        ("arrivalTime", Field::ArrivalTime),
        ("deliveryId", Field::DeliveryId),
        ("body", Field::Body),
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

    /// The field's value for a record (`None`: the record has none).
    pub(crate) fn value(self, body: &Value, position: &SourcePosition) -> Option<Value> {
        use crate::source::SourceKind::{Kinesis, Sqs};
        let id = || match &position.sub_record {
            Some(sub) => format!("{}:{}", position.id, sub.sub_sequence_number),
            None => position.id.clone(),
        };
        let text = |s: Option<String>| s.map(Value::String);
        match self {
            Field::Id => text(Some(id())),
            Field::SequenceNumber => match position.kind {
                Sqs => text(position.sqs_sequence_number.clone()),
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
        }
    }
}

/// Where one value comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    Pointer(String),
    Field(Field),
}

impl Source {
    fn parse(text: &str) -> Result<Source, String> {
        if text.starts_with('/') {
            check_pointer(text)?;
            return Ok(Source::Pointer(text.to_string()));
        }
        match text.strip_prefix('$') {
            Some(name) => Ok(Source::Field(Field::parse(name)?)),
            None => Err(format!(
                "{text:?} is neither a JSON pointer (`/…`) nor a source field (`$…`)"
            )),
        }
    }

    fn read(&self, body: &Value, position: &SourcePosition) -> Result<Value, String> {
        match self {
            Source::Pointer(p) => body
                .pointer(p)
                .cloned()
                .ok_or_else(|| format!("the body has no value at `{p}`")),
            Source::Field(f) => f.value(body, position).ok_or_else(|| {
                format!("a {} record has no `${}`", position.kind.as_str(), f.name())
            }),
        }
    }

    fn describe(&self) -> String {
        match self {
            Source::Pointer(p) => p.clone(),
            Source::Field(f) => format!("${}", f.name()),
        }
    }
}

/// One piece of an `=text` string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    Text(String),
    Value(Source),
}

/// A compiled template node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Literal(Value),
    Read(Source),
    Text(Vec<Piece>),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl Node {
    /// Compile `value` (at `at` in the template): `Err((place, why))`.
    pub(crate) fn compile(value: &Value, at: &str) -> Result<Node, (String, String)> {
        let fail = |why: String| (if at.is_empty() { "/".into() } else { at.into() }, why);
        Ok(match value {
            Value::String(s) => match s.strip_prefix('=') {
                Some(text) => Node::Text(pieces(text).map_err(fail)?),
                None => Node::Read(
                    Source::parse(s)
                        .map_err(|why| fail(format!("{why}; a literal text starts with `=`")))?,
                ),
            },
            Value::Array(items) => Node::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| Node::compile(v, &format!("{at}/{i}")))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(fields) => Node::Object(
                fields
                    .iter()
                    .map(|(k, v)| {
                        let escaped = k.replace('~', "~0").replace('/', "~1");
                        Ok::<_, (String, String)>((
                            k.clone(),
                            Node::compile(v, &format!("{at}/{escaped}"))?,
                        ))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            other => Node::Literal(other.clone()),
        })
    }

    /// Whether filling this node reads the body (a pointer, `$body`), not only the record's
    /// source fields.
    pub(crate) fn reads_body(&self) -> bool {
        let reads =
            |source: &Source| matches!(source, Source::Pointer(_) | Source::Field(Field::Body));
        match self {
            Node::Literal(_) => false,
            Node::Read(source) => reads(source),
            Node::Text(pieces) => pieces
                .iter()
                .any(|p| matches!(p, Piece::Value(source) if reads(source))),
            Node::Array(items) => items.iter().any(Node::reads_body),
            Node::Object(fields) => fields.iter().any(|(_, n)| n.reads_body()),
        }
    }

    /// The value of this node for one record.
    pub(crate) fn fill(&self, body: &Value, position: &SourcePosition) -> Result<Value, String> {
        Ok(match self {
            Node::Literal(v) => v.clone(),
            Node::Read(source) => source.read(body, position)?,
            Node::Text(pieces) => {
                let mut out = String::new();
                for piece in pieces {
                    match piece {
                        Piece::Text(t) => out.push_str(t),
                        Piece::Value(source) => match source.read(body, position)? {
                            Value::String(s) => out.push_str(&s),
                            Value::Number(n) => out.push_str(&n.to_string()),
                            other => {
                                return Err(format!(
                                "`{}` is {}, not a string or a number: it cannot go into a text",
                                source.describe(),
                                kind_of(&other)
                            ))
                            }
                        },
                    }
                }
                Value::String(out)
            }
            Node::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|n| n.fill(body, position))
                    .collect::<Result<_, _>>()?,
            ),
            Node::Object(fields) => {
                let mut map = Map::new();
                for (k, n) in fields {
                    map.insert(k.clone(), n.fill(body, position)?);
                }
                Value::Object(map)
            }
        })
    }
}

/// The pieces of an `=text` string: literal text, `{/pointer}` and `{$field}`; `{{` and `}}`
/// are braces.
fn pieces(text: &str) -> Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('{', Some('{')) | ('}', Some('}')) => {
                chars.next();
                literal.push(c);
            }
            ('{', _) => {
                let mut inner = String::new();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    inner.push(c);
                }
                if !closed {
                    return Err(format!("`{{{inner}` is not closed by `}}`"));
                }
                if !literal.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut literal)));
                }
                out.push(Piece::Value(Source::parse(&inner).map_err(|why| {
                    format!("in `{{{inner}}}`: {why} (a brace is written `{{{{`)")
                })?));
            }
            ('}', _) => return Err("a lone `}` (a brace is written `}}`)".into()),
            _ => literal.push(c),
        }
    }
    if !literal.is_empty() {
        out.push(Piece::Text(literal));
    }
    Ok(out)
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

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
