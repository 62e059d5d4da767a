//! NCCL's plan for point-to-point traffic (an all-to-all is a group of sends and receives): how
//! many channels a peer's send is striped over, its protocol and its chunk. From NCCL's source:
//! src/graph/paths.cc (`ncclTopoGetNchannels`, `ncclTopoComputeP2pChannels`), src/init.cc
//! (`computeBuffSizes`: the p2p chunk) and src/enqueue.cc (`scheduleP2pTasksToPlan`,
//! `addP2pToPlan`: the split of one send over channels and the LL threshold).
//!
//! Each send runs on its channels in chunks; like a Simple ring step, a chunk is copied, fenced
//! and posted before the next, so a channel moves its chunk of c us in c + L (the model's
//! per-slice post, [`super::Model`]). Larger sends are striped over more channels with the same
//! chunk, so each channel's chunk takes longer against the same L: this is why NCCL's all-to-all
//! bandwidth keeps rising with size long after the pipeline is full.

use super::algo::Proto;
use super::constants::{step_data_bytes, P2P_NET_CHUNK, P2P_NVLINK_CHUNK};
use crate::topology::{GpuSystem, Intra};

/// `NCCL_MAX_DEV_WORK_P2P_PER_BATCH` (src/include/device.h): p2p operations a channel runs at once.
const WORK_PER_BATCH: u64 = 8;
/// `NCCL_P2P_LL_THRESHOLD` (src/enqueue.cc): a send of at most this many bytes per channel uses LL.
const LL_THRESHOLD: u64 = 16384;
/// `NCCL_P2P_PER_CHANNEL_NET_BW` (src/graph/paths.cc): GB/s one channel is counted on to drive
/// across the network, which sets the channels per network peer.
const PER_CHANNEL_NET_GBPS: f64 = 14.0;
/// `NCCL_MAX_P2P_NCHANNELS` default (`MAXCHANNELS`).
const MAX_P2P_CHANNELS: u32 = 64;

/// The communicator's p2p channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pChannels {
    /// `p2pnChannels`: channels p2p work may use.
    pub total: u32,
    /// `p2pnChannelsPerPeer`: the most channels one peer's send is striped over.
    pub per_peer: u32,
    /// The fewest channels a send is striped over when it is large enough (`nChannelsMin`: all
    /// peers' sends fit the channels side by side).
    pub min_per_send: u32,
    /// `p2pChunkSize`, bytes.
    pub chunk: u64,
    /// More than one box (NCCL's `nNodes > 1`): sends are cut for the network.
    pub across_boxes: bool,
}

/// How one send of an all-to-all runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pSend {
    pub proto: Proto,
    /// Channels the send is striped over.
    pub channels: u32,
    /// Bytes each channel carries.
    pub part: u64,
    /// Bytes a channel moves per step (the post's unit).
    pub chunk: u64,
}

fn pow2_up(x: u32) -> u32 {
    x.max(1).next_power_of_two()
}

impl P2pChannels {
    /// The p2p channels of a communicator of `comm_channels` channels on `system`.
    pub fn of(system: &GpuSystem, comm_channels: u32) -> P2pChannels {
        let ranks = system.gpus() as u64;
        let total = pow2_up(comm_channels.clamp(1, MAX_P2P_CHANNELS));
        // Channels per peer by the path to it: 2 per NVLink (2 over PCIe or one xGMI link),
        // network peers one per local NIC or enough for its bandwidth at 14 GB/s a channel.
        let mut per_peer = u32::MAX;
        if system.gpus_per_box > 1 {
            let links = match system.intra {
                Intra::NvSwitch => system.links_per_gpu,
                Intra::FullMesh => system.links_per_gpu / (system.gpus_per_box - 1).max(1),
                Intra::Pcie => 1,
            };
            per_peer = per_peer.min(2 * links.max(1));
        }
        if system.boxes > 1 {
            let nics = (system.nics_per_box / system.gpus_per_box.max(1)).max(1);
            let net_gbps = (nics as f64 * system.nic_gbps()).floor();
            let for_bandwidth = (net_gbps / PER_CHANNEL_NET_GBPS).ceil() as u32;
            per_peer = per_peer.min(nics.max(for_bandwidth));
        }
        let mut per_peer = pow2_up(per_peer.min(MAX_P2P_CHANNELS));
        if system.boxes > 1 {
            // The network is the bottleneck: fit every peer's channels into one round.
            let rounds = ranks.div_ceil(WORK_PER_BATCH);
            while per_peer as u64 * rounds > total as u64 && per_peer > 1 {
                per_peer /= 2;
            }
        } else {
            per_peer = per_peer.min(total);
        }
        let mut min_per_send = per_peer;
        while min_per_send as u64 * ranks > total as u64 && min_per_send > 1 {
            min_per_send /= 2;
        }
        let chunk = if system.boxes > 1 || system.intra == Intra::Pcie {
            P2P_NET_CHUNK
        } else {
            P2P_NVLINK_CHUNK
        };
        P2pChannels {
            total,
            per_peer,
            min_per_send,
            chunk,
            across_boxes: system.boxes > 1,
        }
    }

    /// How a send of `bytes` to one peer runs; `ll`: whether LL may run (NCCL_PROTO).
    pub fn send(&self, bytes: u64, ll: bool) -> P2pSend {
        let bytes = bytes.max(1);
        let (min_part, max_part) = if self.across_boxes {
            (self.chunk / 2, self.chunk)
        } else {
            (self.chunk / 8, self.chunk * 32)
        };
        let mut channels = (self.min_per_send as u64).min(bytes.div_ceil(min_part)) as u32;
        let mut part = min_part.max(bytes.div_ceil(channels as u64));
        while part > max_part && channels <= self.per_peer / 2 {
            channels *= 2;
            part = bytes.div_ceil(channels as u64);
        }
        let part = part.min(bytes);
        let (proto, chunk) = if ll && bytes <= channels as u64 * LL_THRESHOLD {
            (Proto::LL, step_data_bytes(Proto::LL as usize))
        } else if self.across_boxes && bytes < self.chunk {
            // Tuned for the network: smaller chunks for smaller sends.
            (Proto::Simple, self.chunk / 4)
        } else if self.across_boxes && bytes < 8 * self.chunk {
            (Proto::Simple, self.chunk / 2)
        } else {
            (Proto::Simple, self.chunk)
        };
        P2pSend {
            proto,
            channels,
            part,
            chunk: chunk.min(part),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn system(name: &str) -> GpuSystem {
        GpuSystem::parse(name).unwrap().unwrap()
    }

    /// One B200 box: 32 p2p channels; a peer's path over 18 NVLinks allows 36, so 32 per peer;
    /// eight ranks side by side get 4 each.
    #[test]
    fn one_box_stripes_each_peer_over_four_of_thirty_two_channels() {
        let ch = P2pChannels::of(&system("hgx-b200:1"), 32);
        assert_eq!((ch.total, ch.per_peer, ch.min_per_send), (32, 32, 4));
        assert_eq!(ch.chunk, 512 << 10);
        // 8 KiB: one channel, LL.
        let s = ch.send(8 << 10, true);
        assert_eq!((s.proto, s.channels), (Proto::LL, 1));
        assert_eq!(ch.send(8 << 10, false).proto, Proto::Simple);
        // 2 MiB: 4 channels of 512 KiB, one chunk each, Simple.
        let s = ch.send(2 << 20, true);
        assert_eq!(
            (s.proto, s.channels, s.part, s.chunk),
            (Proto::Simple, 4, 512 << 10, 512 << 10)
        );
        // 2 GiB: parts over 16 MiB double the channels up to all 32.
        let s = ch.send(2 << 30, true);
        assert_eq!((s.channels, s.part), (32, 64 << 20));
    }

    /// Across boxes a peer gets 4 channels (a 400 Gb/s NIC at 14 GB/s a channel), and each send
    /// is split into parts of at most one 128 KiB chunk.
    #[test]
    fn across_boxes_channels_follow_the_nic() {
        let ch = P2pChannels::of(&system("hgx-b200:2"), 16);
        assert_eq!((ch.total, ch.per_peer, ch.min_per_send), (16, 4, 1));
        assert_eq!(ch.chunk, 128 << 10);
        let s = ch.send(64 << 20, true);
        assert_eq!((s.channels, s.part, s.chunk), (4, 16 << 20, 128 << 10));
        let s = ch.send(100 << 10, true);
        assert_eq!((s.proto, s.chunk), (Proto::Simple, 32 << 10));
    }
}
