//! The aggregation's settings: which source attribute groups item changes, the aggregate
//! item's key and the counters each change moves. Built and checked by
//! [`AggregationBuilder`]; [`aggregate`](super::aggregate) turns a change into its counter
//! record by them.

use super::format::DEFAULT_AGGREGATE_KEY_ATTRIBUTE;
use crate::config::ConfigError;

/// How the counter aggregates item changes; built by [`Aggregation::builder`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregation {
    pub(crate) group_by: String,
    pub(crate) key_attribute: String,
    pub(crate) sort_key: Option<(String, String)>,
    pub(crate) count: Option<String>,
    pub(crate) sums: Vec<(String, String)>,
}

impl Aggregation {
    /// A builder of the aggregation grouping changes by the source attribute `group_by`
    /// (a key attribute is best: it never changes), aggregate items keyed by
    /// `"PK"`.
    pub fn builder(group_by: impl Into<String>) -> AggregationBuilder {
        AggregationBuilder {
            aggregation: Aggregation {
                group_by: group_by.into(),
                key_attribute: DEFAULT_AGGREGATE_KEY_ATTRIBUTE.into(),
                sort_key: None,
                count: None,
                sums: Vec::new(),
            },
        }
    }

    /// The source attribute whose value names the aggregate item.
    pub fn group_by(&self) -> &str {
        &self.group_by
    }

    /// The aggregate table's partition key attribute.
    pub fn key_attribute(&self) -> &str {
        &self.key_attribute
    }

    /// `(attribute, value)`: the constant sort key of aggregate items, if the table has one.
    pub fn sort_key(&self) -> Option<(&str, &str)> {
        self.sort_key
            .as_ref()
            .map(|(a, v)| (a.as_str(), v.as_str()))
    }

    /// The counter of live items (`+1` insert, `−1` remove), if any.
    pub fn count(&self) -> Option<&str> {
        self.count.as_deref()
    }

    /// `(counter, source attribute)`: the sums of numeric attributes.
    pub fn sums(&self) -> &[(String, String)] {
        &self.sums
    }
}

/// Builds an [`Aggregation`]; [`AggregationBuilder::build`] checks it.
#[must_use]
#[derive(Debug, Clone)]
pub struct AggregationBuilder {
    aggregation: Aggregation,
}

impl AggregationBuilder {
    /// The aggregate table's partition key attribute (default
    /// `"PK"`).
    pub fn key_attribute(mut self, attribute: impl Into<String>) -> Self {
        self.aggregation.key_attribute = attribute.into();
        self
    }

    /// A constant sort key of aggregate items, for a table with one (e.g. `SK` = `totals` in a
    /// single-table design).
    pub fn sort_key(mut self, attribute: impl Into<String>, value: impl Into<String>) -> Self {
        self.aggregation.sort_key = Some((attribute.into(), value.into()));
        self
    }

    /// The counter of live items: `+1` per insert, `−1` per remove.
    pub fn count(mut self, counter: impl Into<String>) -> Self {
        self.aggregation.count = Some(counter.into());
        self
    }

    /// One more sum: `counter` adds the changes of the numeric source attribute `attribute`.
    pub fn sum(mut self, counter: impl Into<String>, attribute: impl Into<String>) -> Self {
        self.aggregation
            .sums
            .push((counter.into(), attribute.into()));
        self
    }

    /// The aggregation, if it names its attributes and has a count or a sum.
    pub fn build(self) -> Result<Aggregation, ConfigError> {
        let a = self.aggregation;
        let names = [&a.group_by, &a.key_attribute]
            .into_iter()
            .chain(a.sort_key.iter().map(|(attribute, _)| attribute))
            .chain(a.count.iter())
            .chain(a.sums.iter().flat_map(|(c, s)| [c, s]));
        if names.into_iter().any(String::is_empty) {
            return Err(ConfigError::new(
                "aggregation",
                "attribute and counter names must not be empty",
            ));
        }
        if a.count.is_none() && a.sums.is_empty() {
            return Err(ConfigError::new(
                "aggregation",
                "needs a `count` or a `sum` counter",
            ));
        }
        Ok(a)
    }
}
