//! The Redis protocol without I/O: requests packed for the wire
//! ([`Command`]), replies parsed from it ([`resp`]) into the one type VCL
//! reads ([`Reply`]). As redis-rs keeps its parser, `cmd` and value types
//! together: both directions share the size bound
//! ([`resp::MAX_REPLY_BYTES`]), and the tests of each use the other.
mod command;
mod reply;
pub mod resp;

pub use command::{Command, MAX_COMMAND_BYTES};
pub use reply::{Reply, ReplyKind};
