//! libFuzzer target: raw bytes through `troupe::fuzzing::chunk`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    troupe::fuzzing::chunk(data);
});
