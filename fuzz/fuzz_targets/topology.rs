#![no_main]
//! Inline topology specs and topology files (collsim graphs and ASTRA-sim network YAML).

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    if let Ok(spec) = std::str::from_utf8(data) {
        if !spec.contains('/') && !spec.ends_with(".yml") && !spec.ends_with(".yaml") {
            common::one_line(collsim::topology::TopologyOptions::new(spec).build());
        }
    }
    let path = common::file_with("t.yml", data);
    common::one_line(collsim::topology::TopologyOptions::new(path.to_str().unwrap()).build());
});
