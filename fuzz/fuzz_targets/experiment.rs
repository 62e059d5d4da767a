#![no_main]
//! Experiment files.

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|text: &str| {
    common::one_line(collsim::experiment::Experiment::parse(text, "e.yaml"));
});
