//! GPU systems people own, by name: `dgx-a100:N`, `hgx-h100:N`, `hgx-h200:N`, `hgx-b200:N` and
//! the export parts' boxes `hgx-a800:N`, `hgx-h800:N` (N boxes of 8 GPUs on NVSwitch, one NIC per
//! GPU on a rail-optimised leaf/spine), `mi300x:N` (8 GPUs a box on an xGMI full mesh) and
//! `pcie:G` (G GPUs behind PCIe switches, one box); `dgx-h100`, `dgx-h200`, `dgx-b200` and
//! `hgx-a100` name the same boxes as their HGX and DGX twins.
//!
//! A [`GpuSystem`] holds the figures the NCCL model reads (GPU generation, links per GPU and their
//! rate, NICs); [`GpuSystem::topology`] (in `system_network.rs`) draws it as a network. Every
//! default figure comes from the vendor's datasheet (cited on each constructor) and can be
//! overridden (`--nvlink`, `--nic`, `--nic-kind`, `--cpu`, `--nic-path`, `--sharp`).

use serde::{Deserialize, Serialize};

use crate::units::{parse_bandwidth, Bandwidth};
use crate::Error;

/// GPU generations, as NCCL's tuning tables index them (by CUDA compute capability).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuArch {
    /// SM 8.0 (A100, A800).
    Ampere,
    /// SM 9.0 (H100, H200, H800).
    Hopper,
    /// SM 10.0 (B200).
    Blackwell,
    /// AMD CDNA3 (MI300X), run by RCCL; modelled with NCCL's Hopper-class constants.
    Cdna3,
}

impl GpuArch {
    /// Index into NCCL's per-generation tables (Volta 0, Ampere 1, Hopper 2, Blackwell 3).
    pub fn table_index(self) -> usize {
        match self {
            GpuArch::Ampere => 1,
            GpuArch::Hopper | GpuArch::Cdna3 => 2,
            GpuArch::Blackwell => 3,
        }
    }

    /// NCCL's effective bandwidth of one NVLink per direction in GB/s (src/graph/topo.h,
    /// `SM80_NVLINK_BW` 20.0, `SM90_NVLINK_BW` 20.6, `SM100_NVLINK_BW` 40.1): about 80% of the
    /// line rate, the NVLink protocol overhead sjeaugey describes in nccl-tests#212. RCCL's of
    /// one MI300X xGMI link (ROCm/rccl src/graph/topo.h, `GFX94X_XGMI_WIDTH` 48.0): 75% of its
    /// 64 GB/s, the usable rate after CRC and protocol overhead AMD's own account gives ("about
    /// 48 GB/s per link", ROCm blog "Understanding RCCL Bandwidth and xGMI Performance on AMD
    /// Instinct MI300X", 2025).
    pub fn nccl_link_gbps(self) -> f64 {
        match self {
            GpuArch::Ampere => 20.0,
            GpuArch::Hopper => 20.6,
            GpuArch::Blackwell => 40.1,
            GpuArch::Cdna3 => 48.0,
        }
    }

    /// NCCL's bandwidth of the GPU's PCIe link, GB/s (src/graph/topo.cc: lanes x speed / 80, the
    /// speed 120 for 16 GT/s and 240 for 32 GT/s): 24 for the A100's Gen4 x16, 48 for the Gen5 x16
    /// of Hopper, Blackwell and the MI300X. Every network path of the GPU crosses it.
    pub fn nccl_pcie_gbps(self) -> f64 {
        match self {
            GpuArch::Ampere => 24.0,
            GpuArch::Hopper | GpuArch::Blackwell | GpuArch::Cdna3 => 48.0,
        }
    }
}

/// How the GPUs of a box reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intra {
    /// Every GPU's links go to the box's NVSwitches (one switch node in the network).
    NvSwitch,
    /// A direct link between every pair of GPUs (xGMI).
    FullMesh,
    /// PCIe switches: one shared path per GPU.
    Pcie,
}

/// The network adapters' kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicKind {
    InfiniBand,
    RoCE,
}

/// The host CPU's vendor: NCCL's per-step network overhead depends on it (the proxy thread
/// that drives the NICs runs on the host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuVendor {
    Intel,
    Amd,
    /// Neither named (NCCL's default figure applies).
    Other,
}

impl CpuVendor {
    /// NCCL's per-step network overhead on this host, us (src/graph/tuning.cc
    /// `getNetOverhead`: x86 Intel 1, x86 AMD 2, anything else 1).
    pub fn net_overhead_us(self) -> f64 {
        match self {
            CpuVendor::Amd => 2.0,
            CpuVendor::Intel | CpuVendor::Other => 1.0,
        }
    }

    /// The name `--cpu` takes and system files hold.
    pub fn name(self) -> &'static str {
        match self {
            CpuVendor::Intel => "intel",
            CpuVendor::Amd => "amd",
            CpuVendor::Other => "other",
        }
    }
}

/// How a GPU reaches its NIC over PCIe, in NCCL's path types (`src/graph/topo.h`, nearest
/// first): through one PCIe switch (PIX), several (PXB), over NVLink to a GPU that does (PXN),
/// through the CPU's host bridge (PHB) or across CPUs (SYS). NCCL runs LL128 across boxes only
/// within PXN on Hopper and later, PXB before (`tuning.cc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NicPath {
    Pix,
    Pxb,
    Pxn,
    Phb,
    Sys,
}

impl NicPath {
    /// The name `--nic-path` takes and system files hold (NCCL's, lower case).
    pub fn name(self) -> &'static str {
        match self {
            NicPath::Pix => "pix",
            NicPath::Pxb => "pxb",
            NicPath::Pxn => "pxn",
            NicPath::Phb => "phb",
            NicPath::Sys => "sys",
        }
    }

    fn parse(text: &str) -> Option<NicPath> {
        [
            NicPath::Pix,
            NicPath::Pxb,
            NicPath::Pxn,
            NicPath::Phb,
            NicPath::Sys,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(text))
    }
}

/// Figures of a named GPU system replaced as `--nvlink`, `--nic`, `--nic-kind`, `--cpu`,
/// `--nic-path` and `--sharp` give them, by every command that takes a GPU system.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SystemOverrides {
    /// Each GPU's NVLinks to its box's NVSwitches as `COUNTxSPEED` ([`GpuSystem::set_nvlinks`]).
    pub nvlink: Option<String>,
    /// NICs per box as `COUNTxSPEED` ([`GpuSystem::set_nics`]).
    pub nic: Option<String>,
    /// `ib` or `roce`.
    pub nic_kind: Option<String>,
    /// `intel`, `amd` or `other`.
    pub cpu: Option<String>,
    /// How a GPU reaches its NIC (`pix`, `pxb`, `pxn`, `phb`, `sys`).
    pub nic_path: Option<String>,
    /// The network's switches reduce (IB SHARP).
    pub sharp: bool,
}

impl SystemOverrides {
    pub fn is_empty(&self) -> bool {
        *self == SystemOverrides::default()
    }
}

/// `COUNTxSPEED` (`16x100Gb`, `8x25GB/s`) as a count of 1 to `most` and a rate a direction;
/// `Gb` is read as bits, as NIC datasheets give it. `flag` and `example` name it in errors.
fn count_and_speed(
    flag: &str,
    text: &str,
    most: u32,
    example: &str,
) -> Result<(u32, Bandwidth), Error> {
    let bad = |why: &str| Error::input(format!("{flag} '{text}': {why}"));
    let (count, speed) = text
        .split_once(['x', 'X'])
        .ok_or_else(|| bad(&format!("expected COUNTxSPEED, e.g. {example}")))?;
    let count: u32 = count
        .trim()
        .parse()
        .ok()
        .filter(|&c| (1..=most).contains(&c))
        .ok_or_else(|| bad(&format!("the count must be 1 to {most}")))?;
    let speed = speed.trim();
    let speed = if speed.ends_with("Gb") || speed.ends_with("gb") {
        format!("{speed}ps")
    } else {
        speed.to_string()
    };
    let rate = parse_bandwidth(&speed).map_err(|e| bad(&e.to_string()))?;
    Ok((count, rate))
}

/// A GPU system's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSystem {
    /// The name as given, e.g. `dgx-a100:2`.
    pub name: String,
    pub arch: GpuArch,
    pub boxes: u32,
    pub gpus_per_box: u32,
    pub intra: Intra,
    /// Links from each GPU to its box's fabric (NVLink or xGMI; 1 for PCIe).
    pub links_per_gpu: u32,
    /// Line rate of one such link per direction.
    pub link_line_rate: Bandwidth,
    /// NICs per box (spread evenly over the GPUs).
    pub nics_per_box: u32,
    /// Line rate of one NIC per direction.
    pub nic_line_rate: Bandwidth,
    pub nic_kind: NicKind,
    /// The hosts' CPU vendor (the NCCL proxy's per-step network overhead).
    pub cpu: CpuVendor,
    /// How a GPU reaches its NIC (whether NCCL runs LL128 across boxes).
    pub nic_path: NicPath,
    /// Whether the network switches reduce in the network (SHARP), enabling CollNet.
    pub sharp: bool,
    /// Whether the box's switches reduce (NVLink SHARP, Hopper and later NVSwitches).
    pub nvls: bool,
    /// The named kind it is or derives from (`hgx-b200`).
    pub kind: &'static str,
    /// The GPU model in the boxes (`a100`, `h100`, `h200`, `b200`, `mi300x`), as the compute
    /// model names it.
    pub gpu: &'static str,
    /// Figures measured on this system that replace the NCCL model's defaults.
    pub calibration: Calibration,
}

/// One figure per NCCL protocol (LL, LL128, Simple); None keeps the model's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerProtocol {
    #[serde(rename = "LL", default, skip_serializing_if = "Option::is_none")]
    pub ll: Option<f64>,
    #[serde(rename = "LL128", default, skip_serializing_if = "Option::is_none")]
    pub ll128: Option<f64>,
    #[serde(rename = "Simple", default, skip_serializing_if = "Option::is_none")]
    pub simple: Option<f64>,
}

impl PerProtocol {
    /// The figure of protocol `p` (NCCL's index: LL 0, LL128 1, Simple 2).
    pub fn get(&self, p: usize) -> Option<f64> {
        [self.ll, self.ll128, self.simple].get(p).copied().flatten()
    }

    pub fn set(&mut self, p: usize, value: Option<f64>) {
        match p {
            0 => self.ll = value,
            1 => self.ll128 = value,
            _ => self.simple = value,
        }
    }

    fn is_empty(&self) -> bool {
        *self == PerProtocol::default()
    }
}

/// What `collsim calibrate` measured on a system: the effective bandwidth of each link class,
/// and per protocol how its latency and rate compare with NCCL's public figures. The NCCL model
/// runs its network with these in place of its defaults; NCCL's own choice of algorithm and
/// protocol is unchanged (NCCL chooses from what it detects, not from what was measured).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// Effective bandwidth of one GPU into its box's fabric per direction, GB/s (default: NCCL's
    /// links x per-link figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra_gbps: Option<f64>,
    /// Effective bandwidth of one NIC per direction, GB/s (default: NCCL's search speed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_gbps: Option<f64>,
    /// A call's fixed cost besides NCCL's base latency and the launches, us (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed_us: Option<f64>,
    /// Per protocol, a factor on NCCL's per-hop latencies.
    #[serde(default, skip_serializing_if = "PerProtocol::is_empty")]
    pub latency_factor: PerProtocol,
    /// Per protocol, a factor on the share of the links' bandwidth NCCL's model gives it.
    #[serde(default, skip_serializing_if = "PerProtocol::is_empty")]
    pub rate_factor: PerProtocol,
}

impl Calibration {
    pub fn is_empty(&self) -> bool {
        *self == Calibration::default()
    }
}

impl GpuSystem {
    /// Runs on `n` GPUs (nccl-tests on part of a machine): the first `n` of a single box, or
    /// across boxes the first `n / boxes` of each, each with its own share of the box's NICs
    /// (a GPU's NICs are the ones beside it).
    pub fn use_first_gpus(&mut self, n: u32) -> Result<(), Error> {
        let boxes = self.boxes.max(1);
        if boxes == 1 && (n < 2 || n > self.gpus_per_box) {
            return Err(Error::input(format!(
                "--gpus {n}: between 2 and the box's {} GPUs",
                self.gpus_per_box
            )));
        }
        if boxes > 1 && (!n.is_multiple_of(boxes) || n < boxes || n > self.gpus()) {
            return Err(Error::input(format!(
                "--gpus {n}: the same number of GPUs from each of {}'s {boxes} boxes, a \
                 multiple of {boxes} up to {}",
                self.name,
                self.gpus()
            )));
        }
        let each = n / boxes;
        if each < self.gpus_per_box {
            let of = if boxes == 1 { "" } else { " a box" };
            self.name = format!("{} ({each} of {} GPUs{of})", self.name, self.gpus_per_box);
            if boxes > 1 {
                self.nics_per_box = (self.nics_per_box * each / self.gpus_per_box).max(1);
            }
            self.gpus_per_box = each;
        }
        Ok(())
    }

    /// The system a name gives (`dgx-a100:2`), or None when `spec` names no GPU system.
    pub fn named(spec: &str) -> Result<Option<GpuSystem>, Error> {
        let (given, arg) = spec.split_once(':').unwrap_or((spec, ""));
        const KINDS: [&str; 8] = [
            "dgx-a100", "hgx-h100", "hgx-h200", "hgx-b200", "hgx-a800", "hgx-h800", "mi300x",
            "pcie",
        ];
        // The other names of the same boxes: NVIDIA sells each HGX board in a DGX (whose
        // datasheet the defaults cite) and the DGX A100's board as HGX A100.
        const ALIASES: [(&str, &str); 4] = [
            ("dgx-h100", "hgx-h100"),
            ("dgx-h200", "hgx-h200"),
            ("dgx-b200", "hgx-b200"),
            ("hgx-a100", "dgx-a100"),
        ];
        let kind = ALIASES
            .iter()
            .find(|(alias, _)| *alias == given)
            .map_or(given, |(_, named)| named);
        let Some(kind) = KINDS.iter().copied().find(|k| *k == kind) else {
            return Ok(None);
        };
        let count = match arg.trim() {
            "" => 1,
            text => text
                .parse::<u32>()
                .ok()
                .filter(|&n| (1..=4096).contains(&n))
                .ok_or_else(|| {
                    Error::input(format!(
                        "topology '{spec}': expected {given}:N with 1 <= N <= 4096 ({})",
                        if kind == "pcie" { "GPUs" } else { "boxes" }
                    ))
                })?,
        };
        let gb = |g: f64| Bandwidth::gb_per_sec(g);
        let gbit = |g: f64| Bandwidth::gb_per_sec(g / 8.0);
        let boxed = |gpu, arch, links, link_rate, nic_rate, cpu| GpuSystem {
            name: spec.to_string(),
            arch,
            boxes: count,
            gpus_per_box: 8,
            intra: Intra::NvSwitch,
            links_per_gpu: links,
            link_line_rate: gb(link_rate),
            nics_per_box: 8,
            nic_line_rate: gbit(nic_rate),
            nic_kind: NicKind::InfiniBand,
            cpu,
            // Each GPU and its NIC on one PCIe switch, as the DGX/HGX boards put them.
            nic_path: NicPath::Pxb,
            sharp: false,
            nvls: arch != GpuArch::Ampere,
            kind,
            gpu,
            calibration: Calibration::default(),
        };
        let system = match kind {
            // DGX A100 datasheet: 8 A100 SXM4, 6 NVSwitches, 12 NVLink3 links per GPU at 25 GB/s a
            // direction (600 GB/s bidirectional), 8 ConnectX-6 HDR 200 Gb/s compute NICs, two
            // AMD EPYC 7742 CPUs.
            "dgx-a100" => boxed("a100", GpuArch::Ampere, 12, 25.0, 200.0, CpuVendor::Amd),
            // HGX H100 / H200: 18 NVLink4 links at 25 GB/s a direction (900 GB/s bidirectional),
            // ConnectX-7 NDR 400 Gb/s, one per GPU, two Intel Xeon Platinum 8480C (DGX H100/H200
            // datasheets).
            "hgx-h100" => boxed("h100", GpuArch::Hopper, 18, 25.0, 400.0, CpuVendor::Intel),
            "hgx-h200" => boxed("h200", GpuArch::Hopper, 18, 25.0, 400.0, CpuVendor::Intel),
            // The export parts: the A100's and H100's chips with fewer NVLinks. A800 SXM4 80 GB
            // datasheet: NVLink 400 GB/s bidirectional, 8 NVLink3 links at 25 GB/s a direction;
            // H800 SXM5 datasheet: NVLink 400 GB/s, 8 NVLink4 links. Their boards vary; the
            // defaults are the A100's and H100's boards (HDR and NDR, one NIC a GPU, the same
            // hosts), which `--nic`, `--nic-kind` and `--cpu` replace.
            "hgx-a800" => boxed("a800", GpuArch::Ampere, 8, 25.0, 200.0, CpuVendor::Amd),
            "hgx-h800" => boxed("h800", GpuArch::Hopper, 8, 25.0, 400.0, CpuVendor::Intel),
            // HGX B200: 18 NVLink5 links at 50 GB/s a direction (1.8 TB/s bidirectional),
            // ConnectX-7 NDR 400 Gb/s, one per GPU, two Intel Xeon Platinum 8570 (DGX B200
            // datasheet).
            "hgx-b200" => boxed(
                "b200",
                GpuArch::Blackwell,
                18,
                50.0,
                400.0,
                CpuVendor::Intel,
            ),
            // AMD Instinct MI300X platform: 8 GPUs, each with 7 xGMI links of 128 GB/s
            // bidirectional to its peers; one 400 Gb/s NIC per GPU; its hosts vary (no default
            // CPU: NCCL's default overhead).
            "mi300x" => GpuSystem {
                intra: Intra::FullMesh,
                nvls: false,
                ..boxed("mi300x", GpuArch::Cdna3, 7, 64.0, 400.0, CpuVendor::Other)
            },
            // A box of G GPUs on PCIe Gen4 x16 (32 GB/s a direction); A100 PCIe cards.
            _ => GpuSystem {
                boxes: 1,
                gpus_per_box: count,
                intra: Intra::Pcie,
                links_per_gpu: 1,
                link_line_rate: gb(32.0),
                nics_per_box: 0,
                nvls: false,
                ..boxed("a100", GpuArch::Ampere, 1, 32.0, 200.0, CpuVendor::Other)
            },
        };
        Ok(Some(system))
    }

    /// The named system whose GPUs a device name says, as the drivers print it (`NVIDIA H800`,
    /// `NVIDIA A100-SXM4-80GB`, `AMD Instinct MI300X`); None for GPUs no named system holds
    /// (Hopper's PCIe and NVL cards among them). An H20 box is an H100 box to NCCL: the same 18
    /// NVLink4 links (H20 datasheet: NVLink 900 GB/s).
    pub fn kind_of_device(name: &str) -> Option<&'static str> {
        let upper = name.to_ascii_uppercase();
        let words: Vec<&str> = upper
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        let has = |w: &str| words.contains(&w);
        let card = has("PCIE") || has("NVL");
        let ampere = has("A100") || has("A800");
        Some(match () {
            _ if has("MI300X") => "mi300x",
            _ if ampere && has("PCIE") => "pcie",
            _ if card => return None,
            _ if has("H800") => "hgx-h800",
            _ if has("A800") => "hgx-a800",
            _ if has("H200") => "hgx-h200",
            _ if has("B200") => "hgx-b200",
            _ if has("H20") || has("H100") => "hgx-h100",
            _ if has("A100") => "dgx-a100",
            _ => return None,
        })
    }

    /// Applies the command line's (or a caller's) overrides of its figures; the name says
    /// them (`dgx-a100:2 (nic 16x100Gb, roce)`), so that results carry what they ran on.
    pub fn apply(&mut self, overrides: &SystemOverrides) -> Result<(), Error> {
        let mut changed = Vec::new();
        if let Some(links) = &overrides.nvlink {
            self.set_nvlinks(links)?;
            changed.push(format!("nvlink {links}"));
        }
        if let Some(nic) = &overrides.nic {
            self.set_nics(nic)?;
            changed.push(format!("nic {nic}"));
        }
        if let Some(kind) = &overrides.nic_kind {
            self.set_nic_kind(kind)?;
            changed.push(kind.to_ascii_lowercase());
        }
        if let Some(cpu) = &overrides.cpu {
            self.set_cpu(cpu)?;
            changed.push(format!("{} hosts", cpu.to_ascii_lowercase()));
        }
        if let Some(path) = &overrides.nic_path {
            self.set_nic_path(path)?;
            changed.push(format!("nic path {}", path.to_ascii_lowercase()));
        }
        if overrides.sharp {
            self.sharp = true;
            changed.push("sharp".into());
        }
        if !changed.is_empty() {
            self.name = format!("{} ({})", self.name, changed.join(", "));
        }
        Ok(())
    }

    /// Replaces the NICs by `COUNTxSPEED` per box (`16x100Gb`, `8x400Gbps`, `8x50GB/s`).
    pub fn set_nics(&mut self, text: &str) -> Result<(), Error> {
        (self.nics_per_box, self.nic_line_rate) = count_and_speed("--nic", text, 64, "16x100Gb")?;
        Ok(())
    }

    /// Replaces each GPU's NVLinks to its box's NVSwitches by `COUNTxSPEED` (`8x25GB/s`, a
    /// direction). NCCL rates the links by their count and the GPU's NVLink generation
    /// ([`GpuArch::nccl_link_gbps`]), as it reads them from the driver; the speed is the line
    /// rate the datasheet network (`simulate`, `sweep`) gives them.
    pub fn set_nvlinks(&mut self, text: &str) -> Result<(), Error> {
        if self.intra != Intra::NvSwitch {
            return Err(Error::input(format!(
                "--nvlink '{text}': {} has no NVSwitch (its GPUs are {}); only NVLink boxes \
                 take it",
                self.name,
                match self.intra {
                    Intra::FullMesh => "an xGMI full mesh",
                    _ => "on PCIe",
                }
            )));
        }
        (self.links_per_gpu, self.link_line_rate) =
            count_and_speed("--nvlink", text, 36, "8x25GB/s")?;
        Ok(())
    }

    /// Sets the NIC kind by name (`ib`, `roce`).
    pub fn set_nic_kind(&mut self, text: &str) -> Result<(), Error> {
        self.nic_kind = match text.to_ascii_lowercase().as_str() {
            "ib" | "infiniband" => NicKind::InfiniBand,
            "roce" => NicKind::RoCE,
            _ => {
                return Err(Error::input(format!(
                    "--nic-kind '{text}': expected ib or roce"
                )))
            }
        };
        Ok(())
    }

    /// Sets how a GPU reaches its NIC by NCCL's path name (`pix`, `pxb`, `pxn`, `phb`, `sys`).
    pub fn set_nic_path(&mut self, text: &str) -> Result<(), Error> {
        self.nic_path = NicPath::parse(text).ok_or_else(|| {
            Error::input(format!(
                "--nic-path '{text}': expected pix, pxb, pxn, phb or sys"
            ))
        })?;
        Ok(())
    }

    /// Whether NCCL enables LL128 on the network path (`tuning.cc`: the GPU reaches its NIC
    /// within PXN on Hopper and later, within PXB before; RCCL has its own rule).
    pub fn ll128_across_boxes(&self) -> bool {
        let limit = match self.arch {
            GpuArch::Ampere => NicPath::Pxb,
            _ => NicPath::Pxn,
        };
        self.nic_path <= limit
    }

    /// Sets the hosts' CPU vendor by name (`intel`, `amd`, `other`).
    pub fn set_cpu(&mut self, text: &str) -> Result<(), Error> {
        self.cpu = match text.to_ascii_lowercase().as_str() {
            "intel" => CpuVendor::Intel,
            "amd" => CpuVendor::Amd,
            "other" => CpuVendor::Other,
            _ => {
                return Err(Error::input(format!(
                    "--cpu '{text}': expected intel, amd or other"
                )))
            }
        };
        Ok(())
    }

    pub fn gpus(&self) -> u32 {
        self.boxes * self.gpus_per_box
    }

    /// Per-GPU bandwidth into its box's fabric as NCCL counts it, GB/s (links x NCCL's per-link
    /// figure; PCIe Gen4 at NCCL's 24 GB/s).
    pub fn nccl_intra_gbps(&self) -> f64 {
        match self.intra {
            Intra::Pcie => 24.0,
            _ => self.links_per_gpu as f64 * self.arch.nccl_link_gbps(),
        }
    }

    /// One NIC's rate per direction, GB/s, as NCCL reads it from the adapter (line rate / 8).
    pub fn nic_gbps(&self) -> f64 {
        self.nic_line_rate.as_bytes_per_sec() / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NCCL's per-step network overhead follows the hosts' CPU: the DGX A100's AMD EPYC 2 us,
    /// the HGX systems' Intel Xeon 1 us; `--cpu` and system files replace it.
    #[test]
    fn the_hosts_cpu_sets_nccls_network_overhead() {
        let named = |s: &str| GpuSystem::named(s).unwrap().unwrap();
        assert_eq!(named("dgx-a100:2").cpu.net_overhead_us(), 2.0);
        assert_eq!(named("hgx-h100:2").cpu.net_overhead_us(), 1.0);
        assert_eq!(named("hgx-b200:2").cpu.net_overhead_us(), 1.0);
        let mut a100 = named("dgx-a100:2");
        a100.set_cpu("intel").unwrap();
        assert_eq!(a100.cpu.net_overhead_us(), 1.0);
        assert!(a100
            .set_cpu("arm64")
            .unwrap_err()
            .to_string()
            .contains("--cpu"));
    }

    /// NCCL's LL128 across boxes follows the GPU's path to its NIC (`tuning.cc`): within PXN on
    /// Hopper and Blackwell, within PXB on Ampere; the boards' own path (PXB) allows it.
    #[test]
    fn the_nic_path_bounds_ll128_across_boxes() {
        let named = |s: &str| GpuSystem::named(s).unwrap().unwrap();
        let across = |s: &str, path: &str| {
            let mut system = named(s);
            system.set_nic_path(path).unwrap();
            system.ll128_across_boxes()
        };
        assert!(named("hgx-b200:2").ll128_across_boxes());
        assert!(named("dgx-a100:2").ll128_across_boxes());
        assert!(across("hgx-h100:2", "pxn"));
        assert!(!across("hgx-h100:2", "phb"));
        assert!(!across("hgx-b200:2", "sys"));
        assert!(!across("dgx-a100:2", "pxn"));
        assert!(across("dgx-a100:2", "PIX"));
        let error = named("hgx-b200:2").set_nic_path("c2c").unwrap_err();
        assert!(error.to_string().contains("--nic-path 'c2c'"), "{error}");
    }

    #[test]
    fn named_systems_have_their_datasheet_figures() {
        let a100 = GpuSystem::parse("dgx-a100:2").unwrap().unwrap();
        assert_eq!((a100.gpus(), a100.links_per_gpu), (16, 12));
        assert!((a100.nic_gbps() - 25.0).abs() < 1e-9);
        assert!((a100.nccl_intra_gbps() - 240.0).abs() < 1e-9);
        // As a network it runs at the datasheet's rates: 12 x 25 GB/s into the NVSwitch, 25 GB/s
        // a NIC.
        let t = a100.topology().unwrap();
        let rate = |a, b| {
            t.link(t.link_between(a, b).unwrap())
                .bandwidth
                .as_bytes_per_sec()
        };
        assert_eq!(rate(0, 16), 300e9);
        assert_eq!(rate(0, 18), 25e9);
        let b200 = GpuSystem::parse("hgx-b200:1").unwrap().unwrap();
        assert!((b200.nccl_intra_gbps() - 721.8).abs() < 1e-9);
        assert!(b200.nvls && !a100.nvls);
        assert!(GpuSystem::parse("ring:8").unwrap().is_none());
        assert!(GpuSystem::parse("hgx-h100:0").is_err());
    }

    #[test]
    fn nic_overrides_parse_bits_and_bytes() {
        let mut s = GpuSystem::parse("dgx-a100:2").unwrap().unwrap();
        s.set_nics("16x100Gb").unwrap();
        assert_eq!(s.nics_per_box, 16);
        assert!((s.nic_gbps() - 12.5).abs() < 1e-9);
        s.set_nics("8x50GB/s").unwrap();
        assert!((s.nic_gbps() - 50.0).abs() < 1e-9);
        assert!(s.set_nics("0x100Gb").is_err());
        assert!(s.set_nics("lots").is_err());
        assert!(s.set_nic_kind("roce").is_ok() && s.nic_kind == NicKind::RoCE);
    }

    /// `--gpus` on one box takes its first GPUs; across boxes the same number from each, each
    /// GPU keeping its own NICs; anything else is refused naming the flag.
    #[test]
    fn a_subset_of_gpus_is_taken_from_every_box() {
        let named = |s: &str| GpuSystem::parse(s).unwrap().unwrap();
        let mut one = named("hgx-h100:1");
        one.use_first_gpus(4).unwrap();
        assert_eq!((one.gpus_per_box, one.nics_per_box), (4, 8));
        let mut pair = named("hgx-h100:2");
        pair.use_first_gpus(2).unwrap();
        assert_eq!(
            (pair.boxes, pair.gpus_per_box, pair.nics_per_box),
            (2, 1, 1)
        );
        assert!(pair.name.ends_with("(1 of 8 GPUs a box)"), "{}", pair.name);
        let mut roce = named("dgx-a100:2");
        roce.set_nics("16x100Gb").unwrap();
        roce.use_first_gpus(8).unwrap();
        assert_eq!((roce.gpus_per_box, roce.nics_per_box), (4, 8));
        let mut whole = named("hgx-b200:4");
        whole.use_first_gpus(32).unwrap();
        assert_eq!(whole, named("hgx-b200:4"));
        for (spec, n) in [
            ("hgx-h100:1", 1),
            ("hgx-h100:1", 9),
            ("hgx-h100:2", 3),
            ("hgx-h100:2", 18),
        ] {
            let e = named(spec).use_first_gpus(n).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--gpus {n}: ")), "{e}");
        }
    }

    /// The export parts' boxes are the A100's and H100's with 8 NVLinks a GPU (A800 and H800
    /// datasheets: 400 GB/s bidirectional): NCCL rates them at 8 of its per-link figure, the
    /// datasheet network at 8 x 25 GB/s; `--nvlink` gives any NVSwitch box its links.
    #[test]
    fn nvlinks_are_counted_per_gpu() {
        let h800 = GpuSystem::parse("hgx-h800:2").unwrap().unwrap();
        let h100 = GpuSystem::parse("hgx-h100:2").unwrap().unwrap();
        assert_eq!(
            (h800.arch, h800.gpu, h800.nvls),
            (GpuArch::Hopper, "h800", true)
        );
        assert!((h800.nccl_intra_gbps() - 8.0 * 20.6).abs() < 1e-9);
        assert_eq!(h800.nic_line_rate, h100.nic_line_rate);
        let a800 = GpuSystem::parse("hgx-a800:1").unwrap().unwrap();
        assert_eq!((a800.arch, a800.nvls), (GpuArch::Ampere, false));
        assert!((a800.nccl_intra_gbps() - 160.0).abs() < 1e-9);
        let t = a800.topology().unwrap();
        let into_switch = t.link(t.link_between(0, 8).unwrap()).bandwidth;
        assert_eq!(into_switch.as_bytes_per_sec(), 200e9);
        let mut h100 = h100;
        h100.apply(&SystemOverrides {
            nvlink: Some("8x25GB/s".into()),
            ..SystemOverrides::default()
        })
        .unwrap();
        assert_eq!(
            (h100.links_per_gpu, h100.link_line_rate),
            (h800.links_per_gpu, h800.link_line_rate)
        );
        assert!(h100.name.ends_with("(nvlink 8x25GB/s)"), "{}", h100.name);
        for bad in ["0x25GB/s", "37x25GB/s", "8", "8x25"] {
            let e = h100.set_nvlinks(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--nvlink '{bad}': ")), "{e}");
        }
        for other in ["mi300x:1", "pcie:4"] {
            let mut s = GpuSystem::parse(other).unwrap().unwrap();
            let e = s.set_nvlinks("8x25GB/s").unwrap_err().to_string();
            assert!(e.contains("only NVLink boxes take it"), "{e}");
        }
    }

    /// A DGX is its HGX board's system, and the HGX A100 the DGX A100's, under either name.
    #[test]
    fn dgx_and_hgx_name_the_same_boxes() {
        for (alias, named) in [
            ("dgx-h100:2", "hgx-h100:2"),
            ("dgx-b200:1", "hgx-b200:1"),
            ("hgx-a100:4", "dgx-a100:4"),
        ] {
            let a = GpuSystem::parse(alias).unwrap().unwrap();
            let n = GpuSystem::parse(named).unwrap().unwrap();
            assert_eq!(a.name, alias);
            assert_eq!(
                GpuSystem {
                    name: n.name.clone(),
                    ..a
                },
                n
            );
        }
    }

    #[test]
    fn devices_name_their_systems() {
        for (name, kind) in [
            ("NVIDIA H100 80GB HBM3", Some("hgx-h100")),
            ("NVIDIA H800", Some("hgx-h800")),
            ("NVIDIA A800-SXM4-80GB", Some("hgx-a800")),
            ("NVIDIA A100-SXM4-40GB", Some("dgx-a100")),
            ("NVIDIA A100-PCIE-40GB", Some("pcie")),
            ("NVIDIA H20", Some("hgx-h100")),
            ("NVIDIA H200", Some("hgx-h200")),
            ("NVIDIA B200", Some("hgx-b200")),
            ("AMD Instinct MI300X", Some("mi300x")),
            ("NVIDIA H100 NVL", None),
            ("NVIDIA H100 PCIe", None),
            ("NVIDIA H800 PCIe", None),
            ("NVIDIA H200 NVL", None),
            ("NVIDIA A800 80GB PCIe", Some("pcie")),
            ("Tesla V100-SXM2-32GB", None),
        ] {
            assert_eq!(GpuSystem::kind_of_device(name), kind, "{name}");
        }
        // Every kind it names is a system.
        for name in ["NVIDIA H800", "NVIDIA A800", "AMD Instinct MI300X"] {
            let kind = GpuSystem::kind_of_device(name).unwrap();
            assert_eq!(GpuSystem::named(kind).unwrap().unwrap().kind, kind);
        }
    }
}
