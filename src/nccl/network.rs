//! The GPU system's network as a chosen algorithm and protocol see it: each link at the rate
//! NCCL's model books it under the protocol, each hop at NCCL's per-step latency, Simple's posts
//! and the network proxies.

use super::*;

impl Model {
    /// The system's network as the chosen algorithm and protocol see it, with the switches that
    /// relay for it ([`relays`]) as NPUs. A tree's rates are taken down by `tree_correction`, the
    /// share of its modelled bandwidth NCCL's maintainers find it delivers at the call's size
    /// ([`tuning::tree_correction`]).
    pub(super) fn network(
        &self,
        choice: Choice,
        posts: Posts,
        tree_correction: f64,
    ) -> Result<Topology, Error> {
        let s = &self.system;
        let msccl = choice.algo == Algo::Msccl;
        // MSCCL's channels run the ring's primitives; its rows of NCCL's tables are the ring's.
        let table_algo = if msccl { Algo::Ring } else { choice.algo };
        let (a, p) = (table_algo as usize, choice.proto as usize);
        let nvls = matches!(choice.algo, Algo::Nvls | Algo::NvlsTree);
        let measured = &s.calibration;
        // The protocol's share of the channels' bandwidth in NCCL's model (times what was
        // measured of it).
        let point_to_point = posts.point_to_point;
        let scale = match choice.algo {
            // Point-to-point sends are not priced by the tuning model, nor are MSCCL's direct
            // sends: their protocol's wire efficiency ([`DATA_SHARE`]).
            _ if point_to_point || msccl => {
                DATA_SHARE[p] * measured.rate_factor.get(p).unwrap_or(1.0)
            }
            Algo::Ring | Algo::Tree => {
                self.tables.share[Func::AllReduce as usize][a][p].clamp(0.01, 1.0)
                    * measured.rate_factor.get(p).unwrap_or(1.0)
            }
            // NCCL's model gives PAT three quarters of the ring's bandwidth (the same for
            // all-gather and reduce-scatter).
            Algo::Pat => self.tables.share[Func::AllGather as usize][a][p].clamp(0.01, 1.0),
            _ => 1.0,
        } * tree_correction;
        let intra_gbps = measured.intra_gbps.unwrap_or_else(|| s.nccl_intra_gbps());
        let intra = if nvls {
            intra_gbps * NVLS_EFFICIENCY[s.arch.table_index()] * tree_correction
        } else {
            intra_gbps * scale
        };
        // A GPU's NICs share its PCIe link, which NCCL's search books each path through (a GPU
        // with several NICs gets no more than the link: one H100 driving four 400 Gb/s NICs).
        let nics_per_gpu = (s.nics_per_box as f64 / s.gpus_per_box.max(1) as f64).max(1.0);
        let nic_gbps = measured.nic_gbps.unwrap_or_else(|| {
            self.booked_nic_gbps(table_algo)
                .min(s.arch.nccl_pcie_gbps() / nics_per_gpu)
        });
        let nic = nic_gbps * scale;
        // LL's and LL128's lines are written by the GPU's threads at the rate NCCL's model books
        // the protocol (its per-channel caps: the GPU's, not the wire's), then posted by the
        // proxy; the NIC carries them at their wire share. (Simple's GPU copies at its own rate.)
        let lines = matches!(choice.proto, Proto::LL | Proto::LL128)
            && matches!(choice.algo, Algo::Ring | Algo::Tree)
            && !point_to_point;
        let (nic_link, gpu_to_network) = if lines {
            let wire = nic_gbps * DATA_SHARE[p] * measured.rate_factor.get(p).unwrap_or(1.0);
            (wire.max(nic), Some(Bandwidth::gb_per_sec(nic)))
        } else {
            (nic, None)
        };
        let hw_intra = if s.intra == Intra::Pcie {
            HW_PCI
        } else {
            HW_NVLINK
        };
        // NVLS's steps synchronise as the Simple ring's do.
        let (lat_algo, lat_proto) = if nvls {
            (Algo::Ring, Proto::Simple)
        } else {
            (table_algo, choice.proto)
        };
        // The library's per-step latency inside the box (RCCL's on the MI300X, whose MSCCL
        // channels run the ring's primitives); across boxes NCCL's network figures, which RCCL's
        // model replaces by values that steer its choice rather than measure the network.
        let mut intra_lat = tuning::hw_latency(s, hw_intra, lat_algo, lat_proto);
        // As NCCL's model has it, for rings only.
        if s.boxes > 1 && choice.algo == Algo::Ring {
            intra_lat = intra_lat.max(tuning::ring_overhead_floor_us(s.cpu, choice.proto));
        }
        let net_lat =
            HW_LATENCY[HW_NET][a][p].max(HW_LATENCY[HW_NET][lat_algo as usize][lat_proto as usize]);
        // NCCL's model charges PAT's levels across boxes at its network latency over 3.5
        // (src/graph/tuning.cc).
        let net_lat = if choice.algo == Algo::Pat {
            net_lat / PAT_LEVEL_LATENCY_DIVISOR
        } else {
            net_lat
        };
        let factor = measured
            .latency_factor
            .get(lat_proto as usize)
            .unwrap_or(1.0);
        let (mut intra_lat, net_lat) = (intra_lat * factor, net_lat * factor);
        // Simple's post per slice: a ring or tree channel waits for its slice, copies it, then
        // fences and posts it before the next (src/device/prims_simple.h), so inside a box it
        // moves a slice of c us (at its share of the GPU's rate) in c + L, L NCCL's per-step
        // latency of the protocol. The GPU's sending side runs at c / (c + L) of its rate and
        // the hop carries no latency of its own (it is in the c + L). NVLS and NVLSTree run
        // Simple's primitives too: their scatter group posts one chunk of every head a loop,
        // the reduce and gather groups theirs in step (src/device/all_reduce.h), so a GPU's
        // slice is a loop's chunks. Network hops are driven by the proxy with NCCL_STEPS in
        // flight.
        let posting = choice.proto == Proto::Simple
            && matches!(
                choice.algo,
                Algo::Ring | Algo::Tree | Algo::Nvls | Algo::NvlsTree | Algo::Msccl
            );
        let mut send_share = 1.0;
        if posting {
            // A channel's share of the one link it copies over: the GPU's link to its NVSwitch,
            // or on a full mesh one of its g - 1 links (its channels spread over them).
            let (link_gbps, channels_per_link) = if s.intra == Intra::FullMesh {
                let links = s.gpus_per_box.saturating_sub(1).max(1);
                (intra / links as f64, posts.channels.max(1).div_ceil(links))
            } else {
                (intra, posts.channels.max(1))
            };
            let per_channel_gbps = link_gbps / channels_per_link as f64;
            let copy_us = posts.slice_bytes as f64 / (per_channel_gbps * 1e3);
            send_share = copy_us / (copy_us + intra_lat);
            // A point-to-point receiver copies each chunk out of its buffer after the post
            // (src/device/sendrecv.h, `directRecv`): a second stage of the channel's pipeline,
            // one chunk's copy after the last post.
            intra_lat = if point_to_point { copy_us } else { 0.0 };
        }
        // A hop's latency over the links it crosses: two (GPU - switch - GPU), or one GPU to GPU
        // on a full mesh.
        let hop = |x: f64, links: f64| Time::from_ps((x * 1e6 / links).round() as u64);
        let intra_links = if s.intra == Intra::FullMesh { 1.0 } else { 2.0 };
        let gb = Bandwidth::gb_per_sec;
        // One proxy thread a GPU posts every network step of its channels in turn (NCCL's
        // `proxy.cc`), at NCCL's per-step network overhead (`getNetOverhead`) each way. NCCL's
        // model triples it for Simple as a latency floor (kept so above); held that long a
        // step, a 64 KiB NVLSTree step would cap a NIC at a third of NCCL's own rate.
        let hold = Time::from_ps((s.cpu.net_overhead_us() * 1e6).round() as u64);
        // LL's and LL128's receivers read each line's flag as the NIC writes it
        // (src/device/prims_ll.h, prims_ll128.h): the receive proxy only reposts buffers, off
        // the data's path (src/transport/net.cc even lets it skip their completions,
        // NCCL_NET_OPTIONAL_RECV_COMPLETION); Simple's receiver waits for the proxy to see the
        // step arrive (and flush it) before it may read.
        let lines_read_directly = matches!(choice.proto, Proto::LL | Proto::LL128);
        let proxy = ProxyHolds {
            send: hold,
            receive: if lines_read_directly {
                Time::ZERO
            } else {
                hold
            },
        };
        s.network_sending_at(
            relays(choice.algo, s.boxes),
            (gb(intra), hop(intra_lat, intra_links)),
            send_share,
            (gb(nic_link), hop(net_lat, 2.0)),
            proxy,
            gpu_to_network,
        )
    }

    /// One NIC's rate as NCCL's search books it for `algo`: its channels' `bwInter` spread
    /// over the NICs, GB/s.
    pub fn booked_nic_gbps(&self, algo: Algo) -> f64 {
        self.graphs[algo as usize].bw_inter.max(0.1) * self.nic_channels_per_nic()
    }

    /// NIC link rate per search channel: the search books `channels x bwInter` over the NICs.
    fn nic_channels_per_nic(&self) -> f64 {
        let ring = &self.graphs[Algo::Ring as usize];
        if self.system.nics_per_box == 0 {
            return 1.0;
        }
        (ring.channels as f64 / self.system.nics_per_box as f64).max(1.0)
    }
}
