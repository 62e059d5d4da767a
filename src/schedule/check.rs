//! Structural checks every schedule passes before simulation: NPUs exist, no self-sends, dependencies
//! name real transfers and form no cycle.

use rayon::prelude::*;

use super::{Schedule, TransferIndex};
use crate::topology::{NodeId, Topology};
use crate::Error;

impl Schedule {
    /// Checks the schedule against a topology; the error names the first bad transfer by its id.
    pub fn check(&self, topology: &Topology) -> Result<(), Error> {
        // Transfers are checked on every core (tens of millions of them in the large runs), their
        // endpoints first; the rest only where the schedule has dependencies, routes, waits or
        // piece ranges of more than one piece. The error is still the first bad transfer's.
        let waits = self.has_waits();
        let more = self.has_deps() || self.has_routes() || waits || self.has_piece_spans();
        let endpoints_fine = |&(src, dst): &(NodeId, NodeId)| {
            topology.is_active_npu(src) && topology.is_active_npu(dst) && (src != dst || waits)
        };
        const PIECE: usize = 1 << 16;
        let first_error = self
            .all_ends()
            .par_chunks(PIECE)
            .enumerate()
            .find_map_first(|(piece, ends)| {
                ends.iter().enumerate().find_map(|(j, t)| {
                    if endpoints_fine(t) && !more {
                        return None;
                    }
                    let i = (piece * PIECE + j) as TransferIndex;
                    self.check_transfer(i, topology).err()
                })
            });
        if let Some(error) = first_error {
            return Err(error);
        }
        self.check_acyclic()
    }

    fn check_transfer(&self, i: TransferIndex, topology: &Topology) -> Result<(), Error> {
        let t = self.transfer(i);
        let id = self.id(i);
        for (role, npu) in [("src", t.src), ("dst", t.dst)] {
            if npu >= topology.npus() {
                return Err(Error::input(format!(
                    "transfer {id}: {role} {npu} is not an NPU of {} (NPUs are 0..{})",
                    topology.name(),
                    topology.npus()
                )));
            }
            if !topology.is_active_npu(npu) {
                return Err(Error::input(format!(
                    "transfer {id}: {role} {npu} is a failed NPU of {}",
                    topology.name()
                )));
            }
        }
        if t.src == t.dst && self.wait(i).is_none() {
            return Err(Error::input(format!(
                "transfer {id}: sends from NPU {} to itself",
                t.src
            )));
        }
        if let Some(&d) = self.deps(i).iter().find(|&&d| d as usize >= self.len()) {
            return Err(Error::input(format!(
                "transfer {id}: depends on unknown transfer index {d}"
            )));
        }
        if let Some((lo, hi)) = self.pieces(i) {
            if lo > hi {
                return Err(Error::input(format!(
                    "transfer {id}: chunk range {lo}..{hi} is reversed"
                )));
            }
        }
        match self.route(i) {
            Some(route) => check_route(id, t.src, t.dst, route, topology),
            None => Ok(()),
        }
    }

    fn check_acyclic(&self) -> Result<(), Error> {
        if !self.has_deps() || self.deps_point_backwards() {
            return Ok(());
        }
        let n = self.len();
        let (start, dependents) = self.dependents();
        let mut waiting: Vec<u32> = (0..n as TransferIndex)
            .map(|t| self.deps(t).len() as u32)
            .collect();
        let mut ready: Vec<TransferIndex> = (0..n as TransferIndex)
            .filter(|&t| waiting[t as usize] == 0)
            .collect();
        let mut done = 0usize;
        while let Some(t) = ready.pop() {
            done += 1;
            for &d in &dependents[start[t as usize] as usize..start[t as usize + 1] as usize] {
                waiting[d as usize] -= 1;
                if waiting[d as usize] == 0 {
                    ready.push(d);
                }
            }
        }
        if done == n {
            return Ok(());
        }
        // Walk dependencies among the blocked transfers until one repeats: that is a cycle.
        let first = (0..n)
            .find(|&t| waiting[t] > 0)
            .expect("some transfer is blocked") as TransferIndex;
        let mut seen_at = vec![usize::MAX; n];
        let mut path = Vec::new();
        let mut at = first;
        while seen_at[at as usize] == usize::MAX {
            seen_at[at as usize] = path.len();
            path.push(at);
            at = *self
                .deps(at)
                .iter()
                .find(|&&d| waiting[d as usize] > 0)
                .expect("a blocked transfer waits on a blocked transfer");
        }
        let cycle: Vec<String> = path[seen_at[at as usize]..]
            .iter()
            .chain(std::iter::once(&at))
            .map(|&t| self.id(t).to_string())
            .collect();
        Err(Error::input(format!(
            "dependency cycle among transfers: {} (each waits for the next)",
            cycle.join(" -> ")
        )))
    }
}

/// A route runs from the transfer's src to its dst over links of the topology, reaching dst only
/// at its end and passing no failed NPU.
fn check_route(
    id: u64,
    src: u32,
    dst: u32,
    route: &[u32],
    topology: &Topology,
) -> Result<(), Error> {
    let text = || {
        route
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(";")
    };
    if route.len() < 2 || route[0] != src || route[route.len() - 1] != dst {
        return Err(Error::input(format!(
            "transfer {id}: route {} must run from its src {src} to its dst {dst}",
            text()
        )));
    }
    if route[1..route.len() - 1].contains(&dst) {
        return Err(Error::input(format!(
            "transfer {id}: route {} passes its dst {dst} before its end",
            text()
        )));
    }
    for hop in route.windows(2) {
        let failed = |v: u32| v < topology.npus() && !topology.is_active_npu(v);
        if hop[0] >= topology.nodes() || hop[1] >= topology.nodes() || failed(hop[1]) {
            return Err(Error::input(format!(
                "transfer {id}: route {} names node {} that {} does not have",
                text(),
                if hop[0] >= topology.nodes() {
                    hop[0]
                } else {
                    hop[1]
                },
                topology.name()
            )));
        }
        if topology.link_between(hop[0], hop[1]).is_none() {
            return Err(Error::input(format!(
                "transfer {id}: route {} takes {} -> {}, which is not a link of {}",
                text(),
                hop[0],
                hop[1],
                topology.name()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Transfer;
    use super::*;
    use crate::topology::TopologyOptions;

    fn ring4() -> Topology {
        TopologyOptions::new("ring:4").build().unwrap()
    }

    fn t(src: u32, dst: u32) -> Transfer {
        Transfer { src, dst, bytes: 1 }
    }

    #[test]
    fn cycles_are_named() {
        let mut s = Schedule::new();
        s.push(t(0, 1), &[]);
        s.push(t(1, 2), &[2]);
        s.push(t(2, 3), &[3]);
        s.push(t(3, 0), &[1]);
        let err = s.check(&ring4()).unwrap_err().to_string();
        assert!(
            err.contains("1 -> 2 -> 3 -> 1") || err.contains("2 -> 3 -> 1 -> 2"),
            "{err}"
        );
    }

    #[test]
    fn the_first_bad_transfer_is_named_however_many_follow() {
        // Bad transfers far apart, in separate pieces of the parallel check: the first one wins.
        let mut s = Schedule::new();
        for i in 0..200_000u32 {
            let bad = i == 70_000 || i == 190_000 || i == 150_000;
            s.push(if bad { t(1, 9) } else { t(i % 4, (i + 1) % 4) }, &[]);
        }
        let err = s.check(&ring4()).unwrap_err().to_string();
        assert!(err.starts_with("transfer 70000:"), "{err}");
    }

    #[test]
    fn self_sends_and_unknown_npus_are_rejected() {
        let mut s = Schedule::new();
        s.push(t(0, 0), &[]);
        assert!(s
            .check(&ring4())
            .unwrap_err()
            .to_string()
            .contains("to itself"));
        let mut s = Schedule::new();
        s.push(t(0, 9), &[]);
        assert!(s.check(&ring4()).unwrap_err().to_string().contains("dst 9"));
    }
}
