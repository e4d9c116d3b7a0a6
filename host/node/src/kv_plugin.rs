/// The default KV plugin (etcd v3 semantics), embedded so that a node runs
/// with no plugin supplied. Built from `plugins/kv` by `cargo xtask plugins`,
/// which also checks that this copy matches its sources.
pub const KV_PLUGIN: &[u8] = include_bytes!("../../../plugins/dist/kv.wasm");
