//! Reminders that fire at a log time: the SDK's timers
//! (`wasmraft:plugin@0.2.0`) on a small example.
//!
//! | command | answer |
//! | --- | --- |
//! | `remind AT TEXT` | schedules TEXT for log time AT (ms since the epoch); answers its id |
//! | `cancel ID` | drops a pending reminder; answers `cancelled` |
//!
//! When log time reaches a reminder, the tick emits a `reminder/ID` event
//! with its text (`wasmraft watch reminder/`) and deletes it. The query
//! `pending` lists the pending ones, one `ID AT TEXT` per line, in time
//! order.

use wasmraft_sdk::timer::Deadlines;
use wasmraft_sdk::{ApplyError, Entry, QueryError, StateMachine, Tick, bail, events, store};

/// At most this many reminders fire per tick: a tick does bounded work.
const PER_TICK: usize = 64;

struct Reminders;

fn due() -> Deadlines {
    Deadlines::new(b"due/")
}

fn text_key(id: &[u8]) -> Vec<u8> {
    [b"text/", id].concat()
}

impl StateMachine for Reminders {
    fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> {
        let command = entry.text()?;
        let (verb, rest) = command.split_once(' ').unwrap_or((command, ""));
        match verb {
            "remind" => {
                let (at, text) = rest.split_once(' ').unwrap_or((rest, ""));
                let at: u64 = at.parse()?;
                // The entry's index: unique, and the same on every replica.
                let id = format!("{:016x}", entry.index);
                store::put(&text_key(id.as_bytes()), format!("{at} {text}").as_bytes());
                due().set(id.as_bytes(), at);
                due().rearm();
                Ok(id.into_bytes())
            }
            "cancel" => {
                let Some(record) = store::get(&text_key(rest.as_bytes())) else {
                    bail!(rejected, "no pending reminder {rest}");
                };
                let at = String::from_utf8_lossy(&record).split(' ').next().unwrap_or_default().parse().unwrap_or(0);
                store::delete(&text_key(rest.as_bytes()));
                due().remove(rest.as_bytes(), at);
                due().rearm();
                Ok(b"cancelled".to_vec())
            }
            other => bail!(invalid, "unknown command {other:?}: remind AT TEXT | cancel ID"),
        }
    }

    fn query(request: &[u8]) -> Result<Vec<u8>, QueryError> {
        if request != b"pending" {
            return Err(QueryError::invalid("the query is `pending`"));
        }
        let mut out = String::new();
        for (_, id) in due().due(u64::MAX, usize::MAX) {
            let record = store::get(&text_key(&id)).unwrap_or_default();
            out.push_str(&format!("{} {}\n", String::from_utf8_lossy(&id), String::from_utf8_lossy(&record)));
        }
        Ok(out.into_bytes())
    }

    fn tick(tick: &Tick) -> Result<Vec<Result<Vec<u8>, ApplyError>>, ApplyError> {
        let due_now = due().due(tick.now_ms, PER_TICK);
        for (at, id) in &due_now {
            let record = store::get(&text_key(id)).unwrap_or_default();
            let text = String::from_utf8_lossy(&record).split_once(' ').map(|(_, t)| t.to_string()).unwrap_or_default();
            events::emit(&[b"reminder/", &id[..]].concat(), text.as_bytes());
            store::delete(&text_key(id));
            due().remove(id, *at);
        }
        // More than PER_TICK were due: the wake-up goes to the next one,
        // already past, so the host ticks again at once.
        due().rearm();
        Ok(tick.renewals.iter().map(|_| Err(ApplyError::rejected("reminders take no keep-alives"))).collect())
    }
}

wasmraft_sdk::export!(Reminders);

#[cfg(test)]
mod tests {
    use wasmraft_sdk::testing::TestHost;
    use wasmraft_sdk::timer;

    use super::Reminders;

    #[test]
    fn reminders_fire_in_time_order_once_log_time_reaches_them() {
        let mut host = TestHost::<Reminders>::new();
        host.set_time_ms(1_000);
        let late = host.apply("remind 5000 call ann").unwrap();
        let early = host.apply("remind 3000 water the plants").unwrap();
        let dropped = host.apply("remind 4000 never").unwrap();
        assert_eq!(host.apply(format!("cancel {}", String::from_utf8(dropped).unwrap())).unwrap(), b"cancelled");
        assert_eq!(timer::next(), Some(3_000));
        assert_eq!(host.advance_to(2_999), None, "nothing due yet");
        assert_eq!(host.advance_to(3_000), Some(Ok(())));
        let fired = host.take_events();
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].key, [b"reminder/", &early[..]].concat());
        assert_eq!(fired[0].payload, b"water the plants");
        assert_eq!(timer::next(), Some(5_000));
        let pending = String::from_utf8(host.query("pending").unwrap()).unwrap();
        assert_eq!(pending, format!("{} 5000 call ann\n", String::from_utf8(late).unwrap()));
        assert_eq!(host.advance_to(9_000), Some(Ok(())));
        assert_eq!(host.take_events().len(), 1);
        assert_eq!(timer::next(), None, "nothing left: no wake-up");
        assert!(host.apply("remind soon x").is_err());
    }

    #[test]
    fn a_tick_fires_at_most_a_bounded_number_and_asks_for_more() {
        let mut host = TestHost::<Reminders>::new();
        for i in 0..(super::PER_TICK + 6) {
            host.apply(format!("remind {} r{i}", 100 + i)).unwrap();
        }
        assert_eq!(host.advance_to(10_000), Some(Ok(())));
        assert_eq!(host.take_events().len(), super::PER_TICK);
        assert_eq!(timer::next(), Some(100 + super::PER_TICK as u64), "the next one, already due");
        assert_eq!(host.advance_to(10_000), Some(Ok(())));
        assert_eq!(host.take_events().len(), 6);
        assert_eq!(host.advance_to(10_000), None);
    }
}
