//! Protobuf values: dynamic messages (`prost-reflect`) of the configured message, checked
//! against the message the header names, as proto3 JSON with exact 64-bit integers.

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use serde_json::Value;

use super::framing::MessageRef;

/// The configured message's descriptor.
#[derive(Debug)]
pub(super) struct ProtobufCodec {
    message: MessageDescriptor,
    options: SerializeOptions,
}

impl ProtobufCodec {
    pub(super) fn new(descriptors: &[u8], message: &str) -> Result<Self, String> {
        let pool = DescriptorPool::decode(descriptors)
            .map_err(|e| format!("not a serialized FileDescriptorSet: {e}"))?;
        let message = pool.get_message_by_name(message).ok_or_else(|| {
            format!("the descriptor set has no message {message:?} (give its full name)")
        })?;
        let options = SerializeOptions::new()
            .stringify_64_bit_integers(false)
            .skip_default_fields(false)
            .use_proto_field_name(true);
        Ok(ProtobufCodec { message, options })
    }

    /// One value's JSON: an error when the header names another message or the bytes are
    /// not a message of the configured one.
    pub(super) fn decode(&self, payload: &[u8], named: &MessageRef) -> Result<Value, String> {
        if let Some(other) = self.named(named)? {
            if other.full_name() != self.message.full_name() {
                return Err(format!(
                    "its header names the message {}; this function decodes {}",
                    other.full_name(),
                    self.message.full_name()
                ));
            }
        }
        let message = DynamicMessage::decode(self.message.clone(), payload)
            .map_err(|e| format!("it is not a Protobuf {}: {e}", self.message.full_name()))?;
        message
            .serialize_with_options(serde_json::value::Serializer, &self.options)
            .map_err(|e| e.to_string())
    }

    /// The message a header names, in the configured message's file (`None`: no header).
    fn named(&self, named: &MessageRef) -> Result<Option<MessageDescriptor>, String> {
        let file = self.message.parent_file();
        let found = match named {
            MessageRef::Configured => return Ok(None),
            MessageRef::Path(path) => {
                let mut found = path.first().and_then(|i| file.messages().nth(*i));
                for i in path.iter().skip(1) {
                    found = found.and_then(|m| m.child_messages().nth(*i));
                }
                found
            }
            MessageRef::Sorted(index) => {
                let mut all = Vec::new();
                let mut level: Vec<MessageDescriptor> = file.messages().collect();
                while !level.is_empty() {
                    let next = level.iter().flat_map(|m| m.child_messages()).collect();
                    all.append(&mut level);
                    level = next;
                }
                all.sort_by(|a, b| a.full_name().cmp(b.full_name()));
                all.into_iter().nth(*index)
            }
        };
        found
            .map(Some)
            .ok_or_else(|| format!("its header names message {named:?}, not in {}", file.name()))
    }
}
