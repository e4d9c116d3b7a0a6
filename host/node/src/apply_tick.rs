//! The apply side of timers: a tick entry runs the plugin's `tick`, its
//! writes (the timer record among them) are stored with its index, and the
//! wake-up they leave is published to the Raft loop before the loop hears
//! that the index applied.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use wasmraft_raft::LogId;
use wasmraft_runtime::{EntryError, StateView, TickInput, TimerRecord};
use wasmraft_storage::{AppliedRecords, StateWrite};

use crate::apply::ApplyWorker;
use crate::error::Error;
use crate::node::Applied;
use crate::metrics::bump;
use crate::state_machine::StorageView;

impl ApplyWorker {
    /// Applies the tick at `at`, alone in its batch.
    pub(crate) fn apply_tick(
        &mut self,
        at: LogId,
        now_ms: u64,
        grace_until_ms: u64,
        renewals: Vec<(Vec<u8>, u64)>,
    ) -> Result<(), String> {
        let input = TickInput { index: at.index.0, term: at.term.0, now_ms, grace_until_ms, renewals };
        let view: Arc<dyn StateView> = Arc::new(StorageView(self.storage.apply_reader()));
        let batch = self.state_machine.tick(view, &input).map_err(|f| f.0)?;
        bump(&self.metrics.ticks);
        self.metrics.plugin_fuel.fetch_add(batch.fuel_used, Relaxed);
        if let Some(why) = &batch.failed {
            bump(&self.metrics.tick_failures);
            if matches!(why, EntryError::Trap(_)) {
                bump(&self.metrics.plugin_traps);
            }
            tracing::warn!(index = at.index.0, now_ms = batch.now_ms, error = %why,
                "the plugin's tick failed: its writes are dropped, its wake-up stays, and the leader tries again in a second");
        }
        let records = AppliedRecords { log_time_ms: Some(batch.now_ms), ..AppliedRecords::default() };
        let no_sessions: [(u64, Option<&[u8]>); 0] = [];
        self.storage
            .apply_with_records(
                at,
                batch.writes.iter().map(|w| StateWrite { key: &w.key, value: w.value.as_deref() }),
                no_sessions,
                &records,
            )
            .map_err(|e| e.to_string())?;
        if let Some(change) = TimerRecord::in_writes(&batch.writes)? {
            self.wake.publish(change.and_then(|r| r.wake_at_ms));
        }
        if batch.failed.is_some() {
            self.wake.failed_at(at.index.0);
        }
        self.last_applied = at;
        if let Some((term, replies)) = self.renewal_waiters.remove(&at.index) {
            for (reply, answer) in replies.into_iter().zip(batch.renewed) {
                let _ = reply.send(if term != at.term {
                    Err(Error::ProposalDropped)
                } else {
                    answer.map(|response| Applied { index: at.index.0, response }).map_err(Error::from)
                });
            }
        }
        self.finish_applied(at.index, batch.events);
        Ok(())
    }

    /// Publishes the wake-up stored now (after a start, a deploy or a
    /// snapshot install): none unless the running machine has timers.
    pub(crate) fn publish_stored_wake_up(&self) -> Result<(), String> {
        let wake = if self.state_machine.has_timers() {
            let view = StorageView(self.storage.apply_reader());
            TimerRecord::read(&view).map_err(|e| format!("reading the timer record: {}", e.0))?.and_then(|r| r.wake_at_ms)
        } else {
            None
        };
        self.wake.publish(wake);
        Ok(())
    }
}
