//! Avro values: decoded with `apache-avro` under the configured writer schema, then turned
//! into JSON with the schema beside them (a decimal's scale lives in the schema).

use std::collections::HashMap;
use std::str::FromStr;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::{Name, ResolvedSchema};
use apache_avro::types::Value as Avro;
use apache_avro::Schema;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{Map, Number, Value};

/// A parsed writer schema and its named types.
#[derive(Debug)]
pub(super) struct AvroCodec {
    schema: Schema,
    names: HashMap<Name, Schema>,
}

impl AvroCodec {
    pub(super) fn new(schema: &str) -> Result<Self, String> {
        let schema = Schema::parse_str(schema)
            .map_err(|e| format!("the Avro schema does not parse: {e}"))?;
        let names = ResolvedSchema::try_from(&schema)
            .map_err(|e| format!("the Avro schema does not resolve: {e}"))?
            .get_names()
            .iter()
            .map(|(name, schema)| (name.clone(), (*schema).clone()))
            .collect();
        Ok(AvroCodec { schema, names })
    }

    /// One value's JSON; an error when the bytes do not hold exactly one value of the schema.
    pub(super) fn decode(&self, payload: &[u8]) -> Result<Value, String> {
        let reader = GenericDatumReader::builder(&self.schema)
            .build()
            .map_err(|e| e.to_string())?;
        let mut cursor = payload;
        let value = reader
            .read_value(&mut cursor)
            .map_err(|e| format!("it is not Avro of the configured schema: {e}"))?;
        if !cursor.is_empty() {
            return Err(format!(
                "{} bytes are left over after the Avro value: it was not written under the \
                 configured schema",
                cursor.len()
            ));
        }
        self.json(&value, &self.schema)
    }

    /// `value`, read under `schema`, as JSON.
    fn json(&self, value: &Avro, schema: &Schema) -> Result<Value, String> {
        let schema = match schema {
            Schema::Ref { name } => self
                .names
                .get(name)
                .ok_or_else(|| format!("the schema names an unknown type {name}"))?,
            other => other,
        };
        Ok(match (value, schema) {
            (Avro::Union(i, inner), Schema::Union(union)) => {
                let branch = union
                    .variants()
                    .get(*i as usize)
                    .ok_or_else(|| format!("union branch {i} is not in the schema"))?;
                return self.json(inner, branch);
            }
            (Avro::Array(items), Schema::Array(array)) => Value::Array(
                items
                    .iter()
                    .map(|v| self.json(v, &array.items))
                    .collect::<Result<_, _>>()?,
            ),
            (Avro::Map(entries), Schema::Map(map)) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), self.json(v, &map.types)?)))
                    .collect::<Result<Map<_, _>, String>>()?,
            ),
            (Avro::Record(fields), Schema::Record(record)) => {
                let mut out = Map::new();
                for ((name, v), field) in fields.iter().zip(&record.fields) {
                    out.insert(name.clone(), self.json(v, &field.schema)?);
                }
                Value::Object(out)
            }
            (Avro::Decimal(decimal), Schema::Decimal(d)) => {
                let unscaled = num_bigint::BigInt::from(decimal.clone());
                number(&scaled(&unscaled.to_string(), d.scale))?
            }
            (other, _) => scalar(other)?,
        })
    }
}

/// A value that needs no schema to become JSON.
fn scalar(value: &Avro) -> Result<Value, String> {
    Ok(match value {
        Avro::Null => Value::Null,
        Avro::Boolean(b) => Value::Bool(*b),
        Avro::Int(n) | Avro::Date(n) | Avro::TimeMillis(n) => Value::from(*n),
        Avro::Long(n)
        | Avro::TimeMicros(n)
        | Avro::TimestampMillis(n)
        | Avro::TimestampMicros(n)
        | Avro::TimestampNanos(n)
        | Avro::LocalTimestampMillis(n)
        | Avro::LocalTimestampMicros(n)
        | Avro::LocalTimestampNanos(n) => Value::from(*n),
        Avro::Float(f) => float(f64::from(*f))?,
        Avro::Double(f) => float(*f)?,
        Avro::Bytes(b) | Avro::Fixed(_, b) => Value::String(BASE64.encode(b)),
        Avro::String(s) | Avro::Enum(_, s) => Value::String(s.clone()),
        Avro::Uuid(u) => Value::String(u.to_string()),
        Avro::BigDecimal(d) => number(&d.to_string())?,
        Avro::Duration(d) => serde_json::json!({
            "months": u32::from(d.months()),
            "days": u32::from(d.days()),
            "millis": u32::from(d.millis()),
        }),
        other => {
            return Err(format!(
                "an Avro value that does not fit its schema: {other:?}"
            ))
        }
    })
}

fn float(f: f64) -> Result<Value, String> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| format!("the float {f} has no JSON number"))
}

fn number(text: &str) -> Result<Value, String> {
    Number::from_str(text)
        .map(Value::Number)
        .map_err(|e| format!("the decimal {text} is not a number: {e}"))
}

/// The decimal text of `unscaled` × 10^-`scale` (`-5`, 3 → `-0.005`).
fn scaled(unscaled: &str, scale: usize) -> String {
    let (sign, digits) = match unscaled.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", unscaled),
    };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

#[cfg(test)]
mod tests {
    use super::scaled;

    #[test]
    fn decimal_text_places_the_point_by_the_scale() {
        assert_eq!(scaled("12345", 2), "123.45");
        assert_eq!(scaled("-5", 3), "-0.005");
        assert_eq!(scaled("7", 0), "7");
        assert_eq!(scaled("0", 2), "0.00");
    }
}
