//! The errors the double answers, in the DynamoDBStreams_20120810 JSON form.

use serde_json::json;

/// An error answer: HTTP status, the exception's name and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub message: String,
}

impl ApiError {
    fn new(kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            kind,
            message: message.into(),
        }
    }

    pub fn trimmed(message: impl Into<String>) -> ApiError {
        ApiError::new("TrimmedDataAccessException", message)
    }

    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new("ExpiredIteratorException", message)
    }

    pub fn throttled(message: impl Into<String>) -> ApiError {
        ApiError::new("LimitExceededException", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new("ResourceNotFoundException", message)
    }

    pub fn validation(message: impl Into<String>) -> ApiError {
        ApiError::new("ValidationException", message)
    }

    pub fn unknown_operation(operation: &str) -> ApiError {
        ApiError::new(
            "UnknownOperationException",
            format!("unknown operation {operation}"),
        )
    }

    /// An upstream failure (DynamoDB Local unreachable or answering oddly): a 500.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 500,
            kind: "InternalServerError",
            message: message.into(),
        }
    }

    /// The body AWS sends: `{"__type": "com.amazonaws.dynamodb.v20120810#Kind", "message": …}`.
    pub fn body(&self) -> String {
        json!({
            "__type": format!("com.amazonaws.dynamodb.v20120810#{}", self.kind),
            "message": self.message,
        })
        .to_string()
    }
}
