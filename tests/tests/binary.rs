//! The `troupe` executable itself, as built: properties of the file that no behaviour shows.
//!
//! Packed relative relocations (gateway/build.rs): on a Linux GNU host whose glibc loads them
//! the executable carries a RELR table and almost no RELA entries, 4 MB less to read and keep
//! resident at every start (docs/benchmarks.md, "Issue 48"). A change to the build script, the
//! linker or the profile that loses them shows here, not only in a benchmark.

use troupe_e2e::app::troupe_bin;

/// ELF64 section types (the System V gABI): RELA and RELR.
const SHT_RELA: u32 = 4;
const SHT_RELR: u32 = 19;

/// Each section's type and size, read from the ELF64 little-endian section header table.
fn sections(elf: &[u8]) -> Vec<(u32, u64)> {
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((elf[4], elf[5]), (2, 1), "not ELF64 little-endian");
    let (table, entry, count) = (u64_at(0x28) as usize, u16_at(0x3a) as usize, u16_at(0x3c));
    (0..count as usize)
        .map(|i| table + i * entry)
        .map(|header| (u32_at(header + 4), u64_at(header + 0x20)))
        .collect()
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_endian = "little"))]
#[test]
fn the_executable_packs_its_relative_relocations() {
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
    let glibc = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    let glibc = glibc.to_string_lossy().into_owned();
    let minor: u32 = glibc
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if !glibc.starts_with("2.")
        || minor < 36
        || std::env::var("TROUPE_PACK_RELOCS").as_deref() == Ok("0")
    {
        eprintln!("skipping: glibc {glibc} cannot load DT_RELR, so the build does not pack");
        return;
    }
    let elf = std::fs::read(troupe_bin()).expect("read the troupe executable");
    let sections = sections(&elf);
    let size_of = |kind| {
        sections
            .iter()
            .filter(|s| s.0 == kind)
            .map(|s| s.1)
            .sum::<u64>()
    };
    assert!(
        size_of(SHT_RELR) > 0,
        "no RELR table: the relocations are not packed"
    );
    // What stays RELA is what RELR cannot say (symbol relocations): a few KB, not megabytes.
    assert!(
        size_of(SHT_RELA) < 256 * 1024,
        "{} bytes of RELA relocations: the relative ones were not packed",
        size_of(SHT_RELA)
    );
}
