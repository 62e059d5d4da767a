//! RCCL's own algorithms on the MI300X. RCCL (ROCm/rccl, October 2024) recognises a box of eight
//! MI300X on their xGMI full mesh as its `rome_model_79` (`src/graph/rome_models.cc`: options
//! `mscclEnabled=1,tuning=5`) and then runs a call as an MSCCL algorithm it ships
//! (`tools/msccl-algorithms/`) before its NCCL-derived tuner sees it, whenever one of them
//! matches the call (`mscclInternalSchedulerSelectAlgo`, `src/misc/msccl/msccl_lifecycle.cc`):
//! the same collective on the same number of ranks, the call's bytes within the algorithm's
//! `minBytes`..`maxBytes`, its element count a multiple of the algorithm's `nchunksperloop`, and
//! no pre- or post-operation (`ncclAvg`). The all-reduces are all-pairs: every GPU sends each
//! peer that peer's eighth of its buffer over their direct link, sums the eighth it owns, and
//! sends the sum to every peer, each pair's traffic on `nchannels` thread blocks of its own; the
//! all-to-alls send each peer its block directly. (MSCCL++, which RCCL also ships, runs calls up
//! to 1 MiB only under HIP graph capture, which nccl-tests does not use by default.)

use super::algo::Proto;
use crate::collective::CollectiveKind;
use crate::topology::{GpuArch, GpuSystem, Intra};

/// One of RCCL's shipped MSCCL algorithms, as its XML header gives it (the out-of-place ones,
/// which nccl-tests times first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Algorithm {
    pub kind: CollectiveKind,
    pub proto: Proto,
    /// `nchannels`: thread blocks (channels) each pair of GPUs runs.
    pub channels: u32,
    /// `nchunksperloop`: the call's element count must be a multiple of it.
    pub chunks_per_loop: u64,
    pub min_bytes: u64,
    pub max_bytes: u64,
}

const fn algorithm(
    kind: CollectiveKind,
    proto: Proto,
    channels: u32,
    chunks_per_loop: u64,
    min_bytes: u64,
    max_bytes: u64,
) -> Algorithm {
    Algorithm {
        kind,
        proto,
        channels,
        chunks_per_loop,
        min_bytes,
        max_bytes,
    }
}

/// RCCL's shipped algorithms for eight ranks (`tools/msccl-algorithms/`:
/// `allreduce-allpairs-8n-ll-32tb-op.xml`, `-ll-64tb-op.xml`, `-simple-op.xml`;
/// `alltoall-8n-0-9kb.xml`, `-9kb-190kb.xml`, `-190kb-512kb.xml`, `-512kb-7mb.xml`,
/// `-7mb-43mb.xml`).
pub const ALGORITHMS: [Algorithm; 8] = {
    use CollectiveKind::{AllReduce, AllToAll};
    use Proto::{Simple, LL};
    [
        algorithm(AllReduce, LL, 4, 256, 0, 65_536),
        algorithm(AllReduce, LL, 8, 512, 65_537, 524_287),
        algorithm(AllReduce, Simple, 8, 512, 524_288, 16_777_216),
        algorithm(AllToAll, LL, 1, 8, 0, 9_216),
        algorithm(AllToAll, LL, 2, 16, 9_217, 194_560),
        algorithm(AllToAll, LL, 4, 32, 194_561, 524_288),
        algorithm(AllToAll, Simple, 32, 32, 524_289, 7_340_032),
        algorithm(AllToAll, Simple, 8, 64, 7_340_033, 45_088_768),
    ]
};

/// The MSCCL algorithm RCCL runs for a call of `bytes` of `kind` in elements of `element_bytes`
/// on `system`, if any: only on one box of eight MI300X.
pub fn find(
    system: &GpuSystem,
    kind: CollectiveKind,
    bytes: u64,
    element_bytes: u64,
) -> Option<&'static Algorithm> {
    let one_mi300x_box = system.arch == GpuArch::Cdna3
        && system.intra == Intra::FullMesh
        && system.boxes == 1
        && system.gpus() == 8;
    if !one_mi300x_box || element_bytes == 0 || bytes == 0 || !bytes.is_multiple_of(element_bytes) {
        return None;
    }
    let count = bytes / element_bytes;
    ALGORITHMS.iter().find(|a| {
        a.kind == kind
            && (a.min_bytes..=a.max_bytes).contains(&bytes)
            && count.is_multiple_of(a.chunks_per_loop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn system(spec: &str) -> GpuSystem {
        GpuSystem::parse(spec).unwrap().unwrap()
    }

    #[test]
    fn rccl_runs_its_all_pairs_all_reduce_up_to_16_mib_on_one_mi300x_box() {
        let mi300x = system("mi300x:1");
        let proto = |bytes| find(&mi300x, CollectiveKind::AllReduce, bytes, 4).map(|a| a.proto);
        assert_eq!(proto(8 << 10), Some(Proto::LL));
        assert_eq!(proto(256 << 10), Some(Proto::LL));
        assert_eq!(proto(8 << 20), Some(Proto::Simple));
        assert_eq!(proto(16 << 20), Some(Proto::Simple));
        assert_eq!(proto(32 << 20), None);
        // 512 KiB - 4 bytes is within the 64-block LL file's range, but 131,071 floats are no
        // multiple of its 512 chunks a loop.
        assert_eq!(proto((512 << 10) - 4), None);
        // Half-precision elements: twice the count, the same file.
        assert_eq!(
            find(&mi300x, CollectiveKind::AllReduce, 1 << 20, 2).map(|a| a.channels),
            Some(8)
        );
        let all_to_all = |bytes| find(&mi300x, CollectiveKind::AllToAll, bytes, 1);
        assert_eq!(all_to_all(1 << 20).map(|a| a.channels), Some(32));
        assert_eq!(all_to_all(32 << 20).map(|a| a.channels), Some(8));
        assert_eq!(all_to_all(64 << 20), None);
        assert_eq!(
            find(&mi300x, CollectiveKind::AllGather, 1 << 20, 4),
            None,
            "no shipped all-gather"
        );
    }

    #[test]
    fn only_on_one_box_of_eight_mi300x() {
        for spec in ["mi300x:2", "hgx-h100:1", "dgx-a100:1"] {
            assert_eq!(
                find(&system(spec), CollectiveKind::AllReduce, 8 << 20, 4),
                None,
                "{spec}"
            );
        }
        let mut four = system("mi300x:1");
        four.use_first_gpus(4).unwrap();
        assert_eq!(find(&four, CollectiveKind::AllReduce, 8 << 20, 4), None);
    }

    /// Every range starts where the one before it ends, per collective.
    #[test]
    fn the_shipped_ranges_tile_the_sizes() {
        for kind in [CollectiveKind::AllReduce, CollectiveKind::AllToAll] {
            let ranges: Vec<_> = ALGORITHMS.iter().filter(|a| a.kind == kind).collect();
            assert_eq!(ranges[0].min_bytes, 0);
            for pair in ranges.windows(2) {
                assert_eq!(pair[1].min_bytes, pair[0].max_bytes + 1, "{kind:?}");
            }
        }
    }
}
