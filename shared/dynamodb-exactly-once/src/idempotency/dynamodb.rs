//! Idempotency records in a DynamoDB table: by default partition key `Id` (S), TTL on
//! `ExpiresAt`; any layout through [`DynamoDbPersistence::builder`] (attribute names, a sort
//! key under a static partition key, Powertools' format).
//!
//! * claim: one conditional `PutItem` (the key is absent, expired, in progress past its
//!   time, or in progress under our token), `ALL_OLD` on a failed condition: a duplicate
//!   costs that one failed write (billed by the stored record's size), no read.
//! * complete: one `UpdateItem` conditioned on the claim's token (a refusal is a takeover;
//!   `ALL_OLD` returns the new owner's record; an SDK retry of our own applied completion
//!   meets our token and applies again). Its size is
//!   checked first: a result that would make the item larger than [`MAX_ITEM_BYTES`] is
//!   not written, the record is completed without it.
//! * release (the handler failed): one `DeleteItem` conditioned on the token.

use std::sync::Arc;

use crate::ddb::item::{item_size, to_attribute_value, to_json_value};
use crate::{Item, StoreError};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use super::names::AttributeNames;
use super::persistence::{Claim, ClaimRequest, Completion, Persistence, Status, StoredRecord};
use super::RecordFormat;

/// DynamoDB's item size limit (400 KB): a completion larger than this is stored without
/// its result.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// The claim's condition: the key is free, or still claimed by this run (the SDK's retry of
/// a claim whose response was lost). Only *in progress* under our token: an attempt of the
/// claim that reaches DynamoDB late, after the run completed, must not turn the stored
/// result back into a claim. Strict `<` as Powertools' condition.
///
/// ```text
/// |  held (in progress)   |  free if in progress  | free whatever the status
/// |-----------------------|-----------------------|-----------------------> time
/// claim            #until (deadline, ms)    #exp (TTL, s; a claim's is after #until)
/// ```
const CLAIM_CONDITION: &str = "attribute_not_exists(#id) OR #exp < :nows \
     OR (#st = :inprog AND (#until < :nowms OR #tok = :tok))";

/// The [`Persistence`] of a DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoDbPersistence {
    client: Client,
    table: String,
    names: Arc<AttributeNames>,
    format: RecordFormat,
}

impl DynamoDbPersistence {
    /// Records in `table` (key `Id` S, TTL on `ExpiresAt`).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self::with_layout(
            client,
            table.into(),
            AttributeNames::native(),
            RecordFormat::Native,
        )
    }

    pub(super) fn with_layout(
        client: Client,
        table: String,
        names: AttributeNames,
        format: RecordFormat,
    ) -> Self {
        DynamoDbPersistence {
            client,
            table,
            names: Arc::new(names),
            format,
        }
    }

    /// The layout.
    pub fn names(&self) -> &AttributeNames {
        &self.names
    }

    /// The item key of a stored key.
    fn key(&self, stored: &str) -> Item {
        match &self.names.sort_key {
            Some(sort) => Item::from([
                (self.names.key.clone(), s(&self.names.static_partition_key)),
                (sort.clone(), s(stored)),
            ]),
            None => Item::from([(self.names.key.clone(), s(stored))]),
        }
    }

    /// Whether the completed record, with `result`, fits in one item (the operation and hash
    /// counted at their longest).
    fn fits(&self, key: &str, token: &str, result: &AttributeValue, expires_at_s: u64) -> bool {
        let names = &self.names;
        let mut item = self.key(key);
        item.insert(names.status.clone(), s(&names.completed_value));
        item.insert(names.expires_at.clone(), n(expires_at_s));
        item.insert(names.token.clone(), s(token));
        item.insert(names.operation.clone(), s(&"o".repeat(128)));
        item.insert(names.payload_hash.clone(), s(&"h".repeat(64)));
        item.insert(names.result.clone(), result.clone());
        item_size(&item) <= MAX_ITEM_BYTES
    }

    /// The stored form of a result's JSON: its text (`S`), or in TypeScript Powertools' format
    /// the native value (`M` for an object, `S` for a string, ...; `None`: not one DynamoDB
    /// can hold, e.g. a number outside its range).
    fn result_value(&self, result: &[u8]) -> Option<AttributeValue> {
        if self.format == RecordFormat::PowertoolsJava {
            // Java stores a `String` result as it is, anything else as JSON.
            if let Ok(serde_json::Value::String(text)) = serde_json::from_slice(result) {
                return Some(AttributeValue::S(text));
            }
        }
        if self.format != RecordFormat::PowertoolsTypeScript {
            return Some(AttributeValue::S(
                String::from_utf8_lossy(result).into_owned(),
            ));
        }
        let json: serde_json::Value = serde_json::from_slice(result).ok()?;
        to_attribute_value(&json).ok()
    }

    /// A stored result as JSON bytes (`None`: absent, or not readable).
    fn result_of(&self, value: Option<&AttributeValue>) -> Option<Vec<u8>> {
        match (self.format, value?) {
            (RecordFormat::PowertoolsTypeScript, v) => {
                serde_json::to_vec(&to_json_value(v).ok()?).ok()
            }
            (RecordFormat::PowertoolsJava, AttributeValue::S(text))
                if serde_json::from_str::<serde_json::Value>(text).is_err() =>
            {
                // A `String` result Java stored raw.
                serde_json::to_vec(text).ok()
            }
            (_, AttributeValue::S(text)) => Some(text.clone().into_bytes()),
            _ => None,
        }
    }

    /// The record of a stored item (`None`: not a record of this layout).
    fn record_of(&self, item: &Item) -> Option<StoredRecord> {
        let names = &self.names;
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let number = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<u64>().ok())
        };
        let expires_at_s = number(&names.expires_at)?;
        let status = text(&names.status)?;
        let status = if status == names.in_progress_value {
            Status::InProgress {
                until_ms: number(&names.in_progress_until)
                    .unwrap_or(expires_at_s.saturating_mul(1000)),
            }
        } else if status == names.completed_value {
            Status::Completed {
                result: self.result_of(item.get(&names.result)),
            }
        } else {
            return None;
        };
        Some(StoredRecord {
            status,
            payload_hash: text(&names.payload_hash).unwrap_or_default(),
            token: text(&names.token).unwrap_or_default(),
            expires_at_s,
            operation: text(&names.operation),
        })
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn conditional_failed<E: aws_sdk_dynamodb::error::ProvideErrorMetadata, R>(
    err: &SdkError<E, R>,
) -> bool {
    err.as_service_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "ConditionalCheckFailedException")
}

impl Persistence for DynamoDbPersistence {
    async fn claim(&self, r: &ClaimRequest) -> Result<Claim, StoreError> {
        let names = &self.names;
        let mut item = self.key(&r.key);
        item.insert(names.status.clone(), s(&names.in_progress_value));
        item.insert(names.in_progress_until.clone(), n(r.in_progress_until_ms));
        item.insert(names.expires_at.clone(), n(r.expires_at_s));
        item.insert(names.token.clone(), s(&r.token));
        item.insert(names.operation.clone(), s(&r.operation));
        if !r.payload_hash.is_empty() {
            item.insert(names.payload_hash.clone(), s(&r.payload_hash));
        }
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(CLAIM_CONDITION)
            .expression_attribute_names("#id", &names.key)
            .expression_attribute_names("#exp", &names.expires_at)
            .expression_attribute_names("#st", &names.status)
            .expression_attribute_names("#until", &names.in_progress_until)
            .expression_attribute_names("#tok", &names.token)
            .expression_attribute_values(":nows", n(r.now_ms / 1000))
            .expression_attribute_values(":nowms", n(r.now_ms))
            .expression_attribute_values(":inprog", s(&names.in_progress_value))
            .expression_attribute_values(":tok", s(&r.token))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Claim::Claimed),
            Err(err) if conditional_failed(&err) => {
                let old = match err.as_service_error() {
                    Some(PutItemError::ConditionalCheckFailedException(e)) => {
                        e.item.clone().unwrap_or_default()
                    }
                    _ => Item::new(),
                };
                match self.record_of(&old) {
                    Some(record) => Ok(Claim::Existing(record)),
                    None => Err(StoreError::Inconsistent(format!(
                        "the idempotency record of {:?} in {} is not one of this layout",
                        r.key, self.table
                    ))),
                }
            }
            Err(err) => Err(StoreError::from_sdk("PutItem", err)),
        }
    }

    async fn complete(
        &self,
        key: &str,
        token: &str,
        result: Option<&[u8]>,
        expires_at_s: u64,
    ) -> Result<Completion, StoreError> {
        let names = &self.names;
        let bytes = result.map_or(0, <[u8]>::len);
        let value = result
            .and_then(|r| self.result_value(r))
            .filter(|v| self.fits(key, token, v, expires_at_s));
        let keep = value.is_some();
        let update = if keep {
            "SET #st = :done, #exp = :exp, #res = :res REMOVE #until"
        } else {
            "SET #st = :done, #exp = :exp REMOVE #until, #res"
        };
        let mut values = Item::from([
            (":done".to_string(), s(&names.completed_value)),
            (":exp".to_string(), n(expires_at_s)),
            (":tok".to_string(), s(token)),
        ]);
        if let Some(value) = value {
            values.insert(":res".to_string(), value);
        }
        let outcome = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key(key)))
            .update_expression(update)
            .condition_expression("#tok = :tok")
            .expression_attribute_names("#st", &names.status)
            .expression_attribute_names("#res", &names.result)
            .expression_attribute_names("#exp", &names.expires_at)
            .expression_attribute_names("#until", &names.in_progress_until)
            .expression_attribute_names("#tok", &names.token)
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let stored = if keep {
            Completion::Stored
        } else {
            Completion::StoredWithoutResult { bytes }
        };
        match outcome {
            Ok(_) => Ok(stored),
            Err(err) if conditional_failed(&err) => {
                let old = match err.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(e)) => e.item.clone(),
                    _ => None,
                };
                // The token is another run's (an SDK retry of our own applied completion
                // meets our token, and applies again): the key was taken over.
                Ok(Completion::TakenOver(
                    old.as_ref().and_then(|item| self.record_of(item)),
                ))
            }
            Err(err) => Err(StoreError::from_sdk("UpdateItem", err)),
        }
    }

    async fn release(&self, key: &str, token: &str) -> Result<(), StoreError> {
        let outcome = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key(key)))
            .condition_expression("#tok = :tok")
            .expression_attribute_names("#tok", &self.names.token)
            .expression_attribute_values(":tok", s(token))
            .send()
            .await;
        match outcome {
            // Refused: taken over after the claim expired, the new owner's record stays.
            Err(err) if conditional_failed(&err) => Ok(()),
            Err(err) => Err(StoreError::from_sdk("DeleteItem", err)),
            Ok(_) => Ok(()),
        }
    }

    fn format(&self) -> RecordFormat {
        self.format
    }
}
