#![no_main]

#[allow(dead_code)]
#[path = "../../tests/harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::env_values(data));
