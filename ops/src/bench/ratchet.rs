//! Ratchet writer benchmark (filled in below).
use crate::args::Args;

pub async fn run(_args: Args) -> Result<(), String> {
    Err("not yet".into())
}

pub async fn worker(_args: Args) -> Result<(), String> {
    Err("not yet".into())
}
