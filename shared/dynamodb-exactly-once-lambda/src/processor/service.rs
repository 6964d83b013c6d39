//! [`Processor`] as a `tower::Service<LambdaEvent<Value>>`, like [`Writer`](crate::Writer):
//! `lambda_runtime::run(processor)`, and lambda_runtime's layers or your own around it.

use std::task::{Context, Poll};

use lambda_runtime::{LambdaEvent, Service};
use serde_json::Value;

use super::Processor;
use crate::error::HandlerError;
use crate::run::Invocation;
use crate::source::BatchResponse;

impl<T> Service<LambdaEvent<Value>> for Processor<T>
where
    T: Send + 'static,
{
    type Response = BatchResponse;
    type Error = HandlerError;
    type Future = Invocation<BatchResponse>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<Value>) -> Self::Future {
        let processor = self.clone();
        Box::pin(async move { processor.handle(event).await })
    }
}
