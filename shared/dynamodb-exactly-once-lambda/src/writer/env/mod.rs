//! A writer function from its environment: `<PREFIX>_<SETTING>` variables.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use dynamodb_exactly_once::__private::ANSWER_MARGIN;
use dynamodb_exactly_once::config::Configured;
use dynamodb_exactly_once::{ConfigError, Protocol};

use super::{in_order, too_small, Writer, WriterBuilder, DEFAULT_DEADLINE_MARGIN};
use crate::dead_letter::{DeadLetters, ReportOnly};
use crate::event_time::EventTime;
use crate::mapping::{RecordMapping, RecordShape};
use crate::settings::{env_opt, env_parse, FunctionSpec};
use crate::source::value::KafkaValues;

/// The writer function of protocol `P` from its environment: the protocol's settings
/// (`<PREFIX>_<SETTING>`, see [`crate::settings`]), its dead-letter sink,
/// `<PREFIX>_DEADLINE_MARGIN_MS` (default 2000 ms, at least
/// 250 ms), `<PREFIX>_DEPLOYMENT` (the name its dead letters are kept
/// under; default the Lambda function's name, `AWS_LAMBDA_FUNCTION_NAME`),
/// `<PREFIX>_EVENT_TIME_POINTER` (see [`crate::event_time`]) and `<PREFIX>_RECORD_MAPPING`
/// (see [`crate::mapping`]; checked against `P`'s [`RecordShape`], so a template that does not
/// give `P`'s records refuses to start), `<PREFIX>_KAFKA_VALUE_*` (Avro or Protobuf Kafka
/// values, see [`KafkaValues::from_env`]).
///
/// The sink is `<PREFIX>_DEAD_LETTER_SINK`:
///
/// | value | sink | needs |
/// |---|---|---|
/// | `table` (the default) | [`DeadLetters`]: kept, acknowledged, replayable | `<PREFIX>_DEAD_LETTER_TABLE` |
/// | `sqs` | `SqsDeadLetters`: a message per letter (the cargo feature `sqs`) | `<PREFIX>_DEAD_LETTER_QUEUE_URL` |
/// | `report` | [`ReportOnly`]: reported for the source's own dead-letter queue or on-failure destination | |
///
/// Any other value, or a missing companion variable, refuses to start naming the variable.
/// `report` is an explicit choice, also for a protocol that applies stream batches in order
/// (the records held back behind a rejected one then share its fate; logged at start-up).
pub async fn writer_from_env<P: Protocol + Configured + RecordShape>(
    client: Client,
    spec: FunctionSpec,
) -> Result<Writer<P>, ConfigError> {
    let sink = SinkChoice::from_vars(&spec, env_opt)?;
    let deadline_margin = deadline_margin_from_env(&spec)?;
    let pointer_var = spec.var("EVENT_TIME_POINTER");
    let event_time = env_opt(&pointer_var)
        .map(|p| EventTime::new(&pointer_var, p.trim()))
        .transpose()?;
    let mapping_var = spec.var("RECORD_MAPPING");
    let mapping = env_opt(&mapping_var)
        .map(|m| RecordMapping::for_protocol::<P>(&mapping_var, &m))
        .transpose()?;
    let kafka_values = KafkaValues::from_env(&spec)?;
    let protocol: P = spec.from_env(client.clone())?;
    let mut builder = Writer::builder(spec.name, protocol).deadline_margin(deadline_margin);
    if let Some(event_time) = event_time {
        builder = builder.event_time(event_time);
    }
    if let Some(mapping) = mapping {
        builder = builder.mapping(mapping);
    }
    if let Some(values) = kafka_values {
        builder = builder.kafka_values(values);
    }
    let deployment =
        env_opt(&spec.var("DEPLOYMENT")).or_else(|| env_opt("AWS_LAMBDA_FUNCTION_NAME"));
    let builder = with_sink(builder, sink, client, spec, deployment).await?;
    builder.build()
}

/// `builder` with the sink `choice` names.
async fn with_sink<P: Protocol>(
    builder: WriterBuilder<P>,
    choice: SinkChoice,
    client: Client,
    spec: FunctionSpec,
    deployment: Option<String>,
) -> Result<WriterBuilder<P>, ConfigError> {
    Ok(match choice {
        SinkChoice::Table(table) => builder
            .dead_letters(DeadLetters::new(client, table, spec.name).for_deployment(deployment)),
        SinkChoice::Report => {
            if in_order(&builder.protocol) {
                tracing::warn!(
                    function = spec.name,
                    "dead letters are reported for the source's own dead-letter queue \
                     ({} = report) and this protocol applies stream batches in order: the \
                     records held back behind a rejected one share its fate",
                    spec.var("DEAD_LETTER_SINK")
                );
            }
            builder.dead_letters(ReportOnly)
        }
        #[cfg(feature = "sqs")]
        SinkChoice::Sqs(url) => {
            let sqs = crate::client::sqs_client_from_env().await?;
            builder.dead_letters(
                crate::dead_letter::SqsDeadLetters::new(sqs, url, spec.name)
                    .for_deployment(deployment),
            )
        }
        #[cfg(not(feature = "sqs"))]
        SinkChoice::Sqs(_) => {
            let _ = deployment;
            return Err(ConfigError::new(
                &spec.var("DEAD_LETTER_SINK"),
                "`sqs` needs the cargo feature `sqs` of dynamodb-exactly-once-lambda, which \
                 this build does not have",
            ));
        }
    })
}

/// The dead-letter sink a writer's variables choose.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SinkChoice {
    /// The dead-letter table of this name.
    Table(String),
    /// The SQS queue of this URL.
    Sqs(String),
    /// [`ReportOnly`].
    Report,
}

impl SinkChoice {
    /// `<PREFIX>_DEAD_LETTER_SINK` and its companion variable, read through `var`; errors
    /// name the variable at fault.
    fn from_vars(
        spec: &FunctionSpec,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let sink_var = spec.var("DEAD_LETTER_SINK");
        let required = |setting: &str, why: &str| {
            let name = spec.var(setting);
            var(&name)
                .map(|v| v.trim().to_string())
                .ok_or_else(|| ConfigError::new(&name, format!("is required {why}")))
        };
        let sink = var(&sink_var).map(|v| v.trim().to_ascii_lowercase());
        match sink.as_deref() {
            None | Some("table") => Ok(SinkChoice::Table(required(
                "DEAD_LETTER_TABLE",
                "(the dead-letter table; or choose another sink with DEAD_LETTER_SINK = sqs \
                 or report)",
            )?)),
            Some("sqs") => Ok(SinkChoice::Sqs(required(
                "DEAD_LETTER_QUEUE_URL",
                &format!("when {sink_var} is sqs"),
            )?)),
            Some("report") => Ok(SinkChoice::Report),
            Some(other) => Err(ConfigError::new(
                &sink_var,
                format!("{other:?} is not a dead-letter sink: table (the default), sqs or report"),
            )),
        }
    }
}

/// `<PREFIX>_DEADLINE_MARGIN_MS` (default 2 s), at least
/// 250 ms: the cutoff of work in flight (and of the trace flush) is that long before
/// the deadline, and a smaller margin would move it to the deadline itself.
fn deadline_margin_from_env(spec: &FunctionSpec) -> Result<Duration, ConfigError> {
    let name = spec.var("DEADLINE_MARGIN_MS");
    let margin = env_parse::<u64>(&name)?
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_DEADLINE_MARGIN);
    if margin < ANSWER_MARGIN {
        return Err(ConfigError::new(&name, too_small(margin)));
    }
    Ok(margin)
}

#[cfg(test)]
mod tests;
