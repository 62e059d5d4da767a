//! NCCL's algorithms, protocols and collective functions, numbered as its tuning tables index
//! them (src/include/device.h), with the facts about each that its tuning model uses.

use crate::collective::CollectiveKind;

/// Algorithms in NCCL's order: Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT.
pub const ALGOS: usize = 7;
/// Protocols in NCCL's order: LL, LL128, Simple.
pub const PROTOS: usize = 3;

/// NCCL's algorithms, in its order, and RCCL's shipped MSCCL algorithms ([`msccl`]), which
/// RCCL runs before its tuner and NCCL's tables do not price.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    Tree = 0,
    Ring = 1,
    CollNetDirect = 2,
    CollNetChain = 3,
    Nvls = 4,
    NvlsTree = 5,
    Pat = 6,
    Msccl = 7,
}

impl Algo {
    /// The algorithms NCCL's tuning model prices (not [`Algo::Msccl`]).
    pub const ALL: [Algo; ALGOS] = [
        Algo::Tree,
        Algo::Ring,
        Algo::CollNetDirect,
        Algo::CollNetChain,
        Algo::Nvls,
        Algo::NvlsTree,
        Algo::Pat,
    ];

    /// The name NCCL prints and NCCL_ALGO takes.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Tree => "Tree",
            Algo::Ring => "Ring",
            Algo::CollNetDirect => "CollNetDirect",
            Algo::CollNetChain => "CollNetChain",
            Algo::Nvls => "NVLS",
            Algo::NvlsTree => "NVLSTree",
            Algo::Pat => "PAT",
            Algo::Msccl => "MSCCL",
        }
    }

    /// Which functions NCCL's tuning model prices for the algorithm.
    pub(super) fn runs(self, func: Func) -> bool {
        match func {
            Func::Broadcast | Func::Reduce => self == Algo::Ring,
            Func::AllGather | Func::ReduceScatter => {
                matches!(
                    self,
                    Algo::Pat | Algo::Ring | Algo::Nvls | Algo::CollNetDirect
                )
            }
            Func::AllReduce => !matches!(self, Algo::Pat | Algo::Msccl),
        }
    }

    /// NVLS and NVLSTree run only Simple; CollNet too.
    pub(super) fn takes(self, proto: Proto) -> bool {
        match self {
            Algo::Nvls | Algo::NvlsTree | Algo::CollNetDirect | Algo::CollNetChain | Algo::Pat => {
                proto == Proto::Simple
            }
            _ => true,
        }
    }
}

/// NCCL's protocols.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    LL = 0,
    LL128 = 1,
    Simple = 2,
}

impl Proto {
    pub const ALL: [Proto; PROTOS] = [Proto::LL, Proto::LL128, Proto::Simple];

    pub fn name(self) -> &'static str {
        match self {
            Proto::LL => "LL",
            Proto::LL128 => "LL128",
            Proto::Simple => "Simple",
        }
    }
}

/// Collective functions NCCL's tuning model prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    Broadcast = 0,
    Reduce = 1,
    AllGather = 2,
    ReduceScatter = 3,
    AllReduce = 4,
}

impl Func {
    pub const COUNT: usize = 5;
    pub const ALL: [Func; 5] = [
        Func::Broadcast,
        Func::Reduce,
        Func::AllGather,
        Func::ReduceScatter,
        Func::AllReduce,
    ];

    pub(super) fn of(kind: CollectiveKind) -> Option<Func> {
        Some(match kind {
            CollectiveKind::Broadcast => Func::Broadcast,
            CollectiveKind::Reduce => Func::Reduce,
            CollectiveKind::AllGather => Func::AllGather,
            CollectiveKind::ReduceScatter => Func::ReduceScatter,
            CollectiveKind::AllReduce => Func::AllReduce,
            _ => return None,
        })
    }
}
