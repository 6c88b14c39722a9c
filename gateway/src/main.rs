//! The `troupe` executable: the CLI (`cli.rs`), on jemalloc.
//!
//! The allocator is the executable's choice, not the library's: tests and embedders keep
//! their own. jemalloc rather than glibc's malloc because a third of the message path's CPU
//! was glibc's allocator and its arena locks; one arena per CPU (`percpu_arena`) kept the
//! peak memory of 10,000 rooms where glibc had it. Measured side by side in
//! docs/benchmarks.md ("The allocator"). `_RJEM_MALLOC_CONF` in the environment overrides
//! the options below.

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at its start (jemalloc(3), "malloc_conf"). The name is
/// the crate's prefixed one.
#[cfg(not(target_env = "msvc"))]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8; 57] = b"percpu_arena:percpu,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    #[cfg(not(target_env = "msvc"))]
    return troupe::cli::main_with(release_free_pages);
    #[cfg(target_env = "msvc")]
    return troupe::cli::main();
}

/// Gives every arena's unused dirty pages back to the kernel now (jemalloc(3),
/// `arena.<i>.purge`, for all arenas). jemalloc returns them by itself `dirty_decay_ms`
/// after they are freed, but only when an allocation or a free comes along to notice: what
/// a gateway's start allocated and freed (2.4 MiB) stayed resident for as long as it then
/// sat idle. `troupe run` calls this a second after its start and then once a minute
/// (`troupe::cli::main_with`); jemalloc's own background thread, which would do it too,
/// woke up on the message path (0.1 more context switches a message in one room).
#[cfg(not(target_env = "msvc"))]
fn release_free_pages() {
    /// `MALLCTL_ARENAS_ALL` in jemalloc 5's headers: the index that names every arena.
    const ALL_ARENAS_PURGE: &std::ffi::CStr = c"arena.4096.purge";
    // SAFETY: `arena.<i>.purge` reads and writes nothing: jemalloc requires both value
    // pointers null and the new value's length 0, which is what is passed. The name is a
    // NUL-terminated string that outlives the call.
    // A refusal changes nothing: the pages go back later, as before.
    let _ = unsafe {
        tikv_jemalloc_sys::mallctl(
            ALL_ARENAS_PURGE.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
}
