//! A response head (as the answer to GET and to HEAD) and its chunked body:
//! never a panic.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    spindle_http::fuzzing::response(data);
});
