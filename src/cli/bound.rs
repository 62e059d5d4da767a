//! `bound`: the lower bounds of a collective on a topology.

use clap::Args;

use super::{CollectiveArgs, Format, TopologyArgs};
use crate::bound;
use crate::Error;

#[derive(Args, Debug)]
pub struct BoundArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub collective: CollectiveArgs,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

pub(super) fn bound(args: BoundArgs) -> Result<(), Error> {
    let topology = args.topology.build()?;
    let request = args.collective.request()?;
    let c = request.resolve(&topology)?;
    // The exact cut bound runs max-flows over the whole network: seconds on thousands of NPUs.
    let heartbeat = crate::report::Heartbeat::start("cut bound");
    let b = bound::bounds_counted(&topology, &c, None, Some(&heartbeat.steps()));
    drop(heartbeat);
    if !b.total().fits() {
        return Err(Error::input(format!(
            "the lower bound of {} passes the largest time collsim represents (2^64 ps, about \
             213 days): give a smaller size, faster links or shorter latencies",
            c.describe()
        )));
    }
    let cut = b.cut.map(|t| t.ns_string()).unwrap_or_default();
    match args.format {
        Format::Csv => {
            println!("collective,size_bytes,npu_bound_ns,cut_bound_ns,latency_bound_ns,bound_ns");
            println!(
                "{},{},{},{cut},{},{}",
                c.kind,
                c.size,
                b.npu.ns_string(),
                b.latency.ns_string(),
                b.total().ns_string()
            );
        }
        Format::Text => {
            println!("{} on {}", c.describe(), topology.name());
            println!("  per-NPU bound   {}", b.npu);
            if let Some(cut) = b.cut {
                println!("  cut bound       {cut}");
            }
            println!("  latency bound   {}", b.latency);
            println!("  lower bound     {}", b.total());
        }
    }
    Ok(())
}
