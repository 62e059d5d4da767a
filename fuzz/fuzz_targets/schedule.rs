#![no_main]
//! Schedule files, CSV and JSON.

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    for name in ["s.csv", "s.json"] {
        common::one_line(collsim::schedule::load_schedule_file(&common::file_with(name, data)));
    }
});
