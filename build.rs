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
    let series = varnish_series(&varnish.version);
    println!(
        "cargo::rustc-check-cfg=cfg(varnish, values({}))",
        quoted(TESTED_SERIES)
    );
    println!("cargo::rustc-cfg=varnish=\"{series}\"");
    let vmodtool = pkg_config::get_variable("varnishapi", "vmodtool")
        .expect("pkg-config varnishapi has no vmodtool variable");

    // 1. vmod.vcc -> vcc_if.c, vcc_if.h, vmod_redis.rst, vmod_redis.man.rst
    let status = Command::new("python3")
        .arg(&vmodtool)
        .arg("-o")
        .arg(out.join("vcc_if"))
        .arg("-w")
        .arg(&out)
        .arg("vmod.vcc")
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

/// `VSC_NAMES`: the counter names of vmod_redis.vsc in segment order, for
/// the unit test that keeps them in step with `stats::Counter::ALL`.
fn write_vsc_names(vsc: &std::path::Path, dest: &std::path::Path) {
    let text = fs::read_to_string(vsc).expect("read vmod_redis.vsc");
    let names: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix(".. varnish_vsc:: "))
        .map(|n| format!("{:?}", n.trim()))
        .collect();
    fs::write(
        dest,
        format!(
            "/// Generated by build.rs from vmod_redis.vsc.\n\
             pub(crate) const VSC_NAMES: [&str; {}] = [{}];\n",
            names.len(),
            names.join(", ")
        ),
    )
    .expect("write vsc_names.rs");
}

/// The Varnish release series the tree has been built and tested against.
/// Each differs from the others only inside src/ffi, under `cfg(varnish = ...)`
/// (8.0 is VRT 22.0: the `magic` of `strands` and `vrt_blob`, hdr_t).
const TESTED_SERIES: &[&str] = &["7.1", "7.7", "8.0"];

/// "7.1" for libvarnishapi 7.1.1; refuses a series the tree was not tested on.
fn varnish_series(version: &str) -> &'static str {
    let mut parts = version.split('.');
    let series = format!(
        "{}.{}",
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default()
    );
    TESTED_SERIES
        .iter()
        .find(|tested| **tested == series)
        .copied()
        .unwrap_or_else(|| {
            panic!(
                "libvarnishapi {version} is installed, but this tree is built and tested only \
                 against Varnish {}: build against one of those (Debian 12: 7.1, Debian 13: 7.7, from source: \
                 `eval \"$(bash scripts/varnish 8.0)\"`)",
                TESTED_SERIES.join(", ")
            )
        })
}

fn quoted(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("\"{v}\""))
        .collect::<Vec<_>>()
        .join(", ")
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
