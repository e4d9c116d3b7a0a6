//! Determinism across replicas: for every fixture, two independent runtimes
//! (own engine, own `Plugin::load`, own keyspace) fed the same entries with
//! different batching end with identical outcomes, identical events and
//! byte-identical keyspaces.

mod support;

use prost::Message;
use support::{Replica, fixture, kv_plugin, text};
use wasmraft_proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest, compare, request_op::Request,
};
use wasmraft_runtime::{EntryError, MemoryView, PluginConfig};

type Outcome = Result<Vec<u8>, EntryError>;

/// What one replica ended with.
#[derive(Debug, PartialEq)]
struct Run {
    outcomes: Vec<Outcome>,
    /// (index, key, payload) of every published event.
    events: Vec<(u64, Vec<u8>, Vec<u8>)>,
    state: MemoryView,
}

fn run(wasm: &[u8], config: &PluginConfig, commands: &[Vec<u8>], batch: usize) -> Run {
    let mut r = Replica::with_config(wasm, config.clone());
    let mut run = Run { outcomes: Vec::new(), events: Vec::new(), state: MemoryView::default() };
    for chunk in commands.chunks(batch) {
        let b = r.apply(chunk);
        assert_eq!(b.outcomes.len(), chunk.len(), "one outcome per entry");
        run.outcomes.extend(b.outcomes);
        run.events.extend(b.events.into_iter().map(|e| (e.index, e.key, e.payload)));
    }
    run.state = r.state;
    run
}

/// Runs `commands` on independent runtimes batched one by one, by 3 and all
/// at once; all must agree. Returns the agreed run.
fn agree(wasm: &[u8], config: &PluginConfig, commands: &[Vec<u8>]) -> Run {
    let reference = run(wasm, config, commands, 1);
    for batch in [3, commands.len()] {
        let other = run(wasm, config, commands, batch);
        assert_eq!(other.outcomes, reference.outcomes, "outcomes differ with batches of {batch}");
        assert_eq!(other.events, reference.events, "events differ with batches of {batch}");
        assert_eq!(other.state, reference.state, "keyspaces differ with batches of {batch}");
    }
    reference
}

fn trap_message(o: &Outcome) -> &str {
    match o {
        Err(EntryError::Trap(m)) => m,
        other => panic!("expected a trap, got {other:?}"),
    }
}

fn hostile() -> Vec<u8> {
    fixture("fixture_hostile")
}

#[test]
fn hostile_fixture_is_deterministic_whatever_the_batching() {
    let commands: Vec<Vec<u8>> = [
        "put a 1", "trap", "emit e1 x", "put-then-err a 9", "put b 2", "loop", "put-then-trap c 3", "oom",
        "emit e2 y", "deep", "big 1000", "put a 3", "nonsense",
    ]
    .map(text)
    .to_vec();
    let r = agree(&hostile(), &support::test_config(), &commands);
    let ok: Vec<usize> = (0..commands.len()).filter(|&i| r.outcomes[i].is_ok()).collect();
    assert_eq!(ok, [0, 2, 4, 8, 10, 11], "{:?}", r.outcomes);
    let expected: MemoryView = MemoryView([(text("a"), text("3")), (text("b"), text("2"))].into_iter().collect());
    assert_eq!(r.state, expected);
    assert_eq!(r.events.iter().map(|e| e.0).collect::<Vec<_>>(), [3, 9]);
}

#[test]
fn a_panic_in_the_middle_of_a_batch_fails_that_entry_only() {
    let commands = [text("put a 1"), text("put-then-trap b 2"), text("put c 3")];
    let r = agree(&hostile(), &support::test_config(), &commands);
    assert_eq!(r.outcomes[0], Ok(text("ok")));
    assert!(trap_message(&r.outcomes[1]).contains("trap after writing"), "{:?}", r.outcomes[1]);
    assert_eq!(r.outcomes[2], Ok(text("ok")));
    let expected: MemoryView = MemoryView([(text("a"), text("1")), (text("c"), text("3"))].into_iter().collect());
    assert_eq!(r.state, expected, "the writes around the panic stay, the panicking entry's are gone");
}

#[test]
fn a_plugin_that_writes_then_errs_leaves_nothing() {
    let commands = [text("put a 1"), text("put-then-err a 2"), text("put-then-err b 2")];
    let r = agree(&hostile(), &support::test_config(), &commands);
    assert_eq!(r.outcomes[1], Err(EntryError::Rejected("refused after writing".into())));
    assert_eq!(r.state, MemoryView([(text("a"), text("1"))].into_iter().collect()));
}

/// Outcomes with batches of 1, 2, 3, 7 and all at once, and with the
/// runtime restarted (a new applier, as after a node restart) every 5
/// entries: all must agree with every entry applied alone on a fresh
/// instance, which for the two fixtures below is success.
fn agree_with_restarts(wasm: &[u8], config: &PluginConfig, commands: &[Vec<u8>]) -> Run {
    let reference = agree(wasm, config, commands);
    for batch in [2, 7] {
        assert_eq!(run(wasm, config, commands, batch), reference, "batches of {batch} differ");
    }
    let mut restarted = Run { outcomes: Vec::new(), events: Vec::new(), state: MemoryView::default() };
    for chunk in commands.chunks(5) {
        let mut r = Replica::with_config(wasm, config.clone());
        r.state = restarted.state.clone();
        r.skip_to(restarted.outcomes.len() as u64 + 1);
        for c in chunk {
            restarted.outcomes.push(r.apply_one(c.clone()));
        }
        restarted.state = r.state;
    }
    assert_eq!(restarted.outcomes, reference.outcomes, "a restarted runtime differs");
    assert_eq!(restarted.state, reference.state, "a restarted runtime differs");
    reference
}

#[test]
fn memory_left_behind_by_earlier_entries_does_not_change_later_outcomes() {
    // Each entry keeps 1 MiB in the instance's memory; 16 MiB is the limit.
    // A long-lived instance would trap after about 14 entries, at an entry
    // that depends on how the replica cut its batches.
    let commands = vec![text("leak 1024"); 40];
    let r = agree_with_restarts(&hostile(), &support::test_config(), &commands);
    assert!(r.outcomes.iter().all(|o| *o == Ok(text("ok"))), "{:?}", r.outcomes);
}

#[test]
fn memory_an_earlier_instance_wrote_reads_as_zero_in_the_next() {
    // Each entry checks that its fresh memory is zero, then fills it with
    // 0xff: sizes within and past the part of an instance's memory that the
    // engine keeps mapped and resets in place, and past what the first
    // entries grew to.
    let commands: Vec<Vec<u8>> = ["zeroed 16", "zeroed 200", "zeroed 1024", "zeroed 16", "zeroed 1536", "zeroed 200", "zeroed 1024"]
        .repeat(3)
        .into_iter()
        .map(text)
        .collect();
    let r = agree_with_restarts(&hostile(), &support::test_config(), &commands);
    assert!(r.outcomes.iter().all(|o| *o == Ok(text("ok"))), "{:?}", r.outcomes);
}

#[test]
fn fuel_that_grows_with_the_heap_does_not_change_later_outcomes() {
    // Each entry walks a list that grows by one node per entry run on the
    // same instance: about 1 M fuel alone, past the 20 M budget after some
    // 20 entries on one instance.
    let commands = vec![text("heap-walk 200000"); 40];
    let r = agree_with_restarts(&hostile(), &support::test_config(), &commands);
    assert!(r.outcomes.iter().all(|o| *o == Ok(text("ok"))), "{:?}", r.outcomes);
}

/// 32 MiB: the guest can build it once within the default 64 MiB of linear
/// memory, not twice.
const HUGE: usize = 32 << 20;

#[test]
fn a_32_mib_result_is_returned_whole_under_the_default_memory_limit() {
    // Nothing but linear memory bounds a response: the runtime lifts it
    // whole, for the node to store and answer.
    let commands = [text("put a 1"), format!("big {HUGE}").into_bytes(), text("put b 2")];
    let r = agree(&hostile(), &PluginConfig::default(), &commands);
    assert_eq!(r.outcomes[1].as_ref().map(Vec::len), Ok(HUGE));
    assert_eq!(r.outcomes[2], Ok(text("ok")));
}

#[test]
fn two_huge_results_that_do_not_fit_one_call_still_apply_when_rerun_alone() {
    // Together they exceed the 64 MiB limit, so the batch call traps; each
    // entry re-run alone fits. Batching does not change the outcome.
    let big = format!("big {HUGE}").into_bytes();
    let r = agree(&hostile(), &PluginConfig::default(), &[big.clone(), big, text("put b 2")]);
    assert_eq!(r.outcomes.iter().map(|o| o.as_ref().map(Vec::len)).collect::<Vec<_>>(), [Ok(HUGE), Ok(HUGE), Ok(2)]);
}

#[test]
fn a_result_the_memory_limit_cannot_hold_fails_that_entry_only() {
    let config = PluginConfig::default();
    let too_big = format!("big {}", config.memory_limit_bytes).into_bytes();
    let r = agree(&hostile(), &config, &[text("put a 1"), too_big, text("put b 2")]);
    assert!(trap_message(&r.outcomes[1]).contains("memory limit of 67108864 bytes exceeded"), "{:?}", r.outcomes[1]);
    assert_eq!(r.outcomes[0], Ok(text("ok")));
    assert_eq!(r.outcomes[2], Ok(text("ok")));
    assert_eq!(r.state.0.len(), 2);
}

fn ambient() -> Vec<u8> {
    fixture("fixture_ambient")
}

#[test]
fn std_clocks_trap_the_same_way_on_every_replica() {
    // wasm32-unknown-unknown's std has no clock: `SystemTime::now` and
    // `Instant::now` panic, a trap with the same message everywhere.
    let commands = [text("system-time"), text("put a 1"), text("instant"), text("put b 2")];
    let r = agree(&ambient(), &support::test_config(), &commands);
    for i in [0, 2] {
        let m = trap_message(&r.outcomes[i]);
        assert!(m.contains("time not implemented on this platform"), "entry {i}: {m}");
    }
    assert_eq!(r.state.0.len(), 2);
}

/// Documents a hazard rather than a guarantee. With no entropy source, std
/// seeds `RandomState` from the addresses of a stack and a heap byte, and
/// bumps the seed at every `RandomState::new()`. Every call runs on a fresh
/// instance, so entries applied alone all see the first order; but within a
/// batched call the second map is seeded differently, so the order depends on
/// how a replica cut its batches. Plugins must not let `HashMap` order reach
/// results or writes (use `BTreeMap`, or a fixed hasher). If this starts
/// failing, std changed how it seeds `RandomState` on this target.
#[test]
fn std_hashmap_order_depends_on_the_batching() {
    let config = support::test_config();
    let commands = [text("hashmap 16"), text("hashmap 16")];
    let single = run(&ambient(), &config, &commands, 1);
    assert_eq!(run(&ambient(), &config, &commands, 1), single, "the same history gives the same order");
    let order = String::from_utf8(single.outcomes[0].clone().unwrap()).unwrap();
    assert_eq!(order.split(',').count(), 16, "{order}");
    assert_eq!(single.outcomes[0], single.outcomes[1], "each entry alone ran on a fresh instance");

    let batched = run(&ambient(), &config, &commands, 2);
    assert_ne!(batched.outcomes, single.outcomes, "the second map of one call is seeded differently");

    // A replica restarted before the second entry agrees with one that was not.
    let mut restarted = Replica::with_config(&ambient(), config.clone());
    let second = restarted.apply(&commands[1..]).outcomes.remove(0);
    assert_eq!(second, single.outcomes[1]);
}

fn wasi_clock() -> Vec<u8> {
    fixture("fixture_wasi_clock")
}

/// The timestamp `support::Replica` gives the entry at `index`.
fn timestamp_ms(index: u64) -> u64 {
    1_700_000_000_000 + index
}

#[test]
fn wasi_clock_and_random_are_the_entry_s_own_on_every_replica() {
    let commands: Vec<Vec<u8>> = (0..6).map(|i| format!("tick {i}").into_bytes()).collect();
    // Independent runtimes and batchings agree: the same entry reads the
    // same clock and the same random bytes everywhere.
    let r = agree(&wasi_clock(), &support::test_config(), &commands);
    let mut randoms = Vec::new();
    for (i, o) in r.outcomes.iter().enumerate() {
        let index = i as u64 + 1;
        let out = o.as_ref().unwrap_or_else(|e| panic!("entry {index}: {e}"));
        assert_eq!(out.len(), 36, "wall s u64, wall ns u32, monotonic u64, 16 random bytes");
        let seconds = u64::from_be_bytes(out[0..8].try_into().unwrap());
        let nanos = u32::from_be_bytes(out[8..12].try_into().unwrap());
        assert_eq!(seconds * 1000 + u64::from(nanos) / 1_000_000, timestamp_ms(index), "wall clock of entry {index}");
        assert_eq!(nanos % 1_000_000, 0, "the entry's clock has ms resolution");
        randoms.push(out[20..36].to_vec());
        let mut key = text("clock/");
        key.extend_from_slice(&index.to_be_bytes());
        assert_eq!(r.state.0.get(&key), Some(out), "the values reached the keyspace");
    }
    let distinct: std::collections::BTreeSet<_> = randoms.iter().collect();
    assert_eq!(distinct.len(), randoms.len(), "different entries get different random bytes: {randoms:?}");
}

#[test]
fn counter_is_deterministic_whatever_the_batching() {
    let commands: Vec<Vec<u8>> = ["1", "2", "x", "18446744073709551615", "4", "", "10"].map(text).to_vec();
    let r = agree(&fixture("counter"), &support::test_config(), &commands);
    assert_eq!(r.outcomes[0], Ok(text("1")));
    assert!(matches!(r.outcomes[2], Err(EntryError::Invalid(_))));
    assert!(matches!(r.outcomes[3], Err(EntryError::Rejected(_))), "overflow: {:?}", r.outcomes[3]);
    assert_eq!(r.outcomes[6], Ok(text("17")));
    assert_eq!(r.state.0.get(b"total".as_slice()), Some(&17u64.to_be_bytes().to_vec()));
}

fn op(request: Request) -> Vec<u8> {
    RequestOp { request: Some(request) }.encode_to_vec()
}

fn put(key: &str, value: &str, prev_kv: bool) -> Vec<u8> {
    op(Request::RequestPut(PutRequest { key: text(key), value: text(value), prev_kv, ..Default::default() }))
}

#[test]
fn kv_is_deterministic_whatever_the_batching() {
    let cas = |expect: i64, key: &str, value: &str| {
        op(Request::RequestTxn(TxnRequest {
            compare: vec![Compare {
                key: text(key),
                result: compare::CompareResult::Equal as i32,
                target: compare::CompareTarget::Version as i32,
                target_union: Some(compare::TargetUnion::Version(expect)),
                ..Default::default()
            }],
            success: vec![RequestOp { request: Some(Request::RequestPut(PutRequest {
                key: text(key),
                value: text(value),
                ..Default::default()
            })) }],
            failure: vec![],
        }))
    };
    let commands = vec![
        put("a", "1", false),
        put("b", "1", true),
        put("a", "2", true),
        cas(2, "a", "3"),
        cas(2, "a", "4"), // fails its compare: a is at version 3
        put("", "empty key", false),
        op(Request::RequestDeleteRange(DeleteRangeRequest { key: text("b"), prev_kv: true, ..Default::default() })),
        vec![0xff, 0x01], // not a RequestOp
        op(Request::RequestRange(RangeRequest { key: text("a"), ..Default::default() })),
        put("c", "1", false),
    ];
    let r = agree(&kv_plugin(), &support::test_config(), &commands);
    assert!(matches!(r.outcomes[5], Err(EntryError::Invalid(_))), "{:?}", r.outcomes[5]);
    assert!(matches!(r.outcomes[7], Err(EntryError::Invalid(_))), "{:?}", r.outcomes[7]);
    assert_eq!(r.outcomes.iter().filter(|o| o.is_ok()).count(), 8);
    // \x00rev, a and c, and the history of the six revisions: a version
    // and a revision-log record each.
    assert_eq!(r.state.0.len(), 3 + 2 * 6, "{:?}", r.state.0.keys().collect::<Vec<_>>());
    assert_eq!(r.state.0.get(b"\x00rev".as_slice()), Some(&7u64.to_be_bytes().to_vec()));
}
