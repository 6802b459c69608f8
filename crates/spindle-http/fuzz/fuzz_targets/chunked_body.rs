//! The chunked decoder: never a panic, and the same body however the input
//! is split (the first byte picks the split).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    spindle_http::fuzzing::chunked(data);
});
