//! GPU-system files: a named system (`base: hgx-b200`) with its figures overridden, and the
//! figures `collsim calibrate` measured on it. Every command that takes a GPU system by name
//! takes the file in its place (`--topology b200.yml`, or `b200.yml:4` for four boxes of it).
//!
//! ```yaml
//! gpu_system:
//!   base: hgx-b200        # dgx-a100, hgx-h100, hgx-h200, hgx-b200, hgx-a800, hgx-h800, mi300x, pcie
//!   boxes: 2              # optional (pcie: GPUs)
//!   nvlink: 18x50GB/s     # optional, as --nvlink takes it (NVSwitch boxes)
//!   nic: 8x400Gb          # optional, as --nic takes it
//!   nic_kind: ib          # optional: ib or roce
//!   cpu: intel            # optional: intel, amd or other (NCCL's network overhead)
//!   nic_path: pxb         # optional: pix, pxb, pxn, phb or sys (LL128 across boxes)
//!   sharp: false          # optional
//!   calibrated:           # optional, written by collsim calibrate
//!     intra_gbps: 612.4
//!     latency_factor: {LL: 1.1, Simple: 1.6}
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use super::systems::{Calibration, GpuSystem};
use crate::Error;

/// The file's one top-level key.
const KEY: &str = "gpu_system";

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SystemFile {
    /// A named system without its count (`hgx-b200`), or with it (`hgx-b200:2`).
    base: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    boxes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nvlink: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nic_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nic_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sharp: Option<bool>,
    #[serde(default, skip_serializing_if = "Calibration::is_empty")]
    calibrated: Calibration,
}

impl GpuSystem {
    /// The system `spec` names (`dgx-a100:2`), or a GPU-system file (`sys.yml`, or `sys.yml:N`
    /// for N boxes of it); None when `spec` is neither.
    pub fn parse(spec: &str) -> Result<Option<GpuSystem>, Error> {
        if let Some(system) = load(spec)? {
            return Ok(Some(system));
        }
        GpuSystem::named(spec)
    }
}

/// The system a GPU-system file at `spec` (optionally `FILE:N`) describes; None when `spec` is
/// not such a file (a name, or a topology file of another kind).
pub fn load(spec: &str) -> Result<Option<GpuSystem>, Error> {
    let (path, count) = split(spec);
    if !is_yaml(path) || Path::new(path).is_dir() {
        return Ok(None);
    }
    let text = crate::read_text(Path::new(path), "cannot read topology file")?;
    let value: Value = crate::yaml::from_str(path, &text)?;
    let Some(body) = value.get(KEY) else {
        return Ok(None);
    };
    if !body.is_mapping() {
        return Err(Error::input(format!(
            "{path}: {KEY}: expected a mapping of system fields (base, boxes, nvlink, nic, \
             nic_kind, cpu, nic_path, sharp, calibrated)"
        )));
    }
    let file: SystemFile = serde_yaml::from_value(body.clone())
        .map_err(|e| Error::input(format!("{path}: {KEY}: {e}")))?;
    let base = if file.base.contains(':') {
        file.base.clone()
    } else {
        format!("{}:1", file.base)
    };
    let mut system = GpuSystem::named(&base)?.ok_or_else(|| {
        Error::input(format!(
            "{path}: {KEY}.base '{}': expected dgx-a100, hgx-h100, hgx-h200, hgx-b200, hgx-a800, \
             hgx-h800, mi300x or pcie",
            file.base
        ))
    })?;
    let boxes = match count {
        Some(n) => Some(n.trim().parse::<u32>().map_err(|_| {
            Error::input(format!(
                "topology '{spec}': expected FILE:N with N a whole number"
            ))
        })?),
        None => file.boxes,
    };
    if let Some(n) = boxes {
        let kind = file.base.split(':').next().unwrap_or_default();
        let resized = GpuSystem::named(&format!("{kind}:{n}"))
            .map_err(|e| Error::input(format!("{path}: {e}")))?
            .expect("the base is a named system");
        system.boxes = resized.boxes;
        system.gpus_per_box = resized.gpus_per_box;
    }
    if let Some(links) = &file.nvlink {
        system
            .set_nvlinks(links)
            .map_err(|e| Error::input(format!("{path}: {KEY}.nvlink: {e}")))?;
    }
    if let Some(nic) = &file.nic {
        system
            .set_nics(nic)
            .map_err(|e| Error::input(format!("{path}: {KEY}.nic: {e}")))?;
    }
    if let Some(kind) = &file.nic_kind {
        system
            .set_nic_kind(kind)
            .map_err(|e| Error::input(format!("{path}: {KEY}.nic_kind: {e}")))?;
    }
    if let Some(cpu) = &file.cpu {
        system
            .set_cpu(cpu)
            .map_err(|e| Error::input(format!("{path}: {KEY}.cpu: {e}")))?;
    }
    if let Some(nic_path) = &file.nic_path {
        system
            .set_nic_path(nic_path)
            .map_err(|e| Error::input(format!("{path}: {KEY}.nic_path: {e}")))?;
    }
    if let Some(sharp) = file.sharp {
        system.sharp = sharp;
    }
    check(&file.calibrated)
        .map_err(|why| Error::input(format!("{path}: {KEY}.calibrated.{why}")))?;
    system.calibration = file.calibrated;
    system.name = spec.to_string();
    Ok(Some(system))
}

/// `FILE.yml:N` as the file and the count; anything else as itself.
fn split(spec: &str) -> (&str, Option<&str>) {
    match spec.rsplit_once(':') {
        Some((p, n)) if is_yaml(p) => (p, Some(n)),
        _ => (spec, None),
    }
}

/// The file a `--topology` names (`FILE.yml` of `FILE.yml:N`), or the spec itself.
pub fn file_of(spec: &str) -> &str {
    split(spec).0
}

fn is_yaml(path: &str) -> bool {
    path.ends_with(".yml") || path.ends_with(".yaml")
}

/// Every calibrated figure is a positive finite number.
fn check(c: &Calibration) -> Result<(), String> {
    let mut figures = vec![
        ("intra_gbps".to_string(), c.intra_gbps),
        ("nic_gbps".to_string(), c.nic_gbps),
        ("fixed_us".to_string(), c.fixed_us),
    ];
    for (name, per) in [
        ("latency_factor", &c.latency_factor),
        ("rate_factor", &c.rate_factor),
    ] {
        for (p, proto) in ["LL", "LL128", "Simple"].iter().enumerate() {
            figures.push((format!("{name}.{proto}"), per.get(p)));
        }
    }
    for (name, value) in figures {
        if let Some(v) = value {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name}: {v} is not a positive number"));
            }
        }
    }
    Ok(())
}

/// The text of a GPU-system file: `base`'s kind, count and NICs with `calibration`, after a comment
/// block (`notes`, one line each) saying where the figures came from.
pub fn render(base: &GpuSystem, calibration: &Calibration, notes: &[String]) -> String {
    let named = GpuSystem::named(base.kind)
        .ok()
        .flatten()
        .expect("a system's kind is a name");
    let links = (base.links_per_gpu, base.link_line_rate);
    let file = SystemFile {
        // The NVLinks only where they are not the named system's.
        nvlink: (links != (named.links_per_gpu, named.link_line_rate))
            .then(|| format!("{}x{}GB/s", links.0, links.1.as_bytes_per_sec() / 1e9)),
        base: base.kind.to_string(),
        boxes: Some(if base.intra == super::Intra::Pcie {
            base.gpus_per_box
        } else {
            base.boxes
        }),
        nic: (base.nics_per_box > 0).then(|| {
            format!(
                "{}x{}GB/s",
                base.nics_per_box,
                base.nic_line_rate.as_bytes_per_sec() / 1e9
            )
        }),
        nic_kind: Some(
            match base.nic_kind {
                super::NicKind::InfiniBand => "ib",
                super::NicKind::RoCE => "roce",
            }
            .to_string(),
        ),
        cpu: Some(base.cpu.name().to_string()),
        nic_path: Some(base.nic_path.name().to_string()),
        sharp: Some(base.sharp),
        calibrated: calibration.clone(),
    };
    let mut map = serde_yaml::Mapping::new();
    map.insert(
        Value::String(KEY.into()),
        serde_yaml::to_value(&file).expect("a system file serialises"),
    );
    let body = serde_yaml::to_string(&map).expect("a mapping serialises");
    let mut text = String::new();
    for note in notes {
        text.push_str("# ");
        text.push_str(note);
        text.push('\n');
    }
    text.push_str(&body);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::systems::PerProtocol;
    use crate::topology::NicPath;

    /// A file holding `text` in a folder of its own, removed when the value is dropped.
    struct Temp {
        path: std::path::PathBuf,
        _dir: tempfile::TempDir,
    }

    impl std::ops::Deref for Temp {
        type Target = std::path::Path;

        fn deref(&self) -> &std::path::Path {
            &self.path
        }
    }

    fn temp(name: &str, text: &str) -> Temp {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        Temp { path, _dir: dir }
    }

    #[test]
    fn a_written_file_reads_back_as_the_same_system() {
        let mut base = GpuSystem::named("dgx-a100:2").unwrap().unwrap();
        base.set_nics("16x100Gb").unwrap();
        base.set_nic_kind("roce").unwrap();
        base.set_nic_path("phb").unwrap();
        base.set_nvlinks("8x25GB/s").unwrap();
        let calibration = Calibration {
            intra_gbps: Some(201.5),
            latency_factor: PerProtocol {
                ll128: Some(0.6),
                ..PerProtocol::default()
            },
            ..Calibration::default()
        };
        let text = render(&base, &calibration, &["fitted on a.log".into()]);
        assert!(text.starts_with("# fitted on a.log\n"));
        let path = temp("a100.yml", &text);
        let spec = path.display().to_string();
        let read = GpuSystem::parse(&spec).unwrap().unwrap();
        assert_eq!(read.calibration, calibration);
        assert_eq!((read.boxes, read.nics_per_box), (2, 16));
        assert_eq!(read.nic_line_rate, base.nic_line_rate);
        assert_eq!(read.nic_kind, base.nic_kind);
        assert_eq!(read.nic_path, NicPath::Phb);
        assert_eq!(
            (read.links_per_gpu, read.link_line_rate),
            (8, base.link_line_rate)
        );
        // The named system's own links are not written.
        let plain = GpuSystem::named("dgx-a100:2").unwrap().unwrap();
        assert!(!render(&plain, &calibration, &[]).contains("nvlink"));
        // FILE:N resizes it.
        let four = GpuSystem::parse(&format!("{spec}:4")).unwrap().unwrap();
        assert_eq!((four.boxes, four.nics_per_box), (4, 16));
    }

    #[test]
    fn bad_files_are_refused_by_field() {
        let refusal = |path: &std::path::Path| {
            GpuSystem::parse(&path.display().to_string())
                .unwrap_err()
                .to_string()
        };
        let bad = temp(
            "bad.yml",
            "gpu_system:\n  base: hgx-b200\n  calibrated:\n    intra_gbps: -3\n",
        );
        let e = refusal(&bad);
        assert!(e.contains("calibrated.intra_gbps"), "{e}");
        let e = refusal(&temp("unknown.yml", "gpu_system:\n  base: tpu-v5\n"));
        assert!(e.contains("gpu_system.base 'tpu-v5'"), "{e}");
        let e = refusal(&temp(
            "typo.yml",
            "gpu_system:\n  base: hgx-b200\n  boxs: 2\n",
        ));
        assert!(e.contains("boxs"), "{e}");
        let e = refusal(&temp(
            "mesh.yml",
            "gpu_system:\n  base: mi300x\n  nvlink: 8x25GB/s\n",
        ));
        assert!(e.contains("gpu_system.nvlink: --nvlink '8x25GB/s'"), "{e}");
        assert!(e.contains("xGMI full mesh"), "{e}");
        let e = refusal(&temp("list.yml", "gpu_system: [1, 2]\n"));
        assert!(e.contains("expected a mapping of system fields"), "{e}");
        let e = refusal(std::path::Path::new("no/such/system.yml"));
        assert!(e.starts_with("no/such/system.yml: cannot read"), "{e}");
        // A topology file of another kind is not a GPU system.
        let other = temp("ring.yml", "npus: 4\nlinks: []\n");
        assert!(GpuSystem::parse(&other.display().to_string())
            .unwrap()
            .is_none());
    }
}
