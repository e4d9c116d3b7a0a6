use wasmraft_sdk::{ApplyError, Entry, QueryError, StateMachine, store};

struct Counter;

impl StateMachine for Counter {
    // Each command is a number to add; the answer is the new total.
    fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> {
        let text = String::from_utf8_lossy(&entry.command);
        let by: u64 = text.trim().parse().map_err(|_| ApplyError::invalid("expected a number"))?;
        let total = store::get_u64(b"total").unwrap_or(0);
        let total = total.checked_add(by).ok_or_else(|| ApplyError::rejected("overflow"))?;
        store::put_u64(b"total", total);
        Ok(total.to_string().into_bytes())
    }

    fn query(_request: &[u8]) -> Result<Vec<u8>, QueryError> {
        Ok(store::get_u64(b"total").unwrap_or(0).to_string().into_bytes())
    }
}

wasmraft_sdk::export!(Counter);
