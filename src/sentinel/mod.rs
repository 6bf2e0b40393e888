//! Redis Sentinel (`redis.sentinels()`): while a VCL is warm, threads of
//! its own listen to its Sentinels and keep the role and health of the
//! VCL's servers as Sentinel sees them.
//!
//! The topology thread holds two connections to one Sentinel at a time:
//! one subscribed to its events ([`event::TOPOLOGY_PATTERNS`]), which
//! moves roles within one message of a `+switch-master`, and one for
//! `SENTINEL masters` / `SENTINEL replicas <name>`, asked when the thread
//! connects (so on every VCL warm-up) and every `period`. A Sentinel that
//! fails, closes, refuses the subscription, or does not answer a `PING`
//! on the subscribed connection in time is left for the next one in the
//! list (after a whole list of them, a pause).
//!
//! Only the Sentinel leading a failover publishes its steps, so one more
//! thread per Sentinel of the list keeps a connection subscribed to them
//! ([`event::FAILOVER_PATTERNS`]): whichever Sentinel leads, master
//! commands are held from its choice of a replica to the promotion
//! (`crate::database::hold`). Each reconnects after a pause
//! ([`backoff`]).
//!
//! Every socket wait is bounded, and ends within a slice (`STOP_SLICE`)
//! once the VCL cools, so that `vcl.state cold` and `vcl.discard` never
//! wait on a Sentinel. Workers never wait for these threads: they only
//! flip the atomics of the servers (role, Sentinel's "down", the hold)
//! and swap topology snapshots.
mod apply;
mod backoff;
mod event;
#[cfg(not(test))]
mod monitor;

#[cfg(not(test))]
pub(crate) use monitor::Monitor;
