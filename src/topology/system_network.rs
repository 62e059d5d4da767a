//! A GPU system drawn as a network: its GPUs, each box's fabric (an NVSwitch node, or the
//! xGMI mesh's or PCIe's links), and across boxes a rail-optimised leaf/spine network, at the
//! datasheet's rates or at the rates a caller gives (the NCCL model draws it at NCCL's own), with
//! the switches that reduce as NPUs where a schedule reduces in them, and the network proxies'
//! per-message holds.

use super::systems::{GpuSystem, Intra};
use super::{Link, NodeId, Topology};
use crate::units::{Bandwidth, Time};
use crate::Error;

/// How long a GPU's network proxies hold each message it sends and receives across boxes (a
/// host thread posting them in turn); no proxies when the send hold is zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyHolds {
    pub send: Time,
    pub receive: Time,
}

impl ProxyHolds {
    /// No proxies: the network as the datasheet has it.
    pub const NONE: ProxyHolds = ProxyHolds {
        send: Time::ZERO,
        receive: Time::ZERO,
    };

    /// The same hold each way.
    pub fn both(hold: Time) -> ProxyHolds {
        ProxyHolds {
            send: hold,
            receive: hold,
        }
    }
}

/// Which of a GPU system's switches are NPUs of its network (in-switch reduction: NVLS in the
/// boxes' NVSwitches, SHARP in the rails' leaf switches). Node order is GPUs, box switches, rail
/// leaves, spines, so the rails' leaves come with the boxes' switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchRelays {
    None,
    /// Each box's NVSwitch (nodes `n .. n + boxes`).
    Boxes,
    /// Those and each rail's leaf switch (the next `rails` nodes).
    BoxesAndRails,
}

impl GpuSystem {
    /// The system as a network at its datasheet rates: GPUs `0..n` (box `b` holds `b G .. (b +
    /// 1) G`); per box an NVSwitch (switches `n..n + boxes`, each GPU's link at all its NVLinks'
    /// line rate) or the xGMI / PCIe links; with more than one box, one leaf switch per rail (GPU
    /// `i` of every box on leaf `i`, at its NIC's line rate) and as many spines, each joined to
    /// every leaf (rail-optimised: cross-rail traffic goes through a spine). Links have 500 ns of
    /// latency. Rates measured by `collsim calibrate` replace the datasheet's. The NCCL model
    /// draws the same network at NCCL's own rates ([`Self::network_at`]).
    pub fn topology(&self) -> Result<Topology, Error> {
        let latency = Time::from_ns(500);
        let gb = |g: f64| Bandwidth::gb_per_sec(g);
        let intra = match self.calibration.intra_gbps {
            Some(g) => gb(g),
            None => Bandwidth::bytes_per_sec(
                self.link_line_rate.as_bytes_per_sec() * self.links_per_gpu as f64,
            ),
        };
        let nic = self.calibration.nic_gbps.map_or(self.nic_line_rate, gb);
        self.network_at(SwitchRelays::None, (intra, latency), (nic, latency))
    }

    /// Switch nodes of the boxes' fabrics (one NVSwitch or PCIe switch node a box; none for a
    /// full mesh).
    fn box_switches(&self) -> u32 {
        match self.intra {
            Intra::FullMesh => 0,
            _ => self.boxes,
        }
    }

    /// Rail leaf switches (one per NIC of a box, at most one per GPU), with more than one box.
    pub fn rails(&self) -> u32 {
        if self.boxes > 1 && self.nics_per_box > 0 {
            self.nics_per_box.min(self.gpus_per_box)
        } else {
            0
        }
    }

    /// The switches that reduce when the network is drawn with `relays`
    /// ([`Self::network_at`]): each box's NVSwitch, and with in-network reduction (SHARP) the
    /// rails' leaves after them.
    pub fn reducing_switches(&self, relays: SwitchRelays) -> Vec<NodeId> {
        let first_box = self.gpus();
        let first_rail = first_box + self.box_switches();
        match relays {
            SwitchRelays::None => Vec::new(),
            SwitchRelays::Boxes => (first_box..first_rail).collect(),
            SwitchRelays::BoxesAndRails => (first_box..first_rail + self.rails()).collect(),
        }
    }

    /// The network with every GPU-fabric link at `intra` and every NIC link at `nic`
    /// (bandwidth, latency); the GPU-fabric figure is per GPU (split evenly over a full mesh's
    /// links). `relays` says which switches are NPUs (so a schedule may reduce in them).
    pub fn network_at(
        &self,
        relays: SwitchRelays,
        intra: (Bandwidth, Time),
        nic: (Bandwidth, Time),
    ) -> Result<Topology, Error> {
        self.network_sending_at(relays, intra, 1.0, nic, ProxyHolds::NONE, None)
    }

    /// [`Self::network_at`] with each GPU's links into its box's fabric (to the NVSwitch, or
    /// to its mesh peers) at `send_share` of the intra rate in the GPU's sending direction, and
    /// (when `proxy.send` is not zero, across boxes) each GPU's network messages passing a
    /// proxy each way that holds every message for its time (a host thread posting them in
    /// turn), and, with `gpu_to_network` (one NIC's share, proxies only), each GPU writing its
    /// network messages at that rate on a link of its own before the proxy posts them.
    pub fn network_sending_at(
        &self,
        relays: SwitchRelays,
        intra: (Bandwidth, Time),
        send_share: f64,
        nic: (Bandwidth, Time),
        proxy: ProxyHolds,
        gpu_to_network: Option<Bandwidth>,
    ) -> Result<Topology, Error> {
        let sending = |(rate, latency): (Bandwidth, Time)| {
            (
                Bandwidth::bytes_per_sec(rate.as_bytes_per_sec() * send_share),
                latency,
            )
        };
        let g = self.gpus_per_box;
        let n = self.gpus();
        let boxes = self.boxes;
        let (fabric_nodes, rails) = (self.box_switches(), self.rails());
        let multi = rails > 0;
        let spines = if multi && rails > 1 { rails } else { 0 };
        let mut links = Vec::new();
        for b in 0..boxes {
            for i in 0..g {
                let gpu = b * g + i;
                match self.intra {
                    Intra::FullMesh => {
                        // Each direction is one GPU's sending side.
                        let per_link = sending((intra.0.divided(g - 1), intra.1));
                        for j in i + 1..g {
                            links.extend(Link::both_ways(gpu, b * g + j, per_link));
                        }
                    }
                    _ => {
                        links.push(Link::one_way(gpu, n + b, sending(intra)));
                        links.push(Link::one_way(n + b, gpu, intra));
                    }
                }
            }
        }
        let mut join = |a: NodeId, b: NodeId, tier: (Bandwidth, Time)| {
            links.extend(Link::both_ways(a, b, tier));
        };
        let leaf = |r: u32| n + fabric_nodes + r;
        // Proxies (a send and a receive one a GPU) after the spines.
        let proxies = if multi && proxy.send > Time::ZERO {
            2 * n
        } else {
            0
        };
        let first_proxy = n + fabric_nodes + rails + spines;
        // Gates (one a GPU, after the proxies): where a GPU writes its network messages.
        let gates = if proxies > 0 && gpu_to_network.is_some() {
            n
        } else {
            0
        };
        let first_gate = first_proxy + proxies;
        // A proxy's hop: a message's bytes cost it nothing next to its post.
        let held = |src, dst, hold| Link {
            per_message: hold,
            ..Link::one_way(src, dst, (Bandwidth::bytes_per_sec(1e15), Time::ZERO))
        };
        let mut proxied = Vec::new();
        if multi {
            // NICs per GPU (or GPUs per NIC): a NIC's rate is shared by the GPUs that use it.
            let nics_per_gpu = self.nics_per_box as f64 / g as f64;
            let per_gpu = Bandwidth::bytes_per_sec(nic.0.as_bytes_per_sec() * nics_per_gpu);
            for b in 0..boxes {
                for i in 0..g {
                    let gpu = b * g + i;
                    if proxies == 0 {
                        join(gpu, leaf(i % rails), (per_gpu, nic.1));
                        continue;
                    }
                    let (send, recv) = (first_proxy + 2 * gpu, first_proxy + 2 * gpu + 1);
                    // (Here the proxies exist, so a write rate means a gate.)
                    match gpu_to_network {
                        Some(rate) => {
                            let gate = first_gate + gpu;
                            let written = rate.as_bytes_per_sec() * nics_per_gpu;
                            let tier = (Bandwidth::bytes_per_sec(written), Time::ZERO);
                            proxied.push(Link::one_way(gpu, gate, tier));
                            proxied.push(held(gate, send, proxy.send));
                        }
                        None => proxied.push(held(gpu, send, proxy.send)),
                    }
                    proxied.push(Link::one_way(send, leaf(i % rails), (per_gpu, nic.1)));
                    proxied.push(Link::one_way(leaf(i % rails), recv, (per_gpu, nic.1)));
                    proxied.push(held(recv, gpu, proxy.receive));
                }
            }
            let spine = |s: u32| n + fabric_nodes + rails + s;
            let uplink = Bandwidth::bytes_per_sec(nic.0.as_bytes_per_sec() * boxes as f64 / 2.0);
            for r in 0..rails {
                for s in 0..spines {
                    join(leaf(r), spine(s), (uplink, nic.1));
                }
            }
        }
        links.extend(proxied);
        let hosts = proxies + gates;
        let (npus, switches) = match relays {
            SwitchRelays::None => (n, fabric_nodes + rails + spines + hosts),
            SwitchRelays::Boxes => (n + fabric_nodes, rails + spines + hosts),
            SwitchRelays::BoxesAndRails => (n + fabric_nodes + rails, spines + hosts),
        };
        Topology::from_parts(
            self.name.clone(),
            npus,
            switches,
            links,
            Vec::new(),
            Vec::new(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With a write rate (`gpu_to_network`), each GPU's network messages first cross a gate of
    /// their own at that rate (a NIC's share: doubled where a GPU has two NICs), then the send
    /// proxy's hold; without proxies there is no gate.
    #[test]
    fn gates_carry_each_gpus_network_writes_at_their_rate() {
        let s = GpuSystem::parse("dgx-a100:2").unwrap().unwrap();
        let tier = |gbps: f64, ns: u64| (Bandwidth::gb_per_sec(gbps), Time::from_ns(ns));
        let hold = Time::from_ns(1_000);
        let build = |nic: &str, proxy: ProxyHolds, gate: Option<Bandwidth>| {
            let mut system = s.clone();
            system.set_nics(nic).unwrap();
            system
                .network_sending_at(
                    SwitchRelays::None,
                    tier(240.0, 100),
                    1.0,
                    tier(25.0, 500),
                    proxy,
                    gate,
                )
                .unwrap()
        };
        let rate = Some(Bandwidth::gb_per_sec(2.0));
        let plain = build("8x200Gb", ProxyHolds::both(hold), None);
        let gated = build("8x200Gb", ProxyHolds::both(hold), rate);
        assert_eq!(gated.nodes(), plain.nodes() + 16);
        let first_gate = plain.nodes();
        let gate_links: Vec<_> = gated
            .links()
            .iter()
            .filter(|l| l.dst >= first_gate)
            .collect();
        assert_eq!(gate_links.len(), 16);
        assert!(gate_links
            .iter()
            .all(|l| l.src < 16 && l.bandwidth == Bandwidth::gb_per_sec(2.0)));
        // Every gate leads to its GPU's send proxy, which holds each message.
        assert!(gated
            .links()
            .iter()
            .filter(|l| l.src >= first_gate)
            .all(|l| l.per_message == hold));
        // Two NICs a GPU: the GPU writes at two NICs' share.
        let doubled = build("16x100Gb", ProxyHolds::both(hold), rate);
        assert!(doubled
            .links()
            .iter()
            .filter(|l| l.dst >= first_gate)
            .all(|l| l.bandwidth == Bandwidth::gb_per_sec(4.0)));
        assert_eq!(
            build("8x200Gb", ProxyHolds::NONE, rate).nodes(),
            build("8x200Gb", ProxyHolds::NONE, None).nodes()
        );
    }

    /// With a proxy, each GPU's network messages pass a send proxy and the far GPU's receive
    /// proxy, each holding every message; inside a box nothing changes; without one the
    /// network is the datasheet's.
    #[test]
    fn network_proxies_hold_each_message_across_boxes() {
        let s = GpuSystem::parse("hgx-h100:2").unwrap().unwrap();
        let tier = |gbps: f64, ns: u64| (Bandwidth::gb_per_sec(gbps), Time::from_ns(ns));
        let hold = Time::from_ns(1_000);
        let plain = s
            .network_sending_at(
                SwitchRelays::None,
                tier(450.0, 100),
                1.0,
                tier(50.0, 500),
                ProxyHolds::NONE,
                None,
            )
            .unwrap();
        let proxied = s
            .network_sending_at(
                SwitchRelays::None,
                tier(450.0, 100),
                1.0,
                tier(50.0, 500),
                ProxyHolds::both(hold),
                None,
            )
            .unwrap();
        assert_eq!(proxied.nodes(), plain.nodes() + 2 * 16);
        assert!(plain.links().iter().all(|l| l.per_message == Time::ZERO));
        let held: Vec<&Link> = proxied
            .links()
            .iter()
            .filter(|l| l.per_message == hold)
            .collect();
        // A GPU into its send proxy, its receive proxy into the GPU.
        assert_eq!(held.len(), 2 * 16);
        assert!(held.iter().all(|l| l.src < 16 || l.dst < 16));
        // GPU 0 reaches the other box only through its send proxy.
        let out: Vec<NodeId> = proxied
            .links()
            .iter()
            .filter(|l| l.src == 0)
            .map(|l| l.dst)
            .collect();
        assert_eq!(out.len(), 2, "the NVSwitch and the send proxy: {out:?}");
    }

    /// Two boxes: 16 GPUs, 2 NVSwitches, 8 rail leaves and 8 spines; every GPU has one NVLink
    /// fabric link and one NIC link (both directions).
    #[test]
    fn boxes_are_joined_by_rails() {
        let s = GpuSystem::parse("hgx-h100:2").unwrap().unwrap();
        let t = s.topology().unwrap();
        assert_eq!((t.npus(), t.nodes()), (16, 16 + 2 + 8 + 8));
        assert_eq!(t.links().len(), 2 * (16 + 16 + 64));
        let t = s
            .network_at(
                SwitchRelays::Boxes,
                (Bandwidth::gb_per_sec(1.0), Time::ZERO),
                (Bandwidth::gb_per_sec(1.0), Time::ZERO),
            )
            .unwrap();
        assert_eq!(t.npus(), 18, "the NVSwitches are NPUs");
        let gb = (Bandwidth::gb_per_sec(1.0), Time::ZERO);
        let sharp = s.network_at(SwitchRelays::BoxesAndRails, gb, gb).unwrap();
        assert_eq!(sharp.npus(), 26, "and the rails' leaves");
        // Rail leaf 3 (node 16 + 2 + 3) joins GPU 3 of each box.
        assert!(sharp.link_between(3, 21).is_some() && sharp.link_between(11, 21).is_some());
        assert_eq!(
            s.reducing_switches(SwitchRelays::BoxesAndRails),
            (16..26).collect::<Vec<_>>()
        );
        assert_eq!(s.reducing_switches(SwitchRelays::Boxes), [16, 17]);
        let mesh = GpuSystem::parse("mi300x:1").unwrap().unwrap();
        assert_eq!(mesh.topology().unwrap().links().len(), 2 * 28);
    }
}
