//! A deterministic WASI 0.2 for plugins that import it (language runtimes
//! such as Python's or JavaScript's may). It is linked only into plugins
//! that import some `wasi:` interface.
//!
//! | interface | what the plugin gets |
//! | --- | --- |
//! | `wasi:clocks/wall-clock`, `monotonic-clock` | the entry's leader timestamp (0 during queries and start-up) |
//! | `wasi:random/*` | bytes from a generator seeded from the entry (index, term, timestamp) |
//! | `wasi:cli/stdout`, `stderr` | lines to the host log, tagged with the plugin |
//! | `wasi:filesystem` | no preopened directories: no files |
//! | `wasi:sockets` | every address denied, no name lookup |
//! | `wasi:cli/environment` | no variables, no arguments |
//!
//! Every replica applies an entry with the same clock and the same random
//! stream, so a plugin that reads them still computes the same state. The
//! applier gives such plugins one entry per call, so that the clock is
//! always the entry's own whatever the batching.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use wasmtime::component::{Component, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

/// The entry a plugin instance is working on, as its WASI sees it.
#[derive(Debug, Default)]
pub(crate) struct EntryEnv {
    now_ms: AtomicU64,
    rng: Mutex<u64>,
}

impl EntryEnv {
    /// Sets the clock to the entry's timestamp and reseeds the generator.
    pub fn enter(&self, index: u64, term: u64, timestamp_ms: u64) {
        self.now_ms.store(timestamp_ms, Ordering::Relaxed);
        let seed = splitmix(index ^ splitmix(term ^ splitmix(timestamp_ms)));
        *self.rng.lock() = seed;
    }

    /// The state outside any entry: clock 0, generator seeded with 0.
    pub fn reset(&self) {
        self.enter(0, 0, 0);
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Whether `component` imports any WASI interface.
pub(crate) fn imports_wasi(component: &Component) -> bool {
    let engine = component.engine();
    component.component_type().imports(engine).any(|(name, _)| name.starts_with("wasi:"))
}

/// The WASI state of one plugin instance.
pub(crate) struct WasiState {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiState {
    pub fn new(plugin: Arc<str>, env: Arc<EntryEnv>) -> Self {
        let ctx = WasiCtx::builder()
            .wall_clock(EntryClock(env.clone()))
            .monotonic_clock(EntryClock(env.clone()))
            .secure_random(EntryRng(env.clone()))
            .insecure_random(EntryRng(env))
            .insecure_random_seed(0)
            .stdout(LogStream { plugin: plugin.clone(), stream: "stdout" })
            .stderr(LogStream { plugin, stream: "stderr" })
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self { ctx, table: ResourceTable::new() }
    }

    pub fn view(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.ctx, table: &mut self.table }
    }
}

impl WasiView for crate::ctx::PluginCtx {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.wasi
            .as_mut()
            .expect("WASI is linked only into plugins whose instances carry WASI state")
            .view()
    }
}

struct EntryClock(Arc<EntryEnv>);

impl HostWallClock for EntryClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(self.0.now_ms.load(Ordering::Relaxed))
    }
}

impl HostMonotonicClock for EntryClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        self.0.now_ms.load(Ordering::Relaxed).saturating_mul(1_000_000)
    }
}

struct EntryRng(Arc<EntryEnv>);

impl rand_core::TryRng for EntryRng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(self.try_next_u64()? as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let mut state = self.0.rng.lock();
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        Ok(splitmix(*state))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.try_next_u64()?.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        Ok(())
    }
}

/// A plugin's stdout or stderr: each write becomes a host log line.
#[derive(Clone)]
struct LogStream {
    plugin: Arc<str>,
    stream: &'static str,
}

impl LogStream {
    fn log(&self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches('\n');
        if !text.is_empty() {
            tracing::info!(plugin = &*self.plugin, stream = self.stream, "{text}");
        }
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogStream {
    async fn ready(&mut self) {}
}

impl OutputStream for LogStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.log(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

impl tokio::io::AsyncWrite for LogStream {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.log(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
