fn main() {
    for p in ["wasmraft/v1/client.proto", "wasmraft/v1/raft.proto", "wasmraft/v1/admin.proto", "etcd/etcdserverpb/rpc.proto", "etcd/etcdserverpb/host.proto", "etcd/mvccpb/kv.proto"] {
        println!("cargo:rerun-if-changed={p}");
    }
    let build = || tonic_prost_build::configure();
    build()
        .compile_protos(&["wasmraft/v1/client.proto", "wasmraft/v1/raft.proto", "wasmraft/v1/admin.proto"], &["."])
        .expect("compile wasmraft protos (needs protoc: apt-get install protobuf-compiler)");
    // etcd's files import each other relative to `etcd/`.
    build()
        .compile_protos(&["etcd/etcdserverpb/rpc.proto", "etcd/etcdserverpb/host.proto", "etcd/mvccpb/kv.proto"], &["etcd"])
        .expect("compile etcd protos");
}
