//! The `vmod_*` symbols vmod.vcc declares. Each shim converts the C
//! arguments (NULL strings are ""), runs the matching `vcl::` function
//! under [`guard`], and converts the result back. A method and its proxied
//! function come from one `entry!` line, so they cannot drift apart; the
//! generated signature checks (build.rs) make a drift from vmod.vcc a
//! compile error.
//!
//! # Safety
//! varnishd calls each export with the arguments vmod.vcc declares (the
//! contract every `SAFETY` note below refers to): `ctx` is the live
//! `VRT_CTX` of the call; `priv_vcl` / `priv_task` are this VMOD's slots
//! for the VCL and the task; `obj` is NULL or what `vmod_db__init` stored;
//! STRING / ENUM arguments are NULL or NUL-terminated, valid for the call.
use std::borrow::Cow;
use std::ffi::{c_char, c_int};
use std::ptr;
use std::sync::Arc;

use super::bindings::{
    vcl_event_e, vmod_priv, vmod_redis_db, vrt_ctx, VCL_BLOB, VCL_BOOL, VCL_ENUM, VCL_INT,
    VCL_REAL, VCL_STRING,
};
use super::ctx::{slot_of, Ctx};
use super::{arg_bytes, arg_str, guard};
use crate::config::{DbArgs, Secret, SentinelArgs, TlsArgs};
use crate::database::Database;
use crate::protocol::{Reply, ReplyKind};
use crate::stats::PrometheusOptions;
use crate::vcl::{self, TaskState, VclState};

/// The object varnishd holds for `new db = redis.db(...)`.
type DbObject = Arc<Database>;

/// # Safety
/// `obj` is NULL or a pointer made by `vmod_db__init`.
unsafe fn object<'a>(obj: *mut vmod_redis_db) -> Option<&'a DbObject> {
    // SAFETY: NULL or a Box<DbObject> leaked by vmod_db__init, freed only
    // by vmod_db__fini (after the last call on the object).
    unsafe { obj.cast_const().cast::<DbObject>().as_ref() }
}

/// The database a proxied function names (or the default one).
///
/// # Safety
/// The PRIV pointers and `db` are the ones varnishd passed to the call.
unsafe fn proxied(
    ctx: &Ctx,
    priv_vcl: *mut vmod_priv,
    priv_task: *mut vmod_priv,
    db: VCL_STRING,
) -> Option<DbObject> {
    // SAFETY: the caller's contract.
    unsafe {
        let vcl = slot_of::<VclState>(priv_vcl)?;
        vcl::resolve(ctx, vcl, slot_of::<TaskState>(priv_task), arg_bytes(db))
    }
}

fn vcl_bool(value: bool) -> VCL_BOOL {
    VCL_BOOL::from(value)
}

/// The `tls_*` strings of `redis.db()` and `redis.sentinels()` (the same
/// five in both), turned into text once; both build their [`TlsArgs`]
/// from it.
struct TlsStrings<'a>([Cow<'a, str>; 5]);

impl TlsStrings<'_> {
    /// # Safety
    /// Each argument is NULL or a NUL-terminated string valid for the call.
    unsafe fn new(
        cafile: VCL_STRING,
        capath: VCL_STRING,
        certfile: VCL_STRING,
        keyfile: VCL_STRING,
        sni: VCL_STRING,
    ) -> Self {
        // SAFETY: the caller's contract is arg_str's.
        TlsStrings([cafile, capath, certfile, keyfile, sni].map(|arg| unsafe { arg_str(arg) }))
    }

    /// The TLS arguments, `tls` the BOOL that turns them on.
    fn args(&self, tls: VCL_BOOL, verify_name: VCL_BOOL) -> TlsArgs<'_> {
        let [cafile, capath, certfile, keyfile, sni] = &self.0;
        TlsArgs {
            enabled: tls != 0,
            cafile,
            capath,
            certfile,
            keyfile,
            sni,
            verify_name: verify_name != 0,
        }
    }
}

/// Generates a method `vmod_db_<name>(ctx, obj, args...)` and its proxied
/// function `vmod_<name>(ctx, priv_vcl, priv_task, args..., db, after...)`
/// with one body working on `$db: &Arc<Database>`.
macro_rules! entry {
    ($method:ident, $function:ident, ($($arg:ident: $ty:ty),*) $(; ($($after:ident: $aty:ty),*))? -> $ret:ty = $fallback:expr,
     |$ctx:ident, $db:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $method(
            ctx: *const vrt_ctx,
            obj: *mut vmod_redis_db,
            $($arg: $ty,)* $($($after: $aty,)*)?
        ) -> $ret {
            // SAFETY: the contract (module doc) for ctx, obj and the arguments.
            unsafe {
                guard(ctx, $fallback, |$ctx| match object(obj) {
                    Some($db) => $body,
                    None => $fallback,
                })
            }
        }

        #[no_mangle]
        pub unsafe extern "C" fn $function(
            ctx: *const vrt_ctx,
            priv_vcl: *mut vmod_priv,
            priv_task: *mut vmod_priv,
            $($arg: $ty,)*
            db: VCL_STRING,
            $($($after: $aty,)*)?
        ) -> $ret {
            // SAFETY: the contract (module doc) for ctx, the PRIVs, db and
            // the arguments.
            unsafe {
                guard(ctx, $fallback, |$ctx| match proxied($ctx, priv_vcl, priv_task, db) {
                    Some(found) => {
                        let $db = &found;
                        $body
                    }
                    None => $fallback,
                })
            }
        }
    };
}

/// A reply reader: `read` maps the slot's reply (None before any reply) to
/// the C value.
macro_rules! reader {
    ($method:ident, $function:ident, ($($arg:ident: $ty:ty),*) $(; ($($after:ident: $aty:ty),*))? -> $ret:ty = $fallback:expr,
     |$ctx:ident, $reply:ident| $read:expr) => {
        entry!($method, $function, ($($arg: $ty),*) $(; ($($after: $aty),*))? -> $ret = $fallback,
            |$ctx, db| vcl::with_reply($ctx, db, |$reply: Option<&Reply>| $read));
    };
}

// ---- module configuration, events, constructor ------------------------

#[no_mangle]
pub unsafe extern "C" fn vmod_event_function(
    ctx: *const vrt_ctx,
    priv_vcl: *mut vmod_priv,
    event: vcl_event_e,
) -> c_int {
    // SAFETY: the contract (module doc) for ctx and priv_vcl.
    unsafe {
        guard(ctx, 0, |_ctx| {
            // Before any connect (VCL_EVENT_LOAD comes before vcl_init).
            crate::connection::lookup::set_before_first_thread(super::pin_module);
            if let Some(vcl) = slot_of::<VclState>(priv_vcl) {
                match event {
                    vcl_event_e::VCL_EVENT_WARM => vcl::warm(vcl),
                    vcl_event_e::VCL_EVENT_COLD => vcl::cold(vcl),
                    vcl_event_e::VCL_EVENT_DISCARD => vcl::discard(vcl),
                    _ => {}
                }
            }
            0
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn vmod_subnets(
    ctx: *const vrt_ctx,
    priv_vcl: *mut vmod_priv,
    masks: VCL_STRING,
) {
    // SAFETY: the contract (module doc) for ctx, priv_vcl and masks.
    unsafe {
        guard(ctx, (), |ctx| {
            if let Some(vcl) = slot_of::<VclState>(priv_vcl) {
                vcl::subnets(ctx, vcl, &arg_str(masks));
            }
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn vmod_weights(
    ctx: *const vrt_ctx,
    priv_vcl: *mut vmod_priv,
    rules: VCL_STRING,
) {
    // SAFETY: the contract (module doc) for ctx, priv_vcl and rules.
    unsafe {
        guard(ctx, (), |ctx| {
            if let Some(vcl) = slot_of::<VclState>(priv_vcl) {
                vcl::weights(ctx, vcl, &arg_str(rules));
            }
        })
    }
}

#[no_mangle]
#[allow(clippy::too_many_arguments, reason = "one per argument in vmod.vcc")]
pub unsafe extern "C" fn vmod_sentinels(
    ctx: *const vrt_ctx,
    priv_vcl: *mut vmod_priv,
    locations: VCL_STRING,
    period: VCL_INT,
    connection_timeout: VCL_INT,
    command_timeout: VCL_INT,
    protocol: VCL_ENUM,
    tls: VCL_BOOL,
    tls_cafile: VCL_STRING,
    tls_capath: VCL_STRING,
    tls_certfile: VCL_STRING,
    tls_keyfile: VCL_STRING,
    tls_sni: VCL_STRING,
    password: VCL_STRING,
    debug: VCL_BOOL,
    discover: VCL_BOOL,
    tls_verify_name: VCL_BOOL,
) {
    // SAFETY: the contract (module doc) for ctx, priv_vcl and the STRING / ENUM arguments.
    unsafe {
        guard(ctx, (), |ctx| {
            let Some(vcl) = slot_of::<VclState>(priv_vcl) else {
                return;
            };
            let tls_strings =
                TlsStrings::new(tls_cafile, tls_capath, tls_certfile, tls_keyfile, tls_sni);
            let args = SentinelArgs {
                locations: &arg_str(locations),
                period,
                connection_timeout,
                command_timeout,
                protocol: &arg_str(protocol),
                tls: tls_strings.args(tls, tls_verify_name),
                password: Secret(&arg_str(password)),
                debug: debug != 0,
                discover: discover != 0,
            };
            vcl::sentinels(ctx, vcl, &args);
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn vmod_use(
    ctx: *const vrt_ctx,
    priv_vcl: *mut vmod_priv,
    priv_task: *mut vmod_priv,
    db: VCL_STRING,
) {
    // SAFETY: the contract (module doc) for ctx, the PRIVs and db.
    unsafe {
        guard(ctx, (), |ctx| {
            if let Some(vcl) = slot_of::<VclState>(priv_vcl) {
                vcl::use_db(ctx, vcl, slot_of::<TaskState>(priv_task), arg_bytes(db));
            }
        })
    }
}

#[no_mangle]
#[allow(clippy::too_many_arguments, reason = "one per argument in vmod.vcc")]
pub unsafe extern "C" fn vmod_db__init(
    ctx: *const vrt_ctx,
    out: *mut *mut vmod_redis_db,
    vcl_name: *const c_char,
    priv_vcl: *mut vmod_priv,
    location: VCL_STRING,
    role: VCL_ENUM,
    connection_timeout: VCL_INT,
    connection_ttl: VCL_INT,
    command_timeout: VCL_INT,
    max_command_retries: VCL_INT,
    shared_connections: VCL_BOOL,
    max_connections: VCL_INT,
    protocol: VCL_ENUM,
    tls: VCL_BOOL,
    tls_cafile: VCL_STRING,
    tls_capath: VCL_STRING,
    tls_certfile: VCL_STRING,
    tls_keyfile: VCL_STRING,
    tls_sni: VCL_STRING,
    user: VCL_STRING,
    password: VCL_STRING,
    sickness_ttl: VCL_INT,
    ignore_slaves: VCL_BOOL,
    // The C VMOD's order for this Varnish (build.rs: `cvmod_db_debug_first`).
    #[cfg(cvmod_db_debug_first)] debug: VCL_BOOL,
    max_cluster_hops: VCL_INT,
    #[cfg(not(cvmod_db_debug_first))] debug: VCL_BOOL,
    pipelining: VCL_BOOL,
    near_cache: VCL_INT,
    near_cache_ttl: VCL_INT,
    tls_verify_name: VCL_BOOL,
) {
    // SAFETY: the contract for ctx, priv_vcl and the STRINGs; `out` is the new object's slot.
    unsafe {
        guard(ctx, (), |ctx| {
            let (Some(out), Some(vcl)) = (out.as_mut(), slot_of::<VclState>(priv_vcl)) else {
                ctx.fail("[REDIS] db: called without an object or PRIV_VCL slot");
                return;
            };
            *out = ptr::null_mut();
            let tls_strings =
                TlsStrings::new(tls_cafile, tls_capath, tls_certfile, tls_keyfile, tls_sni);
            let args = DbArgs {
                location: &arg_str(location),
                role: &arg_str(role),
                connection_timeout,
                connection_ttl,
                command_timeout,
                max_command_retries,
                shared_connections: shared_connections != 0,
                max_connections,
                protocol: &arg_str(protocol),
                tls: tls_strings.args(tls, tls_verify_name),
                user: &arg_str(user),
                password: Secret(&arg_str(password)),
                sickness_ttl,
                ignore_slaves: ignore_slaves != 0,
                max_cluster_hops,
                debug: debug != 0,
                pipelining: pipelining != 0,
                near_cache,
                near_cache_ttl,
            };
            if let Some(db) = vcl::db_new(ctx, vcl, &arg_str(vcl_name), &args) {
                *out = Box::into_raw(Box::new(db)).cast::<vmod_redis_db>();
            }
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn vmod_db__fini(objp: *mut *mut vmod_redis_db) {
    // SAFETY: varnishd passes the slot vmod_db__init wrote, once, after the
    // object's last call (so the Box is ours to free, and only here).
    unsafe {
        let Some(slot) = objp.as_mut() else { return };
        let obj = std::mem::replace(slot, ptr::null_mut()).cast::<DbObject>();
        if !obj.is_null() {
            // Dropping closes connections and pool threads; never unwind into C.
            let _ =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(Box::from_raw(obj))));
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn vmod_db_add_server(
    ctx: *const vrt_ctx,
    obj: *mut vmod_redis_db,
    location: VCL_STRING,
    role: VCL_ENUM,
) {
    // SAFETY: the contract (module doc) for ctx, obj, location and role.
    unsafe {
        guard(ctx, (), |ctx| {
            if let Some(db) = object(obj) {
                vcl::add_server(ctx, db, &arg_str(location), &arg_str(role));
            }
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn vmod_add_server(
    ctx: *const vrt_ctx,
    priv_vcl: *mut vmod_priv,
    priv_task: *mut vmod_priv,
    location: VCL_STRING,
    role: VCL_ENUM,
    db: VCL_STRING,
) {
    // SAFETY: the contract (module doc) for ctx, the PRIVs, location, role and db.
    unsafe {
        guard(ctx, (), |ctx| {
            if let Some(db) = proxied(ctx, priv_vcl, priv_task, db) {
                vcl::add_server(ctx, &db, &arg_str(location), &arg_str(role));
            }
        })
    }
}

// ---- building and running a command -----------------------------------

entry!(vmod_db_command, vmod_command, (name: VCL_STRING) -> () = (),
    |ctx, db| vcl::command(ctx, db, arg_bytes(name)));
entry!(vmod_db_push, vmod_push, (arg: VCL_STRING) -> () = (),
    |ctx, db| vcl::push(ctx, db, arg_bytes(arg)));
entry!(vmod_db_timeout, vmod_timeout, (command_timeout: VCL_INT) -> () = (),
    |ctx, db| vcl::timeout(ctx, db, command_timeout));
entry!(vmod_db_retries, vmod_retries, (max_command_retries: VCL_INT) -> () = (),
    |ctx, db| vcl::retries(ctx, db, max_command_retries));
entry!(vmod_db_execute, vmod_execute, (master: VCL_BOOL) -> () = (),
    |ctx, db| vcl::execute(ctx, db, master != 0));
entry!(vmod_db_free, vmod_free, () -> () = (),
    |ctx, db| vcl::free(ctx, db));

/// The optional arguments of `easy_execute`, in order, as given.
macro_rules! easy_args {
    ($args:expr, $($valid:ident / $value:ident),*) => {
        [$(($args.$valid != 0).then(|| arg_bytes($args.$value))),*]
    };
}

/// # Safety
/// `args` is the argument struct varnishd passed.
unsafe fn easy_execute(
    ctx: &Ctx,
    db: &DbObject,
    args: &super::bindings::arg_vmod_redis_db_easy_execute,
) {
    // SAFETY: the caller's contract (the STRINGs of `args`).
    unsafe {
        let given = easy_args!(
            args,
            valid_cmd_arg1 / cmd_arg1,
            valid_cmd_arg2 / cmd_arg2,
            valid_cmd_arg3 / cmd_arg3,
            valid_cmd_arg4 / cmd_arg4,
            valid_cmd_arg5 / cmd_arg5,
            valid_cmd_arg6 / cmd_arg6,
            valid_cmd_arg7 / cmd_arg7,
            valid_cmd_arg8 / cmd_arg8,
            valid_cmd_arg9 / cmd_arg9,
            valid_cmd_arg10 / cmd_arg10,
            valid_cmd_arg11 / cmd_arg11,
            valid_cmd_arg12 / cmd_arg12,
            valid_cmd_arg13 / cmd_arg13,
            valid_cmd_arg14 / cmd_arg14,
            valid_cmd_arg15 / cmd_arg15,
            valid_cmd_arg16 / cmd_arg16
        );
        let pushed: Vec<&[u8]> = given.into_iter().flatten().collect();
        vcl::easy_execute(
            ctx,
            db,
            arg_bytes(args.command),
            &pushed,
            (args.valid_timeout != 0).then_some(args.timeout),
            (args.valid_retries != 0).then_some(args.retries),
            args.master != 0,
        );
    }
}

#[no_mangle]
pub unsafe extern "C" fn vmod_db_easy_execute(
    ctx: *const vrt_ctx,
    obj: *mut vmod_redis_db,
    args: *mut super::bindings::arg_vmod_redis_db_easy_execute,
) {
    // SAFETY: the contract for ctx and obj; `args` is vcc_if.h's struct, STRINGs as the contract's.
    unsafe {
        guard(ctx, (), |ctx| {
            if let (Some(db), Some(args)) = (object(obj), args.as_ref()) {
                easy_execute(ctx, db, args);
            }
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn vmod_easy_execute(
    ctx: *const vrt_ctx,
    args: *mut super::bindings::arg_vmod_redis_easy_execute,
) {
    // SAFETY: the contract for ctx; `args` is vcc_if.h's struct, its PRIVs and STRINGs as the contract's.
    unsafe {
        guard(ctx, (), |ctx| {
            let Some(args) = args.as_ref() else { return };
            if let Some(db) = proxied(ctx, args.arg1, args.arg2, args.db) {
                // Same layout minus the PRIVs and db: copy into the method's struct.
                let method_args = super::bindings::arg_vmod_redis_db_easy_execute {
                    valid_cmd_arg1: args.valid_cmd_arg1,
                    valid_cmd_arg2: args.valid_cmd_arg2,
                    valid_cmd_arg3: args.valid_cmd_arg3,
                    valid_cmd_arg4: args.valid_cmd_arg4,
                    valid_cmd_arg5: args.valid_cmd_arg5,
                    valid_cmd_arg6: args.valid_cmd_arg6,
                    valid_cmd_arg7: args.valid_cmd_arg7,
                    valid_cmd_arg8: args.valid_cmd_arg8,
                    valid_cmd_arg9: args.valid_cmd_arg9,
                    valid_cmd_arg10: args.valid_cmd_arg10,
                    valid_cmd_arg11: args.valid_cmd_arg11,
                    valid_cmd_arg12: args.valid_cmd_arg12,
                    valid_cmd_arg13: args.valid_cmd_arg13,
                    valid_cmd_arg14: args.valid_cmd_arg14,
                    valid_cmd_arg15: args.valid_cmd_arg15,
                    valid_cmd_arg16: args.valid_cmd_arg16,
                    valid_timeout: args.valid_timeout,
                    valid_retries: args.valid_retries,
                    command: args.command,
                    cmd_arg1: args.cmd_arg1,
                    cmd_arg2: args.cmd_arg2,
                    cmd_arg3: args.cmd_arg3,
                    cmd_arg4: args.cmd_arg4,
                    cmd_arg5: args.cmd_arg5,
                    cmd_arg6: args.cmd_arg6,
                    cmd_arg7: args.cmd_arg7,
                    cmd_arg8: args.cmd_arg8,
                    cmd_arg9: args.cmd_arg9,
                    cmd_arg10: args.cmd_arg10,
                    cmd_arg11: args.cmd_arg11,
                    cmd_arg12: args.cmd_arg12,
                    cmd_arg13: args.cmd_arg13,
                    cmd_arg14: args.cmd_arg14,
                    cmd_arg15: args.cmd_arg15,
                    cmd_arg16: args.cmd_arg16,
                    timeout: args.timeout,
                    retries: args.retries,
                    master: args.master,
                };
                easy_execute(ctx, &db, &method_args);
            }
        })
    }
}

// ---- reply readers ------------------------------------------------------

fn is_kind(reply: Option<&Reply>, kind: ReplyKind) -> VCL_BOOL {
    vcl_bool(reply.is_some_and(|reply| reply.kind() == kind))
}

/// Element `index` / `path` of an array reply.
///
/// # Safety
/// `path` is a VCL STRING argument.
unsafe fn element(reply: Option<&Reply>, index: VCL_INT, path: VCL_STRING) -> Option<&Reply> {
    // SAFETY: the caller's contract.
    reply?.element(index, &unsafe { arg_str(path) })
}

fn text_copy(ctx: &Ctx, text: Option<&[u8]>) -> VCL_STRING {
    text.map_or(ptr::null(), |text| ctx.copy_str(text))
}

reader!(vmod_db_replied, vmod_replied, () -> VCL_BOOL = 0,
    |_ctx, reply| vcl_bool(reply.is_some()));
reader!(vmod_db_reply_is_error, vmod_reply_is_error, () -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(reply, ReplyKind::Error));
reader!(vmod_db_reply_is_nil, vmod_reply_is_nil, () -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(reply, ReplyKind::Nil));
reader!(vmod_db_reply_is_status, vmod_reply_is_status, () -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(reply, ReplyKind::Status));
reader!(vmod_db_reply_is_integer, vmod_reply_is_integer, () -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(reply, ReplyKind::Integer));
reader!(vmod_db_reply_is_boolean, vmod_reply_is_boolean, () -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(reply, ReplyKind::Boolean));
reader!(vmod_db_reply_is_double, vmod_reply_is_double, () -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(reply, ReplyKind::Double));
reader!(vmod_db_reply_is_string, vmod_reply_is_string, () -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(reply, ReplyKind::String));
reader!(vmod_db_reply_is_array, vmod_reply_is_array, () -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(reply, ReplyKind::Array));

reader!(vmod_db_get_reply, vmod_get_reply, () -> VCL_STRING = ptr::null(),
    |ctx, reply| text_copy(ctx, reply.and_then(Reply::text).as_deref()));
reader!(vmod_db_get_error_reply, vmod_get_error_reply, () -> VCL_STRING = ptr::null(),
    |ctx, reply| text_copy(ctx, reply.and_then(|r| r.text_of_kind(ReplyKind::Error))));
reader!(vmod_db_get_status_reply, vmod_get_status_reply, () -> VCL_STRING = ptr::null(),
    |ctx, reply| text_copy(ctx, reply.and_then(|r| r.text_of_kind(ReplyKind::Status))));
reader!(vmod_db_get_string_reply, vmod_get_string_reply, () -> VCL_STRING = ptr::null(),
    |ctx, reply| text_copy(ctx, reply.and_then(|r| r.text_of_kind(ReplyKind::String))));
reader!(vmod_db_get_integer_reply, vmod_get_integer_reply, () -> VCL_INT = 0,
    |_ctx, reply| reply.map_or(0, Reply::integer));
reader!(vmod_db_get_boolean_reply, vmod_get_boolean_reply, () -> VCL_BOOL = 0,
    |_ctx, reply| vcl_bool(reply.is_some_and(Reply::boolean)));
reader!(vmod_db_get_double_reply, vmod_get_double_reply, () -> VCL_REAL = 0.0,
    |_ctx, reply| reply.map_or(0.0, Reply::double));
reader!(vmod_db_get_blob_reply, vmod_get_blob_reply, () -> VCL_BLOB = ptr::null(),
    |ctx, reply| reply
        .and_then(|r| r.text_of_kind(ReplyKind::String))
        .map_or(ptr::null(), |bytes| ctx.copy_blob(bytes)));
reader!(vmod_db_get_map_reply_value, vmod_get_map_reply_value, (key: VCL_STRING) -> VCL_STRING = ptr::null(),
    |ctx, reply| text_copy(ctx, reply
        .and_then(|r| r.map_value(arg_bytes(key)))
        .and_then(Reply::text)
        .as_deref()));
reader!(vmod_db_get_array_reply_length, vmod_get_array_reply_length, () -> VCL_INT = 0,
    |_ctx, reply| reply.map_or(0, Reply::array_len));

reader!(vmod_db_array_reply_is_error, vmod_array_reply_is_error, (index: VCL_INT); (path: VCL_STRING) -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(element(reply, index, path), ReplyKind::Error));
reader!(vmod_db_array_reply_is_nil, vmod_array_reply_is_nil, (index: VCL_INT); (path: VCL_STRING) -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(element(reply, index, path), ReplyKind::Nil));
reader!(vmod_db_array_reply_is_status, vmod_array_reply_is_status, (index: VCL_INT); (path: VCL_STRING) -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(element(reply, index, path), ReplyKind::Status));
reader!(vmod_db_array_reply_is_integer, vmod_array_reply_is_integer, (index: VCL_INT); (path: VCL_STRING) -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(element(reply, index, path), ReplyKind::Integer));
reader!(vmod_db_array_reply_is_boolean, vmod_array_reply_is_boolean, (index: VCL_INT); (path: VCL_STRING) -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(element(reply, index, path), ReplyKind::Boolean));
reader!(vmod_db_array_reply_is_double, vmod_array_reply_is_double, (index: VCL_INT); (path: VCL_STRING) -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(element(reply, index, path), ReplyKind::Double));
reader!(vmod_db_array_reply_is_string, vmod_array_reply_is_string, (index: VCL_INT); (path: VCL_STRING) -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(element(reply, index, path), ReplyKind::String));
reader!(vmod_db_array_reply_is_array, vmod_array_reply_is_array, (index: VCL_INT); (path: VCL_STRING) -> VCL_BOOL = 0,
    |_ctx, reply| is_kind(element(reply, index, path), ReplyKind::Array));
reader!(vmod_db_get_array_reply_value, vmod_get_array_reply_value, (index: VCL_INT); (path: VCL_STRING) -> VCL_STRING = ptr::null(),
    |ctx, reply| text_copy(ctx, element(reply, index, path).and_then(Reply::text).as_deref()));

// ---- introspection --------------------------------------------------------

entry!(vmod_db_stats, vmod_stats,
(format: VCL_ENUM, stream: VCL_BOOL, prometheus_name_prefix: VCL_STRING,
 prometheus_default_labels: VCL_BOOL, prometheus_extra_labels: VCL_STRING);
(extended: VCL_BOOL) -> VCL_STRING = ptr::null(),
|ctx, db| {
    let prefix = arg_str(prometheus_name_prefix);
    let extra = arg_str(prometheus_extra_labels);
    let options = PrometheusOptions {
        name_prefix: &prefix,
        default_labels: prometheus_default_labels != 0,
        extra_labels: &extra,
    };
    match vcl::stats(ctx, db, &arg_str(format), stream != 0, &options, extended != 0) {
        Some(text) => ctx.copy_str(text.as_bytes()),
        None => c"".as_ptr(),
    }
});
entry!(vmod_db_counter, vmod_counter, (name: VCL_STRING) -> VCL_INT = 0,
    |ctx, db| vcl::counter(ctx, db, &arg_str(name)));
