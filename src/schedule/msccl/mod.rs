//! MSCCL XML algorithms: schedules that run on GPUs through the MSCCL executor (NCCL/RCCL), and
//! that ASTRA-sim 2.x takes (via Chakra) as custom collectives.
//!
//! Export maps a schedule that claims a collective onto the executor's model: per GPU one thread
//! block per peer it sends to and one per peer it receives from (channel 0), a send step `s` and a
//! matching receive step (`r`, or `rrc` for a reduction) per transfer, in list order on both ends,
//! so the k-th send on a connection meets the k-th receive. Pieces are buffer offsets: all-gather
//! and broadcast receive into the output buffer, reduce-scatter, reduce and all-reduce accumulate in
//! the input buffer (all-reduce in place); local `cpy` steps put a rank's own data where the
//! collective wants it. A transfer's dependencies become step dependencies; since a step names one,
//! further ones go on `nop` steps just before it. Import reverses this for any file in that layout.

mod layout;
mod read;
mod write;

pub use read::{load_msccl, parse_msccl, read_msccl_claim, Claim};
pub use write::{msccl_xml, write_msccl};
