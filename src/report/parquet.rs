//! `transfers.parquet`: the per-transfer table of large runs as Parquet (zstd-compressed), which
//! pandas, polars and duckdb read directly, with the columns of `transfers.csv`. A million-row
//! CSV is tens of megabytes of decimal text that every reader parses again; Parquet stores the
//! integer columns delta-friendly and compressed, and readers load them typed.

use std::path::Path;

use rayon::prelude::*;

use crate::schedule::{schedule_column, Column, ParquetFile, Schedule, TransferIndex, ROW_GROUP};
use crate::sim::SimResult;
use crate::Error;

const SCHEMA: &str = "message transfers {
    REQUIRED INT64 id (INTEGER(64, false));
    REQUIRED INT32 src (INTEGER(32, false));
    REQUIRED INT32 dst (INTEGER(32, false));
    REQUIRED INT64 bytes (INTEGER(64, false));
    REQUIRED DOUBLE start_ns;
    REQUIRED DOUBLE end_ns;
}";

/// Writes `transfers.parquet` (`id,src,dst,bytes,start_ns,end_ns`, as `transfers.csv`).
pub fn write_transfers_parquet(
    schedule: &Schedule,
    result: &SimResult,
    path: &Path,
) -> Result<(), Error> {
    let mut file = ParquetFile::create(path, SCHEMA, None)?;
    let ns = |t: crate::units::Time| t.ps() as f64 / 1e3;
    for start in (0..schedule.len()).step_by(ROW_GROUP) {
        let rows = start as TransferIndex..(start + ROW_GROUP).min(schedule.len()) as TransferIndex;
        let columns = (0..6)
            .into_par_iter()
            .map(|column| match column {
                // id, src, dst, bytes: the first columns of `schedule.parquet`.
                0..4 => schedule_column(schedule, None, rows.clone(), column),
                4 => Column::Double(
                    rows.clone()
                        .map(|i| ns(result.issued[i as usize]))
                        .collect(),
                ),
                _ => Column::Double(
                    rows.clone()
                        .map(|i| ns(result.completed[i as usize]))
                        .collect(),
                ),
            })
            .collect();
        file.write_row_group(columns, true)?;
    }
    file.close()
}
