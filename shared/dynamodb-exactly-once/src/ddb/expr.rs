//! Placeholders for expression attribute names and values.
//!
//! Attribute names that come from input or configuration never appear in an expression's
//! text: [`Placeholders::name`] returns `#<prefix><n>` and keeps the mapping, and
//! [`Placeholders::value`] does the same for values (`:<prefix><n>`). Fixed placeholders of a
//! protocol's named expression constants are added with [`Placeholders::set_name`] /
//! [`Placeholders::set_value`].

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// Expression attribute names and values under construction.
#[derive(Debug, Clone, Default)]
pub(crate) struct Placeholders {
    prefix: String,
    next: usize,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Placeholders {
    /// Generated placeholders start with `#<prefix>` / `:<prefix>`.
    pub(crate) fn new(prefix: &str) -> Self {
        Placeholders {
            prefix: prefix.to_string(),
            ..Placeholders::default()
        }
    }

    fn fresh(&mut self) -> usize {
        self.next += 1;
        self.next - 1
    }

    /// A fresh name placeholder for `attribute`.
    pub(crate) fn name(&mut self, attribute: impl Into<String>) -> String {
        let n = self.fresh();
        let placeholder = format!("#{}{n}", self.prefix);
        self.names.insert(placeholder.clone(), attribute.into());
        placeholder
    }

    /// A fresh value placeholder for `value`.
    pub(crate) fn value(&mut self, value: AttributeValue) -> String {
        let n = self.fresh();
        let placeholder = format!(":{}{n}", self.prefix);
        self.values.insert(placeholder.clone(), value);
        placeholder
    }

    /// Map a fixed name placeholder (`#ts`) used by a named expression constant.
    pub(crate) fn set_name(
        &mut self,
        placeholder: &str,
        attribute: impl Into<String>,
    ) -> &mut Self {
        self.names.insert(placeholder.to_string(), attribute.into());
        self
    }

    /// Map a fixed value placeholder (`:ts`) used by a named expression constant.
    pub(crate) fn set_value(&mut self, placeholder: &str, value: AttributeValue) -> &mut Self {
        self.values.insert(placeholder.to_string(), value);
        self
    }

    /// The names map.
    #[cfg(test)]
    pub(crate) fn names(&self) -> &HashMap<String, String> {
        &self.names
    }

    /// Both maps, for the SDK's `set_expression_attribute_names` / `_values` (an empty map
    /// becomes `None`: DynamoDB refuses empty maps).
    #[allow(clippy::type_complexity)]
    pub(crate) fn into_maps(
        self,
    ) -> (
        Option<HashMap<String, String>>,
        Option<HashMap<String, AttributeValue>>,
    ) {
        let names = (!self.names.is_empty()).then_some(self.names);
        let values = (!self.values.is_empty()).then_some(self.values);
        (names, values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_become_placeholders() {
        let mut p = Placeholders::new("a");
        let name = p.name("Rating");
        let value = p.value(AttributeValue::N("5".into()));
        assert_eq!(format!("SET {name} = {value}"), "SET #a0 = :a1");
        assert_eq!(p.names()["#a0"], "Rating");
    }
}
