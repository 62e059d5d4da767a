#![no_main]
//! ASTRA-sim system files (JSON and the old text form) and workloads (YAML and ASTRA text).

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    for name in ["s.json", "s.txt"] {
        common::one_line(collsim::system::load_system(&common::file_with(name, data)));
    }
    for name in ["w.yaml", "w.txt"] {
        common::one_line(collsim::workload::load_workload(&common::file_with(name, data)));
    }
});
