//! The checker's generator: a schedule's accounts and messages from its seed, in one of its
//! modes. Every generated transaction is valid (distinct items, its own journal item, every
//! item small enough for both paths), so a `Rejected` is a protocol bug.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::txn::env::debit;

pub const COORDINATORS: usize = 4;
pub const INITIAL: i64 = 100;

/// Padding of a large item: 100–190 KB, so that an `Update` or `Put` on it still fits the
/// lock path (its image beside its new value under 400 KB), and so is valid on both paths.
pub const PAD_BYTES: std::ops::RangeInclusive<usize> = 100_000..=190_000;

/// What a schedule exercises beside transfers, creates, deletes and checks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Modes {
    /// Accounts and created items of 100–190 KB, and deliveries cut short by a deadline of a
    /// few tens of milliseconds (an attempt resumed mid-lock-phase by the next delivery).
    pub large: bool,
    /// Every transaction also `ADD`s 1 to a pool item of a table keyed by a number, the key
    /// spelled differently from transaction to transaction (`123`, `123.0`, `1230E-1`, ...).
    pub numbers: bool,
    /// 10–12 large accounts and a transaction checking all of them: chunks cut by bytes.
    pub wide: bool,
    /// Before the schedule's coordinators, every message is started by a lock-path
    /// coordinator that dies after a few calls, and every keep lock left is rewritten as the previous release wrote
    /// it (`txId#attempt`, the image saved): attempts an older coordinator started during a
    /// deploy, resumed by this release.
    pub previous_format: bool,
}

impl Modes {
    fn from_rng(rng: &mut StdRng) -> Modes {
        let wide = rng.random_bool(0.1);
        Modes {
            large: wide || rng.random_bool(0.2),
            numbers: rng.random_bool(0.2),
            wide,
            previous_format: rng.random_bool(0.15),
        }
    }
}

/// One message of a schedule.
#[derive(Debug, Clone)]
pub struct Msg {
    pub tx_id: String,
    pub body: Value,
}

/// A schedule's accounts and messages, from its seed.
pub struct Plan {
    pub prefix: String,
    pub modes: Modes,
    pub accounts: Vec<String>,
    /// The accounts there before the schedule, with their padding (bytes, 0 for none).
    pub existing: BTreeMap<String, usize>,
    /// Per coordinator, the messages it is delivered (duplicates included).
    pub deliveries: Vec<Vec<Msg>>,
    pub messages: Vec<Msg>,
    /// With [`Modes::numbers`], the pool item's key (a number).
    pub pool: Option<u64>,
}

fn journal(table: &str, key: &str) -> Value {
    json!({"Update":{"TableName":table,"Key":{"PK":key},
        "UpdateExpression":"ADD #n :one","ExpressionAttributeNames":{"#n":"applied"},
        "ExpressionAttributeValues":{":one":1}}})
}

fn credit(table: &str, pk: &str, amount: i64) -> Value {
    json!({"Update":{"TableName":table,"Key":{"PK":pk},
        "UpdateExpression":"SET #b = #b + :d","ConditionExpression":"attribute_exists(#b)",
        "ExpressionAttributeNames":{"#b":"balance"},"ExpressionAttributeValues":{":d":amount}}})
}

/// A check that holds whether the item exists or not (a keep lock on an existing item, or a
/// transient one on an absent item).
fn check(table: &str, pk: &str) -> Value {
    json!({"ConditionCheck":{"TableName":table,"Key":{"PK":pk},
        "ConditionExpression":"attribute_not_exists(#f)",
        "ExpressionAttributeNames":{"#f":"frozen"}}})
}

/// `n` spelled one of several ways DynamoDB reads as the same number.
fn spelled(rng: &mut StdRng, n: u64) -> Value {
    let text = match rng.random_range(0..5) {
        0 => n.to_string(),
        1 => format!("{n}.0"),
        2 => format!("{n}0E-1"),
        3 => format!("{n}.000e0"),
        _ => format!("{n}00e-2"),
    };
    Value::Number(text.parse().unwrap_or_else(|_| n.into()))
}

/// The pool item's `ADD` (table keyed by the number `id`).
pub fn pool_add(rng: &mut StdRng, table: &str, id: u64) -> Value {
    json!({"Update":{"TableName":table,"Key":{"id":spelled(rng, id)},
        "UpdateExpression":"ADD #n :one","ExpressionAttributeNames":{"#n":"n"},
        "ExpressionAttributeValues":{":one":1}}})
}

fn pad(rng: &mut StdRng, modes: Modes) -> usize {
    if modes.large {
        rng.random_range(PAD_BYTES)
    } else {
        0
    }
}

/// A random transfer, create (money moved into a new account), delete (an account's whole
/// balance, as the generator guesses it, moved out, then the account deleted) or checked
/// transfer (a third account checked).
fn random_requests(
    rng: &mut StdRng,
    table: &str,
    accounts: &[String],
    guess: &mut BTreeMap<String, i64>,
    modes: Modes,
) -> Vec<Value> {
    let pick = |rng: &mut StdRng, not: &[&String]| loop {
        let x = &accounts[rng.random_range(0..accounts.len())];
        if !not.contains(&x) {
            return x.clone();
        }
    };
    let a = pick(rng, &[]);
    let b = pick(rng, &[&a]);
    match rng.random_range(0..12) {
        0..=5 => {
            let amount = rng.random_range(1..=60);
            vec![debit(table, &a, amount), credit(table, &b, amount)]
        }
        6 | 7 => {
            let amount = rng.random_range(1..=40);
            let mut item = json!({"PK":b,"balance":amount});
            let bytes = pad(rng, modes);
            if bytes > 0 {
                item["pad"] = json!("p".repeat(bytes));
            }
            vec![
                debit(table, &a, amount),
                json!({"Put":{"TableName":table,"Item":item,
                    "ConditionExpression":"attribute_not_exists(PK)"}}),
            ]
        }
        8 | 9 => {
            let amount = rng.random_range(1..=30);
            let c = pick(rng, &[&a, &b]);
            vec![
                debit(table, &a, amount),
                credit(table, &b, amount),
                check(table, &c),
            ]
        }
        _ => {
            let all = guess.get(&a).copied().unwrap_or(INITIAL);
            guess.insert(a.clone(), 0);
            vec![
                json!({"Delete":{"TableName":table,"Key":{"PK":a},
                    "ConditionExpression":"#b = :all",
                    "ExpressionAttributeNames":{"#b":"balance"},
                    "ExpressionAttributeValues":{":all":all}}}),
                credit(table, &b, all),
            ]
        }
    }
}

/// A transfer that also checks every other account: with large accounts, more bytes than one
/// chunk takes.
fn audit(rng: &mut StdRng, table: &str, accounts: &[String]) -> Vec<Value> {
    let amount = rng.random_range(1..=10);
    let mut requests = vec![
        debit(table, &accounts[0], amount),
        credit(table, &accounts[1], amount),
    ];
    requests.extend(accounts[2..].iter().map(|c| check(table, c)));
    requests
}

pub fn plan(seed: u64, table: &str, numeric: &str) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let prefix = format!("c{seed}");
    let modes = Modes::from_rng(&mut rng);
    let n = if modes.wide {
        rng.random_range(10..=12)
    } else {
        rng.random_range(3..=6)
    };
    let accounts: Vec<String> = (0..n).map(|i| format!("{prefix}-a{i}")).collect();
    let mut existing = BTreeMap::new();
    for a in &accounts {
        if modes.wide || rng.random_bool(0.8) {
            let bytes = pad(&mut rng, modes);
            existing.insert(a.clone(), bytes);
        }
    }
    let pool = modes.numbers.then(|| seed % 1_000_000_007 + 1);
    let mut guess = BTreeMap::new();
    let count = rng.random_range(COORDINATORS..=COORDINATORS + 2);
    let mut messages = Vec::new();
    for t in 0..count {
        let tx_id = format!("{prefix}-t{t}");
        let mut requests = if modes.wide && t == 0 {
            audit(&mut rng, table, &accounts)
        } else {
            random_requests(&mut rng, table, &accounts, &mut guess, modes)
        };
        requests.push(journal(table, &format!("{prefix}-j{t}")));
        if let Some(id) = pool {
            requests.push(pool_add(&mut rng, numeric, id));
        }
        if rng.random_bool(0.5) {
            requests.reverse();
        }
        let mut body = json!({"txId":tx_id,"requests":requests});
        // Half the transactions carry the producer's issue time (hashed with the requests).
        if rng.random_bool(0.5) {
            body["issuedAt"] = json!(dynamodb_exactly_once::__private::epoch_millis());
        }
        messages.push(Msg { tx_id, body });
    }
    let mut deliveries = vec![Vec::new(); COORDINATORS];
    for (i, m) in messages.iter().enumerate() {
        deliveries[i % COORDINATORS].push(m.clone());
        if rng.random_bool(0.3) {
            // A producer retry: the same message delivered to another coordinator.
            let other = (i + rng.random_range(1..COORDINATORS)) % COORDINATORS;
            deliveries[other].push(m.clone());
        }
    }
    Plan {
        prefix,
        modes,
        accounts,
        existing,
        deliveries,
        messages,
        pool,
    }
}

/// The accounts there before the schedule (and the pool item), as the plan says.
pub async fn seed_plan(client: &aws_sdk_dynamodb::Client, table: &str, plan: &Plan) {
    use aws_sdk_dynamodb::types::AttributeValue;
    for (pk, bytes) in &plan.existing {
        let mut put = client
            .put_item()
            .table_name(table)
            .item("PK", AttributeValue::S(pk.clone()))
            .item("balance", AttributeValue::N(INITIAL.to_string()));
        if *bytes > 0 {
            put = put.item("pad", AttributeValue::S("p".repeat(*bytes)));
        }
        put.send().await.expect("seed an account");
    }
}
