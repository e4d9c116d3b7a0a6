//! `wasmraft plugin new NAME`: writes a plugin crate that builds, tests and
//! runs as it is, from the templates in `sdk/template/`.

use std::path::{Path, PathBuf};

const CARGO_TOML: &str = include_str!("../../../sdk/template/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("../../../sdk/template/lib.rs.tmpl");
const README: &str = include_str!("../../../sdk/template/README.md.tmpl");
const CARGO_CONFIG: &str = include_str!("../../../sdk/template/cargo-config.toml.tmpl");
const GITIGNORE: &str = include_str!("../../../sdk/template/gitignore.tmpl");
/// The SDK's manifest, for the version a new crate depends on.
const SDK_MANIFEST: &str = include_str!("../../../sdk/guest/Cargo.toml");

#[derive(clap::Args, Debug)]
pub struct NewArgs {
    /// The plugin's crate name: a letter, then letters, digits, `-` or `_`.
    pub name: String,
    /// Create the crate in this directory, which must not exist or be
    /// empty [default: ./NAME].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Depend on the SDK at this path (`sdk/guest` of a Wasmraft checkout)
    /// instead of the crates.io release.
    #[arg(long, value_name = "PATH")]
    pub sdk: Option<PathBuf>,
}

/// Writes the crate and prints what to do next.
pub fn run(args: &NewArgs) -> Result<(), String> {
    check_name(&args.name)?;
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    let sdk_dependency = match &args.sdk {
        Some(path) => path_dependency(path)?,
        None => format!(
            "# The crates.io release; for a Wasmraft checkout use\n\
             # wasmraft-sdk = {{ path = \"PATH/TO/wasmraft/sdk/guest\" }}\n\
             wasmraft-sdk = \"{}\"",
            sdk_version()
        ),
    };
    let file_name = args.name.replace('-', "_");
    let fill = |template: &str| {
        template
            .replace("{{name}}", &args.name)
            .replace("{{file_name}}", &file_name)
            .replace("{{sdk_dependency}}", &sdk_dependency)
    };

    let files = [
        ("Cargo.toml", fill(CARGO_TOML)),
        ("src/lib.rs", fill(LIB_RS)),
        ("README.md", fill(README)),
        (".cargo/config.toml", fill(CARGO_CONFIG)),
        (".gitignore", fill(GITIGNORE)),
    ];
    ensure_empty(&dir)?;
    for (rel, text) in &files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }

    println!("created plugin `{}` in {}", args.name, dir.display());
    println!("  test:   cd {} && cargo test", dir.display());
    println!("  build:  cargo build --release --target wasm32-unknown-unknown");
    println!("  run:    wasmraft dev --plugin target/wasm32-unknown-unknown/release/{file_name}.wasm");
    Ok(())
}

/// Cargo's package-name rules, kept simple: ASCII, starting with a letter.
fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name.len() <= 64;
    if !valid {
        return Err(format!(
            "invalid plugin name {name:?}: use a letter, then letters, digits, `-` or `_` (at most 64)"
        ));
    }
    Ok(())
}

/// Refuses to write over anything: the directory must be new or empty.
fn ensure_empty(dir: &Path) -> Result<(), String> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            Some(_) => Err(format!("{} already exists and is not empty", dir.display())),
            None => Ok(()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot use {}: {e}", dir.display())),
    }
}

/// `wasmraft-sdk = { path = "..." }` for an SDK checkout, by absolute path
/// so that it holds wherever the new crate is.
fn path_dependency(sdk: &Path) -> Result<String, String> {
    let manifest = std::fs::read_to_string(sdk.join("Cargo.toml"))
        .map_err(|e| format!("--sdk {}: no Cargo.toml there ({e})", sdk.display()))?;
    if !manifest.lines().any(|l| l.trim() == "name = \"wasmraft-sdk\"") {
        return Err(format!("--sdk {}: not the wasmraft-sdk crate (sdk/guest of a checkout)", sdk.display()));
    }
    let abs = sdk.canonicalize().map_err(|e| format!("--sdk {}: {e}", sdk.display()))?;
    let path = abs.to_str().ok_or_else(|| format!("--sdk {}: not valid UTF-8", abs.display()))?;
    Ok(format!("wasmraft-sdk = {{ path = {} }}", toml_string(path)))
}

fn toml_string(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The SDK version this CLI was built with, as a caret requirement
/// (`0.1.0` gives `0.1`).
fn sdk_version() -> String {
    let version = SDK_MANIFEST
        .lines()
        .find_map(|l| l.trim().strip_prefix("version = \"")?.strip_suffix('"'))
        .expect("sdk/guest/Cargo.toml has a version");
    let parts: Vec<&str> = version.split('.').collect();
    // Cargo's caret: below 1.0 the minor version is the compatible range.
    if parts.first() == Some(&"0") { parts[..2].join(".") } else { parts[0].to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_cargo() {
        for ok in ["demo", "my-plugin", "bank_2"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "2fast", "-x", "a b", "ünï", "../escape"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn templates_are_filled_completely() {
        let dir = tempfile::tempdir().unwrap();
        let crate_dir = dir.path().join("my-plugin");
        run(&NewArgs { name: "my-plugin".into(), dir: Some(crate_dir.clone()), sdk: None }).unwrap();
        for rel in ["Cargo.toml", "src/lib.rs", "README.md", ".cargo/config.toml", ".gitignore"] {
            let text = std::fs::read_to_string(crate_dir.join(rel)).unwrap();
            assert!(!text.contains("{{"), "{rel} has an unfilled placeholder");
        }
        let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("name = \"my-plugin\""));
        assert!(manifest.contains("\nwasmraft-sdk = \"0.1\""), "{manifest}");
        let readme = std::fs::read_to_string(crate_dir.join("README.md")).unwrap();
        assert!(readme.contains("release/my_plugin.wasm"));
        // Never over an existing crate.
        let again = run(&NewArgs { name: "my-plugin".into(), dir: Some(crate_dir), sdk: None });
        assert!(again.unwrap_err().contains("not empty"));
    }

    #[test]
    fn sdk_path_must_be_the_sdk() {
        let dir = tempfile::tempdir().unwrap();
        let args = NewArgs { name: "x".into(), dir: Some(dir.path().join("x")), sdk: Some(dir.path().into()) };
        assert!(run(&args).unwrap_err().contains("no Cargo.toml"));
    }
}
