//! A key's first put wins: the journal items of a chunk go in as PartiQL `INSERT`s, up to 25
//! in one `BatchExecuteStatement`. An `INSERT` of a key already journaled fails alone
//! (`DuplicateItem`, billed like a failed conditional put: 1 write unit for an item under
//! 1 KB) and leaves the item, its `at` and its TTL as the first put made them; no stream
//! record. Statements refused for a passing reason (throttling, an internal error) are sent
//! again with a backoff.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, BatchStatementErrorCodeEnum as Code, BatchStatementRequest, ConsumedCapacity,
    ReturnConsumedCapacity,
};
use aws_sdk_dynamodb::Client;

use super::entry::{
    ADD_ATTRIBUTE, ARRIVED_ATTRIBUTE, AT_ATTRIBUTE, ITEM_ATTRIBUTE, JOURNAL_KEY_ATTRIBUTE,
    JOURNAL_SORT_ATTRIBUTE, TTL_ATTRIBUTE,
};
use crate::ddb::error::ErrorClass;
use crate::ddb::retry::Backoff;
use crate::ddb::{Cost, Item, StoreError};

/// Waits before sending statements refused for a passing reason again.
const RETRY_BACKOFF: Backoff = Backoff::new(
    std::time::Duration::from_millis(50),
    std::time::Duration::from_millis(1600),
    8,
);

/// The attributes of every journal item, in the order the statement's parameters take them,
/// then those an item has only sometimes (the record's arrival, when its source gave one).
const ATTRIBUTES: [&str; 6] = [
    JOURNAL_KEY_ATTRIBUTE,
    JOURNAL_SORT_ATTRIBUTE,
    ITEM_ATTRIBUTE,
    ADD_ATTRIBUTE,
    TTL_ATTRIBUTE,
    AT_ATTRIBUTE,
];
const OPTIONAL_ATTRIBUTES: [&str; 1] = [ARRIVED_ATTRIBUTE];

/// `INSERT INTO "<table>" VALUE {'pk': ?, ...}` for the attributes `names` (table names hold
/// no quote; the names are the protocol's own).
fn statement(table: &str, names: &[&str]) -> String {
    let fields: Vec<String> = names.iter().map(|a| format!("'{a}': ?")).collect();
    format!("INSERT INTO \"{table}\" VALUE {{{}}}", fields.join(", "))
}

/// The attribute names of a statement `statement` made, in its order.
fn statement_names(statement: &str) -> Vec<String> {
    statement
        .split("'")
        .collect::<Vec<_>>()
        .chunks(2)
        .filter_map(|pair| pair.get(1).map(|name| name.to_string()))
        .collect()
}

/// The journal items a `BatchExecuteStatement` of the journal writer inserts, in order (its
/// statements' parameters back as items; a statement of any other shape: none). For tools
/// that mirror or meter the writer's calls (the benchmarks' interceptors).
pub fn statement_items(statements: &[BatchStatementRequest]) -> Vec<Item> {
    statements
        .iter()
        .filter_map(|s| {
            let parameters = s.parameters();
            let names = statement_names(s.statement());
            (s.statement().starts_with("INSERT INTO ") && parameters.len() == names.len())
                .then(|| names.into_iter().zip(parameters.iter().cloned()).collect())
        })
        .collect()
}

/// Insert `items` (journal items of distinct keys, at most 25) into `table`: a key already
/// journaled is left as it is. On failure: the positions of the items not known to be in
/// the journal, and the error.
pub(super) async fn insert_items(
    client: &Client,
    table: &str,
    items: Vec<Item>,
    cost: &Cost,
) -> Result<(), (Vec<usize>, StoreError)> {
    let mut pending: Vec<(usize, BatchStatementRequest, f64)> = Vec::with_capacity(items.len());
    for (at, mut item) in items.into_iter().enumerate() {
        let units = units_of(&item);
        let names: Vec<&str> = ATTRIBUTES
            .into_iter()
            .chain(
                OPTIONAL_ATTRIBUTES
                    .into_iter()
                    .filter(|a| item.contains_key(*a)),
            )
            .collect();
        let parameters: Option<Vec<AttributeValue>> =
            names.iter().map(|a| item.remove(*a)).collect();
        let request = BatchStatementRequest::builder()
            .statement(statement(table, &names))
            .set_parameters(parameters)
            .build()
            .map_err(|e| {
                (
                    vec![at],
                    StoreError::Inconsistent(format!("statement: {e}")),
                )
            })?;
        pending.push((at, request, units));
    }
    let mut delays = RETRY_BACKOFF.delays();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let requests = pending.iter().map(|(_, r, u)| (r.clone(), *u)).collect();
        let mut refused = match send(client, requests, cost).await {
            Ok(refused) => refused,
            Err(err) => return Err((pending.iter().map(|(at, _, _)| *at).collect(), err)),
        };
        let (mut again, mut lost, mut failed) = (Vec::new(), Vec::new(), None);
        for (i, (at, request, units)) in pending.into_iter().enumerate() {
            match refused.remove(&i) {
                None => {}
                Some(err) if err.is_retryable() => again.push((at, request, units)),
                Some(err) => {
                    lost.push(at);
                    failed.get_or_insert(err);
                }
            }
        }
        if let Some(err) = failed {
            lost.extend(again.iter().map(|(at, _, _)| *at));
            return Err((lost, err));
        }
        pending = again;
        if pending.is_empty() {
            return Ok(());
        }
        let Some(delay) = delays.next() else {
            let err = StoreError::Unprocessed {
                operation: "BatchExecuteStatement",
                attempts,
            };
            return Err((pending.iter().map(|(at, _, _)| *at).collect(), err));
        };
        tokio::time::sleep(delay).await;
    }
}

/// The write units of inserting `item` (or of its refused `INSERT`: the same item is there).
fn units_of(item: &Item) -> f64 {
    let bytes = crate::ddb::item::item_size(item).div_ceil(1024).max(1);
    f64::from(u32::try_from(bytes).unwrap_or(u32::MAX))
}

/// One `BatchExecuteStatement` (each statement with its write units): the statements
/// refused (by position) and why; a key already journaled is not refused.
async fn send(
    client: &Client,
    requests: Vec<(BatchStatementRequest, f64)>,
    cost: &Cost,
) -> Result<HashMap<usize, StoreError>, StoreError> {
    let units_each: Vec<f64> = requests.iter().map(|(_, u)| *u).collect();
    let out = client
        .batch_execute_statement()
        .set_statements(Some(requests.into_iter().map(|(r, _)| r).collect()))
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .map_err(|e| {
            cost.add_failed();
            StoreError::from_sdk("BatchExecuteStatement", e)
        })?;
    // AWS bills an INSERT by the item's size, and a refused one (the key is there) like a
    // failed conditional put: by the existing item's size, the same. DynamoDB Local reports
    // no capacity for PartiQL: the units are the items' own.
    let reported: f64 = out
        .consumed_capacity()
        .iter()
        .filter_map(|c| c.capacity_units)
        .sum();
    let mut written = 0.0;
    let mut duplicates = 0.0;
    let mut refused = HashMap::new();
    for (i, response) in out.responses().iter().enumerate() {
        let units = units_each.get(i).copied().unwrap_or(1.0);
        let Some(error) = response.error() else {
            written += units;
            continue;
        };
        match error.code() {
            Some(Code::DuplicateItem) => duplicates += units,
            code => {
                refused.insert(i, statement_error(code, error.message()));
            }
        }
    }
    let units = match out.consumed_capacity().is_empty() {
        true => written + duplicates,
        false => reported + duplicates,
    };
    cost.add(Some(
        &ConsumedCapacity::builder().capacity_units(units).build(),
    ));
    Ok(refused)
}

/// A refused statement as a store error, classed as DynamoDB documents its code.
fn statement_error(code: Option<&Code>, message: Option<&str>) -> StoreError {
    let class = match code {
        Some(
            Code::ThrottlingError
            | Code::ProvisionedThroughputExceeded
            | Code::RequestLimitExceeded
            | Code::InternalServerError
            | Code::TransactionConflict,
        ) => ErrorClass::Transient,
        Some(Code::ValidationError) => ErrorClass::InvalidRequest,
        _ => ErrorClass::Fatal,
    };
    StoreError::Sdk {
        operation: "BatchExecuteStatement",
        class,
        code: code.map_or("Unknown", Code::as_str).to_string(),
        message: crate::text::bounded(message.unwrap_or_default(), 300),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_names_its_attributes_and_an_item_comes_back_from_its_parameters() {
        let names = [
            JOURNAL_KEY_ATTRIBUTE,
            JOURNAL_SORT_ATTRIBUTE,
            ARRIVED_ATTRIBUTE,
        ];
        let sql = statement("Journal", &names);
        assert_eq!(
            sql,
            r#"INSERT INTO "Journal" VALUE {'pk': ?, 'sk': ?, 'arr': ?}"#
        );
        assert_eq!(statement_names(&sql), names);
        let request = BatchStatementRequest::builder()
            .statement(sql)
            .set_parameters(Some(vec![
                AttributeValue::S("p".into()),
                AttributeValue::S("s".into()),
                AttributeValue::N("7".into()),
            ]))
            .build()
            .expect("statement");
        let items = statement_items(&[request]);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].get("arr"), Some(&AttributeValue::N("7".into())));
    }
}
