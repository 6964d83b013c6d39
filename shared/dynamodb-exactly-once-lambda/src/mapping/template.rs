//! A compiled template: every leaf string already parsed into where its value comes from, so
//! a record costs no template parsing.

use serde_json::{Map, Value};

pub(crate) use super::leaf::Field;
use super::leaf::{canonical, kind_of, Leaf};
use crate::source::SourcePosition;

/// The key of a template object that makes it a choice (`{"$match": …, "cases": …}`).
const MATCH: &str = "$match";

/// One piece of an `=text` string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    Text(String),
    Value(Leaf),
}

/// An object's key: as written, or computed (`"={/type}"`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Key {
    Literal(String),
    Text(Vec<Piece>),
}

/// A compiled template node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Literal(Value),
    Read(Leaf),
    Text(Vec<Piece>),
    Array(Vec<Node>),
    Object(Vec<(Key, Node)>),
    /// `{"$match": leaf, "cases": {"text": node, …}, "else": node}`: the case named by the
    /// leaf's value (a string as it is, a number canonical, `true`, `false`, `null`); `else`
    /// when none is, or nothing was read.
    Match {
        leaf: Leaf,
        cases: Vec<(String, Node)>,
        otherwise: Option<Box<Node>>,
    },
}

type Fail = (String, String);

impl Node {
    /// Compile `value` (at `at` in the template): `Err((place, why))`.
    pub(crate) fn compile(value: &Value, at: &str) -> Result<Node, Fail> {
        let fail = |why: String| (if at.is_empty() { "/".into() } else { at.into() }, why);
        Ok(match value {
            Value::String(s) => match s.strip_prefix('=') {
                Some(text) => Node::Text(pieces(text).map_err(fail)?),
                None => Node::Read(
                    Leaf::parse(s)
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
            Value::Object(fields) if fields.contains_key(MATCH) => compile_match(fields, at)?,
            Value::Object(fields) => Node::Object(
                fields
                    .iter()
                    .map(|(k, v)| {
                        let place = format!("{at}/{}", escape(k));
                        let key = match k.strip_prefix('=') {
                            Some(text) => Key::Text(pieces(text).map_err(|why| {
                                (place.clone(), format!("in the computed key: {why}"))
                            })?),
                            None => Key::Literal(k.clone()),
                        };
                        Ok::<_, Fail>((key, Node::compile(v, &place)?))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            other => Node::Literal(other.clone()),
        })
    }

    /// Whether filling this node reads the body (a pointer, `$body`), not only the record's
    /// source fields.
    pub(crate) fn reads_body(&self) -> bool {
        let text = |pieces: &[Piece]| {
            pieces
                .iter()
                .any(|p| matches!(p, Piece::Value(leaf) if leaf.reads_body()))
        };
        match self {
            Node::Literal(_) => false,
            Node::Read(leaf) => leaf.reads_body(),
            Node::Text(pieces) => text(pieces),
            Node::Array(items) => items.iter().any(Node::reads_body),
            Node::Object(fields) => fields
                .iter()
                .any(|(k, n)| matches!(k, Key::Text(pieces) if text(pieces)) || n.reads_body()),
            Node::Match {
                leaf,
                cases,
                otherwise,
            } => {
                leaf.reads_body()
                    || cases.iter().any(|(_, n)| n.reads_body())
                    || otherwise.as_ref().is_some_and(|n| n.reads_body())
            }
        }
    }

    /// The value of this node for one record.
    pub(crate) fn fill(&self, body: &Value, position: &SourcePosition) -> Result<Value, String> {
        Ok(match self {
            Node::Literal(v) => v.clone(),
            Node::Read(leaf) => leaf.read(body, position)?,
            Node::Text(pieces) => Value::String(fill_text(pieces, body, position)?),
            Node::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|n| n.fill(body, position))
                    .collect::<Result<_, _>>()?,
            ),
            Node::Object(fields) => {
                let mut map = Map::new();
                for (key, node) in fields {
                    let name = match key {
                        Key::Literal(k) => k.clone(),
                        Key::Text(pieces) => fill_text(pieces, body, position)?,
                    };
                    if map
                        .insert(name.clone(), node.fill(body, position)?)
                        .is_some()
                    {
                        return Err(format!("two fields of one object are named `{name}`"));
                    }
                }
                Value::Object(map)
            }
            Node::Match {
                leaf,
                cases,
                otherwise,
            } => {
                let chosen = match leaf.read_opt(body, position)? {
                    Some(value) => {
                        let name = case_name(&value).map_err(|why| {
                            format!("`{}` is {why}: it cannot choose a case", leaf.describe())
                        })?;
                        cases.iter().find(|(c, _)| *c == name).map(|(_, n)| n)
                    }
                    None => None,
                };
                match chosen.or(otherwise.as_deref()) {
                    Some(node) => node.fill(body, position)?,
                    None => {
                        return Err(format!(
                            "`{}` names no case of the `$match` and it has no `else`",
                            leaf.describe()
                        ))
                    }
                }
            }
        })
    }
}

/// `{"$match": leaf, "cases": {…}, "else": node}`, checked.
fn compile_match(fields: &Map<String, Value>, at: &str) -> Result<Node, Fail> {
    let here = || {
        if at.is_empty() {
            "/".to_string()
        } else {
            at.to_string()
        }
    };
    if let Some(other) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), MATCH | "cases" | "else"))
    {
        return Err((
            here(),
            format!("a `$match` object has `$match`, `cases` and `else` only, not `{other}`"),
        ));
    }
    let leaf = match fields.get(MATCH) {
        Some(Value::String(s)) => Leaf::parse(s).map_err(|why| (format!("{at}/$match"), why))?,
        _ => {
            return Err((
                here(),
                "`$match` is a leaf (`/deleted`, `$partitionKey`)".into(),
            ))
        }
    };
    let cases = match fields.get("cases") {
        Some(Value::Object(cases)) => cases
            .iter()
            .map(|(name, v)| {
                let node = Node::compile(v, &format!("{at}/cases/{}", escape(name)))?;
                Ok::<_, Fail>((name.clone(), node))
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err((
                here(),
                "`cases` is an object of values by name (`{\"true\": \"=delete\"}`)".into(),
            ))
        }
    };
    let otherwise = fields
        .get("else")
        .map(|v| Node::compile(v, &format!("{at}/else")).map(Box::new))
        .transpose()?;
    Ok(Node::Match {
        leaf,
        cases,
        otherwise,
    })
}

/// The case a value names: a string as it is, a number canonical, `true`, `false`, `null`.
fn case_name(value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => canonical(n),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null => Ok("null".into()),
        other => Err(kind_of(other).to_string()),
    }
}

/// An `=text`'s value: strings as they are, numbers in their canonical spelling.
fn fill_text(pieces: &[Piece], body: &Value, position: &SourcePosition) -> Result<String, String> {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Value(leaf) => match leaf.read(body, position)? {
                Value::String(s) => out.push_str(&s),
                Value::Number(n) => out.push_str(
                    &canonical(&n).map_err(|why| format!("`{}`: {why}", leaf.describe()))?,
                ),
                other => {
                    return Err(format!(
                        "`{}` is {}, not a string or a number: it cannot go into a text",
                        leaf.describe(),
                        kind_of(&other)
                    ))
                }
            },
        }
    }
    Ok(out)
}

fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// The pieces of an `=text` string: literal text, `{/pointer}` and `{$field}` (with their
/// filters); `{{` and `}}` are braces.
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
                out.push(Piece::Value(Leaf::parse(&inner).map_err(|why| {
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
