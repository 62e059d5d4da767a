//! Boxes of GPUs for the algorithms built around them (NCCL's channels and trees, ACCL's hybrid):
//! the groups of participants joined by the network's fastest links (NVSwitch, xGMI, NVLink),
//! each listed by rank in NPU order. A GPU's position in its box is its local index: GPU `i` of
//! every box is taken to own the same NIC rail, as in rail-optimized clusters.

use std::collections::BTreeMap;

use super::Algorithm;
use crate::collective::Collective;
use crate::topology::{NodeId, Topology};
use crate::Error;

/// The boxes of `c`'s participants, as ranks, ordered by their first NPU; all of one size, or
/// `algorithm`'s refusal naming the network.
pub(crate) fn equal_boxes(
    topology: &Topology,
    c: &Collective,
    algorithm: Algorithm,
) -> Result<Vec<Vec<u32>>, Error> {
    let fastest = topology
        .links()
        .iter()
        .map(|l| l.bandwidth.as_bytes_per_sec())
        .fold(0.0, f64::max);
    let group = topology.groups_joined_at(fastest);
    let mut groups: BTreeMap<u32, Vec<NodeId>> = BTreeMap::new();
    for &v in &c.npus {
        groups.entry(group[v as usize]).or_default().push(v);
    }
    let mut boxes: Vec<Vec<NodeId>> = groups.into_values().collect();
    boxes.sort_by_key(|b| b[0]);
    if boxes.iter().any(|b| b.len() != boxes[0].len()) {
        return Err(Error::input(format!(
            "{} needs boxes of equally many participants joined by the fastest links: {} has \
             boxes of {}",
            algorithm.name(),
            topology.name(),
            sizes(&boxes)
        )));
    }
    let rank_of = c.ranks_by_npu();
    Ok(boxes
        .iter()
        .map(|gpus| gpus.iter().map(|v| rank_of[v]).collect())
        .collect())
}

/// Box sizes for messages: "8, 8, 7".
fn sizes(boxes: &[Vec<NodeId>]) -> String {
    let sizes: Vec<String> = boxes.iter().map(|b| b.len().to_string()).collect();
    sizes.join(", ")
}
