//! Threads that may outlive the worker, and the VCL, that started them
//! (a bounded name lookup, a pipelined connection being opened). Before
//! the first one starts, the hook set by the FFI layer pins our shared
//! object in memory, so that such a thread never returns into code
//! unmapped by the `dlclose` after `vcl.discard`.
use std::io;
use std::sync::{Once, OnceLock};

/// What runs once before the first detached thread starts (the FFI
/// layer's pinning of the .so); unset in unit tests.
static BEFORE_FIRST_THREAD: OnceLock<fn()> = OnceLock::new();

/// Sets the hook run before the first detached thread starts (once per
/// process; later calls are ignored). Only the FFI layer sets it.
#[cfg(not(test))]
pub(crate) fn set_before_first_thread(hook: fn()) {
    let _ = BEFORE_FIRST_THREAD.set(hook);
}

/// The stack of a detached thread: a name lookup (glibc's resolver) or a
/// TLS connect and handshake fit in far less (a debug build's TLS connect
/// takes about 40 KiB), and there may be one per pipelined connection
/// being opened.
const STACK_SIZE: usize = 512 * 1024;

/// Starts `work` on a thread of its own, named `name`, not joined. On
/// failure `work` is dropped unrun.
pub(crate) fn spawn(name: &str, work: impl FnOnce() + Send + 'static) -> io::Result<()> {
    static PINNED: Once = Once::new();
    if let Some(pin) = BEFORE_FIRST_THREAD.get() {
        PINNED.call_once(pin);
    }
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(STACK_SIZE)
        .spawn(work)
        .map(drop)
}
