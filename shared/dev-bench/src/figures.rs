//! The figures a bench also writes as JSON, for `scripts/charts.py` to draw
//! (`make bench` runs it): `$BENCH_OUT/<name>.json` (default `target/bench`), holding the
//! bench's name, the date and commit it was measured at (`BENCH_DATE`, `BENCH_COMMIT`, which
//! `scripts/bench.sh` sets) and one object per measured row.

use serde_json::{json, Value};

/// The rows of one chart's data.
#[derive(Debug)]
pub struct Figures {
    name: &'static str,
    rows: Vec<Value>,
}

impl Figures {
    pub fn new(name: &'static str) -> Self {
        Figures {
            name,
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Value) {
        self.rows.push(row);
    }

    /// Write the file; a failure is printed, never fatal (the printed tables are the record).
    pub fn write(self) {
        let dir = std::env::var("BENCH_OUT").unwrap_or_else(|_| "target/bench".into());
        let path = format!("{dir}/{}.json", self.name);
        let doc = json!({
            "bench": self.name,
            "date": std::env::var("BENCH_DATE").unwrap_or_default(),
            "commit": std::env::var("BENCH_COMMIT").unwrap_or_default(),
            "rows": self.rows,
        });
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, format!("{doc:#}\n")));
        match written {
            Ok(()) => println!("figures: {path}"),
            Err(err) => println!("figures: {path} not written: {err}"),
        }
    }
}
