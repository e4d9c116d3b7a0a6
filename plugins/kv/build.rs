fn main() {
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
