//! Redis Cluster, the parts that need no server: which slot a key hashes
//! to (a command's keys are found by `src/commands/`), the slot map read from
//! `CLUSTER SHARDS` (with node health) or `CLUSTER SLOTS`, and the `MOVED` / `ASK` redirections. The database
//! uses them in `src/database/cluster.rs` (routing and redirections) and
//! `src/database/discovery.rs` (reading and applying the map).
mod map;
mod redirect;
mod shards;
mod slot;

pub(crate) use map::{parse_slots, Node, SlotMap};
pub(crate) use redirect::{redirection, Redirection};
pub(crate) use shards::{parse_shards, ShardsMap};
pub(crate) use slot::{key_slot, HashSlot, SLOTS};
