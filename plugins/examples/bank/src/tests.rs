//! The ledger's rules, run natively against the SDK's in-memory host.

use serde_json::{Value, json};
use wasmraft_sdk::testing::TestHost;
use wasmraft_sdk::{ApplyError, PluginInfo, QueryError};

use super::Bank;

fn bank() -> TestHost<Bank> {
    TestHost::new()
}

fn run(host: &mut TestHost<Bank>, command: Value) -> Result<Value, ApplyError> {
    host.apply(command.to_string()).map(|r| serde_json::from_slice(&r).unwrap())
}

fn ask(host: &TestHost<Bank>, query: Value) -> Result<Value, QueryError> {
    host.query(query.to_string()).map(|r| serde_json::from_slice(&r).unwrap())
}

fn balance(host: &TestHost<Bank>, account: &str) -> u64 {
    ask(host, json!({"op": "balance", "account": account})).unwrap()["balance"].as_u64().unwrap()
}

fn open_with(host: &mut TestHost<Bank>, account: &str, amount: u64) {
    run(host, json!({"op": "open", "account": account})).unwrap();
    if amount > 0 {
        run(host, json!({"op": "deposit", "account": account, "amount": amount})).unwrap();
    }
}

fn rejected(r: Result<Value, ApplyError>, needle: &str) {
    match r {
        Err(ApplyError::Rejected(m)) => assert!(m.contains(needle), "{m:?} should mention {needle:?}"),
        other => panic!("expected a rejection mentioning {needle:?}, got {other:?}"),
    }
}

fn invalid(r: Result<Value, ApplyError>) {
    assert!(matches!(r, Err(ApplyError::Invalid(_))), "expected invalid, got {r:?}");
}

#[test]
fn open_deposit_withdraw_transfer() {
    let mut h = bank();
    assert_eq!(
        run(&mut h, json!({"op": "open", "account": "alice"})).unwrap(),
        json!({"account": "alice", "balance": 0})
    );
    open_with(&mut h, "bob", 0);
    assert_eq!(run(&mut h, json!({"op": "deposit", "account": "alice", "amount": 100})).unwrap()["balance"], 100);
    assert_eq!(run(&mut h, json!({"op": "withdraw", "account": "alice", "amount": 30})).unwrap()["balance"], 70);
    let t = run(&mut h, json!({"op": "transfer", "from": "alice", "to": "bob", "amount": 20})).unwrap();
    assert_eq!(t, json!([{"account": "alice", "balance": 50}, {"account": "bob", "balance": 20}]));
    assert_eq!(ask(&h, json!({"op": "accounts"})).unwrap(), json!({"accounts": {"alice": 50, "bob": 20}, "total": 70}));
}

#[test]
fn overdrafts_are_rejected_and_write_nothing() {
    let mut h = bank();
    open_with(&mut h, "alice", 10);
    open_with(&mut h, "bob", 5);
    let before = h.state();
    h.take_events();
    rejected(run(&mut h, json!({"op": "withdraw", "account": "alice", "amount": 11})), "insufficient funds");
    rejected(run(&mut h, json!({"op": "transfer", "from": "bob", "to": "alice", "amount": 6})), "insufficient funds");
    rejected(run(&mut h, json!({"op": "transfer", "from": "bob", "to": "carol", "amount": 1})), "no account");
    rejected(run(&mut h, json!({"op": "deposit", "account": "alice", "amount": u64::MAX})), "overflow");
    rejected(run(&mut h, json!({"op": "open", "account": "alice"})), "already exists");
    assert_eq!(h.state(), before);
    assert!(h.take_events().is_empty(), "refused entries publish nothing");
    // Exactly the whole balance may go.
    assert_eq!(run(&mut h, json!({"op": "withdraw", "account": "alice", "amount": 10})).unwrap()["balance"], 0);
}

#[test]
fn malformed_commands_are_invalid() {
    let mut h = bank();
    open_with(&mut h, "alice", 10);
    invalid(h.apply("not json").map(|_| Value::Null));
    invalid(run(&mut h, json!({"op": "steal", "account": "alice"})));
    invalid(run(&mut h, json!({"op": "deposit", "account": "alice"})));
    invalid(run(&mut h, json!({"op": "deposit", "account": "alice", "amount": -5})));
    invalid(run(&mut h, json!({"op": "deposit", "account": "alice", "amount": 0})));
    invalid(run(&mut h, json!({"op": "transfer", "from": "alice", "to": "alice", "amount": 1})));
    invalid(run(&mut h, json!({"op": "open", "account": "a/b"})));
    invalid(run(&mut h, json!({"op": "open", "account": ""})));
    assert_eq!(balance(&h, "alice"), 10);
}

#[test]
fn statements_list_the_newest_lines_first() {
    let mut h = bank();
    open_with(&mut h, "alice", 0);
    open_with(&mut h, "bob", 0);
    h.set_time_ms(5_000);
    for amount in 1..=30 {
        run(&mut h, json!({"op": "deposit", "account": "alice", "amount": amount})).unwrap();
    }
    run(&mut h, json!({"op": "transfer", "from": "alice", "to": "bob", "amount": 7})).unwrap();
    let s = ask(&h, json!({"op": "statement", "account": "alice", "limit": 3})).unwrap();
    let lines = s["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["kind"], "transfer_out");
    assert_eq!(lines[0]["counterparty"], "bob");
    assert_eq!(lines[0]["balance"], 465 - 7);
    assert_eq!(lines[1]["amount"], 30);
    assert_eq!(lines[2]["amount"], 29);
    assert!(lines[0]["timestamp_ms"].as_u64().unwrap() > 5_000);
    // The default page and the whole history.
    assert_eq!(ask(&h, json!({"op": "statement", "account": "alice"})).unwrap()["lines"].as_array().unwrap().len(), 20);
    let all = ask(&h, json!({"op": "statement", "account": "alice", "limit": 1000})).unwrap();
    assert_eq!(all["lines"].as_array().unwrap().len(), 31);
    let bob = ask(&h, json!({"op": "statement", "account": "bob"})).unwrap();
    assert_eq!(bob["lines"][0]["kind"], "transfer_in");
    assert_eq!(bob["lines"][0]["counterparty"], "alice");
}

#[test]
fn bad_queries_are_refused() {
    let mut h = bank();
    open_with(&mut h, "alice", 1);
    assert!(matches!(ask(&h, json!({"op": "balance", "account": "zed"})), Err(QueryError::Rejected(_))));
    assert!(matches!(ask(&h, json!({"op": "balance"})), Err(QueryError::Invalid(_))));
    assert!(matches!(
        ask(&h, json!({"op": "statement", "account": "alice", "limit": 5000})),
        Err(QueryError::Invalid(_))
    ));
}

#[test]
fn changes_are_published_on_the_account_key() {
    let mut h = bank();
    open_with(&mut h, "alice", 3);
    let events = h.take_events();
    assert_eq!(events.len(), 1, "open publishes nothing, the deposit once");
    assert_eq!(events[0].key, b"account/alice");
    assert_eq!(serde_json::from_slice::<Value>(&events[0].payload).unwrap(), json!({"account": "alice", "balance": 3}));
}

#[test]
fn migrate_takes_over_only_an_empty_or_bank_keyspace() {
    let mut h = bank();
    let info = |name: &str| PluginInfo { name: name.into(), version: "0.1.0".into(), sdk_version: String::new() };
    assert_eq!(h.migrate(&info("kv")), Ok(()));
    open_with(&mut h, "alice", 1);
    assert_eq!(h.migrate(&info("bank")), Ok(()));
    assert!(matches!(h.migrate(&info("kv")), Err(ApplyError::Rejected(m)) if m.contains("\"kv\"")));
}
