//! Rings that use every link of a graph of GPUs: edge-disjoint Hamiltonian cycles over the direct
//! GPU-to-GPU links, as NCCL's topology search finds them on the DGX-1's hybrid cube-mesh and on
//! NVLink/xGMI meshes (several rings per GPU, each on its own links; with links both ways, each
//! ring also runs reversed on the links' other direction).

use crate::topology::{NodeId, Topology};

/// Search steps (extensions of a partial cycle) allowed per attempt: the search is exponential in
/// the worst case; past this an attempt keeps the best set it found.
const BUDGET: u64 = 200_000;

/// Attempts, each breaking ties between equally constrained neighbours by its own seeded order:
/// the first cycle found decides whether the rest of the graph still holds the others.
const ATTEMPTS: u64 = 16;

/// Edge-disjoint Hamiltonian cycles through all of `npus` over their direct links (both
/// directions present: undirected edges), as indices into `npus` starting at 0; as many as it
/// finds within its budget, up to half the smallest degree. Empty when there is no such cycle
/// (e.g. GPUs joined only through switches).
pub(crate) fn disjoint_rings(topology: &Topology, npus: &[NodeId]) -> Vec<Vec<usize>> {
    let n = npus.len();
    if n < 3 {
        return Vec::new();
    }
    let index: std::collections::HashMap<NodeId, usize> =
        npus.iter().enumerate().map(|(i, &v)| (v, i)).collect();
    // Adjacency lists (sized by the links), each sorted, with a flag per entry: edge still free.
    let mut neighbors: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, &v) in npus.iter().enumerate() {
        for &l in topology.out_links_of(v) {
            let dst = topology.link(l).dst;
            if let Some(&j) = index.get(&dst) {
                if topology.link_between(dst, v).is_some() && !neighbors[i].contains(&j) {
                    neighbors[i].push(j);
                }
            }
        }
        neighbors[i].sort_unstable();
    }
    let degree = neighbors.iter().map(Vec::len).min().unwrap_or(0);
    let most = degree / 2;
    if most == 0 {
        return Vec::new();
    }
    let open: Vec<Vec<bool>> = neighbors.iter().map(|l| vec![true; l.len()]).collect();
    let mut best: Vec<Vec<usize>> = Vec::new();
    for attempt in 0..ATTEMPTS {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(attempt);
        let mut search = Search {
            neighbors: &neighbors,
            open: open.clone(),
            steps: 0,
            best: Vec::new(),
            most,
            tie: (0..n).map(|_| rng.random::<u32>()).collect(),
        };
        search.more_cycles(&mut Vec::new());
        if search.best.len() > best.len() {
            best = search.best;
        }
        if best.len() == most {
            break;
        }
    }
    best
}

struct Search<'a> {
    neighbors: &'a [Vec<usize>],
    /// Per node and entry of its adjacency list: the edge is still free (both ways alike).
    open: Vec<Vec<bool>>,
    steps: u64,
    best: Vec<Vec<usize>>,
    most: usize,
    /// Per node, its rank among equally constrained neighbours in this attempt.
    tie: Vec<u32>,
}

impl Search<'_> {
    /// Extends `chosen` by one more cycle on the free edges, trying each cycle found in turn;
    /// true when `most` cycles were reached (stop).
    fn more_cycles(&mut self, chosen: &mut Vec<Vec<usize>>) -> bool {
        if chosen.len() > self.best.len() {
            self.best = chosen.clone();
        }
        if chosen.len() == self.most {
            return true;
        }
        let n = self.neighbors.len();
        let mut path = vec![0];
        let mut used = vec![false; n];
        used[0] = true;
        self.cycles_from(&mut path, &mut used, chosen)
    }

    /// Depth-first over Hamiltonian paths from node 0, most constrained neighbour first; each
    /// closed cycle is taken (its edges removed) and the search for the next cycle recurses.
    fn cycles_from(
        &mut self,
        path: &mut Vec<usize>,
        used: &mut [bool],
        chosen: &mut Vec<Vec<usize>>,
    ) -> bool {
        self.steps += 1;
        if self.steps > BUDGET {
            return false;
        }
        let n = self.neighbors.len();
        let last = *path.last().expect("starts at 0");
        if path.len() == n {
            if !self.is_open(last, 0) {
                return false;
            }
            self.set_edges(path, false);
            chosen.push(path.clone());
            let done = self.more_cycles(chosen);
            chosen.pop();
            self.set_edges(path, true);
            return done;
        }
        // Warnsdorff's order: the neighbour with the fewest ways on first.
        let free_around = |v: usize| {
            self.neighbors[v]
                .iter()
                .zip(&self.open[v])
                .filter(|&(&w, &open)| open && !used[w])
                .map(|(&w, _)| w)
        };
        let onward = |v: usize| free_around(v).count();
        // The cycle must still be able to close at node 0.
        if path.len() > 1 && onward(0) == 0 && path.len() < n - 1 {
            return false;
        }
        let mut candidates: Vec<(usize, u32, usize)> = free_around(last)
            .map(|v| (onward(v), self.tie[v], v))
            .collect();
        candidates.sort_unstable();
        for (_, _, next) in candidates {
            used[next] = true;
            path.push(next);
            let done = self.cycles_from(path, used, chosen);
            path.pop();
            used[next] = false;
            if done || self.steps > BUDGET {
                return done;
            }
        }
        false
    }

    fn set_edges(&mut self, cycle: &[usize], free: bool) {
        for k in 0..cycle.len() {
            let (a, b) = (cycle[k], cycle[(k + 1) % cycle.len()]);
            self.set_edge(a, b, free);
            self.set_edge(b, a, free);
        }
    }

    fn entry(&self, a: usize, b: usize) -> Option<usize> {
        self.neighbors[a].binary_search(&b).ok()
    }

    fn is_open(&self, a: usize, b: usize) -> bool {
        self.entry(a, b).is_some_and(|k| self.open[a][k])
    }

    fn set_edge(&mut self, a: usize, b: usize, free: bool) {
        let k = self.entry(a, b).expect("cycle edges are links");
        self.open[a][k] = free;
    }
}

/// The Hamiltonian path of a complete graph on `g` (even) nodes from `entry` to `entry + g / 2`
/// (mod g) in Walecki's zigzag (entry, +1, -1, +2, -2, ...); the g paths, one per entry, use
/// every ordered pair of nodes once (those from the first half's entries cover every pair one
/// way, their reversals, from the second half's, the other).
pub(crate) fn walecki_path(entry: usize, g: usize) -> Vec<usize> {
    let half = g / 2;
    let start = entry % half;
    let path: Vec<usize> = std::iter::once(start)
        .chain((1..g).map(|k| {
            let step = k.div_ceil(2);
            if k % 2 == 1 {
                (start + step) % g
            } else {
                (start + g - step) % g
            }
        }))
        .collect();
    if entry < half {
        path
    } else {
        path.into_iter().rev().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walecki's paths from every entry of a complete graph run to the node half-way round,
    /// visit every node once, and together use every ordered pair of nodes once.
    #[test]
    fn walecki_paths_use_every_ordered_pair_once() {
        for g in [2usize, 4, 6, 8, 16] {
            let mut used = vec![0; g * g];
            for entry in 0..g {
                let path = walecki_path(entry, g);
                assert_eq!((path[0], path[g - 1]), (entry, (entry + g / 2) % g), "{g}");
                let mut seen = path.clone();
                seen.sort_unstable();
                assert_eq!(seen, (0..g).collect::<Vec<_>>(), "{g}");
                for hop in path.windows(2) {
                    used[hop[0] * g + hop[1]] += 1;
                }
            }
            for a in 0..g {
                for b in 0..g {
                    assert_eq!(used[a * g + b], usize::from(a != b), "{g}: {a} -> {b}");
                }
            }
        }
    }
    use crate::topology::TopologyOptions;

    fn rings_of(spec: &str) -> (Topology, Vec<Vec<usize>>) {
        let t = TopologyOptions::new(spec)
            .with_links("25GB/s", "1us")
            .build()
            .unwrap();
        let npus = t.active_npus();
        let rings = disjoint_rings(&t, &npus);
        (t, rings)
    }

    /// Each ring visits every GPU once over direct links, and no two rings share a link.
    fn check(t: &Topology, rings: &[Vec<usize>]) {
        let mut used = std::collections::HashSet::new();
        for ring in rings {
            let mut seen = ring.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..ring.len()).collect::<Vec<_>>());
            for k in 0..ring.len() {
                let (a, b) = (ring[k] as u32, ring[(k + 1) % ring.len()] as u32);
                assert!(t.link_between(a, b).is_some(), "{a}-{b} is no link");
                assert!(used.insert((a.min(b), a.max(b))), "{a}-{b} used twice");
            }
        }
    }

    #[test]
    fn the_dgx1_cube_mesh_has_two_disjoint_rings() {
        let (t, rings) = rings_of("dgx1");
        assert_eq!(rings.len(), 2);
        check(&t, &rings);
    }

    #[test]
    fn a_full_mesh_of_eight_has_three_and_a_torus_two() {
        let (t, rings) = rings_of("fc:8");
        assert_eq!(rings.len(), 3);
        check(&t, &rings);
        let (t, rings) = rings_of("torus:4x4");
        assert_eq!(rings.len(), 2);
        check(&t, &rings);
    }

    #[test]
    fn larger_meshes_and_tori_use_every_link_they_can() {
        // Degree 6: three rings; a mesh's corners (degree 2) allow one.
        for (spec, want) in [("torus:4x4x4", 3), ("hypercube:6", 3), ("mesh:8x8", 1)] {
            let (t, rings) = rings_of(spec);
            assert_eq!(rings.len(), want, "{spec}");
            check(&t, &rings);
        }
    }

    #[test]
    fn gpus_behind_a_switch_have_no_ring_of_direct_links() {
        assert!(rings_of("switch:8").1.is_empty());
        // A line (mesh 1-D) has no cycle at all.
        assert!(rings_of("mesh:4").1.is_empty());
    }
}
