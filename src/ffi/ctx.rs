//! The safe face of one call from varnishd: [`Ctx`] over `VRT_CTX` (the
//! task's log, `VRT_fail`, workspace copies, per-task slots, synthetic
//! bodies, the VCL's name), and the PRIV slots behind it. The raw context
//! never leaves this file: the VCL layer and the varnishstat segment work
//! on [`Ctx`]'s safe methods; only `exports` sits above it.
use std::any::Any;
use std::ffi::{c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use super::bindings::{
    self, vmod_priv, vmod_priv_methods, vrt_blob, vrt_ctx, VCL_BLOB, VCL_STRING,
};
use super::log::c_text;
use crate::logger::Level;

/// A borrowed `VRT_CTX`, valid for one call from varnishd.
pub(crate) struct Ctx<'a> {
    raw: &'a vrt_ctx,
}

impl<'a> Ctx<'a> {
    /// # Safety
    /// `ptr` is the `VRT_CTX` varnishd passed to the current call.
    pub(super) unsafe fn from_raw(ptr: *const vrt_ctx) -> Option<Ctx<'a>> {
        // SAFETY: NULL or a live VRT_CTX, by the caller's contract.
        unsafe { ptr.as_ref() }.map(|raw| Ctx { raw })
    }

    /// Logs `msg` to the task's VSL, or outside any transaction when there
    /// is no task (vcl_init, events), and to the other sinks.
    pub(crate) fn log(&self, level: Level, msg: &str) {
        super::log::write(self.raw.vsl, level, msg);
    }

    /// Fails the task (503) or, in vcl_init, the `vcl.load`, with `msg`.
    pub(crate) fn fail(&self, msg: &str) {
        let msg = c_text(msg);
        // SAFETY: "%s" with one NUL-terminated string; raw is the live
        // VRT_CTX of the call.
        unsafe { bindings::VRT_fail(self.raw, c"%s".as_ptr(), msg.as_ptr()) }
    }

    /// True in `vcl_init`.
    pub(crate) fn in_init(&self) -> bool {
        self.raw.method & bindings::VCL_MET_INIT != 0
    }

    /// True in `vcl_synth` and `vcl_backend_error`, where a synthetic body
    /// can be written.
    pub(crate) fn in_synth(&self) -> bool {
        self.raw.method & (bindings::VCL_MET_SYNTH | bindings::VCL_MET_BACKEND_ERROR) != 0
    }

    /// Appends `text` to the synthetic body (only when [`in_synth`]).
    pub(crate) fn synth_write(&self, text: &str) {
        if !self.in_synth() {
            return;
        }
        let text = c_text(text);
        let mut parts = [text.as_ptr()];
        let strands = bindings::strands {
            // 8.0 (VRT 22.0) checks the magic of what VMODs pass in.
            #[cfg(vrt_struct_magic)]
            magic: bindings::STRANDS_MAGIC,
            n: 1,
            p: parts.as_mut_ptr(),
        };
        // SAFETY: the strands and its string outlive the call, which copies.
        unsafe { bindings::VRT_synth_strands(self.raw, &strands) }
    }

    /// Copies `bytes` into the task workspace as a NUL-terminated VCL
    /// STRING (ending at the first NUL byte, as VCL strings do). On
    /// workspace exhaustion, fails the task and returns NULL.
    pub(crate) fn copy_str(&self, bytes: &[u8]) -> VCL_STRING {
        let bytes = bytes.split(|b| *b == 0).next().unwrap_or_default();
        match self.ws_alloc(bytes.len() + 1) {
            Some(dst) => {
                // SAFETY: dst has len + 1 bytes of workspace.
                unsafe {
                    ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len());
                    *dst.add(bytes.len()) = 0;
                }
                dst.cast_const().cast()
            }
            None => ptr::null(),
        }
    }

    /// Copies `bytes` into the workspace as a BLOB (NUL bytes kept).
    pub(crate) fn copy_blob(&self, bytes: &[u8]) -> VCL_BLOB {
        let Some(data) = self.ws_alloc(bytes.len().max(1)) else {
            return ptr::null();
        };
        let Some(blob) = self.ws_alloc(std::mem::size_of::<vrt_blob>()) else {
            return ptr::null();
        };
        // SAFETY: both allocations are ours, sized and (WS_Alloc) aligned.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len());
            let blob = blob.cast::<vrt_blob>();
            blob.write(vrt_blob {
                #[cfg(vrt_struct_magic)]
                magic: bindings::VRT_BLOB_MAGIC,
                type_: 0,
                len: bytes.len(),
                blob: data.cast_const().cast(),
            });
            blob
        }
    }

    fn ws_alloc(&self, len: usize) -> Option<*mut u8> {
        let size = u32::try_from(len).ok();
        // SAFETY: ws is the task's workspace; WS_Alloc returns NULL (and
        // marks the overflow) when it is too small.
        let dst = size.map_or(ptr::null_mut(), |size| unsafe {
            bindings::WS_Alloc(self.raw.ws, size).cast::<u8>()
        });
        if dst.is_null() {
            self.fail(&format!(
                "[REDIS] workspace too small for a {len} bytes reply (raise workspace_client / workspace_backend)"
            ));
            None
        } else {
            Some(dst)
        }
    }

    /// The per-task value of type `T` stored under the address of `key`
    /// (one per database object), created on first use and freed at the
    /// end of the task.
    pub(crate) fn task_slot<T: Any + Default, K>(&self, key: &K) -> Option<&'a T> {
        let key = ptr::from_ref(key).cast::<c_void>();
        // SAFETY: VRT_priv_task returns the task's slot for `key` (NULL
        // outside a task); slot_of only reads / initialises it.
        unsafe { slot_of(bindings::VRT_priv_task(self.raw, key)) }
    }

    /// The name of the VCL of the call (`None` outside one).
    pub(crate) fn vcl_name(&self) -> Option<String> {
        if self.raw.vcl.is_null() {
            return None;
        }
        // SAFETY: vcl is the call's VCL, live for the call; VCL_Name
        // returns its NUL-terminated name (or NULL).
        let name = unsafe { bindings::VCL_Name(self.raw.vcl) };
        if name.is_null() {
            return None;
        }
        // SAFETY: not NULL, so NUL-terminated and valid for the call.
        let name = unsafe { CStr::from_ptr(name) };
        Some(name.to_string_lossy().into_owned())
    }
}

/// The value of type `T` in a PRIV slot varnishd passed (PRIV_VCL,
/// PRIV_TASK), created on first use; the slot's `fini` frees it.
///
/// # Safety
/// `slot` is a `struct vmod_priv *` varnishd passed to the current call.
pub(super) unsafe fn slot_of<'a, T: Any + Default>(slot: *mut vmod_priv) -> Option<&'a T> {
    // SAFETY: NULL or a live slot, by the caller's contract.
    let slot = unsafe { slot.as_mut() }?;
    if slot.priv_.is_null() {
        let value: Box<Box<dyn Any>> = Box::new(Box::new(T::default()));
        slot.priv_ = Box::into_raw(value).cast::<c_void>();
        slot.methods = &PRIV_METHODS.0;
    }
    // SAFETY: priv_ was set above (or by an earlier call) to a
    // Box<Box<dyn Any>>, freed only by priv_fini at the slot's end.
    let value = unsafe { &*slot.priv_.cast_const().cast::<Box<dyn Any>>() };
    value.downcast_ref::<T>()
}

/// `vmod_priv_methods` holds a C string pointer; this one is static and
/// never written, so sharing it between threads is fine.
struct PrivMethods(vmod_priv_methods);
// SAFETY: immutable static data (a pointer to a static C string).
unsafe impl Sync for PrivMethods {}

static PRIV_METHODS: PrivMethods = PrivMethods(vmod_priv_methods {
    magic: bindings::VMOD_PRIV_METHODS_MAGIC,
    type_: c"vmod_redis".as_ptr(),
    fini: Some(priv_fini),
});

unsafe extern "C" fn priv_fini(_ctx: *const vrt_ctx, value: *mut c_void) {
    if !value.is_null() {
        // Dropping may run arbitrary code (connections); never unwind into C.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: varnishd calls fini once, with the priv_ slot_of set.
            drop(unsafe { Box::from_raw(value.cast::<Box<dyn Any>>()) });
        }));
    }
}
