//! Hostile plugin behaviour fails only the entry that misbehaves, with a
//! clear error, leaving no write, identically on independent runtimes.

mod support;

use support::{Replica, fixture, text};
use wasmraft_runtime::{EntryError, Plugin, PluginEngine, PluginError, QueryError};

fn hostile() -> Replica {
    Replica::new(&fixture("fixture_hostile"))
}

fn trap_message(r: &Result<Vec<u8>, EntryError>) -> String {
    match r {
        Err(EntryError::Trap(m)) => m.clone(),
        other => panic!("expected a trap, got {other:?}"),
    }
}

#[test]
fn each_hostile_entry_fails_alone_and_its_neighbours_apply() {
    let mut r = hostile();
    let batch = r.apply(&[
        text("put a 1"),
        text("trap"),
        text("put b 2"),
        text("loop"),
        text("put c 3"),
        text("oom"),
        text("put d 4"),
        text("deep"),
        text("put e 5"),
    ]);
    let o = &batch.outcomes;
    assert_eq!(o.len(), 9);
    for i in [0, 2, 4, 6, 8] {
        assert_eq!(o[i], Ok(text("ok")), "entry {i}");
    }
    assert!(trap_message(&o[1]).contains("deliberate trap"), "{:?}", o[1]);
    assert!(trap_message(&o[3]).contains("out of fuel"), "{:?}", o[3]);
    assert!(trap_message(&o[5]).contains("memory limit"), "{:?}", o[5]);
    assert!(trap_message(&o[7]).contains("stack overflow"), "{:?}", o[7]);
    for (k, v) in [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("e", "5")] {
        assert_eq!(r.query(k.as_bytes()).unwrap(), text(v));
    }
    // The cluster keeps serving after all that.
    assert_eq!(r.apply_one(text("put f 6")), Ok(text("ok")));
}

#[test]
fn a_failed_entry_leaves_no_write() {
    let mut r = hostile();
    let batch = r.apply(&[text("put x before"), text("put-then-err x err"), text("put-then-trap y trap")]);
    assert_eq!(batch.outcomes[0], Ok(text("ok")));
    assert_eq!(batch.outcomes[1], Err(EntryError::Rejected("refused after writing".into())));
    assert!(trap_message(&batch.outcomes[2]).contains("trap after writing"));
    assert_eq!(r.query(b"x").unwrap(), text("before"));
    assert_eq!(r.query(b"y").unwrap(), text("<none>"));
    assert_eq!(batch.writes.len(), 1, "only the successful entry wrote: {:?}", batch.writes);
}

#[test]
fn events_of_failed_entries_are_dropped_and_the_rest_keep_their_index() {
    let mut r = hostile();
    let batch = r.apply(&[text("emit k1 v1"), text("trap"), text("emit k2 v2")]);
    let got: Vec<(u64, Vec<u8>)> = batch.events.iter().map(|e| (e.index, e.key.clone())).collect();
    assert_eq!(got, vec![(1, text("k1")), (3, text("k2"))]);
}

#[test]
fn two_independent_runtimes_reach_identical_outcomes_and_state() {
    let commands: Vec<Vec<u8>> = (0..40)
        .map(|i| match i % 8 {
            0 => text("trap"),
            3 => text("loop"),
            5 => format!("put-then-err k{i} x").into_bytes(),
            6 => text("oom"),
            _ => format!("put k{i} v{i}").into_bytes(),
        })
        .collect();
    let mut a = hostile();
    let mut b = hostile();
    // Different batching on each replica: outcomes must not depend on it.
    let out_a: Vec<_> = commands.chunks(7).flat_map(|c| a.apply(c).outcomes).collect();
    let out_b: Vec<_> = commands.chunks(3).flat_map(|c| b.apply(c).outcomes).collect();
    assert_eq!(out_a, out_b);
    assert_eq!(a.state, b.state);
    assert_eq!(a.state.0.len(), 20, "the 20 plain puts, and nothing of the failed entries");
}

#[test]
fn a_memory_bomb_hits_the_limit() {
    let mut r = hostile();
    let out = r.apply_one(text("oom"));
    assert!(trap_message(&out).contains("memory limit of 16777216 bytes exceeded"), "{out:?}");
}

#[test]
fn a_huge_result_is_returned_whole() {
    let mut r = hostile();
    assert_eq!(r.apply_one(text("big 1000000")).unwrap().len(), 1_000_000);
}

#[test]
fn queries_cannot_write_or_escape_their_budget() {
    let r = hostile();
    assert_eq!(r.query(b"missing").unwrap(), text("<none>"));
    match r.query(b"write k") {
        Err(QueryError::Trap(m)) => assert!(m.contains("read-only"), "{m}"),
        other => panic!("a write during a query must trap, got {other:?}"),
    }
    match r.query(b"loop") {
        Err(QueryError::Trap(m)) => assert!(m.contains("out of fuel"), "{m}"),
        other => panic!("an endless query must run out of fuel, got {other:?}"),
    }
    assert_eq!(r.query(b"k").unwrap(), text("<none>"), "the attempted write left nothing");
    assert!(r.state.0.is_empty());
}

#[test]
fn malformed_commands_get_a_clear_error_and_change_nothing() {
    let mut r = hostile();
    assert!(matches!(r.apply_one(text("nonsense")), Err(EntryError::Invalid(m)) if m.contains("unknown verb")));
    assert!(matches!(r.apply_one(vec![0xff, 0xfe]), Err(EntryError::Invalid(m)) if m.contains("UTF-8")));
    assert!(r.state.0.is_empty());
}

#[test]
fn bad_binaries_are_refused_with_clear_errors() {
    let engine = PluginEngine::new(support::test_config()).unwrap();
    let err = Plugin::load(&engine, b"not wasm at all").unwrap_err();
    assert!(matches!(err, PluginError::Invalid(ref m) if m.contains("not WebAssembly")), "{err}");

    let mut truncated = fixture("fixture_hostile");
    truncated.truncate(truncated.len() / 2);
    assert!(matches!(Plugin::load(&engine, &truncated), Err(PluginError::Invalid(_))));

    // A core module that exports nothing of the world.
    let bare_module = b"\0asm\x01\0\0\0".to_vec();
    let err = Plugin::load(&engine, &bare_module).unwrap_err();
    assert!(matches!(err, PluginError::Incompatible(ref m) if m.contains("apply")), "{err}");
}

/// A core module (as `cargo build --target wasm32-unknown-unknown` makes
/// it) cut anywhere is refused with an error, never a panic: the component
/// encoder once panicked on one.
#[test]
fn a_truncated_core_module_is_refused_wherever_it_is_cut() {
    let engine = PluginEngine::new(support::test_config()).unwrap();
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugins/target/wasm32-unknown-unknown/release/counter.wasm");
    let module = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (run `cargo xtask plugins` first)", path.display()));
    assert!(Plugin::load(&engine, &module).is_ok(), "the whole module loads");
    let cuts: Vec<usize> = (1..64).map(|i| module.len() * i / 64).chain([9, 10, 11, 12, 20, 40, module.len() - 1]).collect();
    for cut in cuts {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Plugin::load(&engine, &module[..cut])));
        match result {
            Ok(Err(PluginError::Invalid(_) | PluginError::Incompatible(_))) => {}
            Ok(other) => panic!("cut at {cut} of {}: {:?}", module.len(), other.map(|_| "loaded")),
            Err(_) => panic!("cut at {cut} of {}: the loader panicked", module.len()),
        }
    }
}

#[test]
fn a_component_with_unknown_imports_is_refused_naming_them() {
    let engine = PluginEngine::new(support::test_config()).unwrap();
    let wat = r#"(component
        (import "acme:net/socket" (instance (export "open" (func))))
    )"#;
    let bytes = wat_to_component(wat);
    let err = Plugin::load(&engine, &bytes).unwrap_err();
    assert!(matches!(err, PluginError::Incompatible(_)), "{err}");
    assert!(err.to_string().contains("acme:net/socket"), "{err}");
}

/// Encodes a tiny component by hand-written text, through wasmtime's parser.
fn wat_to_component(wat: &str) -> Vec<u8> {
    wat::parse_str(wat).expect("valid component text")
}
