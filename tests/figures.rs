//! Figures read as numbers: the value a heat map states as its darkest is the busiest cell,
//! computed here from `links.csv` independently of the drawing code.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{collsim, scratch};

/// The byte count a figure states, e.g. "1016MiB" or "865MB".
fn parse_bytes(text: &str) -> f64 {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        "TiB" => 1099511627776.0,
        other => panic!("unknown unit {other} in {text}"),
    };
    number.parse::<f64>().unwrap() * scale
}

/// The "darkest = X" a heat map's subtitle states, in bytes.
fn stated_darkest(svg: &Path) -> f64 {
    let text = std::fs::read_to_string(svg).unwrap();
    let at = text
        .find("darkest = ")
        .expect("the subtitle states the darkest value")
        + 10;
    let end = at + text[at..].find(')').unwrap();
    parse_bytes(&text[at..end])
}

/// (src, dst, bytes) of every link in `links.csv`.
fn link_bytes(dir: &Path) -> Vec<(u32, u32, f64)> {
    let mut reader = csv::Reader::from_path(dir.join("links.csv")).unwrap();
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            (
                r[0].parse().unwrap(),
                r[1].parse().unwrap(),
                r[2].parse().unwrap(),
            )
        })
        .collect()
}

/// The largest mean over the links between two blocks of `block` consecutive nodes.
fn busiest_cell(links: &[(u32, u32, f64)], block: u32) -> f64 {
    let mut cells: HashMap<(u32, u32), (f64, u32)> = HashMap::new();
    for &(src, dst, bytes) in links {
        let cell = cells.entry((src / block, dst / block)).or_default();
        cell.0 += bytes;
        cell.1 += 1;
    }
    cells
        .values()
        .map(|&(sum, count)| sum / count as f64)
        .fold(0.0, f64::max)
}

fn run(name: &str, topology: &str, algorithm: &str) -> common::Scratch {
    let dir = scratch("figures", name);
    let out = collsim(&[
        "simulate",
        "--topology",
        topology,
        "--collective",
        "all-reduce",
        "--size",
        "1GiB",
        "--algorithm",
        algorithm,
        "--out",
        dir.to_str().unwrap(),
        "--force",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

#[test]
fn a_heat_maps_stated_maximum_is_its_busiest_cell() {
    // Node by node: the busiest link. Uneven loads (a mesh's edges carry less), so the maximum
    // is not every cell's value.
    let dir = run("mesh", "mesh:4x4", "ring");
    let stated = stated_darkest(&dir.join("heatmap.svg"));
    let busiest = busiest_cell(&link_bytes(&dir), 1);
    assert!(
        (stated - busiest).abs() <= busiest * 0.005,
        "stated {stated}, busiest link {busiest}"
    );
    // 128 nodes are drawn by blocks of two: a cell is the mean of its links, so the darkest
    // value is a link's load again, not the 2x2 block's sum.
    let dir = run("ring128", "ring:128", "ring");
    let stated = stated_darkest(&dir.join("heatmap.svg"));
    let links = link_bytes(&dir);
    let busiest = busiest_cell(&links, 2);
    assert!(
        (stated - busiest).abs() <= busiest * 0.005,
        "stated {stated}, busiest 2-node block {busiest}"
    );
    let busiest_link = links.iter().map(|l| l.2).fold(0.0, f64::max);
    assert!(stated <= busiest_link * 1.005);
}
