//! Recording histories from concurrent clients.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use wasmraft_lincheck::{ClientId, KvInput, KvOutput, KvRecorder, Outcome};

use crate::{assert_illegal, check};

#[test]
fn outcomes_are_recorded_and_failed_operations_dropped() {
    let recorder = KvRecorder::new();
    let put = recorder.invoke(ClientId(1), KvInput::put("x", "1"));
    let lost = recorder.invoke(ClientId(2), KvInput::put("x", "2"));
    let rejected = recorder.invoke(ClientId(3), KvInput::put("x", "3"));
    let dropped = recorder.invoke(4, KvInput::get("x"));
    put.ok(KvOutput::Ok);
    lost.unknown();
    rejected.failed();
    drop(dropped); // e.g. a cancelled future: outcome unknown
    let in_flight = recorder.invoke(5, KvInput::get("x"));

    let history = recorder.history();
    assert_eq!(recorder.len(), 4);
    let ops = history.operations();
    assert_eq!(ops.len(), 4);
    assert_eq!(
        ops.iter().map(|op| op.client.0).collect::<Vec<_>>(),
        [1, 2, 4, 5]
    );
    assert!(
        matches!(ops[0].outcome, Outcome::Returned { at, output: KvOutput::Ok } if at >= ops[0].invoke)
    );
    assert!(ops[1..].iter().all(|op| op.is_unknown()));
    assert!(ops.windows(2).all(|w| w[0].invoke <= w[1].invoke));
    in_flight.ok(KvOutput::value("2")); // the lost put took effect
    assert!(!recorder.history().operations()[3].is_unknown());
    check(&recorder.history()).assert_ok();

    let dump = recorder.history().to_string();
    assert!(
        dump.starts_with("history: 4 operations, 2 with unknown outcome\n#0 c1 ["),
        "{dump}"
    );
    assert!(
        dump.contains("] put(\"x\", \"2\") -> ?\n") && dump.contains("..∞]"),
        "{dump}"
    );
    assert!(dump.contains("] get(\"x\") -> \"2\"\n"), "{dump}");
    // Had it read "absent" after put "1" was acknowledged, it would be stale.
    let op = recorder.invoke(6, KvInput::get("x"));
    op.ok(KvOutput::absent());
    assert_illegal(&recorder.history(), "x");
}

/// Threads against a store that applies under a lock (linearizable): the
/// recorded history passes.
#[test]
fn threads_against_a_linearizable_store_pass() {
    let recorder = KvRecorder::new();
    let store: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    std::thread::scope(|scope| {
        for client in 0..8u64 {
            let (recorder, store) = (recorder.clone(), Arc::clone(&store));
            scope.spawn(move || {
                for i in 0..200u64 {
                    let key = format!("k{}", (client + i) % 3);
                    if i % 2 == 0 {
                        let value = format!("{client}-{i}");
                        let op = recorder.invoke(client, KvInput::put(&key, &value));
                        store.lock().unwrap().insert(key, value);
                        op.ok(KvOutput::Ok);
                    } else {
                        let op = recorder.invoke(client, KvInput::get(&key));
                        let seen = store.lock().unwrap().get(&key).cloned();
                        op.ok(KvOutput::Value(seen));
                    }
                }
            });
        }
    });
    let history = recorder.history();
    assert_eq!(history.len(), 1600);
    check(&history).assert_ok();
}

/// A read served from a lagging replica (a deliberately stale read path) is
/// caught.
#[test]
fn a_stale_read_path_fails() {
    let recorder = KvRecorder::new();
    let mut leader: HashMap<&str, &str> = HashMap::new();
    let mut lagging_replica: HashMap<&str, &str> = HashMap::new();
    for value in ["1", "2"] {
        let op = recorder.invoke(1, KvInput::put("x", value));
        if value == "1" {
            lagging_replica.insert("x", value); // replication stops after "1"
        }
        leader.insert("x", value);
        op.ok(KvOutput::Ok);
    }
    let op = recorder.invoke(2, KvInput::get("x"));
    op.ok(KvOutput::Value(
        lagging_replica.get("x").map(|v| v.to_string()),
    ));
    assert_illegal(&recorder.history(), "x");
}

#[test]
fn recorder_and_handles_can_move_across_tasks() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<KvRecorder>();
    send_sync::<wasmraft_lincheck::OpHandle<KvInput, KvOutput>>();
}
