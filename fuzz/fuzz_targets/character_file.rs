//! libFuzzer target: raw bytes through `troupe::fuzzing::character_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    troupe::fuzzing::character_file(data);
});
