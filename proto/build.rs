fn main() {
    for p in ["wasmraft/v1/client.proto", "wasmraft/v1/raft.proto", "wasmraft/v1/admin.proto", "etcd/etcdserverpb/rpc.proto", "etcd-host/etcdserverpb/host.proto", "etcd-host/v3lockpb/v3lock.proto", "etcd-host/v3electionpb/v3election.proto", "etcd/mvccpb/kv.proto", "etcd/kvplugin/kvplugin.proto"] {
        println!("cargo:rerun-if-changed={p}");
    }
    let build = || tonic_prost_build::configure();
    build()
        .compile_protos(&["wasmraft/v1/client.proto", "wasmraft/v1/raft.proto", "wasmraft/v1/admin.proto"], &["."])
        .expect("compile wasmraft protos (needs protoc: apt-get install protobuf-compiler)");
    // etcd's files import each other relative to `etcd/`. The services only
    // the host serves live in `etcd-host/`, outside the KV plugin's sources.
    build()
        .compile_protos(
            &[
                "etcd/etcdserverpb/rpc.proto",
                "etcd-host/etcdserverpb/host.proto",
                "etcd-host/v3lockpb/v3lock.proto",
                "etcd-host/v3electionpb/v3election.proto",
                "etcd/mvccpb/kv.proto",
                "etcd/kvplugin/kvplugin.proto",
            ],
            &["etcd", "etcd-host"],
        )
        .expect("compile etcd protos");
}
