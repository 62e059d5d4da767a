#![no_main]
//! Sizes, times, bandwidths and size lists.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = collsim::units::parse_bytes(text);
    let _ = collsim::units::parse_size_list(text);
    if let Ok(t) = collsim::units::parse_time(text) {
        assert!(t.fits());
    }
    if let Ok(b) = collsim::units::parse_bandwidth(text) {
        assert!((1.0..=1e18).contains(&b.as_bytes_per_sec()));
    }
});
