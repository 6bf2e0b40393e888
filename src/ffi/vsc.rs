//! The varnishstat segment of one database object, `REDIS.<vcl>.<object>`
//! (vmod_redis.vsc, compiled by vsctool.py in build.rs). Its memory is the
//! database's counters themselves: [`Stats`](crate::stats::Stats) bumps
//! them in place, varnishstat reads them from shared memory.
use std::ptr;
use std::sync::atomic::AtomicU64;

use super::bindings;
use super::ctx::Ctx;
use super::log::c_text;
use crate::stats::{Counter, CounterMemory};

// The generated struct is one uint64_t per counter, in Counter::ALL order
// (a unit test in src/stats/tests.rs checks the names and order of vmod_redis.vsc).
const _: () = assert!(
    std::mem::size_of::<bindings::VSC_redis>() == Counter::COUNT * std::mem::size_of::<u64>()
);

struct Segment {
    seg: *mut bindings::vsc_seg,
    cells: *const [AtomicU64; Counter::COUNT],
}

// SAFETY: the cells are atomics in shared memory that lives until Drop;
// `seg` is only handed to VRT_VSC_* functions, which lock inside varnishd.
unsafe impl Send for Segment {}
// SAFETY: as for Send.
unsafe impl Sync for Segment {}

/// The varnishstat segment `REDIS.<vcl>.<object>` for a database object
/// being created in vcl_init (hidden until the VCL is warm); `None`
/// outside a VCL.
pub(crate) fn counter_segment(ctx: &Ctx, object: &str) -> Option<Box<dyn CounterMemory>> {
    Segment::new(ctx, object).map(|s| -> Box<dyn CounterMemory> { Box::new(s) })
}

impl Segment {
    /// Allocates `REDIS.<vcl>.<object>`, hidden until the VCL turns warm
    /// (as Varnish hides its backends' counters while their VCL is cold).
    fn new(ctx: &Ctx, object: &str) -> Option<Segment> {
        let vcl = ctx.vcl_name()?;
        let ident = c_text(&format!("{vcl}.{object}"));
        let mut seg: *mut bindings::vsc_seg = ptr::null_mut();
        // SAFETY: "%s" with one NUL-terminated string; a NULL cluster asks
        // for a segment of its own. The memory returned is zeroed, 8-byte
        // aligned and VSC_redis_size long (checked above).
        let memory = unsafe {
            bindings::VSC_redis_New(ptr::null_mut(), &mut seg, c"%s".as_ptr(), ident.as_ptr())
        };
        if memory.is_null() || seg.is_null() {
            return None;
        }
        // SAFETY: seg was just allocated.
        unsafe { bindings::VRT_VSC_Hide(seg) };
        Some(Segment {
            seg,
            cells: memory.cast(),
        })
    }
}

impl CounterMemory for Segment {
    fn cells(&self) -> &[AtomicU64; Counter::COUNT] {
        // SAFETY: valid until Drop, which needs &mut self.
        unsafe { &*self.cells }
    }

    fn set_visible(&self, visible: bool) {
        // SAFETY: seg is live until Drop.
        unsafe {
            if visible {
                bindings::VRT_VSC_Reveal(self.seg);
            } else {
                bindings::VRT_VSC_Hide(self.seg);
            }
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: seg came from VSC_redis_New and is destroyed once; the
        // cells are not used after this (Drop has the only reference).
        unsafe { bindings::VSC_redis_Destroy(&mut self.seg) };
    }
}
