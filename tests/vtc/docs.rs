//! The documentation's VCL: every ```` ```vcl ```` block of README.md and
//! docs/*.md is a complete VCL, and each is `vcl.load`ed into a real
//! varnishd with the built module, one trial per block, named after where
//! it is: `docs.README.md:120` (`cargo test --test vtc -- docs.`).
//!
//! A block names the servers a site would have; the trial puts live
//! redis-servers in their place (`#@ redis s0`, `s1`..., `#@ redis-tls`
//! when the block says `tls`), so that what `vcl_init` does on load (a
//! `ROLE` probe, a cluster map read, the TLS files read) happens against
//! something real, on loopback only (see [`live`]). `vcl.load` does not
//! need the servers to answer (Sentinels and cluster seeds that do not
//! are logged), but it does need the TLS files:
//! * each distinct `A.B.C.D:PORT` or `localhost:PORT`: a server of its own,
//!   in order of appearance (its TLS address in a block that says `tls`);
//! * `/run/redis/redis.sock`: the first server's UNIX socket;
//! * `/etc/redis/tls/ca.crt`, `client.crt`, `client.key`, and the directory
//!   `/etc/redis/tls` (a `tls_capath`): the harness's CA, client
//!   certificate and key, and their rehashed directory.
//!
//! The block is otherwise loaded as written, as a file (`vcl.load`),
//! `import redis;` finding the module through `vmod_path`. Not run in the
//! TLS and RESP3 modes: a block says itself how it connects.

use crate::modes::Mode;
use libtest_mimic::{Completion, Failed, Trial};
use std::fs;
use std::path::Path;

/// One ```` ```vcl ```` block: the file (relative to the crate) and the
/// line of its opening fence, then its text.
struct Block {
    file: String,
    line: usize,
    vcl: String,
}

/// A trial per block of README.md and docs/*.md, in file order.
pub(crate) fn trials(mode: Mode) -> Vec<Trial> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<_> = fs::read_dir(root.join("docs"))
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .collect()
        })
        .unwrap_or_default();
    docs.sort();
    files.extend(docs);
    let mut trials = Vec::new();
    for path in files {
        let name = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                let message = format!("read {}: {e}", path.display());
                trials.push(Trial::test(format!("docs.{name}"), move || {
                    Err(message.into())
                }));
                continue;
            }
        };
        for block in vcl_blocks(&name, &text) {
            let trial = format!("docs.{}:{}", block.file, block.line);
            trials.push(Trial::ignorable_test(trial, move || load(&block, mode)));
        }
    }
    trials
}

/// The ```` ```vcl ```` blocks of a Markdown text (a fence may be indented,
/// as in a list); an unclosed one runs to the end.
fn vcl_blocks(file: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim();
        match open.as_mut() {
            None if fence == "```vcl" => {
                open = Some(Block {
                    file: file.to_string(),
                    line: i + 1,
                    vcl: String::new(),
                })
            }
            None => {}
            Some(_) if fence.starts_with("```") => blocks.extend(open.take()),
            Some(block) => {
                block.vcl.push_str(line);
                block.vcl.push('\n');
            }
        }
    }
    blocks.extend(open);
    blocks
}

/// The block with its servers, sockets and files replaced by the live
/// ones' varnishtest macros (the module doc above says which), and how
/// many servers that takes (at least one: `s0`).
fn live(vcl: &str, tls: bool) -> (String, usize) {
    let files = [
        ("/etc/redis/tls/ca.crt", "${tls_ca}"),
        ("/etc/redis/tls/client.crt", "${tls_client_cert}"),
        ("/etc/redis/tls/client.key", "${tls_client_key}"),
        ("/etc/redis/tls", "${tls_dir}"),
        ("/run/redis/redis.sock", "${s0_sock}"),
    ];
    let mut text = vcl.to_string();
    for (from, to) in files {
        text = text.replace(from, to);
    }
    let macro_ = if tls { "tls_addr" } else { "addr" };
    let mut seen: Vec<String> = Vec::new();
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let after_word = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'.');
        match address_at(&text[i..]).filter(|_| !after_word) {
            Some(len) => {
                let address = &text[i..i + len];
                let n = match seen.iter().position(|a| a == address) {
                    Some(n) => n,
                    None => {
                        seen.push(address.to_string());
                        seen.len() - 1
                    }
                };
                out.push_str(&format!("${{s{n}_{macro_}}}"));
                i += len;
            }
            None => {
                let c = text[i..].chars().next().expect("in bounds");
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    (out, seen.len().max(1))
}

/// The length of the `A.B.C.D:PORT` or `localhost:PORT` `s` starts with.
fn address_at(s: &str) -> Option<usize> {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let mut at = match s.strip_prefix("localhost") {
        Some(_) => "localhost".len(),
        None => {
            let mut at = 0;
            for part in 0..4 {
                let n = digits(&s[at..]);
                if n == 0 || n > 3 {
                    return None;
                }
                at += n;
                if part < 3 {
                    s[at..].starts_with('.').then_some(())?;
                    at += 1;
                }
            }
            at
        }
    };
    s[at..].starts_with(':').then_some(())?;
    let port = digits(&s[at + 1..]);
    (port > 0).then_some(())?;
    at += 1 + port;
    Some(at)
}

fn load(block: &Block, mode: Mode) -> Result<Completion, Failed> {
    let where_ = format!("{}:{}", block.file, block.line);
    if block.vcl.matches('{').count() != block.vcl.matches('}').count() {
        return Err(format!(
            "{where_}: this ```vcl block's {{ and }} do not pair up, \
             which varnishtest's quoting needs (and VCL too, but in strings)"
        )
        .into());
    }
    let tls = block.vcl.contains("tls");
    let server = if tls { "redis-tls" } else { "redis" };
    let (vcl, servers) = live(&block.vcl, tls);
    let declared: String = (0..servers)
        .map(|n| format!("#@ {server} s{n}\n"))
        .collect();
    let vcl_file = format!(
        "${{harness_tmpdir}}/{}.{}.vcl",
        block.file.replace('/', "_"),
        block.line
    );
    // The block's text, its servers replaced, goes into a file with a
    // quoted heredoc (varnishtest expands the macros, the shell nothing);
    // varnishd then loads that file.
    let vtc = format!(
        "varnishtest \"{where_}: a ```vcl block, vcl.load-ed as written\"\n\
         {declared}\
         #@ not-in tls,resp3: the documentation's VCL says itself how it connects\n\
         shell {{cat >{vcl_file} <<'END_OF_DOC_VCL'\n{}END_OF_DOC_VCL\n\
         chmod 0644 {vcl_file}}}\n\
         varnish v1 -arg \"-p vmod_path=${{vmod_dir}}:${{varnish_vmod_dir}}\" \
         -vcl {{backend default none;}} -start\n\
         varnish v1 -cliok \"vcl.load doc {vcl_file}\"\n",
        vcl
    );
    let dir = crate::support::trial_dir("docs")?;
    let stem = format!("docs.{}.{}", block.file.replace('/', "_"), block.line);
    let vtc_file = dir.join(format!("{stem}.vtc"));
    crate::support::write_public(&vtc_file, &vtc)?;
    crate::run_file(&vtc_file, mode).map_err(|e| {
        let why = e.message().unwrap_or("failed").to_string();
        format!(
            "{where_}: this ```vcl block does not vcl.load (line N of the \
             loaded file is line {} + N of {})\n{why}",
            block.line, block.file
        )
        .into()
    })
}
