//! Links the `troupe` executable with packed relative relocations (`-z pack-relative-relocs`,
//! DT_RELR) where the C library it is built against can load them (glibc 2.36 and later).
//!
//! Why: troupe is a position-independent executable, and its vtables and string tables need
//! about 160,000 relative relocations. As plain RELA entries (24 bytes each, 3.7 MB) the
//! loader reads all of them at every start, and they stay resident: 4 MB of a gateway's 39 MB
//! at ready. As RELR they take 45 KB (docs/benchmarks.md, "Issue 48"). The executable is as
//! position-independent as before (ASLR unchanged); only the table's encoding differs.
//!
//! A binary linked this way needs `GLIBC_ABI_DT_RELR` from the C library and refuses to start
//! on an older one (the loader says so), so it is only done for a native, dynamically linked
//! Linux GNU build whose host glibc has it. `TROUPE_PACK_RELOCS=0` turns it off, for a binary built on a new
//! system to run on an old one.

// Cargo's variables for build scripts, read where cargo puts them: troupe's `Config` reads the
// gateway's settings at run time and has no part in a build.
#[allow(clippy::disallowed_methods)]
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TROUPE_PACK_RELOCS");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let native_linux_gnu = var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("HOST") == var("TARGET");
    // The image's static glibc build (`+crt-static`, docs/deploy.md) relocates itself; packed
    // tables there were not tried, so it keeps the plain ones.
    let static_libc = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|f| f == "crt-static");
    if !native_linux_gnu
        || static_libc
        || var("TROUPE_PACK_RELOCS") == "0"
        || !host_glibc_has_relr()
    {
        return;
    }
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
}

/// Whether the glibc this build script runs on (the target's, for a native build) is 2.36 or
/// later, the first to load DT_RELR.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn host_glibc_has_relr() -> bool {
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
    let version = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    let mut parts = version
        .to_str()
        .unwrap_or("")
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 36)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn host_glibc_has_relr() -> bool {
    false
}
