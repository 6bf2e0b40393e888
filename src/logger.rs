//! Where a line said outside any task goes (a thread of the module's own,
//! a TLS handshake): the VSL outside any transaction, as `src/vcl.rs`
//! gives it, or a test's closure. One type for every such sayer, so that
//! none of them imports another's module for it.
use std::sync::Arc;

/// Takes one line, with its `[REDIS] ...` prefix.
pub(crate) type Logger = Arc<dyn Fn(&str) + Send + Sync>;
