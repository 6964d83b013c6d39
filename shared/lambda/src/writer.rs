//! The glue every writer function shares: a protocol, its dead letters and its deadline margin,
//! behind one `handle(LambdaEvent<Value>)`.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::batch::ANSWER_MARGIN;
use dynamodb_exactly_once::config::Configured;
use dynamodb_exactly_once::ddb::clock::epoch_millis;
use dynamodb_exactly_once::{ConfigError, Deadline, Protocol};
use lambda_runtime::LambdaEvent;
use serde_json::Value;
use tracing::Instrument;

use crate::dead_letter::DeadLetters;
use crate::error::HandlerError;
use crate::event_time::EventTime;
use crate::mapping::{Mapped, RecordMapping, RecordShape};
use crate::otel::batch_span;
use crate::pipeline::{process_batch, process_work, AgeCheck, BatchReport};
use crate::settings::{env_opt, env_parse, env_required, FunctionSpec};
use crate::source::{Batch, BatchResponse};
use crate::telemetry::{invocation_span, traced};

/// Default time kept in reserve before the invocation deadline.
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_millis(2000);

/// A writer function: a protocol plus where its rejected records go.
#[derive(Debug, Clone)]
pub struct Writer<P> {
    /// The function's name, recorded with dead letters and logs.
    pub function: String,
    /// The write protocol.
    pub protocol: P,
    /// Where malformed records are kept.
    pub dead_letters: DeadLetters,
    /// Stop starting writes this long before the invocation deadline.
    pub deadline_margin: Duration,
    /// Where record bodies carry their event time, if they do: the age guard then measures
    /// from the earlier of arrival and event time.
    pub event_time: Option<EventTime>,
    /// How Kinesis and SQS bodies of another shape become the protocol's records
    /// (`<PREFIX>_RECORD_MAPPING`, see [`crate::mapping`]); `None`: they are in its shape.
    pub mapping: Option<RecordMapping>,
}

impl<P> Writer<P> {
    /// A writer of `protocol` named `function` (its dead letters, logs and metrics carry the
    /// name), keeping rejected records in `dead_letters`; the default deadline margin
    /// ([`DEFAULT_DEADLINE_MARGIN`]), no event time, no record mapping.
    pub fn new(function: impl Into<String>, protocol: P, dead_letters: DeadLetters) -> Self {
        Writer {
            function: function.into(),
            protocol,
            dead_letters,
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            event_time: None,
            mapping: None,
        }
    }

    /// Stop starting writes `margin` before the invocation deadline.
    pub fn with_deadline_margin(mut self, margin: Duration) -> Self {
        self.deadline_margin = margin;
        self
    }

    /// Date records by the producer's event time where it is earlier than their arrival.
    pub fn with_event_time(mut self, event_time: EventTime) -> Self {
        self.event_time = Some(event_time);
        self
    }

    /// Read Kinesis and SQS bodies through `mapping`.
    pub fn with_mapping(mut self, mapping: RecordMapping) -> Self {
        self.mapping = Some(mapping);
        self
    }
}

impl<P: Protocol> Writer<P> {
    /// Handle one invocation: the partial batch response.
    /// Every line it logs carries the invocation's request id, trace id and function name.
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<BatchResponse, HandlerError> {
        let span = invocation_span(&event.context, &self.function);
        let deadline = crate::pipeline::invocation_deadline(
            &self.function,
            event.context.deadline,
            self.deadline_margin,
        );
        traced(span, deadline, async {
            tracing::debug!(
                deadline_ms = event.context.deadline,
                now_ms = epoch_millis(),
                "invocation"
            );
            let mut batch = Batch::from_event(event.payload).inspect_err(|err| {
                tracing::error!(error = %err, "the payload is not a Kinesis or SQS batch");
            })?;
            if let Some(event_time) = &self.event_time {
                event_time.stamp(&mut batch);
            }
            Ok(self.handle_batch(&batch, deadline).await.response)
        })
        .await
    }

    /// Process an already decoded batch (also used to replay dead letters): the report, its
    /// summary logged and emitted as metrics.
    pub async fn handle_batch(&self, batch: &Batch, deadline: Deadline) -> BatchReport<P::Outcome> {
        self.run_batch(batch, deadline, AgeCheck::Enforce).await
    }

    pub(crate) async fn run_batch(
        &self,
        batch: &Batch,
        deadline: Deadline,
        ages: AgeCheck,
    ) -> BatchReport<P::Outcome> {
        let span = batch_span(&self.function, batch.kind, batch.records.len());
        let report = match &self.mapping {
            None => {
                process_batch(
                    &self.function,
                    batch,
                    &self.protocol,
                    &self.dead_letters,
                    deadline,
                    ages,
                )
                .instrument(span)
                .await
            }
            Some(mapping) => {
                let work = Mapped {
                    protocol: &self.protocol,
                    mapping,
                };
                process_work(
                    &self.function,
                    batch,
                    &work,
                    &self.dead_letters,
                    deadline,
                    ages,
                )
                .instrument(span)
                .await
            }
        };
        report.summary.log(&self.function, batch.kind);
        crate::metrics::emit_batch_metrics(&self.function, &report.summary);
        report
    }
}

/// The writer function of protocol `P` from its environment: the protocol's settings
/// (`<PREFIX>_<SETTING>`, see [`crate::settings`]), `<PREFIX>_DEAD_LETTER_TABLE` (required),
/// `<PREFIX>_DEADLINE_MARGIN_MS` (default [`DEFAULT_DEADLINE_MARGIN`], at least
/// [`ANSWER_MARGIN`], 250 ms), `<PREFIX>_DEPLOYMENT` (the name its dead letters are kept
/// under; default the Lambda function's name, `AWS_LAMBDA_FUNCTION_NAME`) and
/// `<PREFIX>_EVENT_TIME_POINTER` (see [`crate::event_time`]) and `<PREFIX>_RECORD_MAPPING`
/// (see [`crate::mapping`]; checked against `P`'s [`RecordShape`], so a template that does not
/// give `P`'s records refuses to start).
pub fn writer_from_env<P: Protocol + Configured + RecordShape>(
    client: Client,
    spec: FunctionSpec,
) -> Result<Writer<P>, ConfigError> {
    let deployment =
        env_opt(&spec.var("DEPLOYMENT")).or_else(|| env_opt("AWS_LAMBDA_FUNCTION_NAME"));
    let dead_letters = DeadLetters::new(
        client.clone(),
        env_required(&spec.var("DEAD_LETTER_TABLE"))?,
        spec.name,
    )
    .for_deployment(deployment);
    let pointer_var = spec.var("EVENT_TIME_POINTER");
    let event_time = env_opt(&pointer_var)
        .map(|p| EventTime::new(&pointer_var, p.trim()))
        .transpose()?;
    let mapping_var = spec.var("RECORD_MAPPING");
    let mapping = env_opt(&mapping_var)
        .map(|m| RecordMapping::for_protocol::<P>(&mapping_var, &m))
        .transpose()?;
    Ok(Writer {
        function: spec.name.into(),
        protocol: spec.from_env(client)?,
        dead_letters,
        deadline_margin: deadline_margin_from_env(&spec)?,
        event_time,
        mapping,
    })
}

/// `<PREFIX>_DEADLINE_MARGIN_MS` (default [`DEFAULT_DEADLINE_MARGIN`]), at least
/// [`ANSWER_MARGIN`]: the cutoff of work in flight (and of the trace flush) is that long before
/// the deadline, and a smaller margin would move it to the deadline itself.
fn deadline_margin_from_env(spec: &FunctionSpec) -> Result<Duration, ConfigError> {
    let name = spec.var("DEADLINE_MARGIN_MS");
    let margin = env_parse::<u64>(&name)?
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_DEADLINE_MARGIN);
    if margin < ANSWER_MARGIN {
        return Err(ConfigError::new(
            &name,
            format!(
                "{} ms is too small: at least {} ms, the time kept to send the answer after \
                 work in flight is cut off",
                margin.as_millis(),
                ANSWER_MARGIN.as_millis()
            ),
        ));
    }
    Ok(margin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_margin_below_the_answer_margin_is_refused_naming_its_variable() {
        let spec = FunctionSpec {
            name: "writer-test",
            env_prefix: "WRITERTEST",
        };
        // Variables of this test's own prefix only: nothing else reads them.
        assert_eq!(
            deadline_margin_from_env(&spec).ok(),
            Some(DEFAULT_DEADLINE_MARGIN)
        );
        std::env::set_var("WRITERTEST_DEADLINE_MARGIN_MS", "100");
        let err = deadline_margin_from_env(&spec).expect_err("below 250 ms");
        assert_eq!(err.setting, "WRITERTEST_DEADLINE_MARGIN_MS");
        assert!(err.message.contains("at least 250 ms"), "{}", err.message);
        std::env::set_var("WRITERTEST_DEADLINE_MARGIN_MS", "250");
        assert_eq!(
            deadline_margin_from_env(&spec).ok(),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn a_record_mapping_of_the_wrong_shape_refuses_to_build_the_writer() {
        use dynamodb_exactly_once::counter::Counter;
        let spec = FunctionSpec {
            name: "writer-shape-test",
            env_prefix: "WRITERSHAPE",
        };
        let client = Client::from_conf(
            aws_sdk_dynamodb::Config::builder()
                .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
                .build(),
        );
        // Variables of this test's own prefix only: nothing else reads them.
        std::env::set_var("WRITERSHAPE_DEAD_LETTER_TABLE", "letters");
        std::env::set_var("WRITERSHAPE_TABLE", "counters");
        std::env::set_var(
            "WRITERSHAPE_RECORD_MAPPING",
            r#"{"key":{"PK":"/customer"},"add":{"n":1},"idempotency_key":"$id"}"#,
        );
        let err = writer_from_env::<Counter>(client.clone(), spec).expect_err("misspelled");
        assert_eq!(err.setting, "WRITERSHAPE_RECORD_MAPPING");
        assert!(
            err.message.contains("did you mean `idempotencyKey`"),
            "{}",
            err.message
        );
        std::env::set_var(
            "WRITERSHAPE_RECORD_MAPPING",
            r#"{"key":{"PK":"/customer"},"add":{"n":1},"idempotencyKey":"$id"}"#,
        );
        assert!(writer_from_env::<Counter>(client, spec).is_ok());
    }
}
