/*
 * varnishd finds the VMOD through the dynamic symbol Vmod_redis_Data. The
 * struct vmodtool.py generates is compiled as Vmod_redis_Data_C (a C symbol
 * rustc's version script would hide); this constructor copies it into the
 * Rust-defined, exported Vmod_redis_Data when the .so is loaded.
 */
#include "config.h"
#include "vdef.h"
#include "vrt.h"

/* build.rs renames the generated symbol for vcc_if.c only. */
#undef Vmod_redis_Data

extern const struct vmod_data Vmod_redis_Data_C;
extern struct vmod_data Vmod_redis_Data;

__attribute__((constructor)) static void
vmod_redis_export_data(void)
{
	Vmod_redis_Data = Vmod_redis_Data_C;
}
