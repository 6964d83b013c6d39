//! Idempotency records in a DynamoDB table: partition key `Id` (S), TTL on `ExpiresAt`.
//!
//! * claim: one conditional `PutItem` (the key is absent, expired, in progress past its
//!   time, or in progress under our token), `ALL_OLD` on a failed condition: a duplicate costs that one
//!   failed write (billed by the stored record's size, 1 WCU for a small result), no read.
//! * complete: one `UpdateItem` conditioned on the claim's token.
//! * release (the handler failed): one `DeleteItem` conditioned on the token.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::{Item, StoreError};

use super::persistence::{Claim, ClaimRequest, Persistence, Status, StoredRecord};

/// The key attribute.
pub const ID: &str = "Id";
/// `IN_PROGRESS` or `COMPLETED`.
pub const STATUS: &str = "Status";
/// Epoch ms until which an in-progress claim holds.
pub const IN_PROGRESS_UNTIL: &str = "InProgressUntil";
/// The record's TTL (epoch seconds): enable TTL on it.
pub const EXPIRES_AT: &str = "ExpiresAt";
/// The payload's hash.
pub const PAYLOAD_HASH: &str = "PayloadHash";
/// The claim's token.
pub const TOKEN: &str = "Token";
/// The result (JSON).
pub const RESULT: &str = "Result";

const IN_PROGRESS: &str = "IN_PROGRESS";
const COMPLETED: &str = "COMPLETED";

/// The claim's condition: the key is free, or still claimed by this run (the SDK's retry of
/// a claim whose response was lost). Only *in progress* under our token: an attempt of the
/// claim that reaches DynamoDB late, after the run completed, must not turn the stored
/// result back into a claim (the next duplicate would wait for the deadline, then run again).
const CLAIM_CONDITION: &str = "attribute_not_exists(#id) OR #exp <= :nows \
     OR (#st = :inprog AND (#until <= :nowms OR #tok = :tok))";

/// The [`Persistence`] of a DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoDbPersistence {
    client: Client,
    table: String,
}

impl DynamoDbPersistence {
    /// Records in `table` (key `Id` S, TTL on `ExpiresAt`).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoDbPersistence {
            client,
            table: table.into(),
        }
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The record of a stored item (`None`: not one of ours).
fn record_of(item: &Item) -> Option<StoredRecord> {
    let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
    let number = |name: &str| {
        item.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u64>().ok())
    };
    let status = match text(STATUS)?.as_str() {
        IN_PROGRESS => Status::InProgress {
            until_ms: number(IN_PROGRESS_UNTIL)?,
        },
        COMPLETED => Status::Completed {
            result: text(RESULT).unwrap_or_default().into_bytes(),
        },
        _ => return None,
    };
    Some(StoredRecord {
        status,
        payload_hash: text(PAYLOAD_HASH).unwrap_or_default(),
        token: text(TOKEN).unwrap_or_default(),
        expires_at_s: number(EXPIRES_AT).unwrap_or(0),
    })
}

fn conditional_failed<E: aws_sdk_dynamodb::error::ProvideErrorMetadata, R>(
    err: &SdkError<E, R>,
) -> bool {
    err.as_service_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "ConditionalCheckFailedException")
}

/// A write conditioned on the claim's token: done, or refused because another run holds the
/// key now (nothing to do either way).
fn token_conditioned<T, E, R>(
    operation: &'static str,
    outcome: Result<T, SdkError<E, R>>,
) -> Result<(), StoreError>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match outcome {
        Ok(_) => Ok(()),
        Err(err) if conditional_failed(&err) => Ok(()),
        Err(err) => Err(StoreError::from_sdk(operation, err)),
    }
}

impl Persistence for DynamoDbPersistence {
    async fn claim(&self, r: &ClaimRequest) -> Result<Claim, StoreError> {
        let item = Item::from([
            (ID.into(), s(&r.key)),
            (STATUS.into(), s(IN_PROGRESS)),
            (IN_PROGRESS_UNTIL.into(), n(r.in_progress_until_ms)),
            (EXPIRES_AT.into(), n(r.expires_at_s)),
            (PAYLOAD_HASH.into(), s(&r.payload_hash)),
            (TOKEN.into(), s(&r.token)),
        ]);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(CLAIM_CONDITION)
            .expression_attribute_names("#id", ID)
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_names("#st", STATUS)
            .expression_attribute_names("#until", IN_PROGRESS_UNTIL)
            .expression_attribute_names("#tok", TOKEN)
            .expression_attribute_values(":nows", n(r.now_ms / 1000))
            .expression_attribute_values(":nowms", n(r.now_ms))
            .expression_attribute_values(":inprog", s(IN_PROGRESS))
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
                match record_of(&old) {
                    Some(record) => Ok(Claim::Existing(record)),
                    None => Err(StoreError::Inconsistent(format!(
                        "the idempotency record of {:?} in {} is not one this layer wrote",
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
        result: &[u8],
        expires_at_s: u64,
    ) -> Result<(), StoreError> {
        let outcome = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(ID, s(key))
            .update_expression("SET #st = :done, #res = :res, #exp = :exp REMOVE #until")
            .condition_expression("#tok = :tok")
            .expression_attribute_names("#st", STATUS)
            .expression_attribute_names("#res", RESULT)
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_names("#until", IN_PROGRESS_UNTIL)
            .expression_attribute_names("#tok", TOKEN)
            .expression_attribute_values(":done", s(COMPLETED))
            .expression_attribute_values(":res", s(&String::from_utf8_lossy(result)))
            .expression_attribute_values(":exp", n(expires_at_s))
            .expression_attribute_values(":tok", s(token))
            .send()
            .await;
        // Refused: taken over after the claim expired, the new owner's record stays.
        token_conditioned("UpdateItem", outcome)
    }

    async fn release(&self, key: &str, token: &str) -> Result<(), StoreError> {
        let outcome = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(ID, s(key))
            .condition_expression("#tok = :tok")
            .expression_attribute_names("#tok", TOKEN)
            .expression_attribute_values(":tok", s(token))
            .send()
            .await;
        token_conditioned("DeleteItem", outcome)
    }
}
