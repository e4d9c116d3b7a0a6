//! Project tasks. `cargo xtask examples` builds the plugins written in
//! other languages (see `examples.rs`); `c-bindings` and `componentize` are
//! its two C steps, for C plugins of one's own. `cargo xtask plugins [--update]`:
//!
//! 1. builds every guest crate of `plugins/` for `wasm32-unknown-unknown`
//!    (release profile of that workspace);
//! 2. turns each module into a component, in `plugins/target/components/`;
//! 3. checks that the KV plugin embedded in the host (`plugins/dist/kv.wasm`)
//!    was built from the current sources: `plugins/dist/kv.sources.sha256`
//!    records a hash of every file it is built from. With `--update` the
//!    fresh build replaces the embedded copy and the hash is rewritten.
//!
//! The embedded binary is compared by source hash rather than by bytes
//! because the same sources give different bytes with different compilers
//! (rustup's and Debian's, say).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

mod examples;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo run` gives the manifest's directory as it is now: the one baked
    // in at build time is wrong once a target directory shared between
    // clones (the CI cache) holds a build from another clone, which cargo
    // does not rebuild for the move.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from);
    let root = manifest_dir.parent().expect("xtask lives in the repo").to_path_buf();
    match args.first().map(String::as_str) {
        Some("plugins") => plugins(&root, args.iter().any(|a| a == "--update")),
        Some("examples") => examples::examples(&root),
        Some("c-bindings") => match &args[1..] {
            [wit, out] => examples::c_bindings(Path::new(wit), Path::new(out)).map(drop),
            _ => bail!("usage: cargo xtask c-bindings WIT_DIR OUT_DIR"),
        },
        Some("componentize") => match &args[1..] {
            [core, out] => examples::componentize_file(Path::new(core), Path::new(out)),
            _ => bail!("usage: cargo xtask componentize CORE_WASM OUT_WASM"),
        },
        Some("source-hash") => {
            println!("{}", source_hash(&root)?);
            Ok(())
        }
        _ => bail!(
            "usage: cargo xtask plugins [--update] | examples | c-bindings WIT_DIR OUT_DIR | componentize CORE OUT | source-hash"
        ),
    }
}

fn plugins(root: &Path, update: bool) -> anyhow::Result<()> {
    let ws = root.join("plugins");
    // A plugin that enables the SDK's `timers` feature builds on its own:
    // built with the rest, cargo would unify the feature into every SDK
    // plugin, making them all wasmraft:plugin@0.2.0 ones.
    let mut others = vec!["--workspace"];
    let mut timers = Vec::new();
    for package in WITH_TIMERS {
        others.extend(["--exclude", package]);
        timers.extend(["-p", package]);
    }
    build_guests(root, &ws, &others)?;
    build_guests(root, &ws, &timers)?;
    let out = ws.join("target/wasm32-unknown-unknown/release");
    let components = ws.join("target/components");
    std::fs::create_dir_all(&components)?;
    let mut built = Vec::new();
    for entry in std::fs::read_dir(&out)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let module = std::fs::read(&path)?;
            let component = wit_component::ComponentEncoder::default()
                .module(&module)
                .and_then(|e| e.validate(true).encode())
                .with_context(|| format!("componentizing {}", path.display()))?;
            let dest = components.join(path.file_name().expect("file name"));
            std::fs::write(&dest, &component)?;
            built.push(dest);
        }
    }
    built.sort();
    for b in &built {
        eprintln!("  {}", b.strip_prefix(root).unwrap_or(b).display());
    }

    let dist = root.join("plugins/dist");
    let hash_file = dist.join("kv.sources.sha256");
    let hash = source_hash(root)?;
    if update {
        std::fs::copy(components.join("wasmraft_kv.wasm"), dist.join("kv.wasm"))?;
        std::fs::write(&hash_file, format!("{hash}\n"))?;
        eprintln!("updated plugins/dist/kv.wasm (sources {hash})");
        return Ok(());
    }
    let recorded = std::fs::read_to_string(&hash_file).unwrap_or_default();
    if recorded.trim() != hash {
        bail!(
            "plugins/dist/kv.wasm is out of date with its sources (recorded {}, now {hash}); \
             run `cargo xtask plugins --update` and commit the result",
            recorded.trim()
        );
    }
    eprintln!("plugins/dist/kv.wasm matches its sources ({hash})");
    Ok(())
}

/// The plugins built with the SDK's `timers` feature.
const WITH_TIMERS: [&str; 2] = ["reminders", "wasmraft-kv"];

/// Builds `packages` of the guest workspace `ws` for wasm32.
fn build_guests(root: &Path, ws: &Path, packages: &[&str]) -> anyhow::Result<()> {
    // scripts/setup.sh points WASMRAFT_GUEST_CARGO at Debian's cargo when
    // rustup cannot provide the wasm32 target; that toolchain's directory then
    // comes first on PATH, for this build only.
    let guest_cargo = std::env::var("WASMRAFT_GUEST_CARGO").ok();
    let cargo = guest_cargo.clone().unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(ws).args(["build", "--locked", "--release", "--target", "wasm32-unknown-unknown"]).args(packages);
    // Guests always build into plugins/target, where the tests look, even
    // when CARGO_TARGET_DIR points the host build elsewhere (a CI cache).
    cmd.env("CARGO_TARGET_DIR", ws.join("target"));
    if let Some(dir) = guest_cargo.as_deref().and_then(|c| Path::new(c).parent()) {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", dir.display()))
            .env("RUSTC", dir.join("rustc"))
            .env("RUSTC_BOOTSTRAP", "1");
    }
    // Panic messages embed source paths: keep this machine's out of the
    // binaries (and the bytes the same wherever they are built).
    let cargo_home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo"));
    let flags = [
        format!("--remap-path-prefix={}=/wasmraft", root.display()),
        format!("--remap-path-prefix={}=/cargo", cargo_home.display()),
    ];
    cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
    if let Ok(extra) = std::env::var("WASMRAFT_GUEST_CARGO_ARGS") {
        cmd.args(extra.split_whitespace());
    }
    eprintln!("building plugins: {cmd:?}");
    let status = cmd.status().with_context(|| format!("cannot run {cargo}"))?;
    if !status.success() {
        bail!("building the plugins failed");
    }
    Ok(())
}

/// Every file the KV plugin is built from, in a stable order.
fn kv_sources(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for dir in ["wit", "sdk/guest", "plugins/kv", "proto/etcd"] {
        collect(&root.join(dir), &mut files)?;
    }
    files.push(root.join("plugins/Cargo.toml"));
    files.push(root.join("plugins/Cargo.lock"));
    files.sort();
    Ok(files)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name == "target" || name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

fn source_hash(root: &Path) -> anyhow::Result<String> {
    let mut h = Sha256::new();
    for f in kv_sources(root)? {
        let rel = f.strip_prefix(root).expect("under root").to_string_lossy().replace('\\', "/");
        h.update(rel.as_bytes());
        h.update([0]);
        h.update(std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?);
        h.update([0]);
    }
    Ok(hex::encode(h.finalize()))
}
