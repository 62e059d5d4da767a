//! What one greedy run is given and what it returns: the chunks, who holds them at first and who
//! must get them, and the matched sends.

use crate::units::Time;
use crate::Error;

/// No transfer: the chunk was held from the start.
pub(crate) const NONE: u32 = u32::MAX;

/// Which NPUs must end up holding a chunk.
#[derive(Clone, Debug)]
pub(crate) enum Members {
    All,
    /// One flag per local NPU.
    Some(Vec<bool>),
}

impl Members {
    pub(crate) fn wants(&self, npu: u32) -> bool {
        match self {
            Members::All => true,
            Members::Some(flags) => flags[npu as usize],
        }
    }
}

/// A chunk that `npu` holds from time `ready` on, before any matching.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Holding {
    pub npu: u32,
    pub chunk: u32,
    pub ready: Time,
}

/// What to spread: chunk sizes, who holds what at first, who must get what.
#[derive(Clone, Debug, Default)]
pub(crate) struct Problem {
    pub chunk_bytes: Vec<u64>,
    /// Index into `groups` for each chunk.
    pub chunk_group: Vec<u32>,
    pub groups: Vec<Members>,
    pub initial: Vec<Holding>,
    /// Per chunk, its one destination (local NPU), or [`NONE`] when every member of its group
    /// wants it. Empty when no chunk has a single destination.
    pub dest: Vec<u32>,
}

impl Problem {
    /// An all-gather of one `bytes` chunk per NPU among `npus`, chunk `v` held by NPU `v` from
    /// the start for the first `held` (tests build what they need from it).
    #[cfg(test)]
    pub(crate) fn all_gather(npus: u32, bytes: u64, held: u32) -> Problem {
        Problem {
            chunk_bytes: vec![bytes; npus as usize],
            chunk_group: vec![0; npus as usize],
            groups: vec![Members::All],
            initial: (0..held)
                .map(|v| Holding {
                    npu: v,
                    chunk: v,
                    ready: Time::ZERO,
                })
                .collect(),
            dest: Vec::new(),
        }
    }

    pub fn chunks(&self) -> u32 {
        self.chunk_bytes.len() as u32
    }

    /// (NPU, chunk) pairs over `npus`: the claims' bits, and about the sends of a run.
    pub fn pairs(&self, npus: u32) -> u64 {
        npus as u64 * self.chunks() as u64
    }

    /// The single destination of a chunk that has one.
    pub(super) fn unicast(&self, chunk: u32) -> Option<u32> {
        self.dest
            .get(chunk as usize)
            .copied()
            .filter(|&d| d != NONE)
    }

    /// True when every NPU must get every chunk (an all-gather): no groups, no single
    /// destinations, so whether a copy is of use is one claims bit.
    pub(super) fn copies_to_all(&self) -> bool {
        self.dest.is_empty() && matches!(self.groups[..], [Members::All])
    }

    pub(super) fn member(&self, npu: u32, chunk: u32) -> bool {
        if let [Members::All] = self.groups[..] {
            return true;
        }
        self.groups[self.chunk_group[chunk as usize] as usize].wants(npu)
    }

    /// True when `npu` must end up holding `chunk`.
    pub(crate) fn wants(&self, npu: u32, chunk: u32) -> bool {
        match self.unicast(chunk) {
            Some(d) => d == npu,
            None => self.member(npu, chunk),
        }
    }

    /// How many (NPU, chunk) pairs must be delivered: every member of a chunk's group, or its one
    /// destination.
    pub(super) fn copies_wanted(&self, n: u32) -> u64 {
        let mut chunks_per_group = vec![0u64; self.groups.len()];
        let mut unicast = 0;
        for (c, &g) in self.chunk_group.iter().enumerate() {
            match self.unicast(c as u32) {
                Some(_) => unicast += 1,
                None => chunks_per_group[g as usize] += 1,
            }
        }
        let copies: u64 = self
            .groups
            .iter()
            .zip(&chunks_per_group)
            .map(|(group, &count)| {
                let members = match group {
                    Members::All => n as u64,
                    Members::Some(flags) => flags.iter().filter(|&&f| f).count() as u64,
                };
                members * count
            })
            .sum();
        copies + unicast
    }
}

/// One matched send: `chunk` over network link `link` from `start`, arriving at `arrive`, after
/// send `via` brought the chunk to the link's source (`NONE`: it was there from the start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Send {
    pub link: u32,
    pub chunk: u32,
    pub via: u32,
    pub start: Time,
    pub arrive: Time,
}

/// The most sends one run can make: sends are numbered in 32 bits ([`Send::via`]), [`NONE`]
/// excluded. A 256x256 mesh's all-gather (4,294,901,760 sends) is the largest square mesh's.
pub(crate) const MAX_SENDS: u64 = NONE as u64;

/// Refuses a problem whose copies alone need more sends than [`MAX_SENDS`]: those wanted and
/// not held from the start (a chunk with one destination may take several hops: those are
/// counted as [`super::run`] makes them). Checked where problems are built, before any estimate.
pub(crate) fn ensure_send_ids(npus: u32, problem: &Problem) -> Result<(), Error> {
    let held = problem
        .initial
        .iter()
        .filter(|h| problem.wants(h.npu, h.chunk))
        .count() as u64;
    let copies = problem.copies_wanted(npus).saturating_sub(held);
    if copies > MAX_SENDS {
        return Err(Error::input(format!(
            "synthesis numbers its sends in 32 bits: {copies} sends are more than the \
             {MAX_SENDS} it can number; try fewer NPUs or chunks"
        )));
    }
    Ok(())
}
