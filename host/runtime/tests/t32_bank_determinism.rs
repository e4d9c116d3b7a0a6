//! The bank example plugin is deterministic: independent runtimes fed the
//! same entries, batched differently, return the same outcomes and end with
//! byte-identical keyspaces.

mod support;

use std::sync::Arc;

use support::{Replica, fixture};
use wasmraft_runtime::{EntryError, EntryInput, PluginInfo};

fn bank() -> Replica {
    Replica::new(&fixture("bank"))
}

/// A fixed mix of commands: opens, deposits, withdrawals and transfers, many
/// of which overdraw, name missing accounts or are malformed.
fn commands() -> Vec<Vec<u8>> {
    const ACCOUNTS: u64 = 6;
    let mut seed = 7u64;
    let mut below = |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut out: Vec<String> = (0..ACCOUNTS).map(|i| format!(r#"{{"op":"open","account":"a{i}"}}"#)).collect();
    for i in 0..300 {
        let (a, b, amount) = (below(ACCOUNTS + 1), below(ACCOUNTS), 1 + below(80));
        out.push(match i % 10 {
            0..=1 => format!(r#"{{"op":"deposit","account":"a{a}","amount":{amount}}}"#),
            2 => format!(r#"{{"op":"withdraw","account":"a{a}","amount":{amount}}}"#),
            3 if i % 30 == 3 => "not json".to_string(),
            _ => format!(r#"{{"op":"transfer","from":"a{a}","to":"a{b}","amount":{amount}}}"#),
        });
    }
    out.into_iter().map(String::into_bytes).collect()
}

#[test]
fn differently_batched_replicas_end_byte_identical() {
    let commands = commands();
    let mut replicas = [bank(), bank(), bank()];
    let mut outcomes = Vec::new();
    for (replica, batch) in replicas.iter_mut().zip([1, 7, 64]) {
        outcomes.push(commands.chunks(batch).flat_map(|c| replica.apply(c).outcomes).collect::<Vec<_>>());
    }
    assert_eq!(outcomes[0], outcomes[1]);
    assert_eq!(outcomes[0], outcomes[2]);
    assert_eq!(replicas[0].state, replicas[1].state);
    assert_eq!(replicas[0].state, replicas[2].state);

    // The mix exercised every path, so the comparison means something.
    let count = |f: fn(&Result<Vec<u8>, EntryError>) -> bool| outcomes[0].iter().filter(|o| f(o)).count();
    assert!(count(|o| o.is_ok()) > 100, "{:?}", &outcomes[0][..20]);
    assert!(count(|o| matches!(o, Err(EntryError::Rejected(m)) if m.contains("insufficient funds"))) > 10);
    assert!(count(|o| matches!(o, Err(EntryError::Rejected(m)) if m.contains("no account"))) > 10);
    assert!(count(|o| matches!(o, Err(EntryError::Invalid(_)))) > 5);
    assert!(count(|o| matches!(o, Err(EntryError::Trap(_)))) == 0, "no entry may trap");

    // And the answers agree too.
    let a = replicas[0].query(br#"{"op":"accounts"}"#).unwrap();
    for r in &replicas[1..] {
        assert_eq!(r.query(br#"{"op":"accounts"}"#).unwrap(), a);
        assert_eq!(
            r.query(br#"{"op":"statement","account":"a1","limit":50}"#).unwrap(),
            replicas[0].query(br#"{"op":"statement","account":"a1","limit":50}"#).unwrap()
        );
    }
}

/// The SDK exports `migrate`; the bank's takes over only an empty keyspace or
/// an earlier bank's, and a refusal writes nothing.
#[test]
fn migrate_guards_the_keyspace() {
    let mut r = bank();
    assert!(r.applier.plugin().info().migrates, "plugins built with wasmraft-sdk export migrate");
    let previous = |name: &str| PluginInfo {
        name: name.into(),
        version: "0.1.0".into(),
        sdk_version: "0.1.0".into(),
        sha256: String::new(),
        migrates: false,
        wasi: false,
        contract: wasmraft_runtime::CONTRACT_V1.into(),
    };
    let at = EntryInput { index: 1, term: 1, timestamp_ms: 1_700_000_000_000, command: Vec::new() };
    let migrate = |r: &mut Replica, name: &str| {
        let view = Arc::new(r.state.clone());
        r.applier.migrate(view, &previous(name), &at).expect("no fatal failure")
    };
    assert_eq!(migrate(&mut r, "kv"), Ok(Vec::new()), "an empty keyspace is taken over as it is");
    r.apply_one(br#"{"op":"open","account":"a"}"#.to_vec()).unwrap();
    assert_eq!(migrate(&mut r, "bank"), Ok(Vec::new()));
    match migrate(&mut r, "kv") {
        Err(EntryError::Rejected(m)) => assert!(m.contains("\"kv\""), "{m}"),
        other => panic!("a keyspace another plugin wrote must be refused, got {other:?}"),
    }
}
