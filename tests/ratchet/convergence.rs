//! Convergence, by property: whatever the order, duplication and batching of deliveries,
//! every item ends as its newest record says (every other case without the version cache).

use super::*;

#[derive(Debug, Clone)]
struct GenRecord {
    key: u8,
    ts: i64,
    delete: bool,
    value: u8,
}

fn body(case: usize, r: &GenRecord) -> Value {
    let pk = format!("case{case}");
    let sk = format!("k{}", r.key);
    if r.delete {
        delete(&pk, &sk, r.ts)
    } else {
        put(&pk, &sk, r.ts, json!({"v": r.value}))
    }
}

fn records() -> impl Strategy<Value = Vec<GenRecord>> {
    prop::collection::vec(
        (0u8..4, 0i64..6, prop::bool::weighted(0.25), 0u8..3).prop_map(
            |(key, ts, delete, value)| GenRecord {
                key,
                ts,
                delete,
                value,
            },
        ),
        1..40,
    )
}

/// Deliveries: duplicates (indices repeated), a shuffled order, and batch boundaries.
fn delivery() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, u64)> {
    (
        prop::collection::vec(0usize..1000, 0..20),
        prop::collection::vec(1usize..12, 1..10),
        any::<u64>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// The table is a function of the *set* of records: whatever duplication, order and batch
    /// split, every key holds the model's winner (greatest timestamp; at equal timestamps a
    /// delete, then the greater content hash), tombstones as specified.
    #[test]
    fn table_converges_to_the_model(records in records(), (dups, splits, seed) in delivery()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            use rand::seq::SliceRandom;
            use rand::SeedableRng;
            static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let case = CASE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let client = client();
            let tables = table_for_property(&client).await;
            // Every other case without the version cache: DynamoDB's condition alone then
            // decides (a warm cache would turn most stale records away before any write).
            let w = ratchet_writer_with(client.clone(), &tables, |c| {
                if case % 2 == 1 {
                    c.cache_keys(0)
                } else {
                    c
                }
            });

            // Delivery: every record at least once, some more often, shuffled, split in batches.
            let mut delivered: Vec<usize> = (0..records.len()).collect();
            delivered.extend(dups.iter().map(|d| d % records.len()));
            delivered.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
            let bodies: Vec<Value> = delivered.iter().map(|&i| body(case, &records[i])).collect();
            let mut start = 0;
            let mut splits = splits.into_iter().cycle();
            while start < bodies.len() {
                let end = (start + splits.next().unwrap_or(1)).min(bodies.len());
                let report = w.handle_batch(&sqs_batch(&bodies[start..end], start), Deadline::none()).await;
                assert!(report.response.failed_ids().is_empty());
                start = end;
            }

            // The model: per key, the record with the greatest version.
            let mut model: BTreeMap<String, dynamodb_exactly_once::ratchet::RatchetRecord> = BTreeMap::new();
            for r in &records {
                let parsed = w.protocol().parse_record(body(case, r).to_string().as_bytes()).expect("valid");
                let id = format!("case{case}|k{}", r.key);
                let replace = model.get(&id).is_none_or(|m| parsed.version() > m.version());
                if replace {
                    model.insert(id, parsed);
                }
            }
            let table: BTreeMap<_, _> = scan(&client, &tables["RatchetTable"]).await
                .into_iter()
                .filter(|(k, _)| k.starts_with(&format!("case{case}|")))
                .collect();
            assert_eq!(table.keys().collect::<Vec<_>>(), model.keys().collect::<Vec<_>>());
            for (id, winner) in &model {
                let stored = &table[id];
                assert_eq!(stored["Timestamp"], winner.ts().to_json(), "{id}");
                assert_eq!(stored["TieBreak"], json!(winner.token()), "{id}");
                match winner.op() {
                    dynamodb_exactly_once::ratchet::RatchetOp::Delete => {
                        assert_eq!(stored["Deleted"], json!(true), "{id}");
                        assert!(stored["TTL"].is_number());
                        assert_eq!(stored.len(), 6, "a tombstone keeps only key, ts, token, flag, TTL: {stored:?}");
                    }
                    dynamodb_exactly_once::ratchet::RatchetOp::Put(item) => {
                        let expected = dynamodb_exactly_once::__private::item_to_json(item.clone()).expect("json");
                        assert_eq!(stored, &expected, "{id}");
                    }
                    other => panic!("an op the model does not know: {other:?}"),
                }
            }
        });
    }
}

/// One pair of tables shared by all property cases of this process (cases use distinct keys).
async fn table_for_property(client: &aws_sdk_dynamodb::Client) -> BTreeMap<String, String> {
    static TABLES: std::sync::Mutex<Option<BTreeMap<String, String>>> = std::sync::Mutex::new(None);
    if let Some(t) = TABLES.lock().expect("lock").clone() {
        return t;
    }
    let t = dev_testing::template_tables(client, &["RatchetTable", "DeadLetterTable"]).await;
    *TABLES.lock().expect("lock") = Some(t.clone());
    t
}
