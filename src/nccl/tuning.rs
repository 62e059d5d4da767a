//! NCCL's cost model (src/graph/tuning.cc `ncclTopoTuneModel` and `ncclTopoGetAlgoTime`) and its
//! choice of algorithm, protocol, channels and threads per call (src/enqueue.cc
//! `topoGetAlgoInfo`): what NCCL itself would pick at each size, before collsim simulates it. On
//! the AMD systems RCCL runs, its model's figures and rules instead ([`super::rccl`]).

use super::algo::{Algo, Func, Proto};
use super::constants::*;
use super::graph::Graph;
use super::rccl;
use crate::topology::{CpuVendor, GpuArch, GpuSystem, Intra};

/// Bandwidth (GB/s, algorithm bandwidth) and latency (us) of every (function, algorithm,
/// protocol); a bandwidth of 0 marks a combination NCCL will not run.
#[derive(Clone, Debug)]
pub struct Tables {
    pub bandwidth: [[[f64; PROTOS]; ALGOS]; Func::COUNT],
    pub latency: [[[f64; PROTOS]; ALGOS]; Func::COUNT],
    /// The share of its graph's channels x per-channel bandwidth that NCCL's refinements leave a
    /// combination (the protocol's wire efficiency, per-channel caps), before the bus-to-algorithm
    /// ratio: the rate the simulated links run at for it.
    pub share: [[[f64; PROTOS]; ALGOS]; Func::COUNT],
}

/// log2 rounded down, -1 for 0 (NCCL's `log2i`).
fn log2i(x: u64) -> i32 {
    if x == 0 {
        -1
    } else {
        63 - x.leading_zeros() as i32
    }
}

/// The facts the tuning model reads besides the graphs.
struct Comm {
    nodes: u32,
    ranks: u32,
    generation: usize,
    /// `hw[a]` for one box: NVLink (NVSwitch, xGMI) or PCI.
    intra_hw: usize,
    /// The hosts' CPU (`cpuVendor`: the network overhead and LL's bandwidth row).
    cpu: CpuVendor,
    /// RCCL prices the calls ([`rccl`]).
    rccl: bool,
}

/// The library that runs collectives on `system`: RCCL on AMD GPUs, NCCL elsewhere.
pub fn runs_rccl(system: &GpuSystem) -> bool {
    system.arch == GpuArch::Cdna3
}

/// The base latencies and per-step latencies (by link class `HW_NVLINK`, `HW_PCI`, `HW_NET`) of
/// RCCL's model or NCCL's, us.
type LatencyTables = (
    &'static [[f64; PROTOS]; ALGOS],
    &'static [[[f64; PROTOS]; ALGOS]; 3],
);

fn latency_tables(rccl: bool) -> LatencyTables {
    if rccl {
        (&rccl::BASE_LATENCY, &rccl::HW_LATENCY)
    } else {
        (&BASE_LATENCY, &HW_LATENCY)
    }
}

/// Base latency of (algorithm, protocol) in the model of the library `system` runs, us.
pub fn base_latency(system: &GpuSystem, algo: Algo, proto: Proto) -> f64 {
    latency_tables(runs_rccl(system)).0[algo as usize][proto as usize]
}

/// Per-step latency of (algorithm, protocol) over link class `hw` in the model of the library
/// `system` runs, us.
pub fn hw_latency(system: &GpuSystem, hw: usize, algo: Algo, proto: Proto) -> f64 {
    latency_tables(runs_rccl(system)).1[hw][algo as usize][proto as usize]
}

/// `ncclTopoTuneModel`: the tables for `system` with its `graphs`, and which algorithms and
/// protocols are enabled (`algos`, `protos`: NCCL_ALGO / NCCL_PROTO, all when None).
pub fn tune(
    system: &GpuSystem,
    graphs: &[Graph; ALGOS],
    algos: &[bool; ALGOS],
    protos: &[bool; PROTOS],
) -> Tables {
    let comm = Comm {
        nodes: system.boxes.max(1),
        ranks: system.gpus(),
        generation: system.arch.table_index(),
        cpu: system.cpu,
        rccl: runs_rccl(system),
        intra_hw: if system.intra == Intra::Pcie {
            HW_PCI
        } else {
            HW_NVLINK
        },
    };
    let mut tables = Tables {
        bandwidth: [[[0.0; PROTOS]; ALGOS]; Func::COUNT],
        latency: [[[0.0; PROTOS]; ALGOS]; Func::COUNT],
        share: [[[0.0; PROTOS]; ALGOS]; Func::COUNT],
    };
    if comm.ranks <= 1 {
        return tables;
    }
    let (nodes, ranks) = (comm.nodes, comm.ranks);
    let index2 = (nodes.min(3) - 1) as usize;
    // LL: GPU generation on one box, the hosts' CPU vendor across boxes (AMD's row is the
    // Ampere row's place, Intel's the Volta row's).
    let index1 = match (nodes, comm.cpu) {
        (1, _) => comm.generation,
        (_, CpuVendor::Amd) => 1,
        _ => 0,
    };
    let g = comm.generation;
    let ll_max_bw = LL_MAX_BW[index1][index2];
    let ppn = ranks as f64 / nodes as f64;
    for func in Func::ALL {
        let f = func as usize;
        let nsteps = match func {
            Func::AllReduce => 2 * (ranks - 1),
            Func::ReduceScatter | Func::AllGather => ranks - 1,
            Func::Broadcast | Func::Reduce => ranks,
        } as f64;
        for algo in Algo::ALL {
            let a = algo as usize;
            let graph = &graphs[a];
            // NCCL's disable rules: NVLSTree needs several boxes, NVLS across boxes needs
            // CollNet (a SHARP network), PAT one GPU per box.
            let disabled = match algo {
                Algo::NvlsTree => nodes == 1,
                Algo::Nvls => nodes > 1 && !system.sharp,
                Algo::Pat => ranks != nodes,
                _ => false,
            };
            if disabled || !graph.exists() || !algos[a] || !algo.runs(func) {
                continue;
            }
            for proto in Proto::ALL {
                let p = proto as usize;
                if !protos[p] || !algo.takes(proto) {
                    continue;
                }
                if comm.rccl && !rccl::priced(algo, proto, nodes) {
                    continue;
                }
                let collnet = matches!(algo, Algo::CollNetDirect | Algo::CollNetChain);
                let mut bw = if nodes <= 2 || collnet {
                    graph.bw_intra
                } else {
                    graph.bw_inter
                };
                if matches!(algo, Algo::Nvls | Algo::NvlsTree) {
                    if graph.channels < 2 {
                        continue;
                    }
                    let mut intra =
                        graph.bw_intra * NVLS_EFFICIENCY[g] * (graph.channels - 1) as f64
                            / graph.channels as f64;
                    if func == Func::AllReduce {
                        intra *= 2.0;
                    } else {
                        intra *= (ppn - 1.0) / ppn;
                    }
                    let inter = graph.bw_inter
                        * if nodes <= 2 && algo == Algo::NvlsTree {
                            2.0
                        } else {
                            1.0
                        };
                    let tree_cap = if algo == Algo::NvlsTree {
                        PER_CH_NVLS_TREE_BW[g][index2]
                    } else {
                        f64::MAX
                    };
                    bw = intra.min(inter).min(tree_cap);
                }
                let channels = graph.channels as f64;
                let mut bus = channels * bw;
                match (algo, proto) {
                    (Algo::Ring, Proto::LL) => bus = ll_max_bw.min(bus * 0.5),
                    (Algo::Ring, Proto::LL128) => {
                        bus = (bus * 0.92).min(channels * PER_CH_RING_LL128_BW[g][index2])
                    }
                    _ => {}
                }
                if algo == Algo::Tree && func == Func::AllReduce {
                    bus = (bus * 0.92).min(channels * PER_CH_TREE_BW[g][index2]);
                }
                if algo == Algo::Tree && proto == Proto::LL {
                    bus = (bus / 3.8).min(ll_max_bw);
                }
                if algo == Algo::Tree && proto == Proto::LL128 {
                    let eff = if nodes == 1 { 7.0 / 9.0 } else { 120.0 / 128.0 };
                    bus = (bus * eff).min(channels * PER_CH_TREE_LL128_BW[g][index2]);
                }
                if algo == Algo::Pat {
                    bus *= 0.75;
                }
                if algo == Algo::CollNetDirect {
                    if matches!(func, Func::AllGather | Func::ReduceScatter) {
                        bus = ppn * graph.bw_intra.min(graph.bw_inter * 0.9);
                    } else {
                        let mut factor = ppn / channels;
                        factor -= (factor - 1.0) / 2.0;
                        bus /= factor;
                        if g >= 2 {
                            bus *= 0.85;
                        }
                    }
                }
                tables.share[f][a][p] = bus / (channels * bw);
                // RCCL prices the choice with its own ratios; the share above (the protocol's
                // wire efficiency) stays the simulated links' rate.
                if comm.rccl {
                    bus = rccl::bus_bandwidth(func, algo, proto, nodes, channels * bw);
                }
                // Bus bandwidth to algorithm bandwidth.
                let gathers = matches!(func, Func::AllGather | Func::ReduceScatter);
                if !(algo != Algo::Ring && gathers) {
                    let ratio = match algo {
                        Algo::Ring | Algo::Nvls | Algo::NvlsTree => ranks as f64 / nsteps,
                        _ => 0.5,
                    };
                    bus *= ratio;
                }
                tables.bandwidth[f][a][p] = bus;
                tables.latency[f][a][p] = latency(&comm, func, algo, proto, nsteps);
            }
        }
    }
    tables
}

/// The per-step latency floor of rings across boxes, us: "inter-node rings still have to launch
/// nsteps * net overhead" (`ncclTopoTuneModel`), the hosts' network overhead, tripled for
/// Simple.
pub(super) fn ring_overhead_floor_us(cpu: CpuVendor, proto: Proto) -> f64 {
    cpu.net_overhead_us() * if proto == Proto::Simple { 3.0 } else { 1.0 }
}

/// The latency term of `ncclTopoTuneModel` for one (function, algorithm, protocol), us.
fn latency(comm: &Comm, func: Func, algo: Algo, proto: Proto, nsteps: f64) -> f64 {
    // RCCL's MSCCL algorithms have no row in the tables (the tuner never prices them).
    if algo == Algo::Msccl {
        return f64::INFINITY;
    }
    let (a, p) = (algo as usize, proto as usize);
    let (nodes, ranks) = (comm.nodes, comm.ranks);
    let ppn = ranks / nodes;
    let (base_table, hw_table) = latency_tables(comm.rccl);
    let base = base_table[a][p];
    let mut intra_lat = hw_table[comm.intra_hw][a][p];
    // With one GPU a box NCCL exposes the Tree's network latency; RCCL does not.
    let inter_lat = if ppn == 1 && !comm.rccl {
        hw_table[HW_NET][Algo::Tree as usize][p]
    } else {
        hw_table[HW_NET][a][p]
    };
    let log_nodes = log2i(nodes as u64).max(0) as f64;
    match algo {
        Algo::Ring => {
            let hw = if nodes == 1 { comm.intra_hw } else { HW_NET };
            let lat = hw_table[hw][a][p];
            if matches!(func, Func::Reduce | Func::Broadcast) {
                // sameChannels graphs (every one collsim builds) pay one step.
                base + lat
            } else {
                if nodes > 1 {
                    intra_lat = intra_lat.max(ring_overhead_floor_us(comm.cpu, proto));
                }
                // RCCL counts 2 x boxes network steps of an all-reduce, NCCL 2 x (boxes - 1).
                let inter_steps = match (nodes, func) {
                    (1, _) => 0.0,
                    (_, Func::AllReduce) if comm.rccl => 2.0 * nodes as f64,
                    (_, Func::AllReduce) => 2.0 * (nodes - 1) as f64,
                    _ => (nodes - 1) as f64,
                };
                base + (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
            }
        }
        Algo::Tree => {
            if func == Func::AllReduce {
                base + 2.0 * ((ppn - 1) as f64 * intra_lat + log_nodes * inter_lat)
            } else {
                base
            }
        }
        Algo::CollNetDirect => {
            base + 2.0 * ((ppn - 1).min(1) as f64 * intra_lat + (ppn - 1) as f64 * 0.4) + inter_lat
        }
        Algo::CollNetChain => base + 2.0 * (ppn - 1) as f64 * intra_lat + inter_lat,
        Algo::Nvls => intra_lat + if nodes > 1 { inter_lat } else { 0.0 },
        Algo::NvlsTree => base + intra_lat + 2.0 * log_nodes * inter_lat,
        Algo::Msccl => f64::INFINITY,
        Algo::Pat => {
            if matches!(func, Func::AllGather | Func::ReduceScatter) {
                base + log_nodes * (inter_lat / PAT_LEVEL_LATENCY_DIVISOR)
                    + ranks as f64 * PAT_RANK_LATENCY_US
            } else {
                base
            }
        }
    }
    .max(0.0)
}

/// The share of its modelled bandwidth a tree delivers at `bytes` (`treeCorrectionFactor` in
/// `ncclTopoGetAlgoTime`, src/graph/tuning.cc: "Trees are not perfectly sticking to the model
/// for medium sizes"): the all-reduce's Tree at 64 B to 256 MiB, and since NCCL 2.29 its
/// NVLSTree at 64 B to 512 MiB on Blackwell boxes with x86 hosts; 1 elsewhere.
pub fn tree_correction(
    system: &GpuSystem,
    func: Func,
    algo: Algo,
    proto: Proto,
    bytes: u64,
) -> f64 {
    let log_size = log2i(bytes >> 6);
    let sizes = match algo {
        Algo::Tree => 0..23,
        Algo::NvlsTree
            if system.arch == GpuArch::Blackwell
                && matches!(system.cpu, CpuVendor::Intel | CpuVendor::Amd) =>
        {
            0..24
        }
        _ => return 1.0,
    };
    if func == Func::AllReduce && sizes.contains(&log_size) {
        TREE_CORRECTION[proto as usize][log_size as usize]
    } else {
        1.0
    }
}

/// `ncclTopoGetAlgoTime` for one call of `bytes` (one pipelined operation), us; None where the
/// combination does not run.
pub fn algo_time(
    tables: &Tables,
    system: &GpuSystem,
    comm_channels: u32,
    func: Func,
    algo: Algo,
    proto: Proto,
    bytes: u64,
) -> Option<f64> {
    let (f, a, p) = (func as usize, algo as usize, proto as usize);
    let mut bw = tables.bandwidth[f][a][p];
    let mut lat = tables.latency[f][a][p];
    if bw <= 0.0 {
        return None;
    }
    if runs_rccl(system) {
        // RCCL's own corrections, and no plateau.
        bw *= rccl::correction(algo, proto, system.boxes.max(1), bytes);
    } else {
        bw *= tree_correction(system, func, algo, proto, bytes);
        let ranks = system.gpus() as u64;
        if algo == Algo::Ring
            && proto == Proto::Simple
            && system.boxes > 1
            && func == Func::AllReduce
            && bytes / (comm_channels as u64 * ranks) >= 64
        {
            // "Plateau effect of ring" on Ampere and later.
            lat *= 1.4;
        }
    }
    Some(lat + bytes as f64 / (1000.0 * bw))
}

/// Channels and threads per channel NCCL gives a call on `system` (`topoGetAlgoInfo`): Ring and
/// Tree drop channels, then halve threads, while each thread would have less than its threshold
/// of bytes; NVLS takes its own channel count. RCCL keeps its 256 threads and drops channels only.
pub fn channels_and_threads(
    system: &GpuSystem,
    comm_channels: u32,
    nvls_channels: u32,
    algo: Algo,
    proto: Proto,
    bytes: u64,
) -> (u32, u64) {
    let p = proto as usize;
    let rccl = runs_rccl(system);
    let mut threads = match algo {
        _ if rccl => rccl::THREADS,
        Algo::Nvls | Algo::NvlsTree | Algo::CollNetDirect | Algo::CollNetChain => NVLS_THREADS,
        _ => MAX_THREADS[p],
    };
    let mut threshold = THREAD_THRESHOLD[p];
    if algo == Algo::Ring && proto == Proto::LL {
        threshold *= system.gpus() as u64;
    }
    let mut channels = comm_channels;
    match algo {
        // NVLS across boxes (with CollNet) takes no more than the communicator's channels
        // (src/enqueue.cc `topoGetAlgoInfo`).
        Algo::Nvls if system.boxes > 1 => channels = nvls_channels.min(comm_channels),
        Algo::Nvls | Algo::NvlsTree => channels = nvls_channels,
        _ => {
            while bytes < channels as u64 * threads * threshold && channels >= 2 {
                channels -= 1;
            }
            while !rccl
                && bytes < channels as u64 * threads * threshold
                && threads.is_multiple_of(128)
            {
                threads /= 2;
            }
        }
    }
    (channels.max(1), threads)
}

#[cfg(test)]
mod tests {
    use super::super::Model;
    use super::*;

    fn model(spec: &str) -> Model {
        Model::new(&GpuSystem::parse(spec).unwrap().unwrap())
    }

    /// The bandwidth column NCCL's own tuning table prints for an 8-GPU A100 box: Ring/Simple
    /// all-reduce 12 channels x 20 GB/s x 8/14 = 137.1 GB/s; LL capped at llMaxBw 87.7 x 8/14.
    #[test]
    fn a100_ring_bandwidths_follow_the_tuning_formula() {
        let m = model("dgx-a100:1");
        let ring = |p: Proto| {
            m.tables.bandwidth[Func::AllReduce as usize][Algo::Ring as usize][p as usize]
        };
        assert!((ring(Proto::Simple) - 240.0 * 8.0 / 14.0).abs() < 1e-6);
        assert!((ring(Proto::LL) - 87.7 * 8.0 / 14.0).abs() < 1e-6);
        assert!((ring(Proto::LL128) - 240.0 * 0.92 * 8.0 / 14.0).abs() < 1e-6);
        let lat =
            m.tables.latency[Func::AllReduce as usize][Algo::Ring as usize][Proto::Simple as usize];
        assert!((lat - (8.4 + 14.0 * 3.4)).abs() < 1e-9);
    }

    /// NCCL's tree correction: the Tree all-reduce at every GPU, NVLSTree only on Blackwell
    /// with an x86 host (NCCL 2.29's rule), and only inside the table's sizes; 8 MiB is 64 B
    /// times 2^17, where the Simple row's factor is 0.8.
    #[test]
    fn tree_correction_follows_nccls_conditions() {
        let b200 = GpuSystem::parse("hgx-b200:2").unwrap().unwrap();
        let h100 = GpuSystem::parse("hgx-h100:2").unwrap().unwrap();
        let (ar, simple) = (Func::AllReduce, Proto::Simple);
        let mib8 = 8 << 20;
        assert_eq!(tree_correction(&h100, ar, Algo::Tree, simple, mib8), 0.8);
        assert_eq!(
            tree_correction(&b200, ar, Algo::NvlsTree, simple, mib8),
            0.8
        );
        assert_eq!(
            tree_correction(&h100, ar, Algo::NvlsTree, simple, mib8),
            1.0
        );
        let arm = GpuSystem {
            cpu: CpuVendor::Other,
            ..b200.clone()
        };
        assert_eq!(tree_correction(&arm, ar, Algo::NvlsTree, simple, mib8), 1.0);
        assert_eq!(tree_correction(&b200, ar, Algo::Ring, simple, mib8), 1.0);
        assert_eq!(
            tree_correction(&b200, Func::Broadcast, Algo::Tree, simple, mib8),
            1.0
        );
        // 512 MiB (2^23 x 64 B): past the Tree's table, inside NVLSTree's.
        let mib512 = 512 << 20;
        assert_eq!(tree_correction(&b200, ar, Algo::Tree, simple, mib512), 1.0);
        assert_eq!(
            tree_correction(&b200, ar, Algo::NvlsTree, simple, mib512),
            0.9
        );
        assert_eq!(tree_correction(&b200, ar, Algo::Tree, simple, 1 << 30), 1.0);
    }

    /// RCCL prices one box of eight MI300X with its `tuning_model_5`: Ring/Simple all-reduce
    /// books its 14 channels' 24 GB/s whole (`bwRatio` 1.0) at 8/14, Ring/LL 0.08 of it; the
    /// latencies are RCCL's base (17 and 12 us) and 14 xGMI steps (2.1 and 0.8 us); Tree/Simple
    /// is not priced inside one box but is across two. The simulated links keep LL's wire share
    /// (NCCL's half of the channels, capped at llMaxBw), not the 0.08 that steers the choice.
    #[test]
    fn mi300x_is_priced_by_rccls_model() {
        let m = model("mi300x:1");
        let (f, ring, tree) = (
            Func::AllReduce as usize,
            Algo::Ring as usize,
            Algo::Tree as usize,
        );
        let (ll, simple) = (Proto::LL as usize, Proto::Simple as usize);
        assert_eq!(m.graphs[ring].channels, 14);
        let booked = 14.0 * m.graphs[ring].bw_intra;
        let table = |a: usize, p: usize| (m.tables.bandwidth[f][a][p], m.tables.latency[f][a][p]);
        let (bw, lat) = table(ring, simple);
        assert!((bw - booked * 8.0 / 14.0).abs() < 1e-9, "{bw}");
        assert!((lat - (17.0 + 14.0 * 2.1)).abs() < 1e-9, "{lat}");
        let (bw, lat) = table(ring, ll);
        assert!((bw - booked * 0.08 * 8.0 / 14.0).abs() < 1e-9, "{bw}");
        assert!((lat - (12.0 + 14.0 * 0.8)).abs() < 1e-9, "{lat}");
        assert_eq!(table(tree, simple).0, 0.0);
        assert!(model("mi300x:2").tables.bandwidth[f][tree][simple] > 0.0);
        assert!((m.tables.share[f][ring][ll] - 141.0 / booked).abs() < 1e-9);
        // NVIDIA systems keep NCCL's figures.
        let a100 = model("dgx-a100:1");
        assert!((a100.tables.latency[f][ring][ll] - (6.6 + 14.0 * 0.6)).abs() < 1e-9);
    }

    /// H100 NVLS all-reduce: 8 channels x 40 GB/s x 0.85 x 7/8 x 2 x 8/14 = 272 GB/s of algorithm
    /// bandwidth; the maintainer's figure for an 8 x H100 NVLS all-reduce is ~275 (algbw, with
    /// ~480 busbw; sjeaugey, nccl-tests#212).
    #[test]
    fn h100_nvls_matches_the_maintainers_peak() {
        let m = model("hgx-h100:1");
        let bw = m.tables.bandwidth[Func::AllReduce as usize][Algo::Nvls as usize]
            [Proto::Simple as usize];
        assert!((bw - 272.0).abs() < 1.0, "{bw}");
        assert!((bw - 275.0).abs() / 275.0 < 0.02);
    }

    /// Across more than two boxes NCCL's tree bandwidth is the network speed's: 8 channels x 24
    /// GB/s on four DGX A100s, x 0.92, capped at 8 x 17.8 (perChMaxTreeBws, Ampere, N4) = 142.4,
    /// a share of 142.4 / 192 of the channels' bandwidth (not of the trees' raised intra-box
    /// speed, 8 x 30).
    #[test]
    fn tree_share_across_many_boxes_is_of_the_network_speed() {
        let m = model("dgx-a100:4");
        let (f, a, p) = (
            Func::AllReduce as usize,
            Algo::Tree as usize,
            Proto::Simple as usize,
        );
        assert_eq!(m.graphs[a].bw_intra, 30.0);
        assert!((m.tables.share[f][a][p] - 142.4 / 192.0).abs() < 1e-9);
        assert!((m.tables.bandwidth[f][a][p] - 142.4 * 0.5).abs() < 1e-9);
    }

    /// NCCL drops channels for small calls: an 8-GPU Simple ring call of 64 KiB runs on 2 of 24
    /// channels (each of 512 threads wants 64 bytes), and never under one.
    #[test]
    fn small_calls_use_fewer_channels() {
        let a100 = GpuSystem::parse("dgx-a100:1").unwrap().unwrap();
        let ring = |bytes| channels_and_threads(&a100, 24, 16, Algo::Ring, Proto::Simple, bytes);
        assert_eq!(ring(64 << 10).0, 2);
        assert_eq!(ring(8), (1, 64));
        assert_eq!(ring(1 << 30).0, 24);
        // RCCL keeps 256 threads and drops channels only: 64 KiB is 4 channels' worth at 64
        // bytes a thread.
        let mi300x = GpuSystem::parse("mi300x:1").unwrap().unwrap();
        let ring = |bytes| channels_and_threads(&mi300x, 28, 0, Algo::Ring, Proto::Simple, bytes);
        assert_eq!(ring(64 << 10), (4, 256));
        assert_eq!(ring(8), (1, 256));
    }
}
