//! Well-formedness of a request's expressions on their own, before the lock write composes
//! them with the protocol's guard as `(<condition>) AND (<guard>)`.
//!
//! A `ConditionExpression` is parsed by a small recursive-descent parser of DynamoDB's
//! condition grammar (precedence `NOT` > `AND` > `OR`):
//!
//! ```text
//! condition := or
//! or        := and ("OR" and)*
//! and       := not ("AND" not)*
//! not       := "NOT" not | primary
//! primary   := "(" condition ")" | function | operand comparison
//! function  := attribute_exists(path) | attribute_not_exists(path)
//!            | attribute_type(path, operand) | begins_with(path, operand) | contains(path, operand)
//! comparison:= (= | <> | < | <= | > | >=) operand | BETWEEN operand AND operand
//!            | IN "(" operand ("," operand)* ")"
//! operand   := :value | size(path) | path
//! path      := (#name | word) ("." (#name | word) | "[" digits "]")*
//! ```
//!
//! A condition that parses as a whole is one unit inside the parentheses it is wrapped in,
//! so no text of a request can change how the guard is combined (a condition such as
//! `#b >= :a) OR (attribute_exists(PK)` is refused: it ends before its text does). An
//! `UpdateExpression` is only checked for balanced parentheses and brackets: it is merged
//! into the protocol's `SET` clause and never combined with the guard.

use crate::rejection::{Rejection, RejectionCode};

/// Deepest nesting of parentheses and `NOT` accepted.
const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Word(&'a str),
    Name,
    Value,
    Number,
    Open,
    Close,
    LBracket,
    RBracket,
    Dot,
    Comma,
    Cmp,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn tokenize(expr: &str) -> Result<Vec<Token<'_>>, String> {
    let mut tokens = Vec::new();
    let mut chars = expr.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let word_end = |from: usize| {
            expr[from..]
                .find(|c: char| !is_word_char(c))
                .map_or(expr.len(), |n| from + n)
        };
        let token = match c {
            c if c.is_whitespace() => continue,
            '(' => Token::Open,
            ')' => Token::Close,
            '[' => Token::LBracket,
            ']' => Token::RBracket,
            '.' => Token::Dot,
            ',' => Token::Comma,
            '=' => Token::Cmp,
            '<' | '>' => {
                if chars
                    .peek()
                    .is_some_and(|(_, n)| *n == '=' || (c == '<' && *n == '>'))
                {
                    chars.next();
                }
                Token::Cmp
            }
            '#' | ':' => {
                let end = word_end(i + 1);
                if end == i + 1 {
                    return Err(format!("`{c}` must start a placeholder"));
                }
                while chars.peek().is_some_and(|(j, _)| *j < end) {
                    chars.next();
                }
                if c == '#' {
                    Token::Name
                } else {
                    Token::Value
                }
            }
            c if is_word_char(c) => {
                let end = word_end(i);
                while chars.peek().is_some_and(|(j, _)| *j < end) {
                    chars.next();
                }
                let word = &expr[i..end];
                if word.bytes().all(|b| b.is_ascii_digit()) {
                    Token::Number
                } else {
                    Token::Word(word)
                }
            }
            other => return Err(format!("unexpected character `{other}`")),
        };
        tokens.push(token);
    }
    Ok(tokens)
}

fn keyword(token: Option<Token<'_>>, kw: &str) -> bool {
    matches!(token, Some(Token::Word(w)) if w.eq_ignore_ascii_case(kw))
}

fn is_keyword(word: &str) -> bool {
    ["AND", "OR", "NOT", "BETWEEN", "IN"]
        .iter()
        .any(|k| word.eq_ignore_ascii_case(k))
}

/// Functions that are conditions, with their number of arguments.
fn condition_function(word: &str) -> Option<usize> {
    match word {
        "attribute_exists" | "attribute_not_exists" => Some(1),
        "attribute_type" | "begins_with" | "contains" => Some(2),
        _ => None,
    }
}

struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    pos: usize,
    depth: usize,
}

type Parsed = Result<(), String>;

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Token<'a>> {
        self.tokens.get(self.pos).copied()
    }

    fn peek2(&self) -> Option<Token<'a>> {
        self.tokens.get(self.pos + 1).copied()
    }

    fn eat(&mut self, token: Token<'_>) -> bool {
        let hit = self.peek() == Some(token);
        self.pos += usize::from(hit);
        hit
    }

    fn eat_keyword(&mut self, kw: &str) -> bool {
        let hit = keyword(self.peek(), kw);
        self.pos += usize::from(hit);
        hit
    }

    fn expect(&mut self, token: Token<'_>, what: &str) -> Parsed {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.unexpected(what))
        }
    }

    fn unexpected(&self, what: &str) -> String {
        match self.peek() {
            Some(t) => format!("expected {what} at token {} (found {t:?})", self.pos + 1),
            None => format!("expected {what} at the end"),
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Parsed) -> Parsed {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH}"));
        }
        let result = f(self);
        self.depth -= 1;
        result
    }

    fn or(&mut self) -> Parsed {
        self.and()?;
        while self.eat_keyword("OR") {
            self.and()?;
        }
        Ok(())
    }

    fn and(&mut self) -> Parsed {
        self.not()?;
        while self.eat_keyword("AND") {
            self.not()?;
        }
        Ok(())
    }

    fn not(&mut self) -> Parsed {
        if self.eat_keyword("NOT") {
            return self.nested(Self::not);
        }
        self.primary()
    }

    fn primary(&mut self) -> Parsed {
        if self.eat(Token::Open) {
            self.nested(Self::or)?;
            return self.expect(Token::Close, "`)`");
        }
        if let (Some(Token::Word(w)), Some(Token::Open)) = (self.peek(), self.peek2()) {
            if let Some(arity) = condition_function(w) {
                self.pos += 2;
                return self.arguments(arity);
            }
        }
        self.operand()?;
        self.comparison()
    }

    /// `path ("," operand)*` then `)`: `arity` arguments in all.
    fn arguments(&mut self, arity: usize) -> Parsed {
        self.path()?;
        for _ in 1..arity {
            self.expect(Token::Comma, "`,`")?;
            self.operand()?;
        }
        self.expect(Token::Close, "`)`")
    }

    fn comparison(&mut self) -> Parsed {
        if self.eat(Token::Cmp) {
            return self.operand();
        }
        if self.eat_keyword("BETWEEN") {
            self.operand()?;
            if !self.eat_keyword("AND") {
                return Err(self.unexpected("`AND` of `BETWEEN`"));
            }
            return self.operand();
        }
        if self.eat_keyword("IN") {
            self.expect(Token::Open, "`(`")?;
            self.operand()?;
            while self.eat(Token::Comma) {
                self.operand()?;
            }
            return self.expect(Token::Close, "`)`");
        }
        Err(self.unexpected("a comparator, `BETWEEN` or `IN`"))
    }

    fn operand(&mut self) -> Parsed {
        if self.eat(Token::Value) {
            return Ok(());
        }
        if let (Some(Token::Word("size")), Some(Token::Open)) = (self.peek(), self.peek2()) {
            self.pos += 2;
            return self.arguments(1);
        }
        self.path()
    }

    fn path(&mut self) -> Parsed {
        self.path_element()?;
        loop {
            if self.eat(Token::Dot) {
                self.path_element()?;
            } else if self.eat(Token::LBracket) {
                self.expect(Token::Number, "a list index")?;
                self.expect(Token::RBracket, "`]`")?;
            } else {
                return Ok(());
            }
        }
    }

    fn path_element(&mut self) -> Parsed {
        match self.peek() {
            Some(Token::Name) => {
                self.pos += 1;
                Ok(())
            }
            Some(Token::Word(w)) if !is_keyword(w) && condition_function(w).is_none() => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.unexpected("an attribute")),
        }
    }
}

fn malformed(field: &str, why: String) -> Rejection {
    Rejection::new(
        RejectionCode::MalformedExpression,
        format!("`{field}` is not well-formed on its own: {why}"),
    )
}

/// Check that a `ConditionExpression` is one complete condition.
pub(super) fn check_condition(expr: &str) -> Result<(), Rejection> {
    let tokens = tokenize(expr).map_err(|e| malformed("ConditionExpression", e))?;
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    parser
        .or()
        .map_err(|e| malformed("ConditionExpression", e))?;
    if parser.pos != parser.tokens.len() {
        return Err(malformed(
            "ConditionExpression",
            parser.unexpected("the end of the condition"),
        ));
    }
    Ok(())
}

/// Check that an `UpdateExpression` has balanced parentheses and brackets.
pub(super) fn check_update(expr: &str) -> Result<(), Rejection> {
    let mut open: Vec<char> = Vec::new();
    for c in expr.chars() {
        match c {
            '(' | '[' => open.push(c),
            ')' | ']' => {
                let expected = if c == ')' { '(' } else { '[' };
                if open.pop() != Some(expected) {
                    return Err(malformed("UpdateExpression", format!("unbalanced `{c}`")));
                }
            }
            _ => {}
        }
    }
    match open.last() {
        Some(c) => Err(malformed("UpdateExpression", format!("unclosed `{c}`"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_formed_conditions_pass() {
        for c in [
            "#b >= :a",
            "attribute_not_exists(PK)",
            "attribute_exists(#k) OR attribute_not_exists(#k)",
            "NOT (#a = :x AND #b <> :y) OR #c BETWEEN :lo AND :hi",
            "#s IN (:a, :b, :c) AND size(#l[3].x) > :n",
            "begins_with(#p.#q, :pre) AND contains(#tags, :t) AND attribute_type(#v, :ty)",
            "((#a < :b))",
            "NOT NOT #a = :b",
        ] {
            assert_eq!(check_condition(c), Ok(()), "{c}");
        }
    }

    #[test]
    fn conditions_that_escape_or_are_incomplete_are_refused() {
        for c in [
            "#b >= :a) OR (attribute_exists(PK)",
            "#b >= :a) OR (#x = :y",
            "(#b >= :a",
            "#b >= :a)",
            "#b >=",
            "#b",
            "attribute_exists(PK",
            "#a = :b AND",
            "#a = :b OR OR #c = :d",
            "#a = :b; DROP",
            "#a BETWEEN :x OR :y",
            "attribute_exists(PK) attribute_exists(PK)",
        ] {
            let r = check_condition(c).expect_err(c);
            assert_eq!(r.code, RejectionCode::MalformedExpression, "{c}");
        }
        let deep = format!("{}#a = :b{}", "(".repeat(100), ")".repeat(100));
        assert!(check_condition(&deep).is_err());
    }

    #[test]
    fn update_expressions_must_balance() {
        assert_eq!(
            check_update("SET #l = list_append(#l, :v), #m[0] = :x"),
            Ok(())
        );
        assert!(check_update("SET #a = if_not_exists(#a, :z").is_err());
        assert!(check_update("SET #a = :z)").is_err());
        assert!(check_update("SET #a[0) = :z]").is_err());
    }
}
