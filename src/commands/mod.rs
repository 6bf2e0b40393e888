//! One command model, read from each server's own `COMMAND` table, and
//! every decision about a command made from it: what it does to its
//! connection, whether it may share a multiplexed connection, whether it
//! may wait for ever, which of its arguments are keys and so which
//! cluster slot it goes to, and whether it must go to a master.
//!
//! * `parse.rs`: the `COMMAND` reply (RESP2 or RESP3) into entries.
//! * `builtin.rs`: what no server flag says ([`Effect`] and one table), and the fallback.
//! * `model.rs`: the model, its lookup (no allocation, no lock), and which
//!   entries may share a pipelined connection.
//! * `decide.rs`: the decisions per command, read from an entry.
//! * `keys.rs`: keys by key specification, the slot, `CROSSSLOT`.
//! * `learn.rs`: reading a server's table, sharing it per version.
mod builtin;
mod decide;
mod keys;
mod learn;
mod model;
mod parse;

pub(crate) use builtin::Effect;
pub(crate) use decide::WAITS_FOREVER;
pub(crate) use keys::CROSSSLOT;
pub(crate) use learn::Commands;
pub(crate) use model::Found;

/// The per-command decisions of the standalone path on the fallback
/// model (effect, whether it may wait for ever, whether it may share a
/// connection): for `benches/micro.rs` (`commands/*`), which measures
/// what the model costs each command.
#[doc(hidden)]
pub fn decide_for_bench(command: &crate::protocol::Command) -> bool {
    let found = bench_commands().find(command);
    found.effect() == Effect::None && !found.waits_forever(command) && found.shares(command)
}

/// The cluster slot of `command` on the fallback model: for
/// `benches/micro.rs`.
#[doc(hidden)]
pub fn slot_for_bench(command: &crate::protocol::Command) -> Option<u16> {
    bench_commands().find(command).slot(command).ok().flatten()
}

fn bench_commands() -> &'static Commands {
    static COMMANDS: std::sync::OnceLock<Commands> = std::sync::OnceLock::new();
    COMMANDS.get_or_init(Commands::default)
}

#[cfg(test)]
mod tests;
