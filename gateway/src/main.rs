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
    troupe::cli::main()
}
