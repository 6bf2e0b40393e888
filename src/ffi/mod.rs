//! The only `unsafe` code of the VMOD: the C types bindgen generates from
//! cache/cache.h and vcc_if.h, a safe [`Ctx`] over `VRT_CTX` and the PRIV
//! slots ([`ctx`]), the varnishstat segments ([`vsc`]), and [`guard`],
//! which every entry point in [`exports`] runs its body under so a panic
//! becomes `VRT_fail` instead of aborting varnishd.
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    unnecessary_transmutes,
    clippy::all
)]
mod bindings {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}
pub(crate) mod ctx;
mod exports;
pub(crate) mod vsc;

use bindings::vrt_ctx;
use ctx::{log_global, Ctx, LogTag};

/// The symbol varnishd looks up with dlsym; filled from the vmodtool
/// struct by the constructor in glue.c (see build.rs).
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut Vmod_redis_Data: bindings::vmod_data = unsafe { std::mem::zeroed() };

/// Keeps this shared object mapped for the rest of the process: a name
/// lookup thread may outlive its VCL, and varnishd `dlclose`s the VMOD
/// after the last VCL using it is discarded; the thread's blocking call
/// must not return into unmapped code. Run once, before the first such
/// thread starts (the hook of `connection::lookup`).
fn pin_module() {
    // SAFETY: dladdr only reads the loader's tables, for an address of our
    // own code; `info` is plain data it fills. dlopen with RTLD_NOLOAD
    // loads nothing: it takes a reference on the object already mapped
    // (ours, by the path the loader knows it under) and RTLD_NODELETE
    // keeps it mapped past the last dlclose. The handle is never closed.
    let pinned = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        libc::dladdr(pin_module as *const c_void, &mut info) != 0
            && !info.dli_fname.is_null()
            && !libc::dlopen(
                info.dli_fname,
                libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
            )
            .is_null()
    };
    if !pinned {
        log_global(
            LogTag::Error,
            "[REDIS] could not keep the VMOD in memory: discarding the last VCL that uses it while a name lookup runs may crash the child",
        );
    }
}

/// A VCL STRING argument as bytes; NULL (an unset header) is "".
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string valid for the call.
unsafe fn arg_bytes<'a>(ptr: *const c_char) -> &'a [u8] {
    if ptr.is_null() {
        b""
    } else {
        CStr::from_ptr(ptr).to_bytes()
    }
}

/// A VCL STRING argument as text (lossy: invalid UTF-8 becomes U+FFFD).
///
/// # Safety
/// As [`arg_bytes`].
unsafe fn arg_str<'a>(ptr: *const c_char) -> std::borrow::Cow<'a, str> {
    String::from_utf8_lossy(arg_bytes(ptr))
}

/// Runs an entry point's body with a safe [`Ctx`]; a panic fails the task
/// (or `vcl.load`) with a clear message and returns `fallback`.
///
/// # Safety
/// `ctx` is the `VRT_CTX` varnishd passed to the entry point.
unsafe fn guard<R>(ctx: *const vrt_ctx, fallback: R, body: impl FnOnce(&Ctx) -> R) -> R {
    let Some(ctx) = Ctx::from_raw(ctx) else {
        return fallback;
    };
    match catch_unwind(AssertUnwindSafe(|| body(&ctx))) {
        Ok(value) => value,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            ctx.fail(&format!("[REDIS] internal error (please report): {what}"));
            fallback
        }
    }
}

#[allow(dead_code, clippy::all)]
fn signature_checks() {
    include!(concat!(env!("OUT_DIR"), "/signature_checks.rs"));
}
