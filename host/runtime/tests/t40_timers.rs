//! `wasmraft:plugin@0.2.0`'s timers, on the `fixture_timer` plugin: the
//! wake-up is a keyspace record written with its entry (and undone with a
//! failed one), hidden from the plugin's store, and a tick runs the plugin
//! only when due, like an entry (a failed or trapping tick leaves no write
//! of the plugin's), while its clock never goes back. 0.1.0 plugins load
//! beside it and are never ticked.

mod support;

use support::{Replica, fixture, text};
use wasmraft_runtime::{CONTRACT_V1, CONTRACT_V2, EntryError, TIMER_KEY, TimerRecord};

fn timer_plugin() -> Replica {
    Replica::new(&fixture("fixture_timer"))
}

#[test]
fn both_contracts_load_and_say_which_they_are() {
    let r = timer_plugin();
    assert_eq!(r.applier.plugin().info().contract, CONTRACT_V2);
    assert_eq!(r.applier.plugin().info().name, "fixture-timer");
    let old = Replica::new(&fixture("fixture_ambient"));
    assert_eq!(old.applier.plugin().info().contract, CONTRACT_V1);
}

#[test]
fn a_wake_up_is_written_with_its_entry_and_undone_with_a_failed_one() {
    let mut r = timer_plugin();
    assert_eq!(r.apply_one(text("timer")), Ok(text("none")));
    let batch = r.apply(&[text("wake 5000"), text("wake-then-fail 9000"), text("timer")]);
    assert_eq!(batch.outcomes[0], Ok(text("ok")));
    assert!(matches!(batch.outcomes[1], Err(EntryError::Rejected(_))), "{:?}", batch.outcomes[1]);
    assert_eq!(batch.outcomes[2], Ok(text("5000")), "the failed entry's wake-up is gone");
    assert_eq!(TimerRecord::in_writes(&batch.writes), Ok(Some(Some(TimerRecord { wake_at_ms: Some(5000), clock_ms: 0 }))));
    assert_eq!(r.timer(), Some(TimerRecord { wake_at_ms: Some(5000), clock_ms: 0 }));
    assert_eq!(r.query(b"timer"), Ok(text("5000")), "queries read it too");
    assert_eq!(r.apply_one(text("cancel")), Ok(text("ok")));
    assert_eq!(r.timer(), Some(TimerRecord { wake_at_ms: None, clock_ms: 0 }));
}

#[test]
fn the_record_is_hidden_from_the_store_and_cannot_be_written_through_it() {
    let mut r = timer_plugin();
    r.apply(&[text("put a 1"), text("wake 100")]);
    assert!(r.state.0.contains_key(TIMER_KEY), "the record is in the keyspace");
    // Two pairs stored (a, and the record); the plugin sees one.
    assert_eq!(r.apply_one(text("see-record")), Ok(text("false 1 0 1")));
    let forged = r.apply_one(text("touch-record"));
    assert!(matches!(&forged, Err(EntryError::Trap(m)) if m.contains("timer record")), "{forged:?}");
    assert_eq!(r.timer(), Some(TimerRecord { wake_at_ms: Some(100), clock_ms: 0 }), "unchanged");
}

#[test]
fn a_tick_runs_the_plugin_only_when_due_and_its_clock_never_goes_back() {
    let mut r = timer_plugin();
    assert_eq!(r.apply_one(text("wake 5000")), Ok(text("ok")));
    // Not due: nothing runs, but the clock moves on.
    let early = r.tick(4000, &[]);
    assert!(!early.ran && early.events.is_empty());
    assert_eq!(r.timer(), Some(TimerRecord { wake_at_ms: Some(5000), clock_ms: 4000 }));
    // Due: the plugin ticks at that time and cancels its wake-up.
    let due = r.tick(5001, &[]);
    assert!(due.ran && due.failed.is_none(), "{due:?}");
    assert_eq!(due.events.len(), 1);
    assert_eq!(due.events[0].payload, text("5001"));
    assert_eq!(r.timer(), Some(TimerRecord { wake_at_ms: None, clock_ms: 5001 }));
    // A tick stamped earlier than the clock runs at the clock.
    r.apply(&[text("mode again"), text("wake 10")]);
    let behind = r.tick(3000, &[]);
    assert_eq!(behind.now_ms, 5001);
    assert_eq!(r.timer(), Some(TimerRecord { wake_at_ms: Some(6001), clock_ms: 5001 }), "woken again 1 s later");
}

#[test]
fn a_failing_or_trapping_tick_leaves_no_write_of_the_plugins() {
    for mode in ["fail", "trap"] {
        let mut r = timer_plugin();
        r.apply(&[text(&format!("mode {mode}")), text("lease x"), text("wake 100")]);
        let before = r.state.clone();
        let t = r.tick(200, &[("x", 150)]);
        assert!(t.ran && t.failed.is_some(), "{mode}: {t:?}");
        assert!(t.events.is_empty(), "{mode}");
        assert_eq!(t.renewed.len(), 1);
        assert!(t.renewed[0].is_err(), "{mode}: a failed tick renews nothing");
        // Only the host's clock moved: the wake-up stays, so it is retried.
        assert_eq!(t.writes.len(), 1, "{mode}: {:?}", t.writes);
        assert_eq!(r.timer(), Some(TimerRecord { wake_at_ms: Some(100), clock_ms: 200 }));
        let mut expected = before;
        expected.0.insert(TIMER_KEY.to_vec(), TimerRecord { wake_at_ms: Some(100), clock_ms: 200 }.encode());
        assert_eq!(r.state, expected, "{mode}");
    }
}

#[test]
fn keep_alives_run_the_tick_and_get_one_answer_each() {
    let mut r = timer_plugin();
    assert_eq!(r.apply_one(text("lease a")), Ok(text("ok")));
    // No wake-up set: keep-alives alone make the tick run.
    let t = r.tick(1000, &[("a", 900), ("b", 950)]);
    assert!(t.ran);
    assert_eq!(t.renewed, vec![Ok(text("a")), Err(EntryError::Rejected("not leased".into()))]);
}

#[test]
fn a_0_1_0_plugin_is_never_ticked_and_refuses_keep_alives() {
    let mut r = Replica::new(&fixture("fixture_ambient"));
    assert_eq!(r.apply_one(text("put k v")), Ok(text("ok")));
    let before = r.state.clone();
    let t = r.tick(1000, &[("a", 900)]);
    assert!(!t.ran && t.writes.is_empty(), "{t:?}");
    assert!(matches!(&t.renewed[..], [Err(EntryError::Rejected(_))]), "{:?}", t.renewed);
    assert_eq!(r.state, before);
}
