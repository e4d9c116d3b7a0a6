//! Arbitrary sequences of ticks, deliveries, forged messages, proposals and
//! reads to three Raft cores; the core's invariants are checked after every
//! step (`wasmraft_raft::fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wasmraft_raft::fuzzing::core_messages(data);
});
