//! A request head and, if it has one, its chunked body: never a panic; an
//! accepted request's framing is consistent with its head.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    spindle_http::fuzzing::request(data);
});
