//! Part 1's journal writer: the counter's own writer, either sending its puts to DynamoDB
//! Local (billed from its `ConsumedCapacity`; the double reads DynamoDB Local's stream), or
//! captured before they are sent (billed `ceil(size / 1 KB)` each, as AWS and DynamoDB Local
//! bill a put of a new item) and mirrored into the double's synthetic stream.

use dynamodb_exactly_once::__private::item_size;
use dynamodb_exactly_once::counter::{Counter, CounterConfig};
use dynamodb_exactly_once::{Clock, ItemKey};
use dynamodb_exactly_once::{Deadline, Protocol};

use super::capture::Writer;
use super::meter::{Meter, Mirror, Tap};

/// How the journal is written.
pub enum Journal {
    /// Sent to DynamoDB Local through a metered client.
    Real {
        counter: Counter,
        meter: Meter,
        table: String,
    },
    /// Captured and mirrored.
    Captured { writer: Writer, mirror: Mirror },
}

impl Journal {
    /// The writer of `config`: captured and mirrored when `mirror` is given.
    pub fn new(
        config: CounterConfig,
        clock: Clock,
        mirror: Option<Mirror>,
    ) -> Result<Self, String> {
        if let Some(mirror) = mirror {
            let writer = Writer::new(config, clock)?;
            return Ok(Journal::Captured { writer, mirror });
        }
        let meter = Meter::default();
        let tap = Tap {
            meter: meter.clone(),
            mirror: None,
        };
        let client = dev_testing::client_intercepted(&dev_testing::endpoint(), tap, 3);
        let table = config.journal_table().unwrap_or_default().to_string();
        let counter = Counter::new(client, config).with_clock(clock);
        Ok(Journal::Real {
            counter,
            meter,
            table,
        })
    }

    /// Journal `events` (item, idempotency key; `n` + 1 each): the write units billed.
    pub async fn put(&self, events: Vec<(ItemKey, String)>) -> Result<f64, String> {
        let n = events.len();
        match self {
            Journal::Captured { writer, mirror } => {
                let items = writer.items(events).await?;
                if items.len() != n {
                    return Err(format!("journal: {} items for {n} events", items.len()));
                }
                mirror.put(&items)?;
                Ok(items
                    .iter()
                    .map(|i| item_size(i).div_ceil(1024).max(1) as f64)
                    .sum())
            }
            Journal::Real {
                counter,
                meter,
                table,
            } => {
                let before = meter.bill();
                let mut records = Vec::with_capacity(n);
                for (i, (key, idem)) in events.into_iter().enumerate() {
                    let record = counter
                        .record(key, [("n", 1)], idem)
                        .map_err(|e| format!("{e:?}"))?;
                    records.push((i, record));
                }
                let applied = counter.apply(records, Deadline::none()).await;
                let ok = applied
                    .results
                    .iter()
                    .filter(|(_, r)| r.label() == "journaled");
                if ok.count() != n {
                    return Err(format!("journal: not all of {n} records journaled"));
                }
                Ok(meter.bill().since(&before).units(table))
            }
        }
    }
}

/// 25 journal puts sent to DynamoDB Local against the same puts captured: the units it
/// reported, and `ceil(size / 1 KB)` of the captured items (a line to print).
pub async fn billing_check() -> Result<String, String> {
    let ddb = dev_testing::client();
    let tables = super::tables::create(&ddb, "check").await?;
    let config = CounterConfig::builder(&tables.counters)
        .journal(&tables.journal)
        .build()
        .map_err(|e| e.to_string())?;
    let clock = Clock::system();
    let events = |tag: &str| -> Result<Vec<(ItemKey, String)>, String> {
        (0..25)
            .map(|i| Ok((super::tables::item_key(i % 5)?, format!("{tag}{i}"))))
            .collect()
    };
    let real = Journal::new(config.clone(), clock.clone(), None)?;
    let reported = real.put(events("a")?).await?;
    let captured = Writer::new(config, clock)?.items(events("b")?).await?;
    let sizes: Vec<usize> = captured.iter().map(item_size).collect();
    let computed: usize = sizes.iter().map(|s| s.div_ceil(1024).max(1)).sum();
    Ok(format!(
        "journal billing check: 25 puts sent to DynamoDB Local billed {reported} WCU; the same puts captured: items of {}–{} bytes, ceil(size/1 KB) = {computed} WCU",
        sizes.iter().min().unwrap_or(&0),
        sizes.iter().max().unwrap_or(&0)
    ))
}
