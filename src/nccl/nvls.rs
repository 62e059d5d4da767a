//! NVLS's channels and chunks: how many channels NVLS and NVLSTree run and how large a chunk
//! each loop moves a head, as NCCL sets them for a system (src/transport/nvls.cc,
//! `ncclNvlsTuning`) and cuts them for a call (src/enqueue.cc, `calcCollChunking`), NCCL 2.30.

use super::constants::{NVLS_CHANNELS_SM100, NVLS_CHANNELS_SM100_NVL, NVLS_CHANNELS_SM90};
use crate::topology::{GpuArch, GpuSystem};

/// NCCL's default NVLS chunk (`NCCL_NVLS_CHUNKSIZE`), bytes.
const DEFAULT_CHUNK: u64 = 128 << 10;

/// NVLS's per-communicator figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvlsTuning {
    /// Channels NVLS and NVLSTree run (`nvlsChannels`).
    pub channels: u32,
    /// NVLS's largest chunk a head (`nvlsChunkSize`), bytes.
    pub chunk: u64,
    /// NVLSTree's largest chunk a head (`nvlsTreeMaxChunkSize`), bytes.
    pub tree_max_chunk: u64,
}

impl NvlsTuning {
    /// The figures NCCL picks for `system`: 16 channels on Hopper, 24 in one Blackwell box and
    /// 32 across boxes, a 128 KiB chunk, NVLSTree's capped at 64 KiB from four boxes; across
    /// Blackwell boxes NCCL 2.30 sets all three by the boxes, GPUs a box and the NIC's rate
    /// (`ncclNvlsTreeSm100Tuning`).
    pub fn of(system: &GpuSystem) -> NvlsTuning {
        let blackwell = system.arch == GpuArch::Blackwell;
        let across = system.boxes > 1;
        let mut tuned = NvlsTuning {
            channels: match (blackwell, across) {
                (true, true) => NVLS_CHANNELS_SM100,
                (true, false) => NVLS_CHANNELS_SM100_NVL,
                _ => NVLS_CHANNELS_SM90,
            },
            chunk: DEFAULT_CHUNK,
            tree_max_chunk: 0,
        };
        if blackwell && across {
            tuned.sm100_across_boxes(system);
        }
        if tuned.tree_max_chunk == 0 {
            tuned.tree_max_chunk = if system.boxes >= 4 {
                64 << 10
            } else {
                tuned.chunk
            };
        }
        tuned
    }

    /// `ncclNvlsTreeSm100Tuning`. NCCL reads the GPU's path to its NIC; in the HGX boxes the NICs
    /// sit behind the GPUs' own PCIe switches (NCCL's PATH_PXB), and the NIC's rate bounds that
    /// path.
    fn sm100_across_boxes(&mut self, system: &GpuSystem) {
        let (boxes, ppn, nic) = (system.boxes, system.gpus_per_box, system.nic_gbps());
        let behind_pcie_switch = true;
        let k = 1 << 10;
        if boxes == 2 && nic >= 48.0 {
            self.channels = 32;
            self.tree_max_chunk = 128 * k;
            if ppn <= 4 {
                self.chunk = 256 * k;
                self.tree_max_chunk = 256 * k;
            } else if ppn >= 16 || (ppn <= 8 && behind_pcie_switch && nic < 96.0) {
                self.tree_max_chunk = 64 * k;
            }
        } else if nic >= 96.0 {
            if ppn <= 8 {
                self.channels = 24;
                self.chunk = 256 * k;
                self.tree_max_chunk = 256 * k;
            } else {
                self.channels = 32;
                self.tree_max_chunk = if ppn < 32 { 128 * k } else { 64 * k };
            }
        } else if nic >= 48.0 {
            self.channels = 24;
            self.tree_max_chunk = if behind_pcie_switch { 64 * k } else { 128 * k };
        }
    }

    /// NVLS's chunk for a call of `bytes` over `channels` x `heads` concurrent operations: the
    /// communicator's chunk (at most `max`), halved to 64, 32 and 16 KiB while the call is under
    /// 64, 8 and 2 times the operations' chunks.
    pub fn call_chunk(&self, bytes: u64, channels: u32, heads: u32, max: u64) -> u64 {
        let ops = channels as u64 * heads as u64;
        let mut chunk = self.chunk.min(max);
        for (times, to) in [(64, 65536), (8, 32768), (2, 16384)] {
            if bytes < times * ops * chunk && chunk > to {
                chunk = to;
            }
        }
        chunk
    }

    /// NVLSTree's chunk a head for a call: the smaller of the two maxima, halved to 256, 128,
    /// 64 and 32 KiB while the call is under 32, 16, 4 and 1 times the operations' chunks.
    pub fn tree_call_chunk(&self, bytes: u64, channels: u32, heads: u32) -> u64 {
        let ops = channels as u64 * heads as u64;
        let mut chunk = self.chunk.min(self.tree_max_chunk);
        for (times, to) in [(32, 262144), (16, 131072), (4, 65536), (1, 32768)] {
            if bytes < times * ops * chunk && chunk > to {
                chunk = to;
            }
        }
        chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuning(spec: &str) -> NvlsTuning {
        NvlsTuning::of(&GpuSystem::parse(spec).unwrap().unwrap())
    }

    /// NCCL 2.30's figures: an H100 box 16 channels and 128 KiB; H100 boxes cap NVLSTree's chunk
    /// at 64 KiB from four; two B200 boxes on 400 Gb/s NICs 32 channels and 64 KiB trees, more
    /// of them 24 channels; a B200 box 24 channels.
    #[test]
    fn nvls_tuning_follows_nccl() {
        let k = 1 << 10;
        assert_eq!(
            tuning("hgx-h100:1"),
            NvlsTuning {
                channels: 16,
                chunk: 128 * k,
                tree_max_chunk: 128 * k
            }
        );
        assert_eq!(tuning("hgx-h100:4").tree_max_chunk, 64 * k);
        assert_eq!(tuning("hgx-h100:2").tree_max_chunk, 128 * k);
        assert_eq!(tuning("hgx-b200:1").channels, 24);
        assert_eq!(
            tuning("hgx-b200:2"),
            NvlsTuning {
                channels: 32,
                chunk: 128 * k,
                tree_max_chunk: 64 * k
            }
        );
        assert_eq!(
            tuning("hgx-b200:4"),
            NvlsTuning {
                channels: 24,
                chunk: 128 * k,
                tree_max_chunk: 64 * k
            }
        );
    }

    /// The call's chunk halves as the call shrinks against channels x heads x chunk: 16 x 8
    /// operations of 128 KiB are 16 MiB, so 1 GiB keeps 128 KiB (64 x 16 MiB is exactly 1 GiB),
    /// 64 MiB gets 64 KiB, 16 MiB 32 KiB and 2 MiB 16 KiB.
    #[test]
    fn call_chunks_shrink_with_the_call() {
        let h100 = tuning("hgx-h100:1");
        let chunk = |bytes: u64| h100.call_chunk(bytes, 16, 8, u64::MAX);
        assert_eq!(chunk(1 << 30), 128 << 10);
        assert_eq!(chunk(64 << 20), 64 << 10);
        assert_eq!(chunk(16 << 20), 32 << 10);
        assert_eq!(chunk(2 << 20), 16 << 10);
        let tree = |bytes: u64| tuning("hgx-b200:2").tree_call_chunk(bytes, 32, 8);
        assert_eq!(tree(1 << 30), 64 << 10);
        assert_eq!(tree(8 << 20), 32 << 10);
    }
}
