//! What the sweep sends: every command `COMMAND LIST` names, with plausible
//! arguments built from its `COMMAND DOCS` (or an override), and the
//! commands it skips, each with its reason.
use crate::support::Resp;
use std::collections::HashMap;

/// Never sent, and why.
const SKIPPED: &[(&str, &str)] = &[
    ("shutdown", "stops the server"),
    (
        "debug",
        "crashes, sleeps or reconfigures the server (DEBUG SEGFAULT, SLEEP...)",
    ),
    ("flushall", "would erase the load's keys"),
    ("flushdb", "would erase the load's keys"),
    ("swapdb", "would swap the load's keys away"),
    ("replicaof", "changes the topology"),
    ("slaveof", "changes the topology"),
    ("failover", "changes the topology"),
    ("cluster|addslots", "changes the cluster"),
    ("cluster|addslotsrange", "changes the cluster"),
    ("cluster|delslots", "changes the cluster"),
    ("cluster|delslotsrange", "changes the cluster"),
    ("cluster|failover", "changes the cluster"),
    ("cluster|flushslots", "changes the cluster"),
    ("cluster|forget", "changes the cluster"),
    ("cluster|meet", "changes the cluster"),
    ("cluster|replicate", "changes the cluster"),
    ("cluster|reset", "changes the cluster"),
    ("cluster|set-config-epoch", "changes the cluster"),
    ("cluster|setslot", "changes the cluster"),
    ("cluster|bumpepoch", "changes the cluster"),
    ("cluster|saveconfig", "rewrites nodes.conf"),
    ("module|load", "loads code into the server"),
    ("module|loadex", "loads code into the server"),
    ("module|unload", "unloads code from the server"),
    ("config|set", "reconfigures the server for every client"),
    ("acl|load", "replaces the server's users"),
    ("sentinel", "Sentinel mode only"),
];

/// Arguments used in place of the generated ones, where those would do
/// harm or test nothing.
const OVERRIDES: &[(&str, &[&str])] = &[
    // Not "x": a DNS lookup of "x" from the server's event loop.
    ("migrate", &["127.0.0.1", "1", "{sweep}k1", "0", "1"]),
    // Not ID 1 or a user: the load's and the checker's connections.
    ("client|kill", &["127.0.0.1:1"]),
    // No documented arguments (an internal command): the ACK a replica
    // sends, to which the server sends no reply.
    ("replconf", &["ACK", "0"]),
    // The generated HELLO has no protocol version: 3 changes the protocol.
    ("hello", &["3"]),
    // Keys of the sweep only.
    ("keys", &["{sweep}*"]),
];

/// The sweep's keys: one hash tag, so that multi-key commands work in a
/// cluster too.
pub(crate) fn sweep_key(n: usize) -> String {
    format!("{{sweep}}k{n}")
}

pub(crate) struct Swept {
    /// Command name, then arguments (the subcommand first).
    pub(crate) words: Vec<String>,
}

pub(crate) struct Plan {
    pub(crate) commands: Vec<Swept>,
    /// `(listed name, reason)`.
    pub(crate) skipped: Vec<(String, String)>,
}

/// The plan from `COMMAND LIST` and `COMMAND DOCS` (both RESP2 replies).
pub(crate) fn plan(list: &Resp, docs: &Resp) -> Result<Plan, String> {
    let mut all_docs: HashMap<String, &Resp> = HashMap::new();
    for kv in docs.items().chunks(2) {
        let (Some(name), Some(doc)) = (kv[0].text(), kv.get(1)) else {
            return Err(format!("COMMAND DOCS: unexpected entry {kv:?}"));
        };
        all_docs.insert(name.to_ascii_lowercase(), doc);
        if let Some(subs) = doc.get("subcommands") {
            for skv in subs.items().chunks(2) {
                if let (Some(sub), Some(sdoc)) = (skv[0].text(), skv.get(1)) {
                    all_docs.insert(sub.to_ascii_lowercase(), sdoc);
                }
            }
        }
    }
    let mut names: Vec<String> = list
        .items()
        .iter()
        .filter_map(|n| n.text().map(str::to_ascii_lowercase))
        .collect();
    if names.is_empty() {
        return Err(format!("COMMAND LIST: no names in {list:?}"));
    }
    names.sort();
    let mut commands = Vec::new();
    let mut skipped = Vec::new();
    for listed in names {
        if let Some((_, why)) = SKIPPED.iter().find(|(n, _)| *n == listed) {
            skipped.push((listed, why.to_string()));
            continue;
        }
        let mut words: Vec<String> = listed.split('|').map(str::to_ascii_uppercase).collect();
        if let Some((_, args)) = OVERRIDES.iter().find(|(n, _)| *n == listed) {
            words.extend(args.iter().map(|a| a.to_string()));
        } else {
            let mut keys = 0;
            if let Some(args) = all_docs.get(&listed).and_then(|d| d.get("arguments")) {
                for arg in args.items() {
                    push_arg(arg, &mut words, &mut keys);
                }
            }
        }
        commands.push(Swept { words });
    }
    Ok(Plan { commands, skipped })
}

/// One argument of `COMMAND DOCS`, plausibly: optional ones omitted (but
/// bare keys), multiple ones once, a oneof's first branch, a block's arguments
/// in turn.
fn push_arg(arg: &Resp, words: &mut Vec<String>, keys: &mut usize) {
    let flags: Vec<&str> = arg
        .get("flags")
        .map(|f| f.items().iter().filter_map(Resp::text).collect())
        .unwrap_or_default();
    let kind = arg.get("type").and_then(Resp::text).unwrap_or("string");
    // Optional keys without a token are kept: the keys of EVAL, FCALL and
    // the like (after their numkeys "1") are what routes them.
    let token = arg.get("token").and_then(Resp::text);
    if flags.contains(&"optional") && (kind != "key" || token.is_some()) {
        return;
    }
    let name = arg.get("name").and_then(Resp::text).unwrap_or("");
    if let Some(token) = token {
        words.push(token.to_string());
    }
    match kind {
        "pure-token" => {
            if token.is_none() {
                words.push(name.to_ascii_uppercase());
            }
        }
        "oneof" => {
            if let Some(first) = arg.get("arguments").and_then(|a| a.items().first()) {
                push_arg(first, words, keys);
            }
        }
        "block" => {
            if let Some(args) = arg.get("arguments") {
                for a in args.items() {
                    push_arg(a, words, keys);
                }
            }
        }
        "key" => {
            *keys += 1;
            words.push(sweep_key(*keys));
        }
        "integer" | "double" | "unix-time" => words.push("1".into()),
        "pattern" => words.push("{sweep}*".into()),
        // A script that runs, a stream ID that parses.
        _ if name == "script" => words.push("return 1".into()),
        _ if name == "id" => words.push("0".into()),
        _ => words.push("x".into()),
    }
}
