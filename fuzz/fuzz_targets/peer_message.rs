//! Arbitrary bytes from a peer: decoded as a Raft message and converted for
//! the core, which must answer with a message or an error, never a panic.
#![no_main]

use prost::Message as _;
use wasmraft_proto::convert::raft::from_message;
use wasmraft_proto::v1::RaftMessage;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(wire) = RaftMessage::decode(data) {
        if let Ok(m) = from_message(wire) {
            assert!(m.term.0 <= wasmraft_raft::MAX_TERM && m.from != m.to && m.from.0 != 0);
        }
    }
});
