//! What must be installed before a run, and the build of our module.
use super::*;

// Preflight

pub(crate) fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

pub(crate) fn dpkg_version(pkg: &str) -> Option<String> {
    let out = Process::new("dpkg-query")
        .args(["-W", "-f=${Status}|${Version}", pkg])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (status, version) = text.split_once('|')?;
    status
        .ends_with("installed")
        .then(|| version.trim().to_owned())
}

pub(crate) fn theirs_so() -> Option<PathBuf> {
    let out = Process::new("dpkg-query")
        .args(["-L", THEIRS_PKG])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.ends_with("/libvmod_redis.so"))
        .map(PathBuf::from)
        .filter(|p| p.is_file())
}

/// Checks what the run needs; returns the C VMOD's path (None with
/// `--ours-only`, which neither needs nor runs it).
pub(crate) fn preflight(o: &Opts) -> Res<Option<PathBuf>> {
    let mut tools = vec![
        ("varnishd", "varnish"),
        ("varnishstat", "varnish"),
        ("redis-server", "redis-server"),
        ("redis-benchmark", "redis-tools"),
        ("wrk", "wrk"),
    ];
    if o.pin {
        tools.push(("taskset", "util-linux"));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus <= LOAD_CPU as usize {
            return Err(format!("--pin needs 2 CPUs, this process may use {cpus}"));
        }
    }
    if o.s1 && o.s1_client == S1Client::Ab {
        tools.push(("ab", "apache2-utils"));
    } else if find_in_path("ab").is_none() {
        eprintln!(
            "system: note: ab not found (apt-get install -y apache2-utils); \
             only needed with --s1-client ab"
        );
    }
    let mut missing: Vec<String> = Vec::new();
    let mut pkgs: Vec<&str> = Vec::new();
    for (tool, pkg) in tools {
        if find_in_path(tool).is_none() {
            missing.push(format!("{tool} (package {pkg})"));
            if !pkgs.contains(&pkg) {
                pkgs.push(pkg);
            }
        }
    }
    let theirs = if o.ours_only { None } else { theirs_so() };
    if !o.ours_only && (dpkg_version(THEIRS_PKG).is_none() || theirs.is_none()) {
        missing.push(format!(
            "the C VMOD (package {THEIRS_PKG}, libvmod_redis.so)"
        ));
        pkgs.push(THEIRS_PKG);
    }
    if !missing.is_empty() {
        return Err(format!(
            "missing: {}\nnothing is installed automatically; as root run:\n  \
             apt-get update && apt-get install -y {}",
            missing.join(", "),
            pkgs.join(" ")
        ));
    }
    Ok(theirs)
}

/// `varnishd -V`'s first line and the varnishd it ran: the first in PATH,
/// the one every varnishd of the run is started as.
pub(crate) fn varnishd_version() -> (String, String) {
    let path = find_in_path("varnishd").map_or_else(|| "?".into(), |p| p.display().to_string());
    (first_line(cmd("varnishd", &["-V"])), path)
}

/// "varnish-8.0.0" out of `varnishd -V`'s first line (for file names).
pub(crate) fn varnish_release(version_line: &str) -> Option<&str> {
    version_line
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .find(|w| w.starts_with("varnish-"))
}

/// Builds ours in release mode and returns the cdylib's path. Cargo runs
/// with this process's environment: build.rs compiles against the Varnish
/// `PKG_CONFIG_PATH` finds (and reruns when it changes), into the target
/// directory `CARGO_TARGET_DIR` names, else this crate's `target/`.
pub(crate) fn build_ours() -> Res<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Process::new(cargo);
    cmd.args([
        "build",
        "--release",
        "--lib",
        "--message-format=json-render-diagnostics",
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR"))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    COMMANDS
        .lock()
        .push(("build ours".into(), "cargo build --release --lib".into()));
    eprintln!("system: {}", command_line(&cmd));
    let out = reap(spawn(&mut cmd, "cargo build")?)?;
    if !out.status.success() {
        return Err("cargo build --release --lib failed".into());
    }
    support::artifact_path(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| "cargo build did not report libvmod_redis.so".into())
}
