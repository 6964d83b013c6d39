//! Kafka values in Avro or Protobuf: each value's schema-registry framing recognised and
//! stripped, the rest decoded under the schema given in the settings, into the JSON the record
//! mappings and the protocols read (a JSON value needs none of this).
//!
//! # Framing
//!
//! | first byte | registry | header |
//! |---|---|---|
//! | `0` | Confluent Schema Registry | 4-byte big-endian schema id; Protobuf only: the message indexes (a zig-zag varint count, then as many zig-zag varints; a count of 0 is the first message of the file) |
//! | `3` | AWS Glue Schema Registry | compression byte (`0` none, `5` zlib), the 16-byte schema version UUID; Protobuf only: the message's index (an unsigned varint) among the file's messages sorted by full name |
//!
//! Any other first byte is refused ([`Framing::Registry`], the default); [`Framing::None`]
//! reads values without a header. The schema id or version in the header is not looked up in
//! a registry: the value is decoded under the schema the function was given, and the decoding
//! refuses what does not fit it (bytes left over, a Protobuf message index naming another
//! message than the one configured).
//!
//! # Values
//!
//! Avro: records and maps become objects, arrays arrays, unions their branch, enums their
//! symbol, `bytes` and `fixed` base64 text, `long` and the date and time logical types
//! integers, `decimal` its exact decimal number (the unscaled integer and the schema's
//! scale, never through f64), `uuid` text. Protobuf: the proto3 JSON mapping with the
//! `.proto` field names, every field (defaults included), enums by name, and 64-bit integers
//! as numbers, exact.
//!
//! # Failure modes
//! * A value that does not decode (a wrong first byte, a truncated header or body, bytes left
//!   over, a Glue value compressed otherwise than zlib, or inflating to more than
//!   `MAX_DECODED_BYTES`): the record is rejected with `undecodable_value` and a reason of at
//!   most `MAX_DETAIL_CHARS` characters, kept as a dead letter with its value as delivered;
//!   its partition goes on.
//! * A schema that does not parse, a descriptor set without the message named, a format this
//!   build does not have (the cargo features `avro`, `protobuf`): the function refuses to
//!   start ([`ConfigError`] naming the setting).
//!
//! Cost: one decode and one JSON serialisation per Kafka record; no DynamoDB call.

#[cfg(feature = "avro")]
mod avro;
#[cfg(any(feature = "avro", feature = "protobuf"))]
mod framing;
#[cfg(feature = "protobuf")]
mod protobuf;

use std::sync::Arc;

use dynamodb_exactly_once::{ConfigError, Rejection, RejectionCode};

use crate::settings::{env_opt, FunctionSpec};

/// Most bytes a Glue value's zlib body may inflate to (Lambda's whole payload is at most
/// 6 MB): more is `undecodable_value`.
#[cfg(any(feature = "avro", feature = "protobuf"))]
pub(crate) const MAX_DECODED_BYTES: usize = 16 * 1024 * 1024;

/// Longest reason an `undecodable_value` dead letter carries.
pub(crate) const MAX_DETAIL_CHARS: usize = 300;

/// How values are framed.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Framing {
    /// A Confluent (first byte `0`) or AWS Glue (first byte `3`) schema-registry header,
    /// stripped; any other first byte is refused.
    #[default]
    Registry,
    /// No header: the value is the encoded bytes.
    None,
}

impl std::str::FromStr for Framing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "registry" => Ok(Framing::Registry),
            "none" => Ok(Framing::None),
            other => Err(format!("{other:?}: registry or none")),
        }
    }
}

/// How a function's Kafka values are decoded (see the module documentation).
#[derive(Debug, Clone)]
pub struct KafkaValues {
    codec: Codec,
    framing: Framing,
}

#[derive(Debug, Clone)]
enum Codec {
    #[cfg(feature = "avro")]
    Avro(Arc<avro::AvroCodec>),
    #[cfg(feature = "protobuf")]
    Protobuf(Arc<protobuf::ProtobufCodec>),
    /// Never built: keeps the enum inhabited in a build without either feature.
    #[allow(dead_code)]
    None(std::marker::PhantomData<Arc<()>>),
}

impl KafkaValues {
    /// Avro values written under `schema` (the schema's JSON); `setting` names it in errors.
    #[cfg(feature = "avro")]
    pub fn avro(setting: &str, schema: &str) -> Result<Self, ConfigError> {
        let codec = avro::AvroCodec::new(schema).map_err(|e| ConfigError::new(setting, e))?;
        Ok(KafkaValues {
            codec: Codec::Avro(Arc::new(codec)),
            framing: Framing::default(),
        })
    }

    /// Protobuf values of `message` (its full name, e.g. `shop.v1.Order`), described in the
    /// serialized `FileDescriptorSet` `descriptors` (`protoc --include_imports
    /// --descriptor_set_out`); `setting` names it in errors.
    #[cfg(feature = "protobuf")]
    pub fn protobuf(setting: &str, descriptors: &[u8], message: &str) -> Result<Self, ConfigError> {
        let codec = protobuf::ProtobufCodec::new(descriptors, message)
            .map_err(|e| ConfigError::new(setting, e))?;
        Ok(KafkaValues {
            codec: Codec::Protobuf(Arc::new(codec)),
            framing: Framing::default(),
        })
    }

    /// The same values read with `framing` (default [`Framing::Registry`]).
    #[must_use]
    pub fn with_framing(mut self, framing: Framing) -> Self {
        self.framing = framing;
        self
    }

    /// The framing values are read with.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The JSON of one value, or the `undecodable_value` rejection.
    pub fn decode(&self, value: &[u8]) -> Result<Vec<u8>, Rejection> {
        self.decode_inner(value).map_err(|why| undecodable(&why))
    }

    fn decode_inner(&self, value: &[u8]) -> Result<Vec<u8>, String> {
        let json: Result<serde_json::Value, String> = match &self.codec {
            #[cfg(feature = "avro")]
            Codec::Avro(codec) => framing::unframe(value, self.framing, framing::Indexes::Absent)
                .and_then(|frame| codec.decode(&frame.payload)),
            #[cfg(feature = "protobuf")]
            Codec::Protobuf(codec) => {
                framing::unframe(value, self.framing, framing::Indexes::Protobuf)
                    .and_then(|frame| codec.decode(&frame.payload, &frame.message))
            }
            Codec::None(_) => Err(format!("no value format for its {} bytes", value.len())),
        };
        serde_json::to_vec(&json?).map_err(|e| e.to_string())
    }

    /// The values of the function `spec` from its variables (`None`: JSON values):
    ///
    /// | variable | value |
    /// |---|---|
    /// | `<PREFIX>_KAFKA_VALUE_FORMAT` | `json` (the default), `avro`, `protobuf` |
    /// | `<PREFIX>_KAFKA_VALUE_SCHEMA` | Avro: the schema's JSON, or the path of a file holding it |
    /// | `<PREFIX>_KAFKA_VALUE_DESCRIPTORS` | Protobuf: the path of a serialized `FileDescriptorSet` |
    /// | `<PREFIX>_KAFKA_VALUE_MESSAGE` | Protobuf: the message's full name |
    /// | `<PREFIX>_KAFKA_VALUE_FRAMING` | `registry` (the default: Confluent or Glue), `none` |
    pub fn from_env(spec: &FunctionSpec) -> Result<Option<Self>, ConfigError> {
        let format_var = spec.var("KAFKA_VALUE_FORMAT");
        let format = env_opt(&format_var).map(|f| f.trim().to_ascii_lowercase());
        let values = match format.as_deref() {
            None | Some("json") => return Ok(None),
            Some("avro") => avro_from_env(spec, &format_var)?,
            Some("protobuf") => protobuf_from_env(spec, &format_var)?,
            Some(other) => {
                return Err(ConfigError::new(
                    &format_var,
                    format!("{other:?}: json, avro or protobuf"),
                ))
            }
        };
        let framing_var = spec.var("KAFKA_VALUE_FRAMING");
        let framing = match env_opt(&framing_var) {
            Some(f) => f
                .trim()
                .parse()
                .map_err(|e| ConfigError::new(&framing_var, e))?,
            None => Framing::default(),
        };
        Ok(Some(values.with_framing(framing)))
    }
}

/// A variable that must be set for the chosen format.
#[cfg(any(feature = "avro", feature = "protobuf"))]
fn required(
    spec: &FunctionSpec,
    setting: &str,
    format_var: &str,
) -> Result<(String, String), ConfigError> {
    let var = spec.var(setting);
    let value = env_opt(&var).ok_or_else(|| {
        ConfigError::new(
            &var,
            format!("must be set when {format_var} names this format"),
        )
    })?;
    Ok((var, value))
}

#[cfg(feature = "avro")]
fn avro_from_env(spec: &FunctionSpec, format_var: &str) -> Result<KafkaValues, ConfigError> {
    let (var, schema) = required(spec, "KAFKA_VALUE_SCHEMA", format_var)?;
    let text = schema.trim();
    let schema = if text.starts_with(['{', '[', '"']) {
        text.to_string()
    } else {
        std::fs::read_to_string(text).map_err(|e| {
            ConfigError::new(&var, format!("cannot read the schema file {text:?}: {e}"))
        })?
    };
    KafkaValues::avro(&var, &schema)
}

#[cfg(not(feature = "avro"))]
fn avro_from_env(_: &FunctionSpec, format_var: &str) -> Result<KafkaValues, ConfigError> {
    Err(not_built(format_var, "avro"))
}

#[cfg(feature = "protobuf")]
fn protobuf_from_env(spec: &FunctionSpec, format_var: &str) -> Result<KafkaValues, ConfigError> {
    let (var, path) = required(spec, "KAFKA_VALUE_DESCRIPTORS", format_var)?;
    let (_, message) = required(spec, "KAFKA_VALUE_MESSAGE", format_var)?;
    let bytes = std::fs::read(path.trim())
        .map_err(|e| ConfigError::new(&var, format!("cannot read {path:?}: {e}")))?;
    KafkaValues::protobuf(&var, &bytes, message.trim())
}

#[cfg(not(feature = "protobuf"))]
fn protobuf_from_env(_: &FunctionSpec, format_var: &str) -> Result<KafkaValues, ConfigError> {
    Err(not_built(format_var, "protobuf"))
}

#[cfg(not(all(feature = "avro", feature = "protobuf")))]
fn not_built(format_var: &str, format: &str) -> ConfigError {
    ConfigError::new(
        format_var,
        format!("this function was built without the `{format}` feature of dynamodb-exactly-once-lambda"),
    )
}

/// The `undecodable_value` rejection, its reason cut to [`MAX_DETAIL_CHARS`].
fn undecodable(why: &str) -> Rejection {
    let mut detail: String = why.chars().take(MAX_DETAIL_CHARS).collect();
    if detail.len() < why.len() {
        detail.push('…');
    }
    Rejection::new(
        RejectionCode::UndecodableValue,
        format!("the Kafka value does not decode: {detail}"),
    )
}

#[cfg(all(test, feature = "avro", feature = "protobuf"))]
mod tests;
