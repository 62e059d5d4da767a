#![no_main]
//! MSCCL XML algorithms, read as an all-gather of 4 NPUs with 2 chunks.

use collsim::collective::{Collective, CollectiveKind};
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|text: &str| {
    let c = Collective::new(CollectiveKind::AllGather, (0..4).collect(), 1 << 20, 2, None).unwrap();
    common::one_line(collsim::schedule::parse_msccl("f.xml", text, &c));
});
