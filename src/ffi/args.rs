//! VCL arguments made Rust values, once for every entry point: [`FromVcl`]
//! and its conversions (STRING and ENUM, NULL being ""; BOOL, INT, REAL and
//! DURATION; an optional argument; a PRIV slot; the argument struct of
//! `easy_execute`). `exports` declares, per argument, its C type and the
//! Rust type it becomes (`export!`), and runs the conversions inside the
//! entry point's panic guard.
use std::any::Any;
use std::borrow::Cow;
use std::ffi::{c_char, CStr};

use super::bindings::{
    arg_vmod_redis_db_easy_execute, arg_vmod_redis_easy_execute, vcl_event_e, vmod_priv, VCL_BOOL,
    VCL_INT, VCL_REAL, VCL_STRING,
};
use super::ctx::slot_of;
use crate::vcl::{EasyExecute, Event, TaskState, VclState};

/// A Rust value made from one argument varnishd passed.
pub(super) trait FromVcl<C>: Sized {
    /// The value of `arg`; `None` when the call cannot go on (a NULL PRIV
    /// slot or object, which varnishd never passes): the entry point then
    /// returns its fallback, as it did before any conversion existed.
    ///
    /// # Safety
    /// `arg` is an argument of the running call, of the type vmod.vcc
    /// declares (the contract of `exports`): a STRING or ENUM is NULL or
    /// NUL-terminated and valid for the call; a PRIV is this VMOD's slot;
    /// an argument struct is vcc_if.h's, valid for the call. The value
    /// borrowed from it does not outlive the call.
    unsafe fn from_vcl(arg: C) -> Option<Self>;
}

/// A STRING (or ENUM) as bytes; NULL (an unset header) is "".
impl FromVcl<VCL_STRING> for &[u8] {
    unsafe fn from_vcl(arg: VCL_STRING) -> Option<Self> {
        if arg.is_null() {
            return Some(b"");
        }
        // SAFETY: not NULL, so NUL-terminated and valid for the call.
        Some(unsafe { CStr::from_ptr(arg) }.to_bytes())
    }
}

/// A STRING (or ENUM) as text: invalid UTF-8 becomes U+FFFD; NULL is "".
impl<'a> FromVcl<VCL_STRING> for Cow<'a, str> {
    unsafe fn from_vcl(arg: VCL_STRING) -> Option<Self> {
        // SAFETY: the caller's contract is the bytes' one.
        let bytes: &[u8] = unsafe { FromVcl::from_vcl(arg) }?;
        Some(String::from_utf8_lossy(bytes))
    }
}

impl FromVcl<VCL_BOOL> for bool {
    unsafe fn from_vcl(arg: VCL_BOOL) -> Option<Self> {
        Some(arg != 0)
    }
}

impl FromVcl<VCL_INT> for i64 {
    unsafe fn from_vcl(arg: VCL_INT) -> Option<Self> {
        Some(arg)
    }
}

/// A REAL or a DURATION (both a C double).
impl FromVcl<VCL_REAL> for f64 {
    unsafe fn from_vcl(arg: VCL_REAL) -> Option<Self> {
        Some(arg)
    }
}

/// An optional argument of an argument struct: its `valid_*` flag and its
/// value; `None` when VCL left it out.
impl<C, T: FromVcl<C>> FromVcl<(c_char, C)> for Option<T> {
    unsafe fn from_vcl((valid, arg): (c_char, C)) -> Option<Self> {
        Some(if valid != 0 {
            // SAFETY: the caller's contract, for the value.
            unsafe { T::from_vcl(arg) }
        } else {
            None
        })
    }
}

/// The value in this VMOD's PRIV slot (PRIV_VCL, PRIV_TASK), created on
/// first use.
impl<T: Any + Default> FromVcl<*mut vmod_priv> for &T {
    unsafe fn from_vcl(arg: *mut vmod_priv) -> Option<Self> {
        // SAFETY: the caller's contract is slot_of's.
        unsafe { slot_of(arg) }
    }
}

/// As `&T`, for the entry points that go on without the slot.
impl<T: Any + Default> FromVcl<*mut vmod_priv> for Option<&T> {
    unsafe fn from_vcl(arg: *mut vmod_priv) -> Option<Self> {
        // SAFETY: the caller's contract is slot_of's.
        Some(unsafe { slot_of(arg) })
    }
}

/// The events the VCL layer acts on (`None`: another one).
impl FromVcl<vcl_event_e> for Option<Event> {
    unsafe fn from_vcl(arg: vcl_event_e) -> Option<Self> {
        Some(match arg {
            vcl_event_e::VCL_EVENT_LOAD => Some(Event::Load),
            vcl_event_e::VCL_EVENT_WARM => Some(Event::Warm),
            vcl_event_e::VCL_EVENT_COLD => Some(Event::Cold),
            vcl_event_e::VCL_EVENT_DISCARD => Some(Event::Discard),
            #[allow(
                unreachable_patterns,
                reason = "none before Varnish 8.0, which adds VDI_EVENT_SICK"
            )]
            _ => None,
        })
    }
}

/// The arguments of `easy_execute` as given, from either argument struct
/// (the method's, and the function's with its PRIVs and `db` besides: the
/// same field names).
macro_rules! easy_execute {
    ($args:expr, $($valid:ident / $value:ident),*) => {{
        let args = $args;
        // SAFETY: the caller's contract (STRINGs of vcc_if.h's struct).
        unsafe {
            EasyExecute {
                command: FromVcl::from_vcl(args.command)?,
                pushed: [$(FromVcl::from_vcl((args.$valid, args.$value))?),*],
                timeout_ms: FromVcl::from_vcl((args.valid_timeout, args.timeout))?,
                max_retries: FromVcl::from_vcl((args.valid_retries, args.retries))?,
                master: FromVcl::from_vcl(args.master)?,
            }
        }
    }};
    ($args:expr) => {
        easy_execute!($args,
            valid_cmd_arg1 / cmd_arg1, valid_cmd_arg2 / cmd_arg2,
            valid_cmd_arg3 / cmd_arg3, valid_cmd_arg4 / cmd_arg4,
            valid_cmd_arg5 / cmd_arg5, valid_cmd_arg6 / cmd_arg6,
            valid_cmd_arg7 / cmd_arg7, valid_cmd_arg8 / cmd_arg8,
            valid_cmd_arg9 / cmd_arg9, valid_cmd_arg10 / cmd_arg10,
            valid_cmd_arg11 / cmd_arg11, valid_cmd_arg12 / cmd_arg12,
            valid_cmd_arg13 / cmd_arg13, valid_cmd_arg14 / cmd_arg14,
            valid_cmd_arg15 / cmd_arg15, valid_cmd_arg16 / cmd_arg16)
    };
}

/// `.easy_execute(...)`'s argument struct.
impl<'a> FromVcl<*mut arg_vmod_redis_db_easy_execute> for EasyExecute<'a> {
    unsafe fn from_vcl(arg: *mut arg_vmod_redis_db_easy_execute) -> Option<Self> {
        // SAFETY: NULL or vcc_if.h's struct, valid for the call.
        Some(easy_execute!(unsafe { arg.as_ref() }?))
    }
}

/// `redis.easy_execute(..., db)`: the database it names, and the call.
pub(super) struct ProxiedEasyExecute<'a> {
    pub(super) vcl: &'a VclState,
    pub(super) task: Option<&'a TaskState>,
    pub(super) db: &'a [u8],
    pub(super) call: EasyExecute<'a>,
}

impl<'a> FromVcl<*mut arg_vmod_redis_easy_execute> for ProxiedEasyExecute<'a> {
    unsafe fn from_vcl(arg: *mut arg_vmod_redis_easy_execute) -> Option<Self> {
        // SAFETY: NULL or vcc_if.h's struct, valid for the call.
        let args = unsafe { arg.as_ref() }?;
        // SAFETY: its PRIV_VCL (arg1), PRIV_TASK (arg2) and STRING db.
        let (vcl, task, db) = unsafe {
            (
                FromVcl::from_vcl(args.arg1)?,
                FromVcl::from_vcl(args.arg2)?,
                FromVcl::from_vcl(args.db)?,
            )
        };
        Some(ProxiedEasyExecute {
            vcl,
            task,
            db,
            call: easy_execute!(args),
        })
    }
}
