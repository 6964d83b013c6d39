//! Conditional writes as values.
//!
//! A failed condition is an expected result of every protocol here (a stale record, a
//! duplicate, a lost race), so it is never an error: [`conditional`] turns the SDK's result
//! into [`Cond::Done`] or [`Cond::Failed`] (with the item as it was when the condition was
//! evaluated, when the request asked for `ReturnValuesOnConditionCheckFailure::AllOld`), and
//! everything else into a [`StoreError`] that says whether a retry helps.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;

use super::error::StoreError;
use super::item::Item;

/// The result of a conditional write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cond<T> {
    /// The condition held and the write was applied.
    Done(T),
    /// The condition failed; nothing was written.
    Failed {
        /// The item as DynamoDB saw it (`ALL_OLD`); `None` when the item did not exist or
        /// the request did not ask for it.
        old: Option<Item>,
    },
}

/// An operation error that can be a failed condition.
pub(crate) trait ConditionFailure {
    /// `Some(old)` when this is a `ConditionalCheckFailedException` (`old`: the `ALL_OLD`
    /// item, if any), `None` for any other error.
    fn condition_failed(&self) -> Option<Option<Item>>;
}

macro_rules! condition_failure {
    ($($error:ty),*) => {$(
        impl ConditionFailure for $error {
            fn condition_failed(&self) -> Option<Option<Item>> {
                match self {
                    Self::ConditionalCheckFailedException(e) => Some(e.item().cloned()),
                    _ => None,
                }
            }
        }
    )*};
}

condition_failure!(PutItemError, UpdateItemError, DeleteItemError);

/// Decide the result of a conditional `PutItem`, `UpdateItem` or `DeleteItem` named
/// `operation`.
pub(crate) fn conditional<T, E, R>(
    operation: &'static str,
    result: Result<T, SdkError<E, R>>,
) -> Result<Cond<T>, StoreError>
where
    E: ConditionFailure + ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    match result {
        Ok(out) => Ok(Cond::Done(out)),
        Err(err) => match err.as_service_error().and_then(|e| e.condition_failed()) {
            Some(old) => Ok(Cond::Failed { old }),
            None => Err(StoreError::from_sdk(operation, err)),
        },
    }
}
