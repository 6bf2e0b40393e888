//! docs/reference.md against vmod.vcc: every `$Object`, `$Method` and
//! `$Function` of vmod.vcc has its signature in reference.md (a ```vcc
//! block: same name, arguments, types and defaults, PRIV_* left out), and
//! reference.md has no signature vmod.vcc lacks. Each argument has a row
//! (`` | `name` | ``) in the argument table of the section that shows its
//! signature (or is named, `` `name` ``, in a section with no table), and
//! a row names only an argument of that section.
//!
//! [ext]: an entry or argument the C VMOD 15.1 (its `vmod_redis(3)`
//! synopsis, `cvmod-15.1.synopsis`) lacks is marked [ext] (the argument's
//! row, or a paragraph of the entry's section naming it), and a row of
//! one it has is not.
//!
//! Run: `cargo test --test reference`.
use std::collections::BTreeMap;

const VCC: &str = include_str!("../../vmod.vcc");
const REFERENCE: &str = include_str!("../../docs/reference.md");
const CVMOD: &str = include_str!("cvmod-15.1.synopsis");

/// One entry of the VCL interface: `new xdb = redis.db`, `xdb.command`,
/// `redis.use`... and its arguments as written (`STRING db=""`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Signature {
    /// What precedes the name: `VOID`, `STRING`..., or `new xdb =`.
    returns: String,
    /// `redis.db`, `xdb.command`, `redis.command`.
    name: String,
    args: Vec<String>,
}

impl Signature {
    fn text(&self) -> String {
        format!("{} {}({})", self.returns, self.name, self.args.join(", "))
    }

    /// The argument names: `[STRING cmd_arg1]` is `cmd_arg1`, `INT
    /// max_connections=128` is `max_connections`.
    fn arg_names(&self) -> Vec<String> {
        self.args
            .iter()
            .map(|arg| {
                let decl = arg.trim_matches(|c| c == '[' || c == ']');
                let decl = decl.split('=').next().unwrap_or(decl).trim();
                decl.rsplit(' ').next().unwrap_or(decl).to_string()
            })
            .collect()
    }
}

/// Splits an argument list at the commas outside `{...}` and `[...]`,
/// blanks collapsed.
fn split_args(list: &str) -> Vec<String> {
    let mut args = Vec::new();
    let (mut depth, mut current) = (0, String::new());
    for c in list.chars() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            args.push(current.clone());
            current.clear();
        } else {
            current.push(c);
        }
    }
    args.push(current);
    args.iter()
        .map(|arg| arg.split_whitespace().collect::<Vec<_>>().join(" "))
        .map(|arg| arg.replace("{ ", "{").replace(" }", "}"))
        .filter(|arg| !arg.is_empty())
        .collect()
}

/// `head(args)` into its parts; None when it is not one.
fn parse_call(text: &str) -> Option<(String, String)> {
    let open = text.find('(')?;
    let inner = text[open + 1..].strip_suffix(')')?;
    Some((text[..open].trim().to_string(), inner.to_string()))
}

/// The C VMOD 15.1's entries (named as here: `redis.db`, `xdb.command`,
/// `redis.command`) and their argument names.
fn cvmod_entries() -> BTreeMap<String, Vec<String>> {
    let mut entries = BTreeMap::new();
    for line in CVMOD.lines().filter(|line| !line.starts_with('#')) {
        let (head, inner) = parse_call(line.trim()).expect("a synopsis line");
        let name = match head.strip_prefix("new xdb = ") {
            Some(name) => name.to_string(),
            None => {
                let name = head.split_once(' ').expect("TYPE name").1;
                if name.starts_with("xdb.") {
                    name.to_string()
                } else {
                    format!("redis.{name}")
                }
            }
        };
        let args = split_args(&inner)
            .iter()
            .map(|arg| arg.rsplit(' ').next().unwrap_or(arg).to_string())
            .collect();
        entries.insert(name, args);
    }
    entries
}

/// The interface as vmod.vcc declares it.
fn vcc_signatures() -> Vec<Signature> {
    let mut found = Vec::new();
    for line in VCC.lines() {
        let Some((kind, rest)) = line.split_once(' ') else {
            continue;
        };
        if !matches!(kind, "$Object" | "$Method" | "$Function") {
            continue;
        }
        let (head, inner) = parse_call(rest.trim()).expect("a $ line of vmod.vcc");
        let args: Vec<String> = split_args(&inner)
            .into_iter()
            .filter(|arg| !arg.starts_with("PRIV_"))
            .collect();
        let (returns, name) = match kind {
            "$Object" => ("new xdb =".to_string(), format!("redis.{head}")),
            _ => {
                let (returns, name) = head.split_once(' ').expect("TYPE name");
                let name = match name.strip_prefix('.') {
                    Some(method) => format!("xdb.{method}"),
                    None => format!("redis.{name}"),
                };
                (returns.to_string(), name)
            }
        };
        found.push(Signature {
            returns,
            name,
            args,
        });
    }
    found
}

/// A section of reference.md: its heading, its prose (code blocks left
/// out) and the signatures of its ```vcc blocks.
struct Section {
    heading: String,
    prose: String,
    signatures: Vec<Signature>,
}

/// Parses the ```vcc blocks of reference.md (a signature may span lines:
/// it ends where its parentheses close) and the prose around them.
fn reference_sections(text: &str) -> Vec<Section> {
    let mut sections = vec![Section {
        heading: String::new(),
        prose: String::new(),
        signatures: Vec::new(),
    }];
    let mut fence: Option<String> = None;
    let mut pending = String::new();
    for line in text.lines() {
        let section = sections.last_mut().expect("one section at least");
        if let Some(info) = &fence {
            if line.trim_start().starts_with("```") {
                assert!(pending.trim().is_empty(), "unclosed signature: {pending}");
                fence = None;
            } else if info == "vcc" {
                pending.push(' ');
                pending.push_str(line.trim());
                let opened = pending.matches('(').count();
                if opened > 0 && opened == pending.matches(')').count() {
                    section.signatures.push(parse_signature(pending.trim()));
                    pending.clear();
                }
            }
            continue;
        }
        if let Some(info) = line.trim_start().strip_prefix("```") {
            fence = Some(info.trim().to_string());
        } else if line.starts_with('#') {
            sections.push(Section {
                heading: line.to_string(),
                prose: String::new(),
                signatures: Vec::new(),
            });
        } else {
            section.prose.push_str(line);
            section.prose.push('\n');
        }
    }
    sections
}

fn parse_signature(text: &str) -> Signature {
    let (head, inner) =
        parse_call(text).unwrap_or_else(|| panic!("not a signature in a vcc block: {text}"));
    let (returns, name) = match head.strip_prefix("new xdb = ") {
        Some(name) => ("new xdb =".to_string(), name.to_string()),
        None => {
            let (returns, name) = head
                .split_once(' ')
                .unwrap_or_else(|| panic!("no return type: {text}"));
            (returns.to_string(), name.to_string())
        }
    };
    Signature {
        returns,
        name,
        args: split_args(&inner),
    }
}

/// The argument names in the first cell of the section's table rows:
/// `` | `name` | ... ``.
fn table_arguments(prose: &str) -> Vec<String> {
    table_rows(prose)
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// The argument table rows of a section: the name, and the row.
fn table_rows(prose: &str) -> Vec<(String, &str)> {
    prose
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("| `")?;
            let (name, _) = rest.split_once("` |")?;
            let name_only = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            name_only.then(|| (name.to_string(), line))
        })
        .collect()
}

/// The [ext] marks that are missing or wrong, against the C VMOD 15.1.
fn ext_problems(sections: &[Section]) -> Vec<String> {
    let cvmod = cvmod_entries();
    let mut problems = Vec::new();
    for section in sections {
        for (arg, row) in table_rows(&section.prose) {
            let theirs = section.signatures.iter().any(|signature| {
                cvmod
                    .get(&signature.name)
                    .is_some_and(|args| args.contains(&arg))
            });
            match (theirs, row.contains("[ext]")) {
                (false, false) => problems.push(format!(
                    "section {:?}: row `{arg}` is not the C VMOD's: mark it [ext]",
                    section.heading
                )),
                (true, true) => problems.push(format!(
                    "section {:?}: row `{arg}` is the C VMOD's, not [ext]",
                    section.heading
                )),
                _ => {}
            }
        }
        let text = format!("{}\n\n{}", section.heading, section.prose);
        for signature in &section.signatures {
            if cvmod.contains_key(&signature.name) {
                continue;
            }
            let short = signature.name.rsplit('.').next().unwrap_or_default();
            let marked = text.split("\n\n").any(|paragraph| {
                paragraph.contains("[ext]") && paragraph.contains(&format!("{short}("))
            });
            if !marked {
                problems.push(format!(
                    "{}: not the C VMOD's, but no paragraph of section {:?} says it is [ext]",
                    signature.name, section.heading
                ));
            }
        }
    }
    problems
}

/// What is wrong with `reference` against vmod.vcc, one line each.
fn problems(reference: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let vcc: BTreeMap<String, Signature> = vcc_signatures()
        .into_iter()
        .map(|s| (s.name.clone(), s))
        .collect();
    let sections = reference_sections(reference);
    // Each documented entry and the index of its section.
    let mut documented: BTreeMap<String, (Signature, usize)> = BTreeMap::new();
    for (index, section) in sections.iter().enumerate() {
        for signature in &section.signatures {
            if documented
                .insert(signature.name.clone(), (signature.clone(), index))
                .is_some()
            {
                problems.push(format!("{}: shown twice", signature.name));
            }
        }
        let args: Vec<String> = section
            .signatures
            .iter()
            .flat_map(Signature::arg_names)
            .collect();
        for row in table_arguments(&section.prose) {
            if !args.contains(&row) {
                problems.push(format!(
                    "section {:?}: table row `{row}` is no argument of its signatures",
                    section.heading
                ));
            }
        }
    }
    // An argument is described in its section; one that a proxied
    // function `redis.X` shares with the method `xdb.X`, at the method.
    for (signature, index) in documented.values() {
        let method = signature
            .name
            .strip_prefix("redis.")
            .and_then(|name| documented.get(&format!("xdb.{name}")));
        for arg in signature.arg_names() {
            let at = match method {
                Some((method, at)) if method.arg_names().contains(&arg) => *at,
                _ => *index,
            };
            // A section with an argument table has a row for each.
            let rows = table_arguments(&sections[at].prose);
            let described = if rows.is_empty() {
                sections[at].prose.contains(&format!("`{arg}`"))
            } else {
                rows.contains(&arg)
            };
            if !described {
                problems.push(format!(
                    "{}: argument `{arg}` not described in section {:?}",
                    signature.name, sections[at].heading
                ));
            }
        }
    }
    problems.extend(ext_problems(&sections));
    let documented: BTreeMap<String, Signature> = documented
        .into_iter()
        .map(|(name, (signature, _))| (name, signature))
        .collect();
    for (name, signature) in &vcc {
        match documented.get(name) {
            None => problems.push(format!("missing: {}", signature.text())),
            Some(shown) if shown != signature => problems.push(format!(
                "differs:\n  vmod.vcc:     {}\n  reference.md: {}",
                signature.text(),
                shown.text()
            )),
            Some(_) => {}
        }
    }
    for (name, shown) in &documented {
        if !vcc.contains_key(name) {
            problems.push(format!("not in vmod.vcc: {}", shown.text()));
        }
    }
    problems
}

#[test]
fn reference_md_shows_every_function_and_argument_of_vmod_vcc_and_nothing_else() {
    let found = problems(REFERENCE);
    assert!(
        found.is_empty(),
        "docs/reference.md against vmod.vcc:\n{}",
        found.join("\n")
    );
}

/// The check sees a missing argument, a changed default, an argument
/// vmod.vcc lacks, an undescribed argument and a stray table row.
#[test]
fn the_check_finds_what_is_wrong() {
    let vcc = vcc_signatures();
    assert!(vcc.len() >= 80, "{} entries read from vmod.vcc", vcc.len());
    let db = vcc.iter().find(|s| s.name == "redis.db").expect("redis.db");
    assert!(db.arg_names().contains(&"max_connections".to_string()));

    let dropped = REFERENCE.replacen(" INT max_connections=128,", "", 1);
    assert_ne!(
        dropped, REFERENCE,
        "the reference shows max_connections=128"
    );
    let found = problems(&dropped);
    assert!(
        found.iter().any(|p| p.starts_with("differs:")
            && p.contains("redis.db(")
            && p.contains("max_connections=128")),
        "{found:?}"
    );
    // Its row is left without an argument.
    assert!(
        found
            .iter()
            .any(|p| p.contains("table row `max_connections`")),
        "{found:?}"
    );

    let no_row = REFERENCE.replacen(
        "| `tls_keyfile` | `\"\"` | Its private key",
        "| Its private key",
        1,
    );
    assert_ne!(no_row, REFERENCE, "the reference has a tls_keyfile row");
    let found = problems(&no_row);
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("redis.db: argument `tls_keyfile` not described")),
        "{found:?}"
    );

    // [ext] marks: one removed, one added where it does not belong.
    let unmarked = REFERENCE.replacen(
        "| `discover` | `false` | [ext] Add",
        "| `discover` | `false` | Add",
        1,
    );
    assert_ne!(unmarked, REFERENCE, "the reference marks discover [ext]");
    let found = problems(&unmarked);
    assert!(
        found
            .iter()
            .any(|p| p.contains("row `discover` is not the C VMOD's: mark it [ext]")),
        "{found:?}"
    );
    let marked = REFERENCE.replacen(
        "| `period` | `60` | Seconds",
        "| `period` | `60` | [ext] Seconds",
        1,
    );
    assert_ne!(marked, REFERENCE, "the reference has a period row");
    let found = problems(&marked);
    assert!(
        found
            .iter()
            .any(|p| p.contains("row `period` is the C VMOD's, not [ext]")),
        "{found:?}"
    );
    let entry = REFERENCE.replacen("### redis.weights() [ext]", "### redis.weights()", 1);
    let entry = entry.replacen(
        "[ext] on Varnish 7.1 and 7.7; the C VMOD",
        "On Varnish 7.1 and 7.7 the C VMOD",
        1,
    );
    let entry = entry.replacen(
        "| `rules` | `\"\"`: the environment variable `VMOD_REDIS_WEIGHTS` | [ext] ",
        "| `rules` | `\"\"`: the environment variable `VMOD_REDIS_WEIGHTS` | ",
        1,
    );
    let found = problems(&entry);
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("redis.weights: not the C VMOD's")),
        "{found:?}"
    );

    let changed = REFERENCE.replacen("INT max_connections=128", "INT max_connections=64", 1);
    assert!(problems(&changed).iter().any(|p| p.starts_with("differs:")));

    let extra = REFERENCE.replacen(
        "VOID xdb.free()",
        "VOID xdb.free()\nVOID xdb.flush(STRING what)",
        1,
    );
    assert_ne!(extra, REFERENCE, "the reference shows VOID xdb.free()");
    let found = problems(&extra);
    assert!(
        found
            .iter()
            .any(|p| p == "not in vmod.vcc: VOID xdb.flush(STRING what)"),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("xdb.flush: argument `what` not described")),
        "{found:?}"
    );

    let removed = REFERENCE.replacen("VOID xdb.free()", "", 1);
    assert!(problems(&removed)
        .iter()
        .any(|p| p == "missing: VOID xdb.free()"));
}
