//! The `vmod_*` symbols vmod.vcc declares, as declarations: each names its
//! arguments with their C type and the Rust value they become
//! ([`FromVcl`]), and calls the matching `vcl::` function; `export!` makes
//! the `extern "C"` function, which runs the conversions and the call
//! under [`guard`] (a panic fails the task, never unwinds into varnishd).
//! A method and its proxied function come from one `entry!` line, so they
//! cannot drift apart; the generated signature checks (build.rs) make a
//! drift from vmod.vcc a compile error.
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

use super::args::{FromVcl, ProxiedEasyExecute};
use super::bindings::{
    arg_vmod_redis_db_easy_execute, arg_vmod_redis_easy_execute, vcl_event_e, vmod_priv,
    vmod_redis_db, vrt_ctx, VCL_BLOB, VCL_BOOL, VCL_ENUM, VCL_INT, VCL_REAL, VCL_STRING,
};
use super::ctx::Ctx;
use super::guard;
use crate::config::{DbArgs, Secret, SentinelArgs, TlsArgs};
use crate::database::Database;
use crate::protocol::{Reply, ReplyKind};
use crate::stats::PrometheusOptions;
use crate::vcl::{self, EasyExecute, Event, TaskState, VclState};

/// Declares an entry point: `fn name(ctx, arg: C type => Rust type, ...)
/// -> C type = fallback { body }`. The body sees `ctx` as a [`Ctx`] and
/// each argument converted; an argument that cannot be converted (a NULL
/// slot or object) returns the fallback, as does a panic (after failing
/// the task).
macro_rules! export {
    ($(#[$attr:meta])* fn $name:ident($ctx:ident $(, $(#[$cfg:meta])* $arg:ident: $cty:ty => $rty:ty)* $(,)?)
     $body:block) => {
        export!($(#[$attr])* fn $name($ctx $(, $(#[$cfg])* $arg: $cty => $rty)*) -> () = (); $body);
    };
    ($(#[$attr:meta])* fn $name:ident($ctx:ident $(, $(#[$cfg:meta])* $arg:ident: $cty:ty => $rty:ty)* $(,)?)
     -> $ret:ty = $fallback:expr; $body:block) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(ctx: *const vrt_ctx $(, $(#[$cfg])* $arg: $cty)*) -> $ret {
            // SAFETY: the contract (module doc): ctx is the call's VRT_CTX
            // and each argument is of the type vmod.vcc declares.
            unsafe {
                guard(ctx, $fallback, |$ctx| {
                    $(
                        $(#[$cfg])*
                        let Some($arg): Option<$rty> = FromVcl::from_vcl($arg) else {
                            return $fallback;
                        };
                    )*
                    $body
                })
            }
        }
    };
}

/// The object varnishd holds for `new db = redis.db(...)`.
type DbObject = Arc<Database>;

/// The object of a method: NULL or a Box<DbObject> leaked by
/// `vmod_db__init`, freed only by `vmod_db__fini` (after the last call on
/// the object).
impl FromVcl<*mut vmod_redis_db> for &DbObject {
    unsafe fn from_vcl(arg: *mut vmod_redis_db) -> Option<Self> {
        // SAFETY: the contract above.
        unsafe { arg.cast_const().cast::<DbObject>().as_ref() }
    }
}

/// Where `vmod_db__init` leaves the new object (NULL when it fails).
struct NewObject<'a>(&'a mut *mut vmod_redis_db);

impl<'a> FromVcl<*mut *mut vmod_redis_db> for Option<NewObject<'a>> {
    unsafe fn from_vcl(arg: *mut *mut vmod_redis_db) -> Option<Self> {
        // SAFETY: NULL or the slot of the object being created.
        Some(unsafe { arg.as_mut() }.map(|slot| {
            *slot = ptr::null_mut();
            NewObject(slot)
        }))
    }
}

impl NewObject<'_> {
    fn set(self, db: DbObject) {
        *self.0 = Box::into_raw(Box::new(db)).cast::<vmod_redis_db>();
    }
}

/// The TLS arguments of `redis.db()` and `redis.sentinels()` (the same in
/// both), `enabled` the BOOL that turns them on.
fn tls_args<'a>(
    enabled: bool,
    [cafile, capath, certfile, keyfile, sni]: [&'a str; 5],
    verify_name: bool,
) -> TlsArgs<'a> {
    TlsArgs {
        enabled,
        cafile,
        capath,
        certfile,
        keyfile,
        sni,
        verify_name,
    }
}

/// Declares a method `vmod_db_<name>(ctx, obj, args...)` and its proxied
/// function `vmod_<name>(ctx, priv_vcl, priv_task, args..., db, after...)`
/// with one body working on `$db: &Arc<Database>`.
macro_rules! entry {
    ($method:ident, $function:ident,
     ($($arg:ident: $cty:ty => $rty:ty),*), |$ctx:ident, $db:ident| $body:expr) => {
        entry!($method, $function, ($($arg: $cty => $rty),*) -> () = (), |$ctx, $db| $body);
    };
    ($method:ident, $function:ident,
     ($($arg:ident: $cty:ty => $rty:ty),*) $(; ($($after:ident: $acty:ty => $arty:ty),*))?
     -> $ret:ty = $fallback:expr, |$ctx:ident, $db:ident| $body:expr) => {
        export!(fn $method($ctx, obj: *mut vmod_redis_db => &DbObject,
                $($arg: $cty => $rty,)* $($($after: $acty => $arty,)*)?)
            -> $ret = $fallback; {
                let $db = obj;
                $body
            });
        export!(fn $function($ctx, priv_vcl: *mut vmod_priv => &VclState,
                priv_task: *mut vmod_priv => Option<&TaskState>,
                $($arg: $cty => $rty,)* db: VCL_STRING => &[u8], $($($after: $acty => $arty,)*)?)
            -> $ret = $fallback; {
                let function = &stringify!($function)["vmod_".len()..];
                let Some(found) = vcl::resolve($ctx, priv_vcl, priv_task, function, db) else {
                    return $fallback;
                };
                let $db = &found;
                $body
            });
    };
}

/// A reply reader: `read` maps the slot's reply (None before any reply) to
/// the C value.
macro_rules! reader {
    ($method:ident, $function:ident,
     ($($arg:ident: $cty:ty => $rty:ty),*) $(; ($($after:ident: $acty:ty => $arty:ty),*))?
     -> $ret:ty = $fallback:expr, |$ctx:ident, $reply:ident| $read:expr) => {
        entry!($method, $function, ($($arg: $cty => $rty),*) $(; ($($after: $acty => $arty),*))?
            -> $ret = $fallback,
            |$ctx, db| vcl::with_reply($ctx, db, |$reply: Option<&Reply>| $read));
    };
}

// ---- module configuration, events, constructor ------------------------

export!(fn vmod_event_function(ctx,
    priv_vcl: *mut vmod_priv => Option<&VclState>,
    event: vcl_event_e => Option<Event>,
) -> c_int = 0; {
    // Before any connect (VCL_EVENT_LOAD comes before vcl_init).
    crate::connection::detached::set_before_first_thread(super::pin_module);
    if let (Some(vcl), Some(event)) = (priv_vcl, event) {
        vcl::event(ctx, vcl, event);
    }
    0
});

export!(fn vmod_version(_ctx) -> VCL_STRING = ptr::null(); {
    vcl::VERSION.as_ptr()
});

export!(fn vmod_subnets(ctx,
    priv_vcl: *mut vmod_priv => &VclState,
    masks: VCL_STRING => Cow<str>,
) {
    vcl::subnets(ctx, priv_vcl, &masks);
});

export!(fn vmod_weights(ctx,
    priv_vcl: *mut vmod_priv => &VclState,
    rules: VCL_STRING => Cow<str>,
) {
    vcl::weights(ctx, priv_vcl, &rules);
});

export!(
#[allow(clippy::too_many_arguments, reason = "one per argument in vmod.vcc")]
fn vmod_sentinels(ctx,
    priv_vcl: *mut vmod_priv => &VclState,
    locations: VCL_STRING => Cow<str>,
    period: VCL_INT => i64,
    connection_timeout: VCL_INT => i64,
    command_timeout: VCL_INT => i64,
    protocol: VCL_ENUM => Cow<str>,
    tls: VCL_BOOL => bool,
    tls_cafile: VCL_STRING => Cow<str>,
    tls_capath: VCL_STRING => Cow<str>,
    tls_certfile: VCL_STRING => Cow<str>,
    tls_keyfile: VCL_STRING => Cow<str>,
    tls_sni: VCL_STRING => Cow<str>,
    password: VCL_STRING => Cow<str>,
    debug: VCL_BOOL => bool,
    discover: VCL_BOOL => bool,
    tls_verify_name: VCL_BOOL => bool,
) {
    let tls_files: [&str; 5] = [&tls_cafile, &tls_capath, &tls_certfile, &tls_keyfile, &tls_sni];
    let args = SentinelArgs {
        locations: &locations,
        period,
        connection_timeout,
        command_timeout,
        protocol: &protocol,
        tls: tls_args(tls, tls_files, tls_verify_name),
        password: Secret(&password),
        debug,
        discover,
    };
    vcl::sentinels(ctx, priv_vcl, &args);
});

export!(fn vmod_use(ctx,
    priv_vcl: *mut vmod_priv => &VclState,
    priv_task: *mut vmod_priv => Option<&TaskState>,
    db: VCL_STRING => &[u8],
) {
    vcl::use_db(ctx, priv_vcl, priv_task, db);
});

export!(
#[allow(clippy::too_many_arguments, reason = "one per argument in vmod.vcc")]
fn vmod_db__init(ctx,
    out: *mut *mut vmod_redis_db => Option<NewObject>,
    vcl_name: *const c_char => Cow<str>,
    priv_vcl: *mut vmod_priv => Option<&VclState>,
    location: VCL_STRING => Cow<str>,
    role: VCL_ENUM => Cow<str>,
    connection_timeout: VCL_INT => i64,
    connection_ttl: VCL_INT => i64,
    command_timeout: VCL_INT => i64,
    max_command_retries: VCL_INT => i64,
    shared_connections: VCL_BOOL => bool,
    max_connections: VCL_INT => i64,
    protocol: VCL_ENUM => Cow<str>,
    tls: VCL_BOOL => bool,
    tls_cafile: VCL_STRING => Cow<str>,
    tls_capath: VCL_STRING => Cow<str>,
    tls_certfile: VCL_STRING => Cow<str>,
    tls_keyfile: VCL_STRING => Cow<str>,
    tls_sni: VCL_STRING => Cow<str>,
    user: VCL_STRING => Cow<str>,
    password: VCL_STRING => Cow<str>,
    sickness_ttl: VCL_INT => i64,
    ignore_slaves: VCL_BOOL => bool,
    // The C VMOD's order for this Varnish (build.rs: `cvmod_db_debug_first`).
    #[cfg(cvmod_db_debug_first)] debug: VCL_BOOL => bool,
    max_cluster_hops: VCL_INT => i64,
    #[cfg(not(cvmod_db_debug_first))] debug: VCL_BOOL => bool,
    pipelining: VCL_BOOL => bool,
    near_cache: VCL_INT => i64,
    near_cache_ttl: VCL_INT => i64,
    tls_verify_name: VCL_BOOL => bool,
) {
    let (Some(out), Some(vcl)) = (out, priv_vcl) else {
        ctx.fail("[REDIS] db: called without an object or PRIV_VCL slot");
        return;
    };
    let tls_files: [&str; 5] = [&tls_cafile, &tls_capath, &tls_certfile, &tls_keyfile, &tls_sni];
    let args = DbArgs {
        location: &location,
        role: &role,
        connection_timeout,
        connection_ttl,
        command_timeout,
        max_command_retries,
        shared_connections,
        max_connections,
        protocol: &protocol,
        tls: tls_args(tls, tls_files, tls_verify_name),
        user: &user,
        password: Secret(&password),
        sickness_ttl,
        ignore_slaves,
        max_cluster_hops,
        debug,
        pipelining,
        near_cache,
        near_cache_ttl,
    };
    if let Some(db) = vcl::db_new(ctx, vcl, &vcl_name, &args) {
        out.set(db);
    }
});

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

entry!(vmod_db_add_server, vmod_add_server,
    (location: VCL_STRING => Cow<str>, role: VCL_ENUM => Cow<str>),
    |ctx, db| vcl::add_server(ctx, db, &location, &role));

// ---- building and running a command -----------------------------------

entry!(vmod_db_command, vmod_command, (name: VCL_STRING => &[u8]),
    |ctx, db| vcl::command(ctx, db, name));
entry!(vmod_db_push, vmod_push, (arg: VCL_STRING => &[u8]),
    |ctx, db| vcl::push(ctx, db, arg));
entry!(vmod_db_timeout, vmod_timeout, (command_timeout: VCL_INT => i64),
    |ctx, db| vcl::timeout(ctx, db, command_timeout));
entry!(vmod_db_retries, vmod_retries, (max_command_retries: VCL_INT => i64),
    |ctx, db| vcl::retries(ctx, db, max_command_retries));
entry!(vmod_db_execute, vmod_execute, (master: VCL_BOOL => bool),
    |ctx, db| vcl::execute(ctx, db, master));
entry!(vmod_db_free, vmod_free, (), |ctx, db| vcl::free(ctx, db));

export!(fn vmod_db_easy_execute(ctx,
    obj: *mut vmod_redis_db => &DbObject,
    args: *mut arg_vmod_redis_db_easy_execute => EasyExecute,
) {
    vcl::easy_execute(ctx, obj, &args);
});

export!(fn vmod_easy_execute(ctx,
    args: *mut arg_vmod_redis_easy_execute => ProxiedEasyExecute,
) {
    if let Some(db) = vcl::resolve(ctx, args.vcl, args.task, "easy_execute", args.db) {
        vcl::easy_execute(ctx, &db, &args.call);
    }
});

// ---- reply readers ------------------------------------------------------

fn vcl_bool(value: bool) -> VCL_BOOL {
    VCL_BOOL::from(value)
}

fn is_kind(reply: Option<&Reply>, kind: ReplyKind) -> VCL_BOOL {
    vcl_bool(reply.is_some_and(|reply| reply.kind() == kind))
}

/// Element `index` / `path` of an array reply.
fn element<'r>(reply: Option<&'r Reply>, index: i64, path: &str) -> Option<&'r Reply> {
    reply?.element(index, path)
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
reader!(vmod_db_get_map_reply_value, vmod_get_map_reply_value,
    (key: VCL_STRING => &[u8]) -> VCL_STRING = ptr::null(),
    |ctx, reply| text_copy(ctx, reply
        .and_then(|r| r.map_value(key))
        .and_then(Reply::text)
        .as_deref()));
reader!(vmod_db_get_array_reply_length, vmod_get_array_reply_length, () -> VCL_INT = 0,
    |_ctx, reply| reply.map_or(0, Reply::array_len));

/// The readers of one element of an array reply: `(index, path)`.
macro_rules! element_reader {
    ($method:ident, $function:ident -> $ret:ty = $fallback:expr, |$ctx:ident, $element:ident| $read:expr) => {
        reader!($method, $function, (index: VCL_INT => i64); (path: VCL_STRING => Cow<str>)
            -> $ret = $fallback,
            |$ctx, reply| { let $element = element(reply, index, &path); $read });
    };
}

element_reader!(vmod_db_array_reply_is_error, vmod_array_reply_is_error -> VCL_BOOL = 0,
    |_ctx, element| is_kind(element, ReplyKind::Error));
element_reader!(vmod_db_array_reply_is_nil, vmod_array_reply_is_nil -> VCL_BOOL = 0,
    |_ctx, element| is_kind(element, ReplyKind::Nil));
element_reader!(vmod_db_array_reply_is_status, vmod_array_reply_is_status -> VCL_BOOL = 0,
    |_ctx, element| is_kind(element, ReplyKind::Status));
element_reader!(vmod_db_array_reply_is_integer, vmod_array_reply_is_integer -> VCL_BOOL = 0,
    |_ctx, element| is_kind(element, ReplyKind::Integer));
element_reader!(vmod_db_array_reply_is_boolean, vmod_array_reply_is_boolean -> VCL_BOOL = 0,
    |_ctx, element| is_kind(element, ReplyKind::Boolean));
element_reader!(vmod_db_array_reply_is_double, vmod_array_reply_is_double -> VCL_BOOL = 0,
    |_ctx, element| is_kind(element, ReplyKind::Double));
element_reader!(vmod_db_array_reply_is_string, vmod_array_reply_is_string -> VCL_BOOL = 0,
    |_ctx, element| is_kind(element, ReplyKind::String));
element_reader!(vmod_db_array_reply_is_array, vmod_array_reply_is_array -> VCL_BOOL = 0,
    |_ctx, element| is_kind(element, ReplyKind::Array));
element_reader!(vmod_db_get_array_reply_value, vmod_get_array_reply_value -> VCL_STRING = ptr::null(),
    |ctx, element| text_copy(ctx, element.and_then(Reply::text).as_deref()));

// ---- introspection --------------------------------------------------------

/// `.stats()` and `redis.stats()`: the options as `vcl::stats` takes them,
/// and its text as the VCL string ("" when it was streamed).
fn stats_entry(
    ctx: &Ctx,
    of: vcl::StatsOf,
    (format, stream, prefix, default_labels, extra_labels, extended): StatsArgs,
) -> VCL_STRING {
    let options = PrometheusOptions {
        name_prefix: &prefix,
        default_labels,
        extra_labels: &extra_labels,
    };
    match vcl::stats(ctx, of, &format, stream, &options, extended) {
        Some(text) => ctx.copy_str(text.as_bytes()),
        None => c"".as_ptr(),
    }
}

/// The arguments of `.stats()` but `db`, in vmod.vcc's order.
type StatsArgs<'a> = (Cow<'a, str>, bool, Cow<'a, str>, bool, Cow<'a, str>, bool);

export!(fn vmod_db_stats(ctx, obj: *mut vmod_redis_db => &DbObject,
    format: VCL_ENUM => Cow<str>, stream: VCL_BOOL => bool,
    prometheus_name_prefix: VCL_STRING => Cow<str>,
    prometheus_default_labels: VCL_BOOL => bool,
    prometheus_extra_labels: VCL_STRING => Cow<str>,
    extended: VCL_BOOL => bool,
) -> VCL_STRING = ptr::null(); {
    stats_entry(ctx, vcl::StatsOf::One(obj), (format, stream, prometheus_name_prefix,
        prometheus_default_labels, prometheus_extra_labels, extended))
});

// Not from `entry!`: `db="*"` ([ext]) names every database, not one.
export!(fn vmod_stats(ctx, priv_vcl: *mut vmod_priv => &VclState,
    priv_task: *mut vmod_priv => Option<&TaskState>,
    format: VCL_ENUM => Cow<str>, stream: VCL_BOOL => bool,
    prometheus_name_prefix: VCL_STRING => Cow<str>,
    prometheus_default_labels: VCL_BOOL => bool,
    prometheus_extra_labels: VCL_STRING => Cow<str>,
    db: VCL_STRING => &[u8],
    extended: VCL_BOOL => bool,
) -> VCL_STRING = ptr::null(); {
    let args = (format, stream, prometheus_name_prefix, prometheus_default_labels,
        prometheus_extra_labels, extended);
    if db == vcl::EVERY_DATABASE {
        return stats_entry(ctx, vcl::StatsOf::Every(priv_vcl), args);
    }
    let Some(found) = vcl::resolve(ctx, priv_vcl, priv_task, "stats", db) else {
        return ptr::null();
    };
    stats_entry(ctx, vcl::StatsOf::One(&found), args)
});
entry!(vmod_db_counter, vmod_counter, (name: VCL_STRING => Cow<str>) -> VCL_INT = 0,
    |ctx, db| vcl::counter(ctx, db, &name));
