//! vmod-redis: a Varnish VMOD for Redis, written in Rust.
//!
//! Layers, top to bottom:
//! - [`ffi`]: the only code that may break Rust's safety rules. C types, the `vmod_*` entry points that
//!   vmod.vcc declares (each a declaration of its arguments, converted by `ffi::args::FromVcl`),
//!   workspace copies, PRIV slots, VSL and the other log sinks, varnishstat segments, panics.
//! - [`vcl`]: one safe function per vmod.vcc entry, on plain Rust types.
//! - `logger`: the one log every layer writes to (`Log`, `Level`); `ffi::log` writes its lines.
//! - Plain Rust, unit-tested without varnishd: [`config`], [`database`]
//!   (execution along the plan, retries), `routing` (the execution plan),
//!   `topology` (a database's servers as a snapshot), `cluster` (slots,
//!   keys, slot map and redirections of Redis Cluster), [`connection`]
//!   (private / shared / pipelined), [`protocol`] (command packing, the
//!   RESP parser, replies: no I/O), `session` (connection state per
//!   command), [`stats`], `sentinel` (what Sentinel says, and the thread
//!   that listens).

// The VMOD runs inside varnishd's child: what it has to say goes to VSL
// (logger::Log, ffi::log), not to stdout or stderr. Tests and harnesses may print.
#![cfg_attr(not(test), warn(clippy::print_stdout, clippy::print_stderr))]

mod cluster;
pub mod commands;
pub mod config;
pub mod connection;
pub mod database;
pub mod error;
mod logger;
pub(crate) mod near_cache;
/// For benches/micro.rs: the near cache's hit path (not an API).
#[doc(hidden)]
pub use near_cache::NearCacheBench;
pub mod protocol;
mod routing;
mod sentinel;
pub mod server;
mod session;
pub mod stats;
#[cfg(test)]
mod testing;
pub mod tls;
mod topology;

// The FFI layer (and the VCL layer that only it calls) need varnishd's
// symbols, so unit-test builds leave them out and test the logic beneath.
#[cfg(not(test))]
mod ffi;
#[cfg(not(test))]
mod vcl;
