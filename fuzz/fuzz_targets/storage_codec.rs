//! Arbitrary bytes read from disk: every record decoder answers with a
//! value or a corruption error, never a panic or an abort.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wasmraft_storage::fuzzing::decode_any(data);
});
