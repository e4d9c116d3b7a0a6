//! `cargo xtask examples`: builds the state machines of `examples/plugins/`
//! written in other languages into `plugins/target/components/`:
//!
//! - `c-ratelimit` → `c_ratelimit.wasm`: bindings from `wit-bindgen-c` (the
//!   library, so no CLI to install), Debian's `clang-14` for wasm32-wasi,
//!   then `wit-component`, as `wasm-tools component new` would;
//! - `python-poll` → `python_poll.wasm`: PyPI `componentize-py`;
//! - `js-leaderboard` → `js_leaderboard.wasm`: npm `componentize-qjs`.
//!
//! The Python and JavaScript tools come from the tools directory that
//! `scripts/setup.sh` fills (`WASMRAFT_TOOLS`, default
//! `${XDG_CACHE_HOME:-$HOME/.cache}/wasmraft-tools`). Every component must
//! import nothing but `wasmraft:plugin` interfaces: a plugin that imports
//! WASI is applied one entry per call, and these examples need none, so a
//! stray WASI import (C stdio, a missing `--stub-wasi`) fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

pub fn examples(root: &Path) -> anyhow::Result<()> {
    let out = root.join("plugins/target/components");
    let work = root.join("plugins/target/examples");
    std::fs::create_dir_all(&out)?;
    std::fs::create_dir_all(&work)?;
    let tools = tools_dir()?;
    let built = [
        ("c_ratelimit", build_c(root, &root.join("examples/plugins/c-ratelimit"), &work.join("c-ratelimit"))?),
        ("python_poll", build_python(root, &root.join("examples/plugins/python-poll"), &work, &tools)?),
        ("js_leaderboard", build_js(root, &root.join("examples/plugins/js-leaderboard"), &work, &tools)?),
    ];
    for (name, component) in built {
        let imports = check_imports(&component).with_context(|| format!("checking {name}"))?;
        let dest = out.join(format!("{name}.wasm"));
        std::fs::write(&dest, &component)?;
        eprintln!(
            "  {} ({} KB; imports {})",
            dest.strip_prefix(root).unwrap_or(&dest).display(),
            component.len() / 1024,
            imports.join(", ")
        );
    }
    Ok(())
}

/// Where `scripts/setup.sh` installs componentize-py and componentize-qjs.
fn tools_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("WASMRAFT_TOOLS") {
        return Ok(PathBuf::from(dir));
    }
    let cache = match std::env::var("XDG_CACHE_HOME") {
        Ok(c) if !c.is_empty() => PathBuf::from(c),
        _ => PathBuf::from(std::env::var("HOME").context("neither WASMRAFT_TOOLS nor HOME is set")?).join(".cache"),
    };
    Ok(cache.join("wasmraft-tools"))
}

fn tool(path: PathBuf) -> anyhow::Result<PathBuf> {
    if !path.exists() {
        bail!("{} is missing: run scripts/setup.sh first (it installs the example toolchains)", path.display());
    }
    Ok(path)
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let started = Instant::now();
    let status = cmd.status().with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    eprintln!("  ({:.1} s) {:?}", started.elapsed().as_secs_f64(), cmd.get_program());
    Ok(())
}

fn build_c(root: &Path, src: &Path, work: &Path) -> anyhow::Result<Vec<u8>> {
    eprintln!("building examples/plugins/c-ratelimit");
    // Bindings are generated, never committed: they always match wit/.
    let bindings = work.join("bindings");
    let mut inputs = vec![src.join("ratelimit.c")];
    inputs.extend(c_bindings(&root.join("wit"), &bindings)?);
    let module = work.join("ratelimit.core.wasm");
    let clang = std::env::var("WASMRAFT_CLANG").unwrap_or_else(|_| "clang-14".into());
    run(Command::new(&clang)
        .args(["--target=wasm32-wasi", "-O2", "-mexec-model=reactor", "-s", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(&bindings)
        .args(&inputs)
        .arg("-o")
        .arg(&module))
    .with_context(|| {
        format!(
            "compiling with {clang} (scripts/setup.sh installs clang-14 lld-14 wasi-libc libclang-rt-14-dev-wasm32)"
        )
    })?;
    componentize(&std::fs::read(&module)?).context("componentizing c-ratelimit")
}

/// `cargo xtask c-bindings WIT_DIR OUT_DIR`: the C bindings of the
/// `state-machine` world, as `wit-bindgen c WIT_DIR --world state-machine
/// --out-dir OUT_DIR` writes them. Returns the files to compile and link.
pub fn c_bindings(wit: &Path, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use wit_bindgen_core::wit_parser::Resolve;
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut resolve = Resolve::default();
    let (pkg, _) = resolve.push_path(wit).with_context(|| format!("parsing {}", wit.display()))?;
    let world = resolve.select_world(&[pkg], Some("state-machine"))?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default().build().generate(&mut resolve, world, &mut files)?;
    let mut inputs = Vec::new();
    for (name, contents) in files.iter() {
        let path = out.join(name);
        std::fs::write(&path, contents)?;
        if name.ends_with(".c") || name.ends_with(".o") {
            inputs.push(path);
        }
    }
    Ok(inputs)
}

/// `cargo xtask componentize CORE OUT`: a core module with component-type
/// sections (as the C bindings link in) made a component, as `wasm-tools
/// component new CORE -o OUT` makes it.
pub fn componentize_file(core: &Path, out: &Path) -> anyhow::Result<()> {
    let module = std::fs::read(core).with_context(|| format!("reading {}", core.display()))?;
    let component = componentize(&module).with_context(|| format!("componentizing {}", core.display()))?;
    std::fs::write(out, component).with_context(|| format!("writing {}", out.display()))
}

fn componentize(module: &[u8]) -> anyhow::Result<Vec<u8>> {
    wit_component::ComponentEncoder::default().module(module).and_then(|e| e.validate(true).encode())
}

fn build_python(root: &Path, src: &Path, work: &Path, tools: &Path) -> anyhow::Result<Vec<u8>> {
    eprintln!("building examples/plugins/python-poll");
    let cpy = tool(tools.join("venv/bin/componentize-py"))?;
    // Built from a copy: componentize-py leaves __pycache__ beside the sources.
    let copy = work.join("python-poll");
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(&copy)?;
    std::fs::copy(src.join("app.py"), copy.join("app.py"))?;
    let out = work.join("python_poll.wasm");
    run(Command::new(cpy)
        .arg("-d")
        .arg(root.join("wit"))
        .args(["-w", "state-machine", "componentize", "--stub-wasi", "-p"])
        .arg(&copy)
        .args(["app", "-o"])
        .arg(&out))?;
    Ok(std::fs::read(&out)?)
}

fn build_js(root: &Path, src: &Path, work: &Path, tools: &Path) -> anyhow::Result<Vec<u8>> {
    eprintln!("building examples/plugins/js-leaderboard");
    let qjs = tool(tools.join("npm/node_modules/.bin/componentize-qjs"))?;
    let out = work.join("js_leaderboard.wasm");
    run(Command::new(qjs)
        .arg("--wit")
        .arg(root.join("wit"))
        .args(["--world", "state-machine", "--sync", "--stub-wasi", "--js"])
        .arg(src.join("leaderboard.js"))
        .arg("-o")
        .arg(&out))?;
    Ok(std::fs::read(&out)?)
}

/// The component's imports; an error if any is not `wasmraft:plugin`'s.
fn check_imports(component: &[u8]) -> anyhow::Result<Vec<String>> {
    let wit_component::DecodedWasm::Component(resolve, world) =
        wit_component::decode(component).context("decoding the component")?
    else {
        bail!("not a component");
    };
    // Types `use`d from an interface are listed too; they are not imports.
    let names: Vec<String> = resolve.worlds[world]
        .imports
        .iter()
        .filter(|(_, item)| !matches!(item, wit_parser::WorldItem::Type { .. }))
        .map(|(k, _)| resolve.name_world_key(k))
        .collect();
    let foreign: Vec<&String> = names.iter().filter(|n| !n.starts_with("wasmraft:plugin/")).collect();
    if !foreign.is_empty() {
        bail!("imports {foreign:?}; the examples may import only wasmraft:plugin interfaces");
    }
    Ok(names)
}
