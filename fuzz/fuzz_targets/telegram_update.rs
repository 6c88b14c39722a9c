//! libFuzzer target: raw bytes through `troupe_connectors::fuzzing::telegram_update`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    troupe_connectors::fuzzing::telegram_update(data);
});
