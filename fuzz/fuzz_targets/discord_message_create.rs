//! libFuzzer target: raw bytes through `troupe_connectors::fuzzing::discord_message_create`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    troupe_connectors::fuzzing::discord_message_create(data);
});
