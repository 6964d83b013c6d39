//! The DynamoDB client, configured from the standard AWS environment (`AWS_REGION`,
//! credentials, and `AWS_ENDPOINT_URL_DYNAMODB` for a local endpoint such as DynamoDB Local),
//! with timeouts: a stalled connection or response never holds an invocation past its deadline.
//!
//! | variable | default | what |
//! |---|---|---|
//! | `DYNAMODB_CONNECT_TIMEOUT_MS` | 1000 | establishing a connection |
//! | `DYNAMODB_ATTEMPT_TIMEOUT_MS` | 3000 | one attempt (then the SDK retries) |
//! | `DYNAMODB_OPERATION_TIMEOUT_MS` | 10000 | one call, retries included; at most 20000 |
//!
//! These are ceilings; the invocation deadline is enforced on top of them by
//! [`dynamodb_exactly_once::Deadline::bound`] in the pipeline.
//!
//! The operation timeout is also the retry horizon: after it the SDK sends no further attempt
//! of a write. The writers' operation tokens (document op tokens, versioned writes' tokens)
//! stay in an item for at least one token epoch
//! ([`TOKEN_EPOCH`](dynamodb_exactly_once::document::TOKEN_EPOCH), 30 s) after they landed,
//! whatever the number of other writes; an operation timeout over
//! `MAX_OPERATION_TIMEOUT` (20 s) is refused, so that every SDK retry is decided by
//! DynamoDB within the epoch (10 s remain for a request in flight and clock skew).
//!
//! With the feature `sqs`, `sqs_client_from_env` builds the SQS client of the SQS dead-letter
//! sink the same way (the same timeouts; `AWS_ENDPOINT_URL_SQS` for a local endpoint).
//!

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::ConfigError;

use crate::settings::env_parse;

/// Default connect timeout.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
/// Default timeout of one attempt.
pub(crate) const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(3000);
/// Default timeout of one call, retries included.
pub(crate) const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_millis(10_000);

/// The longest operation timeout: the retry horizon the writers' operation tokens cover
/// (see the [module documentation](self)).
pub(crate) const MAX_OPERATION_TIMEOUT: Duration = Duration::from_millis(20_000);

/// The client's timeouts from `DYNAMODB_*_TIMEOUT_MS`.
#[doc(hidden)]
pub fn timeouts_from_env() -> Result<TimeoutConfig, ConfigError> {
    let ms = |name: &str, default: Duration| -> Result<Duration, ConfigError> {
        Ok(env_parse::<u64>(name)?
            .map(Duration::from_millis)
            .unwrap_or(default))
    };
    let operation = ms("DYNAMODB_OPERATION_TIMEOUT_MS", DEFAULT_OPERATION_TIMEOUT)?;
    check_operation_timeout(operation)?;
    Ok(TimeoutConfig::builder()
        .connect_timeout(ms("DYNAMODB_CONNECT_TIMEOUT_MS", DEFAULT_CONNECT_TIMEOUT)?)
        .operation_attempt_timeout(ms("DYNAMODB_ATTEMPT_TIMEOUT_MS", DEFAULT_ATTEMPT_TIMEOUT)?)
        .operation_timeout(operation)
        .build())
}

/// An operation timeout within [`MAX_OPERATION_TIMEOUT`] (and not zero).
fn check_operation_timeout(operation: Duration) -> Result<(), ConfigError> {
    if operation.is_zero() || operation > MAX_OPERATION_TIMEOUT {
        return Err(ConfigError::new(
            "DYNAMODB_OPERATION_TIMEOUT_MS",
            format!(
                "must be between 1 and {} ms: it bounds when an SDK retry of a write can be \
                 sent, and the writers' operation tokens recognise a retry for {} s after its \
                 first attempt landed",
                MAX_OPERATION_TIMEOUT.as_millis(),
                dynamodb_exactly_once::document::TOKEN_EPOCH.as_secs()
            ),
        ));
    }
    Ok(())
}

/// The SDK configuration from the environment, with the SDK's standard retry policy and the
/// timeouts of [`timeouts_from_env`]: what every client of this module is built from.
#[doc(hidden)]
pub async fn sdk_config_from_env() -> Result<SdkConfig, ConfigError> {
    Ok(aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts_from_env()?)
        .load()
        .await)
}

/// A client from the environment, with the SDK's standard retry policy and the timeouts of
/// [`timeouts_from_env`].
pub async fn client_from_env() -> Result<Client, ConfigError> {
    Ok(Client::new(&sdk_config_from_env().await?))
}

/// An SQS client from the environment (feature `sqs`, for
/// [`SqsDeadLetters`](crate::dead_letter::SqsDeadLetters)), with the SDK's standard retry
/// policy and the timeouts of [`timeouts_from_env`].
#[cfg(feature = "sqs")]
pub async fn sqs_client_from_env() -> Result<aws_sdk_sqs::Client, ConfigError> {
    let config = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts_from_env()?)
        .load()
        .await;
    Ok(aws_sdk_sqs::Client::new(&config))
}

/// A DynamoDB client that never connects, for the crate's tests that build functions and
/// stores from settings without calling DynamoDB.
#[cfg(test)]
pub(crate) fn offline_client() -> Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .build();
    Client::from_conf(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_timeout_past_the_token_epoch_margin_is_refused_naming_its_variable() {
        assert!(check_operation_timeout(DEFAULT_OPERATION_TIMEOUT).is_ok());
        assert!(check_operation_timeout(MAX_OPERATION_TIMEOUT).is_ok());
        let err = check_operation_timeout(Duration::from_millis(20_001)).expect_err("refused");
        assert!(
            err.to_string().contains("DYNAMODB_OPERATION_TIMEOUT_MS"),
            "{err}"
        );
        assert!(check_operation_timeout(Duration::ZERO).is_err());
        let margin = dynamodb_exactly_once::document::TOKEN_EPOCH - MAX_OPERATION_TIMEOUT;
        assert!(
            margin >= Duration::from_secs(10),
            "room for a request in flight"
        );
    }
}
