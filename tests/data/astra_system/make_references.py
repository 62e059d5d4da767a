#!/usr/bin/env python3
"""Regenerates references.csv: ASTRA-sim's own finish and exposed-communication times for every
network x system x workload case below, read off its log lines
`sys[i] finished, T cycles, exposed communication E cycles`.

Usage: ASTRA_SIM=<.../bin/AstraSim_Analytical_Congestion_Aware> python3 make_references.py
With ASTRA_SIM_UNAWARE=<.../bin/AstraSim_Analytical_Congestion_Unaware> it also writes
references_multidim.csv: two-dimensional networks, which the congestion-aware backend refuses, on
ASTRA-sim's congestion-unaware backend, in configurations where no two messages ever share a link
(ring algorithms between ring neighbours, direct only on a fully connected dimension, one chunk per
dimension at a time), so that the two backends agree and the comparison tests the system layer's
phases across dimensions.
(ASTRA-sim 2.x, astra-sim/astra-sim @518bd51, congestion-aware analytical backend, built as
../../../../shared/reference/astra_system/README.md describes; remote memory: its
examples/remote_memory/analytical/no_memory_expansion.json, written here as remote_memory.json).
"""
import json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ["ASTRA_SIM"]
MICRO = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
NETWORKS = {"ring8": 8, "switch8": 8, "hgx_h100": 8, "fc8": 8, "ring4": 4, "ring16": 16}
SYSTEMS = ["rt_base", "fifo", "baseline", "no_local_mem_bw", "active2", "active3", "splits1",
           "splits16", "splits7", "endpoint1", "direct", "direct2_active2", "onering",
           "hgx_h100", "ring_4chunks", "hd", "onehd", "dbt", "hd_active2", "dbt_active2",
           "hd_splits16", "dbt_splits16"]
TRAINING = ["resnet50", "dlrm", "gnmt", "pipeline"]
TRAINING_NETWORKS = ["ring8", "switch8", "hgx_h100"]
TRAINING_SYSTEMS = ["rt_base", "fifo", "active2", "direct", "hgx_h100", "splits1", "hd", "dbt"]
LINE = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")

def run(workload, system, network, binary=None):
    remote = os.path.join(HERE, "remote_memory.json")
    with open(remote, "w") as f:
        json.dump({"memory-type": "NO_MEMORY_EXPANSION"}, f)
    out = subprocess.run([binary or BIN, f"--workload-configuration={workload}",
                          f"--system-configuration={system}",
                          f"--remote-memory-configuration={remote}",
                          f"--network-configuration={network}"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         cwd=tempfile.gettempdir()).stdout
    os.remove(remote)
    return sorted((int(r), int(t), int(e)) for r, t, e in LINE.findall(out))

cases = []
for net, npus in NETWORKS.items():
    for system in SYSTEMS:
        for w in MICRO:
            cases.append((net, system, f"microbenchmarks/{w}/{npus}npus_1MB/{w}"))
for w in TRAINING:
    for net in TRAINING_NETWORKS:
        for system in TRAINING_SYSTEMS:
            cases.append((net, system, f"{w}/{w}"))
rows = ["network,system,workload,rank,finish_ns,exposed_ns"]
for net, system, workload in cases:
    ranks = run(os.path.join(HERE, "workload", workload), os.path.join(HERE, "system", system + ".json"),
                os.path.join(HERE, "network", net + ".yml"))
    if not ranks:
        print(f"ASTRA-sim gave no result for {net} {system} {workload}; left out", file=sys.stderr)
    rows += [f"{net},{system},{workload},{r},{t},{e}" for r, t, e in ranks]
with open(os.path.join(HERE, "references.csv"), "w") as f:
    f.write("\n".join(rows) + "\n")
print(f"{len(cases)} cases, {len(rows) - 1} rank rows")

UNAWARE = os.environ.get("ASTRA_SIM_UNAWARE")
if UNAWARE:
    cases = [(net, system, f"microbenchmarks/{w}/16npus_1MB/{w}")
             for net in ["ring4x4", "fc4x4"] for system in ["md_lbw", "md_base"]
             for w in MICRO]
    cases += [("fc4x4", "md_direct", f"microbenchmarks/{w}/16npus_1MB/{w}") for w in MICRO]
    rows = ["network,system,workload,rank,finish_ns,exposed_ns"]
    for net, system, workload in cases:
        ranks = run(os.path.join(HERE, "workload", workload),
                    os.path.join(HERE, "system", system + ".json"),
                    os.path.join(HERE, "network", net + ".yml"), UNAWARE)
        rows += [f"{net},{system},{workload},{r},{t},{e}" for r, t, e in ranks]
    with open(os.path.join(HERE, "references_multidim.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    print(f"multi-dimensional: {len(cases)} cases, {len(rows) - 1} rank rows")
