//! Compiled plugins cached on disk: compiling a large plugin (a Python or
//! JavaScript runtime) takes seconds, loading the cached code milliseconds.
//!
//! A cache entry is `<plugin sha256>-<engine fingerprint>.cwasm`, with the
//! SHA-256 of its own bytes in a `.sha256` file beside it. An entry is used
//! only if that checksum matches: a torn or tampered file is recompiled,
//! never loaded.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use crate::engine::PluginEngine;

/// A directory of compiled plugins for one engine configuration.
#[derive(Clone, Debug)]
pub(crate) struct CompiledCache<'a> {
    dir: &'a Path,
}

impl<'a> CompiledCache<'a> {
    pub fn new(dir: &'a Path) -> Self {
        Self { dir }
    }

    fn path(&self, engine: &PluginEngine, plugin_sha256: &str) -> PathBuf {
        self.dir.join(format!("{plugin_sha256}-{}.cwasm", engine.compatibility_hash()))
    }

    /// The cached compilation of the plugin with this hash, if there is a
    /// sound one.
    pub fn load(&self, engine: &PluginEngine, plugin_sha256: &str) -> Option<Component> {
        let path = self.path(engine, plugin_sha256);
        let bytes = std::fs::read(&path).ok()?;
        let recorded = std::fs::read_to_string(path.with_extension("cwasm.sha256")).ok()?;
        if hex::encode(Sha256::digest(&bytes)) != recorded.trim() {
            tracing::warn!(path = %path.display(), "compiled plugin cache entry fails its checksum; recompiling");
            return None;
        }
        // SAFETY: wasmtime requires that the bytes come from
        // `Component::serialize` of a compatible engine. This process wrote
        // them (below), the file name carries the engine's fingerprint, and
        // the checksum above rules out torn or altered files.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(&engine.engine, &bytes) };
        match component {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %format!("{e:#}"), "cannot use a cached compiled plugin; recompiling");
                None
            }
        }
    }

    /// Stores a compilation; failures only cost a recompilation later.
    pub fn store(&self, engine: &PluginEngine, plugin_sha256: &str, component: &Component) {
        let path = self.path(engine, plugin_sha256);
        let result = component.serialize().map_err(|e| format!("{e:#}")).and_then(|bytes| {
            std::fs::create_dir_all(self.dir).map_err(|e| e.to_string())?;
            let tmp = path.with_extension("cwasm.tmp");
            std::fs::write(&tmp, &bytes).map_err(|e| e.to_string())?;
            std::fs::write(path.with_extension("cwasm.sha256"), hex::encode(Sha256::digest(&bytes)))
                .map_err(|e| e.to_string())?;
            std::fs::rename(&tmp, &path).map_err(|e| e.to_string())
        });
        if let Err(e) = result {
            tracing::warn!(path = %path.display(), error = %e, "cannot cache a compiled plugin");
        }
    }
}
