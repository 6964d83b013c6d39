//! The DynamoDB layer every protocol stands on: one way to do each thing.
//!
//! * [`retry`]: the one backoff policy (exponential, jittered, bounded).
//! * [`item`]: the item codec (JSON ↔ attribute values, canonical keys, item sizes).
//! * [`number`]: numbers as DynamoDB defines them (38 digits, its range, one spelling per
//!   value), never through `f64`.
//! * [`read`]: one item by key ([`Read`]: consistent or eventual), decoded to a type.
//! * [`clock`]: the one clock (epoch milliseconds), injectable in tests.
//! * [`cost`]: write requests and consumed write units, counted the same way by every protocol.
//! * [`error`]: infrastructure errors ([`StoreError`]) and whether a retry helps.
//! * [`schema`]: a table's real key schema, described once per process; every writer checks
//!   each record's key against it before writing (`invalid_key`).
//!
//! Inside the crate only: `cond` (a conditional write's result as a value, `Done` or `Failed`
//! with the `ALL_OLD` item, decided while the SDK's typed error is in hand) and `expr`
//! (placeholders for attribute names and values, so that a name from input never becomes part
//! of an expression's text).

pub(crate) mod batch;
pub(crate) mod clock;
pub(crate) mod cond;
pub(crate) mod conflict;
pub(crate) mod cost;
pub(crate) mod error;
pub(crate) mod expr;
pub(crate) mod item;
pub(crate) mod json_style;
pub(crate) mod number;
pub(crate) mod read;
pub(crate) mod retry;
pub(crate) mod schema;

pub use clock::Clock;
pub(crate) use cond::{conditional, Cond};
pub use cost::Cost;
pub use error::{ErrorClass, StoreError};
pub(crate) use expr::Placeholders;
pub use item::{Item, ItemKey, KeyError, KeyValue};
pub use number::{Number, NumberError};
pub use read::Read;
