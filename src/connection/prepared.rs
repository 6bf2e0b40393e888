//! What one connection was prepared as, beyond its opening (`HELLO` /
//! `AUTH`, done by the [`Connector`](super::Connector)): the one record,
//! kept with the connection, of the requests its server's preparation
//! (`src/server/prepare.rs`) sent on it. Nothing else keeps a flag for
//! them; the preparation reads this record to send each once.
use std::sync::Arc;

/// The preparation requests a connection has had. A new connection has
/// none; each stays for the life of the connection, as the state it
/// set on the server does.
#[derive(Clone, Default, Debug)]
pub(crate) struct Prepared {
    /// `ROLE` was asked on it (`type=auto`).
    role_asked: bool,
    /// `READONLY` was sent on it (a cluster replica serving reads).
    readonly: bool,
    /// [ext] `near_cache`: the `run_id` of the server it reached (empty:
    /// it would not say), once asked (`INFO server`). Behind a balancer,
    /// one location is several servers.
    identity: Option<Arc<str>>,
}

impl Prepared {
    pub(crate) fn role_asked(&self) -> bool {
        self.role_asked
    }

    pub(crate) fn readonly(&self) -> bool {
        self.readonly
    }

    /// [ext] The `run_id` of the server it reached, once asked.
    pub(crate) fn identity(&self) -> Option<&Arc<str>> {
        self.identity.as_ref()
    }

    pub(crate) fn asked_role(&mut self) {
        self.role_asked = true;
    }

    pub(crate) fn sent_readonly(&mut self) {
        self.readonly = true;
    }

    pub(crate) fn identified(&mut self, identity: Arc<str>) {
        self.identity = Some(identity);
    }
}
