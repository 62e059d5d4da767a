//! NCCL's channel search (src/graph/search.cc, `ncclTopoCompute`), reduced to the systems collsim
//! names: how many channels each algorithm's graph gets and the bandwidth NCCL books per channel
//! inside a box (`bwIntra`) and across boxes (`bwInter`).
//!
//! The search tries the speeds of NCCL's table from the fastest the links allow downwards and keeps
//! the solution with the most bandwidth (channels x speed); it stops at the first that books all
//! of the GPU's bandwidth and gives up on speeds under half the best one's. Rings then double
//! their channels at half the speed where NCCL does (`ncclTopoDupChannels`: 25 GB/s and over, not
//! Hopper-and-later graphs under 50 GB/s with more than 4 channels) and try faster speeds with that
//! many channels (pass 2). Trees take the rings' channels; across two boxes NCCL raises their
//! intra-box speed up to twice the network's. What is left out: the path search itself (every
//! system here is symmetric, so channels are counted by bandwidth), PCI topologies inside the box,
//! and search timeouts.

use super::algo::Algo;
use super::constants::{MAX_CHANNELS, MAX_NVLS_ARITY, SPEEDS_INTER, SPEEDS_INTRA};
use crate::topology::{GpuArch, GpuSystem, Intra};

/// One algorithm's channel graph: NCCL's `nChannels`, `bwIntra`, `bwInter`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Graph {
    pub channels: u32,
    pub bw_intra: f64,
    pub bw_inter: f64,
}

impl Graph {
    pub fn exists(&self) -> bool {
        self.channels > 0
    }
}

/// Every algorithm's graph, indexed by [`Algo`]; absent algorithms have no channels.
pub fn search(system: &GpuSystem) -> [Graph; super::constants::ALGOS] {
    let mut graphs = [Graph::default(); super::constants::ALGOS];
    let ring = ring(system);
    graphs[Algo::Ring as usize] = ring;
    graphs[Algo::Pat as usize] = ring;
    graphs[Algo::Tree as usize] = tree(system, &ring);
    if system.sharp && system.boxes > 1 {
        let tree = graphs[Algo::Tree as usize];
        graphs[Algo::CollNetDirect as usize] = tree;
        graphs[Algo::CollNetChain as usize] = tree;
    }
    if let Some(nvls) = nvls(system) {
        graphs[Algo::Nvls as usize] = nvls;
        graphs[Algo::NvlsTree as usize] = nvls;
    }
    graphs
}

/// The speeds NCCL tries: its intra-box table on one box, the network table across boxes.
fn speeds(system: &GpuSystem, across: bool) -> &'static [f64] {
    let generation = match system.arch {
        GpuArch::Ampere => 0,
        GpuArch::Hopper | GpuArch::Cdna3 => 1,
        GpuArch::Blackwell => 2,
    };
    if across {
        SPEEDS_INTER[generation]
    } else {
        SPEEDS_INTRA[generation]
    }
}

/// Whole channels of `speed` that fit in `bandwidth` (NCCL subtracts each channel's speed from
/// the links it uses until one runs out).
fn fit(bandwidth: f64, speed: f64) -> u32 {
    ((bandwidth + 1e-9) / speed).floor() as u32
}

/// Pass 1 of the search: the best (channels, speed) over the table from the fastest speed
/// under `cap`, where `channels_at(speed)` counts what fits; `total` is the GPU's bandwidth, which
/// ends the search once booked.
fn best_channels(
    speeds: &[f64],
    cap: f64,
    total: f64,
    channels_at: impl Fn(f64) -> u32,
) -> Option<(u32, f64)> {
    let start = speeds
        .iter()
        .position(|&s| s <= cap + 1e-9 && s <= total + 1e-9)
        .unwrap_or(speeds.len() - 1);
    let mut best: Option<(u32, f64)> = None;
    for &speed in &speeds[start..] {
        if let Some((_, best_speed)) = best {
            if speed / best_speed <= 0.49 {
                break;
            }
        }
        let channels = channels_at(speed).min(MAX_CHANNELS / 2);
        if channels == 0 {
            continue;
        }
        if best.is_none_or(|(c, s)| channels as f64 * speed > c as f64 * s + 1e-9) {
            best = Some((channels, speed));
        }
        if channels as f64 * speed >= total - 1e-9 {
            break;
        }
    }
    best
}

/// `ncclTopoDupChannels` then pass 2 for rings: double the channels at half the speed where NCCL
/// does, then the fastest speed at which that many channels still fit.
fn duplicate_and_raise(
    system: &GpuSystem,
    speeds: &[f64],
    (channels, speed): (u32, f64),
    channels_at: impl Fn(f64) -> u32,
) -> (u32, f64) {
    let hopper_or_later = system.arch != GpuArch::Ampere;
    let (mut channels, mut speed) = (channels, speed);
    if speed >= 25.0 && !(hopper_or_later && speed < 50.0 && channels > 4) {
        let doubled = (channels * 2).min(MAX_CHANNELS / 2);
        speed /= doubled.div_ceil(channels) as f64;
        channels = doubled;
    }
    for &faster in speeds.iter().rev() {
        if faster > speed + 1e-9 && channels_at(faster) >= channels {
            speed = faster;
        }
    }
    (channels, speed)
}

/// The rings: inside a box, channels of one speed fill each GPU's links (a full mesh gives each
/// ring one link per GPU); across boxes each channel also crosses a NIC.
fn ring(system: &GpuSystem) -> Graph {
    let intra_total = system.nccl_intra_gbps();
    let across = system.boxes > 1 && system.nics_per_box > 0;
    let per_link = match system.intra {
        Intra::FullMesh => system.arch.nccl_link_gbps(),
        _ => intra_total,
    };
    let links = match system.intra {
        Intra::FullMesh => system.links_per_gpu,
        _ => 1,
    };
    let nic = system.nic_gbps();
    let nics = system.nics_per_box;
    let channels_at = |s: f64| {
        let inside = links * fit(per_link, s);
        if across {
            inside.min(nics * fit(nic, s))
        } else {
            inside
        }
    };
    let cap = if across { per_link.min(nic) } else { per_link };
    let total = if across {
        intra_total.min(nic * nics as f64)
    } else {
        intra_total
    };
    let table = speeds(system, across);
    match best_channels(table, cap, total, channels_at) {
        Some(found) => {
            let (channels, speed) = duplicate_and_raise(system, table, found, channels_at);
            Graph {
                channels,
                bw_intra: speed,
                bw_inter: speed,
            }
        }
        // NCCL falls back to one slow channel in GPU order.
        None => Graph {
            channels: 1,
            bw_intra: 0.1,
            bw_inter: 0.1,
        },
    }
}

/// Trees share the rings' channel count; across boxes their intra-box speed may rise to twice
/// the network's where the GPU's links allow (search.cc pass 2 for trees).
fn tree(system: &GpuSystem, ring: &Graph) -> Graph {
    if system.boxes == 1 || system.nics_per_box == 0 {
        return *ring;
    }
    let table = speeds(system, true);
    let room = system.nccl_intra_gbps() / ring.channels as f64;
    let bw_intra = table
        .iter()
        .copied()
        .filter(|&s| s <= 2.0 * ring.bw_inter + 1e-9 && s <= room + 1e-9)
        .fold(ring.bw_intra, f64::max);
    Graph { bw_intra, ..*ring }
}

/// NVLS (Hopper and later NVSwitch boxes of two GPUs or more: `ncclNvlsInit` leaves it off on
/// one): one channel per GPU of the box (at most `NCCL_MAX_NVLS_ARITY`), at the fastest intra
/// speed all of them fit; its network speed is then raised up to twice that (search.cc pass 2
/// for NVLS), capped by the NIC across boxes.
fn nvls(system: &GpuSystem) -> Option<Graph> {
    let capable = system.nvls
        && system.intra == Intra::NvSwitch
        && system.gpus_per_box >= 2
        && matches!(system.arch, GpuArch::Hopper | GpuArch::Blackwell);
    if !capable {
        return None;
    }
    let channels = system.gpus_per_box.min(MAX_NVLS_ARITY);
    let total = system.nccl_intra_gbps();
    let bw_intra = speeds(system, false)
        .iter()
        .copied()
        .find(|&s| channels as f64 * s <= total + 1e-9)?;
    // Pass 2 raises the NVLS graph's network speed towards twice the intra one: up the intra
    // table inside one box, to the NIC's speed across boxes.
    let bw_inter = if system.boxes > 1 {
        speeds(system, true)
            .iter()
            .copied()
            .find(|&s| s <= system.nic_gbps() + 1e-9)
            .unwrap_or(bw_intra)
    } else {
        speeds(system, false)
            .iter()
            .copied()
            .find(|&s| s < 2.0 * bw_intra + 1e-9)
            .unwrap_or(bw_intra)
            .max(bw_intra)
    };
    Some(Graph {
        channels,
        bw_intra,
        bw_inter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graphs(spec: &str) -> [Graph; super::super::constants::ALGOS] {
        search(&GpuSystem::parse(spec).unwrap().unwrap())
    }

    /// The channel counts NCCL reports on these systems: a DGX A100's rings are 6 x 40 GB/s
    /// doubled to 12 x 20 (240 GB/s of its 12 x 20 NVLink); across boxes one 24 GB/s channel per
    /// HDR NIC, 8 x 24 = 192 GB/s, the busbw AddyLaddy quotes for DGX A100 rings over 8 HDR NICs
    /// (nccl#812). H100 NVLS: 8 channels of 40 (8 x 40 of 18 x 20.6).
    #[test]
    fn searches_find_nccls_channels() {
        let a100 = graphs("dgx-a100:1");
        assert_eq!(a100[Algo::Ring as usize].channels, 12);
        assert_eq!(a100[Algo::Ring as usize].bw_intra, 20.0);
        assert!(!a100[Algo::Nvls as usize].exists());
        let a100x2 = graphs("dgx-a100:2");
        let ring = a100x2[Algo::Ring as usize];
        assert_eq!((ring.channels, ring.bw_inter), (8, 24.0));
        let tree = a100x2[Algo::Tree as usize];
        assert_eq!(tree.bw_intra, 30.0, "raised towards twice the network's 24");
        let h100 = graphs("hgx-h100:1");
        let nvls = h100[Algo::Nvls as usize];
        assert_eq!((nvls.channels, nvls.bw_intra), (8, 40.0));
        let ring = h100[Algo::Ring as usize];
        assert_eq!((ring.channels, ring.bw_intra), (12, 30.0));
        let b200 = graphs("hgx-b200:1");
        assert_eq!(b200[Algo::Nvls as usize].bw_intra, 90.0);
        assert_eq!(b200[Algo::Ring as usize].channels, 16);
    }
}
