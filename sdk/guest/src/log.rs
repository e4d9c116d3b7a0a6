//! Diagnostics to the host's structured log. Logging never changes state.
//!
//! Off `wasm32` (native tests) messages go to standard error.

use crate::__bindings::wasmraft::plugin::log::Level;
#[cfg(target_arch = "wasm32")]
use crate::__bindings::wasmraft::plugin::log::write;

#[cfg(not(target_arch = "wasm32"))]
fn write(level: Level, message: &str) {
    eprintln!("[plugin {level:?}] {message}");
}

/// Logs at debug level.
pub fn debug(message: &str) {
    write(Level::Debug, message)
}

/// Logs at info level.
pub fn info(message: &str) {
    write(Level::Info, message)
}

/// Logs at warn level.
pub fn warn(message: &str) {
    write(Level::Warn, message)
}

/// Logs at error level.
pub fn error(message: &str) {
    write(Level::Error, message)
}
