//! Text from payloads and errors, bounded before it reaches a message, a log or a dead letter.
//! The lowest module of the crate: it uses nothing else of it.

/// Characters of a value quoted in a message.
pub const QUOTE_CHARS: usize = 40;

/// `text` cut to at most `max` characters (on a character boundary), marked when cut.
pub fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((end, _)) => format!("{}… ({} bytes)", &text[..end], text.len()),
    }
}

/// A value from a payload as a message may show it: at most [`QUOTE_CHARS`] characters, with
/// its length when it is cut.
///
/// ```
/// use dynamodb_exactly_once::rejection::quote;
/// assert_eq!(quote("upsert"), "`upsert`");
/// assert!(quote(&"x".repeat(1000)).ends_with("… (1000 bytes)`"));
/// ```
pub fn quote(value: &str) -> String {
    format!("`{}`", bounded(value, QUOTE_CHARS))
}
