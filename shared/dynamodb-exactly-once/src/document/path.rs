//! Attribute paths from records: `friends`, `profile.tags`, `lists[2]`, `a.b[0][1].c`.
//!
//! A path is parsed into segments (names and list indexes) and every name is emitted through
//! a fresh [`Placeholders`] name (`#d0.#d1[2]`): a name from a record never becomes part of
//! an expression's text, so it cannot inject operators or clash with reserved words. Indexes
//! are plain decimal numbers, the only thing written literally.

use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::ddb::{Item, Placeholders};

/// Longest path accepted (bytes).
pub(crate) const MAX_PATH_BYTES: usize = 1024;
/// Deepest path accepted (DynamoDB nests documents 32 levels deep).
pub(crate) const MAX_DEPTH: usize = 32;
/// Largest list index accepted (a 400 KB item cannot hold a longer list).
pub(crate) const MAX_INDEX: usize = 409_600;

/// One step of a path: a map key or a list index, the two steps of DynamoDB's document
/// paths (exhaustive on purpose).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A map key (or, first, a top-level attribute).
    Name(String),
    /// A list index.
    Index(usize),
}

/// A parsed attribute path; its first segment is always a name (the top-level attribute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrPath {
    segments: Vec<Segment>,
}

impl AttrPath {
    /// Parse `text`; the error says what is wrong, for a rejection message.
    ///
    /// ```
    /// use dynamodb_exactly_once::document::{AttrPath, Segment};
    /// let p = AttrPath::parse("lists[2].tags").expect("valid");
    /// assert_eq!(p.top(), "lists");
    /// assert_eq!(p.segments()[1], Segment::Index(2));
    /// assert!(AttrPath::parse("a..b").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<AttrPath, String> {
        if text.is_empty() {
            return Err("the path is empty".into());
        }
        if text.len() > MAX_PATH_BYTES {
            return Err(format!("the path is longer than {MAX_PATH_BYTES} bytes"));
        }
        let mut segments = Vec::new();
        let mut rest = text;
        let mut expect_name = true;
        while !rest.is_empty() || expect_name {
            let (segment, tail) = if expect_name {
                take_name(rest)?
            } else if let Some(tail) = rest.strip_prefix('.') {
                take_name(tail)?
            } else if let Some(tail) = rest.strip_prefix('[') {
                take_index(tail)?
            } else {
                return Err(format!("unexpected {rest:?} in the path"));
            };
            segments.push(segment);
            rest = tail;
            expect_name = false;
        }
        if segments.len() > MAX_DEPTH {
            return Err(format!("the path is deeper than {MAX_DEPTH} levels"));
        }
        Ok(AttrPath { segments })
    }

    /// The segments, the first being the top-level attribute's name.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The top-level attribute.
    pub fn top(&self) -> &str {
        match self.segments.first() {
            Some(Segment::Name(name)) => name,
            _ => "",
        }
    }

    /// The path with a list index appended (`path[i]`).
    pub fn index(&self, i: usize) -> AttrPath {
        let mut segments = self.segments.clone();
        segments.push(Segment::Index(i));
        AttrPath { segments }
    }

    /// The path up to its first list index (`a.b[2].c` → `a.b`): what a projection may name
    /// without DynamoDB renumbering the projected list's elements.
    pub fn before_first_index(&self) -> AttrPath {
        let segments = self
            .segments
            .iter()
            .take_while(|s| matches!(s, Segment::Name(_)))
            .cloned()
            .collect();
        AttrPath { segments }
    }

    /// The expression text of the path, every name through a fresh placeholder:
    /// `#d0.#d1[2]`.
    pub(crate) fn emit(&self, placeholders: &mut Placeholders) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Name(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(&placeholders.name(name.as_str()));
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    /// The value at this path in `item`, if there is one.
    pub fn get<'a>(&self, item: &'a Item) -> Option<&'a AttributeValue> {
        let mut segments = self.segments.iter();
        let mut current = match segments.next()? {
            Segment::Name(name) => item.get(name)?,
            Segment::Index(_) => return None,
        };
        for segment in segments {
            current = match (segment, current) {
                (Segment::Name(name), AttributeValue::M(map)) => map.get(name)?,
                (Segment::Index(i), AttributeValue::L(list)) => list.get(*i)?,
                _ => return None,
            };
        }
        Some(current)
    }
}

impl fmt::Display for AttrPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, segment) in self.segments.iter().enumerate() {
            match segment {
                Segment::Name(name) if n == 0 => f.write_str(name)?,
                Segment::Name(name) => write!(f, ".{name}")?,
                Segment::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

/// A name up to the next `.` or `[`.
fn take_name(text: &str) -> Result<(Segment, &str), String> {
    let end = text.find(['.', '[', ']']).unwrap_or(text.len());
    if end == 0 {
        return Err("a name in the path is empty".into());
    }
    if text[end..].starts_with(']') {
        return Err("`]` without `[` in the path".into());
    }
    Ok((Segment::Name(text[..end].to_string()), &text[end..]))
}

/// Decimal digits up to `]` (the `[` already taken).
fn take_index(text: &str) -> Result<(Segment, &str), String> {
    let end = text
        .find(']')
        .ok_or_else(|| String::from("`[` without `]` in the path"))?;
    let digits = &text[..end];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("list index {digits:?} is not a decimal number"));
    }
    match digits.parse::<usize>() {
        Ok(i) if i <= MAX_INDEX => Ok((Segment::Index(i), &text[end + 1..])),
        _ => Err(format!("list index {digits} is larger than {MAX_INDEX}")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_path_is_emitted_through_placeholders() {
        let mut p = crate::ddb::Placeholders::new("d");
        let path = AttrPath::parse("profile.tags[2]").expect("valid");
        assert_eq!(path.emit(&mut p), "#d0.#d1[2]");
        assert_eq!(p.names()["#d1"], "tags");
    }

    use super::*;

    fn names(p: &AttrPath) -> Vec<String> {
        p.segments()
            .iter()
            .map(|s| match s {
                Segment::Name(n) => n.clone(),
                Segment::Index(i) => format!("[{i}]"),
            })
            .collect()
    }

    #[test]
    fn valid_paths_parse_into_segments_and_print_back() {
        for (text, expected) in [
            ("friends", vec!["friends"]),
            ("profile.tags", vec!["profile", "tags"]),
            ("lists[2]", vec!["lists", "[2]"]),
            ("a.b[0][13].c", vec!["a", "b", "[0]", "[13]", "c"]),
            (
                "with space.#not-a-placeholder",
                vec!["with space", "#not-a-placeholder"],
            ),
        ] {
            let path = AttrPath::parse(text).expect(text);
            assert_eq!(names(&path), expected, "{text}");
            assert_eq!(path.to_string(), text);
        }
    }

    #[test]
    fn malformed_paths_are_refused() {
        for text in [
            "",
            ".a",
            "a.",
            "a..b",
            "[0]",
            "a[",
            "a[]",
            "a[x]",
            "a[-1]",
            "a[1",
            "a]",
            "a[0]b",
            "a[99999999999999999999]",
        ] {
            assert!(AttrPath::parse(text).is_err(), "{text:?} should be refused");
        }
        let deep = vec!["a"; MAX_DEPTH + 1].join(".");
        assert!(AttrPath::parse(&deep).is_err());
        assert!(AttrPath::parse(&"x".repeat(MAX_PATH_BYTES + 1)).is_err());
    }

    #[test]
    fn names_never_reach_the_expression_text() {
        let mut p = Placeholders::new("d");
        let path = AttrPath::parse("a = :x OR b.c[3]").expect("a name may hold anything");
        let text = path.emit(&mut p);
        assert_eq!(text, "#d0.#d1[3]");
        assert_eq!(p.names()["#d0"], "a = :x OR b");
        assert_eq!(p.names()["#d1"], "c");
    }

    #[test]
    fn get_follows_maps_and_lists() {
        let item: Item = serde_dynamo::to_item(serde_json::json!({
            "profile": {"lists": [["x"], ["y", "z"]]}
        }))
        .expect("item");
        let path = AttrPath::parse("profile.lists[1][0]").expect("valid");
        assert_eq!(path.get(&item), Some(&AttributeValue::S("y".into())));
        assert_eq!(
            AttrPath::parse("profile.nope").expect("ok").get(&item),
            None
        );
        assert_eq!(AttrPath::parse("profile[0]").expect("ok").get(&item), None);
        let prefix = AttrPath::parse("a.b[2].c")
            .expect("ok")
            .before_first_index();
        assert_eq!(prefix.to_string(), "a.b");
    }
}
