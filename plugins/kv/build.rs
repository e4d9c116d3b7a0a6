fn main() {
    // Memory layout for the Wasm build (the native build runs the unit tests).
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        // A 64 KiB stack instead of Rust's 1 MiB default: the plugin's data
        // starts within its first 2 pages, so a fresh instance (one per
        // apply call) touches and resets little. Its deepest recursion, a
        // txn nested as deep as the protobuf decoder admits, needs under
        // 32 KiB (t20_kv_semantics:
        // the_deepest_txn_the_plugin_decodes_runs_within_its_stack).
        println!("cargo:rustc-link-arg-cdylib=-zstack-size=65536");
        // 512 KiB of initial memory, most of it heap that the SDK's allocator
        // uses before it grows memory (each growth a system call for the host):
        // a batch of puts needs no growth. Untouched pages cost nothing, and the
        // host keeps the first 1 MiB of each instance's memory mapped.
        println!("cargo:rustc-link-arg-cdylib=--initial-memory=524288");
    }
    let root = "../../proto/etcd";
    let files = [
        format!("{root}/etcdserverpb/rpc.proto"),
        format!("{root}/mvccpb/kv.proto"),
        format!("{root}/kvplugin/kvplugin.proto"),
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    prost_build::Config::new()
        .compile_protos(&files, &[root])
        .expect("compile etcd protos (needs protoc)");
}
