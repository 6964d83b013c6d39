//! The record shapes of the protocols, as far as a template can be checked against them when
//! the function starts: the fields a record has (a misspelled `idempotency_key` is refused),
//! the required ones, and the type of a literal value (`"op": "=upsert"` is refused).
//! Values read from the body are checked by the protocol, record by record.

use dynamodb_exactly_once::counter::Counter;
use dynamodb_exactly_once::document::Document;
use dynamodb_exactly_once::ratchet::Ratchet;
use dynamodb_exactly_once::txn::Coordinator;
use serde_json::Value;

use super::template::{Key, Node, Piece};

/// A JSON type a field's literal may have.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    String,
    /// A number.
    Number,
    /// `true` or `false`.
    Bool,
    /// An object.
    Object,
    /// An array.
    Array,
    /// Any value.
    Any,
}

/// One field of a protocol's record.
#[non_exhaustive]
#[derive(Debug, Clone, Copy)]
pub struct FieldShape {
    /// Its name in the record.
    pub name: &'static str,
    /// Whether every record has it.
    pub required: bool,
    /// The types its value may have.
    pub kinds: &'static [Kind],
    /// The texts a string value may be (empty: any).
    pub values: &'static [&'static str],
}

impl FieldShape {
    /// A field every record has, of one of `kinds`.
    pub const fn required(name: &'static str, kinds: &'static [Kind]) -> Self {
        FieldShape {
            name,
            required: true,
            kinds,
            values: &[],
        }
    }

    /// A field some records have.
    pub const fn optional(name: &'static str, kinds: &'static [Kind]) -> Self {
        FieldShape {
            required: false,
            ..FieldShape::required(name, kinds)
        }
    }

    /// The same field, a string that is one of `values`.
    pub const fn one_of(self, values: &'static [&'static str]) -> Self {
        FieldShape { values, ..self }
    }
}

/// A protocol's record: its name (for messages) and its fields.
#[non_exhaustive]
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The protocol, as messages name it (`the counter`).
    pub protocol: &'static str,
    /// Every field a record may have.
    pub fields: &'static [FieldShape],
}

impl Shape {
    /// A protocol named `protocol` whose records have `fields` (no other).
    pub const fn new(protocol: &'static str, fields: &'static [FieldShape]) -> Self {
        Shape { protocol, fields }
    }
}

/// A protocol whose records a mapping's template can be checked against at start-up
/// ([`RecordMapping::check`](super::RecordMapping::check)); `None`: not checked.
pub trait RecordShape {
    /// The shape of its records.
    fn record_shape() -> Option<Shape> {
        None
    }
}

use Kind::{Any, Array, Bool, Number, Object, String as Text};

impl RecordShape for Counter {
    fn record_shape() -> Option<Shape> {
        const FIELDS: &[FieldShape] = &[
            FieldShape::required("key", &[Object]),
            FieldShape::required("add", &[Object]),
            FieldShape::required("idempotencyKey", &[Text]),
        ];
        Some(Shape::new("the counter", FIELDS))
    }
}

impl RecordShape for Ratchet {
    fn record_shape() -> Option<Shape> {
        const FIELDS: &[FieldShape] = &[
            FieldShape::required("op", &[Text]).one_of(&["put", "delete"]),
            FieldShape::required("key", &[Object]),
            FieldShape::required("ts", &[Number, Text]),
            FieldShape::optional("item", &[Object]),
        ];
        Some(Shape::new("the ratchet", FIELDS))
    }
}

impl RecordShape for Document {
    fn record_shape() -> Option<Shape> {
        const OPS: &[&str] = &[
            "list_append",
            "list_remove",
            "set_add",
            "set_remove",
            "replace",
        ];
        const FIELDS: &[FieldShape] = &[
            FieldShape::required("op", &[Text]).one_of(OPS),
            FieldShape::required("key", &[Object]),
            FieldShape::optional("path", &[Text]),
            FieldShape::optional("values", &[Array]),
            FieldShape::optional("value", &[Any]),
            FieldShape::optional("unique", &[Bool]),
            FieldShape::optional("document", &[Object]),
            FieldShape::optional("expectedVersion", &[Number]),
        ];
        Some(Shape::new("the document writer", FIELDS))
    }
}

impl RecordShape for Coordinator {
    fn record_shape() -> Option<Shape> {
        const FIELDS: &[FieldShape] = &[
            FieldShape::required("txId", &[Text]),
            FieldShape::required("requests", &[Array]),
            FieldShape::optional("issuedAt", &[Number]),
        ];
        Some(Shape::new("the transaction coordinator", FIELDS))
    }
}

/// Check a compiled template against `shape`: `Err((place, why))`.
pub(super) fn check(node: &Node, shape: &Shape, at: &str) -> Result<(), (String, String)> {
    let here = || {
        if at.is_empty() {
            "/".to_string()
        } else {
            at.to_string()
        }
    };
    match node {
        // `$body`, a pointer: the record is whatever the body holds, checked per record.
        Node::Read(_) => Ok(()),
        Node::Match {
            cases, otherwise, ..
        } => {
            for (name, case) in cases {
                check(case, shape, &format!("{at}/cases/{name}"))?;
            }
            match otherwise {
                Some(node) => check(node, shape, &format!("{at}/else")),
                None => Ok(()),
            }
        }
        Node::Object(fields) => check_fields(fields, shape, at),
        _ => Err((
            here(),
            format!(
                "{}'s record is an object: {}",
                shape.protocol,
                fields_of(shape)
            ),
        )),
    }
}

fn check_fields(fields: &[(Key, Node)], shape: &Shape, at: &str) -> Result<(), (String, String)> {
    let computed = fields.iter().any(|(k, _)| matches!(k, Key::Text(_)));
    for (key, node) in fields {
        let Key::Literal(name) = key else { continue };
        let place = format!("{at}/{name}");
        let Some(field) = shape.fields.iter().find(|f| f.name == name) else {
            let hint = near(name, shape)
                .map(|n| format!(" (did you mean `{n}`?)"))
                .unwrap_or_default();
            return Err((
                place,
                format!(
                    "`{name}` is not a field of {}'s record{hint}: {}",
                    shape.protocol,
                    fields_of(shape)
                ),
            ));
        };
        check_value(node, field, shape).map_err(|why| (place, why))?;
    }
    if computed {
        return Ok(());
    }
    let given = |name: &str| {
        fields
            .iter()
            .any(|(k, _)| matches!(k, Key::Literal(n) if n == name))
    };
    match shape.fields.iter().find(|f| f.required && !given(f.name)) {
        Some(missing) => Err((
            if at.is_empty() { "/".into() } else { at.into() },
            format!(
                "{}'s record needs `{}`: {}",
                shape.protocol,
                missing.name,
                fields_of(shape)
            ),
        )),
        None => Ok(()),
    }
}

/// A field's value node: a literal (or a text without values put in) of a type and value
/// the field takes; read values are checked per record.
fn check_value(node: &Node, field: &FieldShape, shape: &Shape) -> Result<(), String> {
    let (kind, text) = match node {
        Node::Read(_) => return Ok(()),
        Node::Match {
            cases, otherwise, ..
        } => {
            for node in cases.iter().map(|(_, n)| n).chain(otherwise.as_deref()) {
                check_value(node, field, shape)?;
            }
            return Ok(());
        }
        Node::Literal(Value::Null) => return Err(format!("`{}` is null", field.name)),
        Node::Literal(Value::String(s)) => (Text, Some(s.clone())),
        Node::Literal(Value::Number(_)) => (Number, None),
        Node::Literal(Value::Bool(_)) => (Bool, None),
        Node::Literal(Value::Array(_)) | Node::Array(_) => (Array, None),
        Node::Literal(Value::Object(_)) | Node::Object(_) => (Object, None),
        Node::Text(pieces) => (Text, constant(pieces)),
    };
    if !field.kinds.iter().any(|k| *k == kind || *k == Any) {
        return Err(format!(
            "`{}` of {}'s record is {}, not {}",
            field.name,
            shape.protocol,
            names(field.kinds),
            describe(kind)
        ));
    }
    match text {
        Some(text) if !field.values.is_empty() && !field.values.contains(&text.as_str()) => {
            Err(format!(
                "`{}` of {}'s record is one of {}, not {text:?}",
                field.name,
                shape.protocol,
                field.values.join(", ")
            ))
        }
        _ => Ok(()),
    }
}

fn constant(pieces: &[Piece]) -> Option<String> {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => Some(t.as_str()),
            Piece::Value(_) => None,
        })
        .collect::<Option<Vec<_>>>()
        .map(|parts| parts.concat())
}

/// The field spelled alike (`idempotency_key`, `IdempotencyKey` → `idempotencyKey`).
fn near(name: &str, shape: &Shape) -> Option<&'static str> {
    let fold = |s: &str| s.replace(['_', '-'], "").to_ascii_lowercase();
    shape
        .fields
        .iter()
        .find(|f| fold(f.name) == fold(name))
        .map(|f| f.name)
}

fn fields_of(shape: &Shape) -> String {
    let list: Vec<String> = shape
        .fields
        .iter()
        .map(|f| {
            let need = if f.required { "" } else { " (optional)" };
            format!("`{}`{need}", f.name)
        })
        .collect();
    format!("its fields are {}", list.join(", "))
}

fn names(kinds: &[Kind]) -> String {
    let list: Vec<&str> = kinds.iter().map(|k| describe(*k)).collect();
    list.join(" or ")
}

fn describe(kind: Kind) -> &'static str {
    match kind {
        Text => "a string",
        Number => "a number",
        Bool => "a boolean",
        Object => "an object",
        Array => "an array",
        Any => "any value",
    }
}
