//! An ASTRA-sim 2.x system file read with ASTRA-sim's own meaning (`Sys::initialize_sys` and
//! `CollectiveImplLookup` in astra-sim/system): every key either takes the effect it has there or
//! is refused with the reason.

use std::path::Path;

use serde_json::{Map, Value};

use crate::collective::CollectiveKind;
use crate::system::{implementation_names, number, read_system_file, text};
use crate::Error;

/// Which ready collective goes first (`scheduling-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The newest collective first (ASTRA-sim's priority counter counts up).
    Lifo,
    /// The oldest first (the counter counts down).
    Fifo,
    /// By the Chakra node's `comm_priority`.
    Explicit,
}

/// `collective-optimization`: how an all-reduce is cut into phases across dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Optimization {
    /// One all-reduce phase per dimension.
    Baseline,
    /// Reduce-scatter up the dimensions, all-reduce on the last, all-gather back down.
    LocalBwAware,
}

/// One entry of an `*-implementation` list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Implementation {
    /// `ring`, or `oneRing` (`whole`: one ring over every NPU).
    Ring { whole: bool },
    /// `direct`/`directN`, `oneDirect`/`oneDirectN`: `window` packets in flight (None: all).
    Direct { whole: bool, window: Option<u32> },
    /// `halvingDoubling`, `oneHalvingDoubling`.
    HalvingDoubling { whole: bool },
    /// `doubleBinaryTree` (an all-reduce on whichever phase it is named for, as in ASTRA-sim).
    DoubleBinaryTree,
}

impl Implementation {
    /// Reads an ASTRA-sim implementation name.
    fn parse(name: &str) -> Result<Implementation, String> {
        let window = |digits: &str| -> Result<Option<u32>, String> {
            if digits.is_empty() {
                return Ok(None);
            }
            // ASTRA-sim reads at most five digits after the name (stoi of substr(n, 5)).
            let digits: String = digits.chars().take(5).collect();
            digits
                .parse::<u32>()
                .map(Some)
                .map_err(|_| format!("'{name}': the window after the name is not a number"))
        };
        match name {
            "ring" => Ok(Implementation::Ring { whole: false }),
            "oneRing" => Ok(Implementation::Ring { whole: true }),
            "halvingDoubling" => Ok(Implementation::HalvingDoubling { whole: false }),
            "oneHalvingDoubling" => Ok(Implementation::HalvingDoubling { whole: true }),
            "doubleBinaryTree" => Ok(Implementation::DoubleBinaryTree),
            _ if name.starts_with("oneDirect") => Ok(Implementation::Direct {
                whole: true,
                window: window(&name["oneDirect".len()..])?,
            }),
            _ if name.starts_with("direct") => Ok(Implementation::Direct {
                whole: false,
                window: window(&name["direct".len()..])?,
            }),
            _ => Err(format!(
                "'{name}' is not ring, oneRing, direct, directN, oneDirect, oneDirectN, \
                 halvingDoubling, oneHalvingDoubling or doubleBinaryTree"
            )),
        }
    }

    /// One logical ring over every NPU rather than one per dimension.
    pub fn whole(self) -> bool {
        match self {
            Implementation::Ring { whole }
            | Implementation::Direct { whole, .. }
            | Implementation::HalvingDoubling { whole } => whole,
            Implementation::DoubleBinaryTree => false,
        }
    }
}

/// What an ASTRA-sim system file sets, with ASTRA-sim's defaults where a key is absent.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub policy: Policy,
    /// `endpoint-delay`: cycles (ns) each message spends between the NPU and the network interface.
    pub endpoint_delay: u64,
    /// `active-chunks-per-dimension`: chunks one queue runs at once.
    pub active_chunks: u32,
    /// `preferred-dataset-splits`: chunks a collective is cut into.
    pub splits: u32,
    pub optimization: Optimization,
    /// `local-mem-bw` in GB/s (10^9 bytes); 0 when absent: reductions then take no time.
    pub local_mem_bw: f64,
    /// Implementations per dimension of all-reduce, reduce-scatter, all-gather and all-to-all.
    pub implementations: Vec<(CollectiveKind, Vec<Implementation>)>,
    /// Keys ASTRA-sim does not read (it ignores them; so does collsim), for a warning.
    pub ignored: Vec<String>,
}

impl Settings {
    /// Reads `path` (JSON, as ASTRA-sim 2.x reads it, or the 1.x text form).
    pub fn load(path: &Path) -> Result<Settings, Error> {
        let (value, shown) = read_system_file(path)?;
        match value {
            Value::Object(map) => Settings::parse(&map, &shown),
            _ => Err(Error::input(format!(
                "{shown}: expected an object of ASTRA-sim system settings"
            ))),
        }
    }

    /// Reads the keys of a parsed system file; `file` names it in errors.
    pub fn parse(map: &Map<String, Value>, file: &str) -> Result<Settings, Error> {
        let bad = |key: &str, why: String| Error::input(format!("{file}: '{key}': {why}"));
        let mut settings = Settings {
            policy: Policy::Lifo,
            endpoint_delay: 10,
            active_chunks: 1,
            splits: 0,
            optimization: Optimization::Baseline,
            local_mem_bw: 0.0,
            implementations: Vec::new(),
            ignored: Vec::new(),
        };
        let shared_bus = map
            .get("model-shared-bus")
            .map(|v| number(v).map_err(|e| bad("model-shared-bus", e)))
            .transpose()?
            .is_some_and(|n| n == 1.0);
        if shared_bus {
            return Err(bad(
                "model-shared-bus",
                "1 (ASTRA-sim's LogGP shared memory bus) is not modelled; use 0".into(),
            ));
        }
        for (key, v) in map {
            let k = key.as_str();
            match k {
                "scheduling-policy" => {
                    settings.policy = match text(v).map_err(|e| bad(k, e))? {
                        "LIFO" => Policy::Lifo,
                        "FIFO" => Policy::Fifo,
                        "EXPLICIT" => Policy::Explicit,
                        other => {
                            return Err(bad(k, format!("'{other}' is not LIFO, FIFO or EXPLICIT")))
                        }
                    }
                }
                "collective-optimization" => {
                    settings.optimization = match text(v).map_err(|e| bad(k, e))? {
                        "baseline" => Optimization::Baseline,
                        "localBWAware" => Optimization::LocalBwAware,
                        other => {
                            return Err(bad(
                                k,
                                format!("'{other}' is not baseline or localBWAware"),
                            ))
                        }
                    }
                }
                "endpoint-delay" => settings.endpoint_delay = whole(v, 0).map_err(|e| bad(k, e))?,
                "active-chunks-per-dimension" => {
                    settings.active_chunks = whole(v, 1).map_err(|e| bad(k, e))? as u32
                }
                "preferred-dataset-splits" => {
                    settings.splits = whole(v, 1).map_err(|e| bad(k, e))? as u32
                }
                "local-mem-bw" => {
                    let gbps = number(v).map_err(|e| bad(k, e))?;
                    if !(gbps.is_finite() && gbps >= 0.0) {
                        return Err(bad(k, format!("{gbps} is not a bandwidth in GB/s")));
                    }
                    settings.local_mem_bw = gbps;
                }
                "all-reduce-implementation"
                | "all-gather-implementation"
                | "reduce-scatter-implementation"
                | "all-to-all-implementation" => {
                    let kind = CollectiveKind::parse(k.trim_end_matches("-implementation"))
                        .expect("the four names above are collectives");
                    let list = implementations(v).map_err(|e| bad(k, e))?;
                    settings.implementations.push((kind, list));
                }
                "roofline-enabled" | "replay-only" => {
                    if switch(v).map_err(|e| bad(k, e))? {
                        return Err(bad(
                            k,
                            "is not modelled (compute nodes run for their recorded duration); \
                             use 0"
                                .into(),
                        ));
                    }
                }
                "inter-dimension-scheduling" | "intra-dimension-scheduling" => {
                    let name = text(v).map_err(|e| bad(k, e))?;
                    if !matches!(name, "ascending" | "baseline" | "FIFO") {
                        return Err(bad(
                            k,
                            format!(
                                "ASTRA-sim 2.x does not read this key (its chunks always go \
                                 through the dimensions in ascending order, first come first \
                                 served), so '{name}' would not take effect; remove it, or run \
                                 collsim's own schedulers without --system (--algorithm themis, \
                                 --intra-dimension)"
                            ),
                        ));
                    }
                }
                k if k.ends_with("-implementation-custom") || k.ends_with("-per-node") => {
                    return Err(bad(
                        k,
                        "custom collectives (Chakra-defined algorithms) are not modelled".into(),
                    ))
                }
                // Read by ASTRA-sim but with no effect on time here as there: the LogGP figures
                // and the reduction delay act only through the shared bus (refused above), the
                // peak only through the roofline (refused when enabled), and the rest is logging.
                "L"
                | "o"
                | "g"
                | "G"
                | "local-reduction-delay"
                | "model-shared-bus"
                | "peak-perf"
                | "trace-enabled"
                | "track-local-mem"
                | "local-mem-trace-filename" => {}
                _ => settings.ignored.push(key.clone()),
            }
        }
        if settings.splits == 0 {
            return Err(Error::input(format!(
                "{file}: 'preferred-dataset-splits' is missing: ASTRA-sim cuts every collective \
                 into that many chunks and has no default"
            )));
        }
        Ok(settings)
    }

    /// The implementation list of `kind`, or an error naming the missing key.
    pub fn implementation(&self, kind: CollectiveKind) -> Result<&[Implementation], Error> {
        self.implementations
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, list)| list.as_slice())
            .ok_or_else(|| {
                Error::input(format!(
                    "the system file has no '{}-implementation' for the workload's {} \
                     collectives",
                    kind.name(),
                    kind.name()
                ))
            })
    }
}

/// An on/off key ASTRA-sim tests against 0 (`roofline-enabled`, `replay-only`): a number, or
/// true/false.
fn switch(v: &Value) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(*b),
        other => number(other).map(|n| n != 0.0),
    }
}

/// A whole number of at least `min` (ASTRA-sim reads these keys as integers).
fn whole(v: &Value, min: u64) -> Result<u64, String> {
    let n = number(v)?;
    if n.fract() != 0.0 || n < min as f64 || n > u32::MAX as f64 {
        return Err(format!("{n} is not a whole number of at least {min}"));
    }
    Ok(n as u64)
}

/// A JSON list of implementation names, or the 1.x form `ring_direct`.
fn implementations(v: &Value) -> Result<Vec<Implementation>, String> {
    implementation_names(v)?
        .into_iter()
        .map(Implementation::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<Settings, Error> {
        Settings::parse(v.as_object().unwrap(), "s.json")
    }

    #[test]
    fn the_regression_file_reads_with_astra_sims_meaning() {
        let s = parse(serde_json::json!({
            "scheduling-policy": "LIFO", "endpoint-delay": 10,
            "active-chunks-per-dimension": 1, "preferred-dataset-splits": 4,
            "all-reduce-implementation": ["ring"], "all-to-all-implementation": ["direct3"],
            "collective-optimization": "localBWAware", "local-mem-bw": 50, "boost-mode": 0
        }))
        .unwrap();
        assert_eq!(s.policy, Policy::Lifo);
        assert_eq!((s.endpoint_delay, s.active_chunks, s.splits), (10, 1, 4));
        assert_eq!(s.optimization, Optimization::LocalBwAware);
        assert_eq!(s.local_mem_bw, 50.0);
        assert_eq!(
            s.implementation(CollectiveKind::AllToAll).unwrap(),
            &[Implementation::Direct {
                whole: false,
                window: Some(3)
            }]
        );
        assert_eq!(s.ignored, vec!["boost-mode".to_string()]);
        let missing = s.implementation(CollectiveKind::AllGather).unwrap_err();
        assert!(missing.to_string().contains("all-gather-implementation"));
    }

    #[test]
    fn keys_that_would_not_take_effect_are_refused_by_name() {
        for (key, value) in [
            ("inter-dimension-scheduling", serde_json::json!("themis")),
            ("model-shared-bus", serde_json::json!(1)),
            ("roofline-enabled", serde_json::json!(1)),
            ("all-reduce-implementation", serde_json::json!(["quadTree"])),
            ("scheduling-policy", serde_json::json!("RANDOM")),
            ("endpoint-delay", serde_json::json!(-1)),
        ] {
            let mut map = serde_json::json!({"preferred-dataset-splits": 4});
            map[key] = value;
            let err = parse(map).unwrap_err().to_string();
            assert!(err.contains("s.json") && err.contains(key), "{err}");
        }
        let err = parse(serde_json::json!({})).unwrap_err().to_string();
        assert!(err.contains("preferred-dataset-splits"), "{err}");
    }
}
