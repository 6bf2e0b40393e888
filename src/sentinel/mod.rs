//! Redis Sentinel (`redis.sentinels()`): while a VCL is warm, one thread
//! of its own listens to one Sentinel at a time and keeps the role and
//! health of the VCL's servers as Sentinel sees them.
//!
//! The thread holds two connections to the current Sentinel: one
//! subscribed to its events ([`event::PATTERNS`]), which moves roles
//! within one message of a `+switch-master`, and one for `SENTINEL
//! masters` / `SENTINEL replicas <name>`, asked when the thread connects
//! (so on every VCL warm-up) and every `period`. Every socket wait is
//! bounded, and ends within a slice (`STOP_SLICE`) once the VCL cools, so
//! that `vcl.state cold` and `vcl.discard` never wait on a Sentinel; a
//! Sentinel that fails, closes, refuses the subscription, or does not
//! answer a `PING` on the subscribed connection in time is left for the
//! next one in the list (after a whole list of them, a pause). Workers never wait for this thread: it only flips the atomics of
//! the servers (role, Sentinel's "down") and swaps topology snapshots.
mod apply;
mod event;
#[cfg(not(test))]
mod monitor;

#[cfg(not(test))]
pub(crate) use monitor::{Level, Logger, Monitor};
