//! Failures that are not a deterministic function of the entry (the
//! wall-clock watchdog) stop the caller's apply loop instead of becoming
//! the entry's outcome; and compiled plugins are cached on disk, safely.

mod support;

use std::sync::Arc;

use support::{fixture, test_config};
use wasmraft_runtime::{Applier, EntryInput, MemoryView, Plugin, PluginConfig, PluginEngine};

fn entry(command: &str) -> EntryInput {
    EntryInput { index: 1, term: 1, timestamp_ms: 1, command: command.as_bytes().to_vec() }
}

#[test]
fn the_watchdog_makes_a_stalled_call_fatal_not_an_entry_outcome() {
    // Fuel high enough that the endless loop outlives the 200 ms watchdog.
    let config = PluginConfig { fuel_per_entry: u64::MAX / 4, watchdog_ms: 200, ..test_config() };
    let engine = PluginEngine::new(config).unwrap();
    let plugin = Plugin::load(&engine, &fixture("fixture_hostile")).unwrap();
    let mut applier = Applier::new(plugin).unwrap();
    let fatal = applier.apply(Arc::new(MemoryView::default()), &[entry("loop")]).unwrap_err();
    assert!(fatal.0.contains("watchdog"), "{fatal}");
}

#[test]
fn compiled_plugins_are_cached_and_a_corrupt_cache_entry_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let engine = PluginEngine::new(test_config()).unwrap();
    let wasm = fixture("fixture_hostile");
    let first = Plugin::load_cached(&engine, &wasm, Some(dir.path())).unwrap();
    let cached: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    let cwasm = cached.iter().find(|p| p.extension().is_some_and(|e| e == "cwasm")).expect("a compiled entry").clone();

    // Loaded from the cache: the same plugin, and it works.
    let second = Plugin::load_cached(&engine, &wasm, Some(dir.path())).unwrap();
    assert_eq!(first.info(), second.info());
    let mut applier = Applier::new(second).unwrap();
    let batch = applier.apply(Arc::new(MemoryView::default()), &[entry("put a 1")]).unwrap();
    assert!(batch.outcomes[0].is_ok());

    // A flipped byte fails the checksum: recompiled, never loaded.
    let mut bytes = std::fs::read(&cwasm).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&cwasm, &bytes).unwrap();
    let third = Plugin::load_cached(&engine, &wasm, Some(dir.path())).unwrap();
    let mut applier = Applier::new(third).unwrap();
    let batch = applier.apply(Arc::new(MemoryView::default()), &[entry("put a 1")]).unwrap();
    assert!(batch.outcomes[0].is_ok());
    assert_ne!(std::fs::read(&cwasm).unwrap(), bytes, "the corrupt entry was replaced");
}
