//! NCCL's published constants, each with the file of NCCL's source it is read from (NVIDIA/nccl,
//! master of 2026) or the maintainer's statement. Tables are indexed by [`super::Algo`],
//! [`super::Proto`] and the GPU generation (Volta 0, Ampere 1, Hopper 2, Blackwell 3).

use super::algo::Proto;
pub use super::algo::{ALGOS, PROTOS};

/// `baseLatencies` (src/graph/tuning.cc, `ncclTunerConstantsDefaults`), us.
pub const BASE_LATENCY: [[f64; PROTOS]; ALGOS] = [
    [6.8, 14.0, 8.4],
    [6.6, 14.0, 8.4],
    [0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0],
    [8.0, 8.0, 8.0],
];

/// Link classes of `hwLatencies`.
pub const HW_NVLINK: usize = 0;
pub const HW_PCI: usize = 1;
pub const HW_NET: usize = 2;

/// `hwLatencies` (src/graph/tuning.cc): per-step latency by link class, algorithm, protocol, us.
pub const HW_LATENCY: [[[f64; PROTOS]; ALGOS]; 3] = [
    [
        [0.6, 1.25, 4.0],
        [0.6, 1.9, 3.4],
        [0.0, 0.0, 3.7],
        [0.0, 0.0, 2.8],
        [0.0, 0.0, 25.0],
        [0.0, 0.0, 25.0],
        [0.0, 0.0, 4.0],
    ],
    [
        [1.0, 1.9, 4.0],
        [1.0, 2.5, 5.7],
        [0.0, 0.0, 3.7],
        [0.0, 0.0, 2.8],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 4.0],
    ],
    [
        [5.0, 8.5, 14.0],
        [2.7, 4.0, 14.0],
        [0.0, 0.0, 31.0],
        [0.0, 0.0, 30.0],
        [0.0, 0.0, 18.0],
        [0.0, 0.0, 20.9],
        [0.0, 0.0, 14.0],
    ],
];

/// `llMaxBws` [generation][nodes: 1, 2, more] (src/graph/tuning.cc), GB/s. Single-node rows
/// are indexed by GPU generation, multi-node rows by CPU vendor (0 Intel, 1 AMD).
pub const LL_MAX_BW: [[f64; 3]; 4] = [
    [39.0, 39.0, 20.4],
    [87.7, 22.5, 19.0],
    [141.0, 45.0, 35.0],
    [282.0, 90.0, 70.0],
];
/// `perChMaxRingLL128Bws` (src/graph/tuning.cc), GB/s per channel.
pub const PER_CH_RING_LL128_BW: [[f64; 3]; 4] = [
    [20.0, 20.0, 20.0],
    [20.0, 20.0, 20.0],
    [36.7, 36.7, 36.7],
    [40.0, 40.0, 40.0],
];
/// `perChMaxTreeLL128Bws` (src/graph/tuning.cc), GB/s per channel.
pub const PER_CH_TREE_LL128_BW: [[f64; 3]; 4] = [
    [20.0, 20.0, 20.0],
    [20.0, 20.0, 20.0],
    [36.7, 36.7, 29.0],
    [55.6, 31.67, 20.0],
];
/// `perChMaxTreeBws` (src/graph/tuning.cc), GB/s per channel.
pub const PER_CH_TREE_BW: [[f64; 3]; 4] = [
    [26.5, 18.5, 10.0],
    [24.0, 23.6, 17.8],
    [38.7, 41.4, 36.0],
    [70.0, 42.8, 24.0],
];
/// `perChMaxNVLSTreeBws` (src/graph/tuning.cc), GB/s per channel.
pub const PER_CH_NVLS_TREE_BW: [[f64; 3]; 4] = [
    [26.5, 18.5, 10.0],
    [24.0, 23.6, 17.8],
    [0.0, 57.7, 45.5],
    [0.0, 96.0, 80.0],
];
/// `nvlsEfficiency` by generation (src/graph/tuning.cc).
pub const NVLS_EFFICIENCY: [f64; 4] = [0.0, 0.0, 0.85, 0.74];

/// `treeCorrectionFactor` [protocol][log2(bytes / 64)] (src/graph/tuning.cc).
pub const TREE_CORRECTION: [[f64; 24]; PROTOS] = [
    [
        1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.0, 1.0, 1.0, 1.0,
    ],
    [
        1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9,
        0.9, 0.9, 0.9, 1.0, 1.0, 1.0,
    ],
    [
        0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8,
        0.7, 0.7, 0.8, 0.9, 0.9, 0.9,
    ],
];

/// `speedArrayIntra` / `sm90SpeedArrayIntra` / `sm100SpeedArrayIntra` (src/graph/search.cc):
/// the per-channel bandwidths NCCL's channel search tries inside a box, GB/s.
pub const SPEEDS_INTRA: [&[f64]; 3] = [
    &[
        40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
    ],
    &[
        60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0,
    ],
    &[
        90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
    ],
];
/// `speedArrayInter` / `sm90SpeedArrayInter` / `sm100SpeedArrayInter` (src/graph/search.cc).
pub const SPEEDS_INTER: [&[f64]; 3] = [
    &[
        48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4,
        1.2, 0.24, 0.12,
    ],
    &[
        48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
        0.12,
    ],
    &[
        96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
        3.0, 2.4, 1.2, 0.24, 0.12,
    ],
];

/// `MAXCHANNELS` (src/include/device.h); rings search up to half of it (src/init.cc).
pub const MAX_CHANNELS: u32 = 64;
/// `NCCL_MAX_NVLS_ARITY` (src/include/device.h).
pub const MAX_NVLS_ARITY: u32 = 32;
/// NVLS channels per communicator (src/transport/nvls.cc: `NVLS_NCHANNELS_SM90` 16,
/// `NVLS_NCHANNELS_SM100` 32 across boxes, `NVLS_NCHANNELS_SM100_NVL` 24 inside one), before
/// [`super::nvls::NvlsTuning`] adjusts them.
pub const NVLS_CHANNELS_SM90: u32 = 16;
pub const NVLS_CHANNELS_SM100: u32 = 32;
pub const NVLS_CHANNELS_SM100_NVL: u32 = 24;

/// `NCCL_STEPS`, buffer slots per connection (src/include/device.h).
pub const STEPS: u64 = 8;
/// Default buffer sizes per protocol (src/init.cc): LL 8 lines x 512 threads x 8 steps x 16 B,
/// LL128 120 elements x 640 threads x 8 steps x 8 B, Simple 4 MiB.
pub const BUFFER_BYTES: [u64; PROTOS] = [8 * 512 * 8 * 16, 120 * 640 * 8 * 8, 4 << 20];
/// `ALLREDUCE_CHUNKSTEPS` / `ALLREDUCE_SLICESTEPS` (src/include/collectives.h), the same for
/// all-gather and reduce-scatter: Simple ring chunks are 4 steps, cut in slices of 2.
pub const RING_CHUNK_STEPS: u64 = STEPS / 2;
pub const RING_SLICE_STEPS: u64 = STEPS / 4;
/// The share of a protocol's bytes on the wire that is data: LL's 16-byte lines carry 8 bytes
/// and two flags, LL128's 128-byte lines 120 bytes and one flag, Simple only data
/// (src/device/prims_ll.h, prims_ll128.h).
pub const DATA_SHARE: [f64; PROTOS] = [0.5, 120.0 / 128.0, 1.0];
/// Data bytes one of a protocol's NCCL_STEPS buffer slots carries: its buffer over the slots,
/// less LL's and LL128's flags ([`DATA_SHARE`]).
pub fn step_data_bytes(proto: usize) -> u64 {
    let step = BUFFER_BYTES[proto] / STEPS;
    match proto {
        0 => step / 2,
        1 => step / 128 * 120,
        _ => step,
    }
}
/// `ncclProtoGrainSize` (src/include/device.h): the unit NCCL cuts a protocol's chunks in, bytes
/// (LL 16; LL128 32 threads x 8 elements / 16 per line x 15 data elements x 8 B; Simple 512).
pub const GRAIN_BYTES: [u64; PROTOS] = [16, 32 * 8 / 16 * 15 * 8, 512];
/// Data bytes a channel's `threads` move in one trip of LL's or LL128's loop, the grain at which
/// a rank forwards what it receives (src/device/prims_ll.h: each thread waits for its own
/// 16-byte line, 8 bytes of data, and stores it on at once; prims_ll128.h: each warp a slice of
/// `NCCL_LL128_SHMEM_ELEMS_PER_THREAD` 8 words a thread, 15 of each 16-word line data, 60 bytes
/// a thread). Simple forwards whole slices: its step.
pub fn trip_data_bytes(proto: Proto, threads: u64) -> u64 {
    let threads = threads.max(32);
    match proto {
        Proto::LL => threads * 8,
        Proto::LL128 => threads * 8 * 8 / 16 * 15,
        Proto::Simple => step_data_bytes(proto as usize),
    }
}

/// Peer-to-peer chunk sizes (src/init.cc): 512 KiB over NVLink, 128 KiB over the network.
pub const P2P_NVLINK_CHUNK: u64 = 512 << 10;
pub const P2P_NET_CHUNK: u64 = 128 << 10;

/// Threads per channel (src/include/device.h): `NCCL_SIMPLE_MAX_NTHREADS` 512,
/// `NCCL_LL_MAX_NTHREADS` 512, `NCCL_LL128_MAX_NTHREADS` 640, `NCCL_MAX_NTHREADS` 640.
pub const MAX_THREADS: [u64; PROTOS] = [512, 640, 512];
pub const NVLS_THREADS: u64 = 640;
/// Bytes per thread before another channel is used (src/include/comm.h:
/// `NCCL_LL_THREAD_THRESHOLD` 8, `NCCL_LL128_THREAD_THRESHOLD` 8, `NCCL_SIMPLE_THREAD_THRESHOLD`
/// 64); the ring's LL threshold is multiplied by the rank count (src/graph/tuning.cc).
pub const THREAD_THRESHOLD: [u64; PROTOS] = [8, 8, 64];

/// PAT's latency a rank, us (src/graph/tuning.cc: an all-gather's or reduce-scatter's PAT
/// latency is its base latency, its network latency / 3.5 a level of log2(nodes), and 2.8 us a
/// rank: the steps its kernel runs one part at a time).
pub const PAT_RANK_LATENCY_US: f64 = 2.8;
/// The divisor of the network latency a level of PAT's trees in NCCL's model.
pub const PAT_LEVEL_LATENCY_DIVISOR: f64 = 3.5;

/// The fixed cost of a call beyond NCCL's base latency, us: the maintainer's "~5 us
/// launch/fixed overhead" (sjeaugey, nccl-tests#123) that nccl-tests' timing includes.
pub const FIXED_OVERHEAD_US: f64 = 5.0;

/// Time a CUDA kernel launch costs the thread that issues it, us. nccl-tests run with `-g G`
/// (one thread driving G GPUs) launches the G kernels of each collective one after another, so
/// the last GPU starts (G - 1) launches after the first; with one thread or process per GPU
/// (`-t`, MPI) they start together. In the DGX A100 latency measurements of nccl-tests#123 the
/// 8-GPU `-g 8` run takes 12.7 us more than the `-t 8` one: 1.8 us for each of the 7 later
/// launches, taken here as 2 us.
pub const LAUNCH_US: f64 = 2.0;
