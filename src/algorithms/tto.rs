//! TTO, the tree baseline the TACOS paper names beside Blink (Sec. VIII): Blink's reduce-then-
//! broadcast specialised to a 2-D mesh with three spanning trees, all rooted at edge NPUs, each
//! reducing a third of the buffer to its root and broadcasting it back, pipelined over the chunks.
//! The TACOS paper does not say which edge NPUs; we root the trees at the middles of three sides
//! (top, left, bottom: NPUs `(a/2, 0)`, `(0, b/2)`, `(a/2, b-1)` of an `a x b` mesh) and pack one
//! tree from each exactly, at the best rate one tree per root allows (ForestColl's packing).

use super::Algorithm;
use crate::collective::{Collective, CollectiveKind};
use crate::forest::{self, ForestRequest};
use crate::schedule::Schedule;
use crate::topology::{DimKind, Topology};
use crate::Error;

/// TTO's all-reduce of `c` over every NPU of a 2-D mesh.
pub fn generate(topology: &Topology, c: &Collective) -> Result<Schedule, Error> {
    if c.kind != CollectiveKind::AllReduce {
        return Err(Algorithm::Tto.refusal(c.kind));
    }
    let dims = topology.dims();
    let mesh = dims.len() == 2
        && dims.iter().all(|d| d.kind == DimKind::Line && d.size >= 3)
        && c.npus == topology.active_npus()
        && topology.active_npus().len() == topology.npus() as usize;
    if !mesh {
        return Err(Error::input(format!(
            "tto roots its three trees at edge NPUs of a 2-D mesh (mesh:AxB, both at least 3) \
             over all its NPUs; {} is not one",
            topology.name()
        )));
    }
    let (a, b) = (dims[0].size, dims[1].size);
    let at = |x: u32, y: u32| x + a * y;
    let roots = vec![at(a / 2, 0), at(0, b / 2), at(a / 2, b - 1)];
    let mut plan = forest::plan(
        topology,
        &ForestRequest {
            participants: c.npus.clone(),
            roots: Some(roots),
            reversed: false,
            trees: Some(1),
            sinks: None,
        },
    )?;
    // Every tree carries its share of the whole buffer (reduce-then-broadcast counts all trees).
    plan.k = plan.trees.iter().map(|t| t.weight).sum();
    plan.reduce_broadcast = true;
    super::forestcoll::generate_reduce_broadcast(c, &plan, c.chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;

    /// Three trees, one from each edge root, each spanning the mesh; the all-reduce validates and
    /// every tree link carries its third up and down: at least 2 S / 3 over the root's links.
    #[test]
    fn three_trees_from_edge_npus_reduce_and_broadcast() {
        let (t, c) = crate::algorithms::testing::all_reduce_on("mesh:5x4", "16GB/s", "0.15us", 16);
        let finish = crate::algorithms::testing::validated_ps(&t, &generate(&t, &c).unwrap());
        // A root of degree 3 takes in (and gives out) its third of the buffer over 3 links.
        let root_bound = (1u64 << 30) as f64 / 3.0 / (3.0 * 16e9) * 1e12;
        assert!(finish > root_bound, "{finish} against {root_bound}");
        let torus = TopologyOptions::new("torus:4x4").build().unwrap();
        let err = generate(&torus, &c).unwrap_err().to_string();
        assert!(err.contains("2-D mesh"), "{err}");
    }
}
