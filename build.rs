//! Turns vmod.vcc into the C glue varnishd loads, compiles it, and generates
//! the Rust bindings plus a compile-time signature check of every entry point.
//!
//! See docs/architecture.md: vmodtool.py writes vcc_if.{c,h} and the
//! reference docs; the C `Vmod_redis_Data` is renamed and copied into the
//! Rust-exported symbol by src/ffi/glue.c, because rustc's version script
//! would hide a C symbol of the cdylib.
use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=vmod.vcc");
    println!("cargo:rerun-if-changed=vmod_redis.vsc");
    println!("cargo:rerun-if-changed=src/ffi/glue.c");
    println!("cargo:rerun-if-changed=build.rs");
    // Which Varnish pkg-config finds (scripts/varnish points it at a build).
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let varnish = pkg_config::Config::new()
        .cargo_metadata(false)
        .probe("varnishapi")
        .expect("varnishapi not found: apt-get install libvarnishapi-dev");
    let vrt = Vrt::from_headers(&varnish.include_paths);
    vrt.emit_cfgs(&varnish.version);
    let vmodtool = pkg_config::get_variable("varnishapi", "vmodtool")
        .expect("pkg-config varnishapi has no vmodtool variable");

    // 1. vmod.vcc (in this VRT's variant) -> vcc_if.c, vcc_if.h,
    //    vmod_redis.rst, vmod_redis.man.rst
    let vcc = out.join("vmod.vcc");
    let text = fs::read_to_string("vmod.vcc").expect("read vmod.vcc");
    fs::write(&vcc, vrt.vcc_variant(&text)).expect("write vmod.vcc variant");
    let status = Command::new("python3")
        .arg(&vmodtool)
        .arg("-o")
        .arg(out.join("vcc_if"))
        .arg("-w")
        .arg(&out)
        // Relative, from OUT_DIR: vmodtool (8.0+) runs `git -C <its
        // directory>` and writes vmod_vcs_version.txt into its working
        // directory; as before the variant, it finds no git and writes nothing.
        .arg("vmod.vcc")
        .current_dir(&out)
        .status()
        .expect("cannot run python3 vmodtool.py");
    assert!(status.success(), "vmodtool.py failed on vmod.vcc");
    fs::write(out.join("config.h"), "").expect("write config.h");

    // 1b. vmod_redis.vsc -> VSC_redis.{c,h}: the varnishstat segment of a
    //     database object (vsctool.py writes into its working directory).
    let vsctool = pkg_config::get_variable("varnishapi", "vsctool")
        .expect("pkg-config varnishapi has no vsctool variable");
    let vsc = fs::canonicalize("vmod_redis.vsc").expect("vmod_redis.vsc");
    let status = Command::new("python3")
        .arg(&vsctool)
        .arg("-ch")
        .arg(&vsc)
        .current_dir(&out)
        .status()
        .expect("cannot run python3 vsctool.py");
    assert!(status.success(), "vsctool.py failed on vmod_redis.vsc");
    write_vsc_names(&vsc, &out.join("vsc_names.rs"));

    // 2. compile the glue; link it into the cdylib only (unit-test binaries
    //    must not see it: it references symbols only varnishd provides).
    let mut build = cc::Build::new();
    build
        .file(out.join("vcc_if.c"))
        .file(out.join("VSC_redis.c"))
        .file("src/ffi/glue.c")
        .include(&out)
        .define("Vmod_redis_Data", "Vmod_redis_Data_C")
        .flag_if_supported("-Wno-unused-parameter")
        .cargo_metadata(false);
    for inc in &varnish.include_paths {
        build.include(inc);
    }
    build.compile("vcc_if");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--whole-archive");
    println!(
        "cargo:rustc-cdylib-link-arg={}",
        out.join("libvcc_if.a").display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-whole-archive");

    // 3. bindings for cache.h (VRT, WS, VSL) and the generated prototypes
    let wrapper = out.join("wrapper.h");
    fs::write(
        &wrapper,
        "#include \"cache/cache.h\"\n#include \"vcl.h\"\n#include \"vcc_if.h\"\n\
         #include \"VSC_redis.h\"\n",
    )
    .expect("write wrapper.h");
    let mut bindgen = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_arg(format!("-I{}", out.display()))
        .allowlist_function("VRT_.*|WS_.*|VSLb|VSL|VCL_Name|VSC_redis_.*|vmod_.*")
        .allowlist_type("vrt_ctx|vmod_priv|vmod_priv_methods|vcl_event_e|vrt_blob|strands|VSL_tag_e|arg_vmod_.*|vmod_data|ws")
        .allowlist_var(
            "enum_vmod_.*|VSL_tag_e_.*|VCL_MET_.*|VMOD_PRIV_METHODS_MAGIC|STRANDS_MAGIC|VRT_BLOB_MAGIC",
        )
        .rustified_enum("vcl_event_e")
        .derive_default(true)
        // 8.0's hdr_t points to a struct with a flexible array member, whose
        // generated accessors are unsafe fns (unsafe_op_in_unsafe_fn is denied).
        .wrap_unsafe_ops(true)
        .layout_tests(false)
        .generate_comments(false);
    for inc in &varnish.include_paths {
        bindgen = bindgen.clang_arg(format!("-I{}", inc.display()));
    }
    bindgen
        .generate()
        .expect("bindgen failed on cache/cache.h + vcc_if.h")
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    // 4. one line per C prototype: `[bindings::vmod_x, exports::vmod_x]` only
    //    compiles when the Rust entry point exists with the exact signature.
    let header = fs::read_to_string(out.join("vcc_if.h")).expect("read vcc_if.h");
    let mut checks = String::from("// generated by build.rs from vcc_if.h\n{\n");
    for name in entry_points(&header) {
        checks.push_str(&format!("let _ = [bindings::{name}, exports::{name}];\n"));
    }
    checks.push_str("}\n");
    fs::write(out.join("signature_checks.rs"), checks).expect("write checks");
}

/// `VSC_NAMES` and `VSC_ONELINERS`: the counter names of vmod_redis.vsc in
/// segment order (a unit test keeps them in step with
/// `stats::Counter::ALL`) and their one-line descriptions, which
/// `redis.stats(db="*")` also prints as Prometheus `# HELP` texts.
fn write_vsc_names(vsc: &std::path::Path, dest: &std::path::Path) {
    let text = fs::read_to_string(vsc).expect("read vmod_redis.vsc");
    let mut names: Vec<String> = Vec::new();
    let mut oneliners: Vec<String> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix(".. varnish_vsc:: ") {
            names.push(format!("{:?}", name.trim()));
        } else if let Some(oneliner) = line.trim_start().strip_prefix(":oneliner:") {
            // The segment's own oneliner comes before the first counter.
            if !names.is_empty() {
                oneliners.push(format!("{:?}", oneliner.trim()));
            }
        }
    }
    assert_eq!(
        names.len(),
        oneliners.len(),
        "a :oneliner: per counter of vmod_redis.vsc"
    );
    fs::write(
        dest,
        format!(
            "/// Generated by build.rs from vmod_redis.vsc.\n\
             #[cfg_attr(not(test), expect(dead_code, reason = \"read by a unit test\"))]\n\
             pub(crate) const VSC_NAMES: [&str; {n}] = [{}];\n\
             /// Generated by build.rs from vmod_redis.vsc.\n\
             pub(crate) const VSC_ONELINERS: [&str; {n}] = [{}];\n",
            names.join(", "),
            oneliners.join(", "),
            n = names.len(),
        ),
    )
    .expect("write vsc_names.rs");
}

/// The VRT (VMOD ABI) versions the tree has been built and tested against,
/// with the Varnish releases that declare them.
const TESTED_VRT: &[(u32, &str)] = &[(15, "7.1"), (21, "7.7"), (22, "8.0.0, trunk 27d2ce15b")];
/// The oldest VRT major src/ffi has a layout for (Varnish 7.1).
const OLDEST_VRT: u32 = 15;

/// What vrt.h says (`VRT_MAJOR_VERSION`, `VRT_MINOR_VERSION`): which
/// layouts src/ffi compiles against is decided by it, not by the release
/// string pkg-config reports ("trunk" for a development tree).
struct Vrt {
    major: u32,
    minor: u32,
}

impl Vrt {
    fn from_headers(include_paths: &[PathBuf]) -> Vrt {
        let vrt_h = include_paths
            .iter()
            .map(|dir| dir.join("vrt.h"))
            .find(|path| path.is_file())
            .unwrap_or_else(|| {
                panic!("no vrt.h in the varnishapi include paths {include_paths:?}")
            });
        println!("cargo:rerun-if-changed={}", vrt_h.display());
        let text = fs::read_to_string(&vrt_h).expect("read vrt.h");
        let define = |name: &str| -> u32 {
            text.lines()
                .find_map(|line| {
                    let mut words = line.split_whitespace();
                    (words.next() == Some("#define") && words.next() == Some(name))
                        .then(|| words.next())
                        .flatten()
                })
                .and_then(|v| v.trim_end_matches(['U', 'u']).parse().ok())
                .unwrap_or_else(|| panic!("{}: no numeric #define {name}", vrt_h.display()))
        };
        Vrt {
            major: define("VRT_MAJOR_VERSION"),
            minor: define("VRT_MINOR_VERSION"),
        }
    }

    /// The cfgs src/ffi (and the tests) read, each named by what changed:
    /// * `vrt_vxid_t`: VSL transaction ids are the 64-bit `vxid_t` struct
    ///   (VRT 17.0, Varnish 7.3), not an integer;
    /// * `vrt_struct_magic`: `struct strands` and `struct vrt_blob` carry a
    ///   `magic` that varnishd checks (VRT 22.0, Varnish 8.0);
    /// * `cvmod_db_debug_first`: the C VMOD for this Varnish (its 8.0, 9.0
    ///   and main branches) has `redis.db(..., debug, max_cluster_hops)`, so
    ///   ours takes that order (see [`Vrt::vcc_variant`]).
    ///
    /// A VRT older than [`OLDEST_VRT`] is refused; one not in [`TESTED_VRT`]
    /// (Varnish 9.0 is VRT 23) builds with the newest layout that applies
    /// and a warning.
    fn emit_cfgs(&self, release: &str) {
        let Vrt { major, minor } = *self;
        assert!(
            major >= OLDEST_VRT,
            "libvarnishapi {release} declares VRT {major}.{minor} (vrt.h), older than VRT \
             {OLDEST_VRT}.0 (Varnish 7.1), the oldest this tree has a layout for: build against \
             Varnish 7.1 or later (Debian 12: 7.1, Debian 13: 7.7, from source: \
             `eval \"$(bash scripts/varnish 8.0)\"`)"
        );
        if !TESTED_VRT.iter().any(|(tested, _)| *tested == major) {
            let tested: Vec<String> = TESTED_VRT
                .iter()
                .map(|(vrt, release)| format!("VRT {vrt} (Varnish {release})"))
                .collect();
            println!(
                "cargo:warning=libvarnishapi {release} declares VRT {major}.{minor}, which this \
                 tree has not been tested against (tested: {}); it builds with the layout of \
                 the newest VRT it knows that applies: run the test suite before using it",
                tested.join(", ")
            );
        }
        let cfgs = [
            ("vrt_vxid_t", major >= 17),
            ("vrt_struct_magic", major >= 22),
            ("cvmod_db_debug_first", self.cvmod_db_debug_first()),
        ];
        for (name, on) in cfgs {
            println!("cargo::rustc-check-cfg=cfg({name})");
            if on {
                println!("cargo::rustc-cfg={name}");
            }
        }
        // For the vtc harness (`#@ vrt` directives) and messages.
        println!("cargo::rustc-env=VMOD_REDIS_VRT_MAJOR={major}");
    }

    /// The C VMOD's releases for Varnish 8.0 and later (VRT 22+) have
    /// `debug` in `redis.db()`, before `max_cluster_hops`.
    fn cvmod_db_debug_first(&self) -> bool {
        self.major >= 22
    }

    /// vmod.vcc as vmodtool reads it for this VRT. vmod.vcc has no
    /// conditionals, and is written in the 7.1/7.7 order (`debug` after
    /// `max_cluster_hops`, an [ext] there); for the C VMOD's 8.0+ order the
    /// two arguments swap, so that a VCL passing them by position means
    /// what it meant with the C VMOD.
    fn vcc_variant(&self, vcc: &str) -> String {
        if !self.cvmod_db_debug_first() {
            return vcc.to_string();
        }
        const ORDER_7: &str = ", INT max_cluster_hops=32, BOOL debug=0,";
        const ORDER_8: &str = ", BOOL debug=0, INT max_cluster_hops=32,";
        let line = vcc
            .lines()
            .find(|l| l.starts_with("$Object db("))
            .expect("vmod.vcc has no `$Object db(` line");
        assert_eq!(
            line.matches(ORDER_7).count(),
            1,
            "vmod.vcc: `$Object db(` must hold `{ORDER_7}` once (build.rs swaps it for VRT 22+)"
        );
        vcc.replacen(line, &line.replacen(ORDER_7, ORDER_8, 1), 1)
    }
}

/// Names of the `vmod_*` functions vcc_if.h declares (`VPFX(name)(` or the
/// expanded `vmod_name(`), the event function included.
fn entry_points(header: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in header.lines() {
        let line = line.trim_start();
        let decl = line
            .strip_prefix("VCL_")
            .and_then(|rest| rest.split_once(' ').map(|(_, d)| d))
            .or_else(|| line.strip_prefix("vmod_event_f "));
        let Some(decl) = decl else { continue };
        let name = if let Some(rest) = decl.strip_prefix("VPFX(") {
            rest.split(')').next().map(|n| format!("vmod_{n}"))
        } else if decl.starts_with("vmod_") {
            decl.split(['(', ';']).next().map(str::to_string)
        } else {
            None
        };
        if let Some(name) = name {
            let name = name.trim().to_string();
            if !name.is_empty() && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}
