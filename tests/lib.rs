//! Integration tests live beside this file; see the `[[test]]` entries in Cargo.toml.
