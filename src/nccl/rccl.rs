//! RCCL's cost model, where it departs from NCCL's: the figures RCCL's tuner prices calls with on
//! the systems it runs (AMD GPUs), so that `auto` picks what RCCL would pick there.
//!
//! Read from ROCm/rccl (`src/graph/tuning.cc`, October 2024): RCCL recognises a box of eight
//! MI300X as `rome_model_79` (`src/graph/rome_models.cc`, options `tuning=5`) and prices its calls
//! with `tuning_model_5`: its own per-step latencies by link class, a ratio of each (algorithm,
//! protocol)'s booked bandwidth in place of NCCL's refinements (`bwRatio`), base latencies of its
//! own (`baseLat`), and per-size correction factors of the Tree's bandwidth and, across boxes, the
//! Ring's (`ncclTopoGetAlgoTime`). It skips Tree/Simple on gfx94x GPUs inside one box, raises
//! Ring/LL broadcast and reduce by 1.65 there, and keeps 256 threads a channel, dropping channels
//! but never threads for small calls (`src/enqueue.cc`, `getChannnelThreadInfo`).
//!
//! These steer RCCL's choice; the simulated network keeps the physical figures (links at the
//! protocol's wire share, NCCL's network latencies) except the per-step latency over xGMI, which
//! is RCCL's.

use super::algo::{Algo, Func, Proto};
use super::constants::{ALGOS, PROTOS};

/// `baseLat` (RCCL's `src/graph/tuning.cc`), us, in collsim's algorithm order (RCCL has no PAT).
pub const BASE_LATENCY: [[f64; PROTOS]; ALGOS] = [
    [12.0, 12.0, 17.0],
    [12.0, 12.0, 17.0],
    [12.0, 12.0, 17.0],
    [12.0, 12.0, 17.0],
    [0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0],
];

/// `tuning_model_5.hwLat`: per-step latency by link class (xGMI, PCI, network), algorithm and
/// protocol, us. LL128 is off on the MI300X (its zeros are never read).
pub const HW_LATENCY: [[[f64; PROTOS]; ALGOS]; 3] = [
    [
        [0.9, 0.0, 2.3],
        [0.8, 0.0, 2.1],
        [0.0, 0.0, 0.9],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
    ],
    [
        [2.2, 2.2, 5.7],
        [2.2, 2.2, 5.7],
        [0.0, 0.0, 5.7],
        [0.0, 0.0, 5.7],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
    ],
    [
        [10.5, 0.0, 25.0],
        [9.5, 0.0, 320.0],
        [0.0, 0.0, 10.5],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
    ],
];

/// `tuning_model_5.bwRatio`: the share of its channels' booked bandwidth RCCL's model gives each
/// (algorithm, protocol), [up to two boxes, more][algorithm][protocol].
const BW_RATIO: [[[f64; PROTOS]; ALGOS]; 2] = [
    [
        [0.06, 0.0, 0.11],
        [0.08, 0.0, 1.0],
        [0.0, 0.0, 1.0],
        [0.0, 0.0, 1.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
    ],
    [
        [0.06, 0.0, 0.59],
        [0.08, 0.0, 1.0],
        [0.0, 0.0, 1.0],
        [0.0, 0.0, 1.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
    ],
];

/// Sizes the correction tables cover: `log2(bytes / 64)` from 0 to 26 (larger calls take the
/// last entry).
const CORRECTION_SIZES: usize = 27;

/// `tuning_model_5.treeCorrectionFactor` [protocol][log2(bytes / 64)].
const TREE_CORRECTION: [[f64; CORRECTION_SIZES]; PROTOS] = [
    [
        0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 1.0, 1.0, 1.0, 1.0, 1.0, 0.6, 1.0, 0.9, 1.0, 1.0, 0.1, 0.1,
        0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1,
    ],
    [0.0; CORRECTION_SIZES],
    [
        0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.7, 1.0, 1.0,
        1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.8,
    ],
];

/// `tuning_model_5.ringCorrectionFactor` [protocol][log2(bytes / 64)], applied across boxes only.
const RING_CORRECTION: [[f64; CORRECTION_SIZES]; PROTOS] = [
    [
        0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 1.0, 0.2, 1.0, 0.4, 0.4, 0.1, 0.2,
        0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1,
    ],
    [0.0; CORRECTION_SIZES],
    [
        0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1,
        0.1, 0.1, 0.1, 0.1, 0.1, 0.8, 1.0, 1.0, 1.0,
    ],
];

/// Threads of every protocol's channel (`NCCL_MAX_NTHREADS` in RCCL's `src/include/device.h`).
pub const THREADS: u64 = 256;

/// Whether RCCL's model prices (algorithm, protocol) at all: Tree/Simple is skipped on gfx94x
/// GPUs when every rank is in one box.
pub fn priced(algo: Algo, proto: Proto, boxes: u32) -> bool {
    !(algo == Algo::Tree && proto == Proto::Simple && boxes == 1)
}

/// RCCL's bus bandwidth for `func` on `channels` channels of `bw` GB/s each: `bwRatio`, and the
/// 1.65 of Ring/LL broadcast and reduce on one gfx94x box.
pub fn bus_bandwidth(func: Func, algo: Algo, proto: Proto, boxes: u32, channel_bus: f64) -> f64 {
    let row = usize::from(boxes > 2);
    let mut bus = channel_bus * BW_RATIO[row][algo as usize][proto as usize];
    if algo == Algo::Ring
        && proto == Proto::LL
        && matches!(func, Func::Broadcast | Func::Reduce)
        && boxes == 1
    {
        bus *= 1.65;
    }
    bus
}

/// The factor `ncclTopoGetAlgoTime` applies to the bandwidth of a call of `bytes`: the Tree's
/// correction, and the Ring's across boxes; 1 elsewhere.
pub fn correction(algo: Algo, proto: Proto, boxes: u32, bytes: u64) -> f64 {
    let log_size = (bytes >> 6).checked_ilog2().unwrap_or(0) as usize;
    let entry = log_size.min(CORRECTION_SIZES - 1);
    match algo {
        Algo::Tree => TREE_CORRECTION[proto as usize][entry],
        Algo::Ring if boxes > 1 => RING_CORRECTION[proto as usize][entry],
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The correction tables' index is `log2(bytes / 64)`: 8 MiB is 2^17 x 64 B, where Tree/LL
    /// reads 0.1 and Tree/Simple 1.0; past 2^26 x 64 B (4 GiB) the last entry holds.
    #[test]
    fn corrections_index_by_log_size() {
        let mib8 = 8 << 20;
        assert_eq!(correction(Algo::Tree, Proto::LL, 1, mib8), 0.1);
        assert_eq!(correction(Algo::Tree, Proto::Simple, 2, mib8), 1.0);
        assert_eq!(correction(Algo::Tree, Proto::Simple, 2, 64 << 30), 0.8);
        // Rings are corrected across boxes only: 512 MiB (2^23 x 64 B) on Simple reads 0.8.
        assert_eq!(correction(Algo::Ring, Proto::Simple, 1, 512 << 20), 1.0);
        assert_eq!(correction(Algo::Ring, Proto::Simple, 2, 512 << 20), 0.8);
        assert_eq!(correction(Algo::Ring, Proto::Simple, 2, 8 << 20), 0.1);
        // Below 64 bytes RCCL's index would be -1; the first entry is read.
        assert_eq!(correction(Algo::Tree, Proto::LL, 1, 8), 0.1);
    }

    #[test]
    fn bus_bandwidth_follows_bw_ratio() {
        let bus = |func, algo, proto, boxes| bus_bandwidth(func, algo, proto, boxes, 100.0);
        assert!((bus(Func::AllReduce, Algo::Ring, Proto::LL, 1) - 8.0).abs() < 1e-9);
        assert!((bus(Func::Broadcast, Algo::Ring, Proto::LL, 1) - 8.0 * 1.65).abs() < 1e-9);
        assert!((bus(Func::Broadcast, Algo::Ring, Proto::LL, 2) - 8.0).abs() < 1e-9);
        assert!((bus(Func::AllReduce, Algo::Tree, Proto::Simple, 2) - 11.0).abs() < 1e-9);
        assert!((bus(Func::AllReduce, Algo::Tree, Proto::Simple, 3) - 59.0).abs() < 1e-9);
        assert!(!priced(Algo::Tree, Proto::Simple, 1));
        assert!(priced(Algo::Tree, Proto::Simple, 2));
    }
}
