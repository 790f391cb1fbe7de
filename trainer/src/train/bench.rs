//! `trainer bench`: all-reduce bandwidth between the job's ranks, in the
//! style of nccl-tests' `all_reduce_perf`: for each size, the time of one
//! all-reduce (the slowest rank's mean), the algorithm bandwidth
//! (size / time) and the bus bandwidth (algbw * 2(n-1)/n, what each link
//! carries in a ring, comparable with the link rate whatever the world size).
//!
//! Run under `trainer launch` (one process per host, or one per GPU with
//! `--nproc-per-node`): it reads the torchrun environment (`RANK`,
//! `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, `LOCAL_RANK`), rank 0 hosts
//! the job's rendezvous, every rank learns its identity and address from the
//! agent's state file (`/var/lib/deeplearning/state.json` under `--root`).
//! With `--device cpu` (the default) the ranks sum host buffers over the TCP
//! ring ([`crate::train::ring`]); with `--device cuda` (a build with the
//! `cuda` feature) each rank sums buffers on GPU `LOCAL_RANK` through NCCL,
//! the collective `trainer train --device cuda` uses, over whatever NCCL
//! picks between the hosts (sockets, or EFA with the aws-ofi-nccl plugin
//! and the profile's `FI_*`/`NCCL_*` settings that `trainer launch` passes
//! on): what the network gate's TCP probe cannot see. Rank 0 prints the
//! table on stdout; logs go to stderr.

use std::path::PathBuf;
use std::time::Duration;

use crate::exit::{EXIT_FAILED, EXIT_OK};
use crate::train::args::Device;
use crate::train::collective::CollectiveError;
use crate::train::device::{BenchDevice, DeviceError, nccl_id_maker};
use crate::train::elastic::{self, ElasticConfig, Launch, Next};
use crate::train::rendezvous::{HostConfig, RendezvousError, Roster};
use crate::train::timing::Timed;

/// Arguments of `trainer bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Smallest buffer, in bytes (rounded down to whole f32).
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    pub min_bytes: usize,
    /// Largest buffer, in bytes; sizes double from --min-bytes.
    #[arg(long, default_value_t = 256 << 20, value_name = "BYTES")]
    pub max_bytes: usize,
    /// Timed all-reduces per size (after --warmup untimed ones).
    #[arg(long, default_value_t = 5)]
    pub iters: u32,
    /// Untimed all-reduces per size, first.
    #[arg(long, default_value_t = 1)]
    pub warmup: u32,
    /// This process's rank (0 hosts the rendezvous); set by `trainer launch`.
    #[arg(long, env = "RANK")]
    pub rank: usize,
    /// Processes in the job; set by `trainer launch`.
    #[arg(long, env = "WORLD_SIZE")]
    pub world_size: usize,
    /// Host of rank 0; set by `trainer launch`.
    #[arg(long, env = "MASTER_ADDR")]
    pub master_addr: String,
    /// Rendezvous port on rank 0's host; set by `trainer launch`.
    #[arg(long, env = "MASTER_PORT")]
    pub master_port: u16,
    /// Which of this host's processes this is; set by `trainer launch`.
    #[arg(long, env = "LOCAL_RANK", default_value_t = 0)]
    pub local_rank: u32,
    /// A peer silent this long fails the run, in seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// Filesystem root the agent's files are under.
    #[arg(long, env = "TRAINER_ROOT", default_value = "/")]
    pub root: PathBuf,
    /// Where the buffers live: `cpu` sums host memory over the TCP ring;
    /// `cuda` sums GPU memory (GPU `LOCAL_RANK`) through NCCL (a build with
    /// the `cuda` feature, the NVIDIA driver and NCCL).
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// Forming the group failed.
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    /// An all-reduce failed.
    #[error("all-reduce failed: {0}")]
    Collective(#[from] CollectiveError),
    /// The table could not be written to stdout.
    #[error("{0}")]
    Output(#[source] cli_output::Closed),
    /// The GPU or its libraries could not be used.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// One measured size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Row {
    /// Bytes per rank.
    pub bytes: usize,
    /// Mean seconds per all-reduce, slowest rank.
    pub seconds: f64,
}

impl Row {
    /// Algorithm bandwidth, bytes per second.
    pub(crate) fn algbw(&self) -> f64 {
        self.bytes as f64 / self.seconds
    }

    /// Bus bandwidth for `world` ranks, bytes per second.
    pub(crate) fn busbw(&self, world: usize) -> f64 {
        self.algbw() * 2.0 * (world as f64 - 1.0) / world as f64
    }
}

/// The sizes to measure: doubling from `min` to `max` bytes.
pub(crate) fn sizes(min: usize, max: usize) -> Vec<usize> {
    std::iter::successors(Some(min.max(4)), |s| s.checked_mul(2)).take_while(|&s| s <= max).collect()
}

/// Measures every size on `c`; every rank gets the same rows.
pub(crate) fn measure(
    c: &mut dyn Timed,
    sizes: &[usize],
    warmup: u32,
    iters: u32,
) -> Result<Vec<Row>, CollectiveError> {
    let mut rows = Vec::new();
    for &bytes in sizes {
        let mean = c.time_all_reduce(bytes / 4, warmup, iters)?;
        // The slowest rank's time: each rank fills its own slot, a sum gathers them.
        let mut times = vec![0f32; c.world_size()];
        times[c.rank()] = mean as f32;
        c.sum_host(&mut times)?;
        let seconds = times.iter().copied().fold(0f32, f32::max);
        rows.push(Row { bytes: bytes / 4 * 4, seconds: f64::from(seconds) });
    }
    Ok(rows)
}

/// The table nccl-tests prints, for `world` ranks summing over `how` ("TCP ring", "NCCL").
pub(crate) fn table(rows: &[Row], world: usize, how: &str) -> String {
    let mut out = format!("# all-reduce (sum, f32), {how}, {world} ranks\n");
    out.push_str(&format!("{:>12} {:>12} {:>12} {:>10} {:>10}\n", "size(B)", "count", "time(us)", "algbw", "busbw"));
    out.push_str(&format!("{:>12} {:>12} {:>12} {:>10} {:>10}\n", "", "(elements)", "", "(GB/s)", "(GB/s)"));
    for r in rows {
        out.push_str(&format!(
            "{:>12} {:>12} {:>12.1} {:>10.3} {:>10.3}\n",
            r.bytes,
            r.bytes / 4,
            r.seconds * 1e6,
            r.algbw() / 1e9,
            r.busbw(world) / 1e9
        ));
    }
    out
}

/// Runs `trainer bench`.
pub(crate) fn run(args: &Args) -> Result<u8, BenchError> {
    if args.rank >= args.world_size {
        return Err(BenchError::Usage(format!("RANK {} is not below WORLD_SIZE {}", args.rank, args.world_size)));
    }
    if args.min_bytes > args.max_bytes {
        return Err(BenchError::Usage(format!(
            "--min-bytes {} is above --max-bytes {}",
            args.min_bytes, args.max_bytes
        )));
    }
    // The GPU and its libraries are checked before the rendezvous, so a
    // host without them fails at once instead of after the others waited.
    let device = BenchDevice::open(args.device, args.local_rank as usize)?;
    let launch = Launch {
        rank: args.rank,
        world_size: args.world_size,
        local_rank: args.local_rank,
        master_addr: args.master_addr.clone(),
        master_port: args.master_port,
    };
    let host = HostConfig {
        report_timeout: Duration::from_secs(args.timeout),
        nccl_id: nccl_id_maker(args.device),
        ..HostConfig::new(args.world_size)
    };
    let (_membership, next) = elastic::connect(&launch, &Roster::new(&args.root, None), (0, 0), host, |rendezvous| {
        let mut config = ElasticConfig::new(rendezvous);
        config.ring.io_timeout = Duration::from_secs(args.timeout);
        config
    })?;
    let Next::Reformed { group, ring, .. } = next else {
        return Err(BenchError::Usage("the rendezvous did not give this process a rank".into()));
    };
    let (mut timed, how) = device.join(&group, ring)?;
    let rows = measure(timed.as_mut(), &sizes(args.min_bytes, args.max_bytes), args.warmup, args.iters)?;
    if group.rank == 0 {
        cli_output::print(&table(&rows, group.world_size, how)).map_err(BenchError::Output)?;
    }
    Ok(if rows.is_empty() { EXIT_FAILED } else { EXIT_OK })
}

/// The arguments of a one-rank run on `device` whose rendezvous port
/// nothing listens on (for the tests of what fails before it).
#[cfg(test)]
fn alone_on(device: Device) -> Args {
    Args {
        min_bytes: 1024,
        max_bytes: 1024,
        iters: 1,
        warmup: 0,
        rank: 0,
        world_size: 1,
        master_addr: "127.0.0.1".into(),
        master_port: 1,
        local_rank: 0,
        timeout: 1,
        root: PathBuf::from("/nonexistent"),
        device,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::collective::Single;
    use crate::train::timing::Host;

    /// Without a GPU (this project's machines), or in a build without the
    /// `cuda` feature, `--device cuda` fails with the device's reason before
    /// the rendezvous (whose port here nothing listens on).
    #[test]
    fn a_gpu_that_cannot_be_used_is_refused_before_the_rendezvous() {
        let Err(reason) = BenchDevice::open(Device::Cuda, 0) else {
            return; // A GPU host: scripts/gpu-check.sh runs the bench there.
        };
        let err = run(&alone_on(Device::Cuda)).unwrap_err().to_string();
        assert_eq!(err, reason.to_string());
        assert!(err.starts_with("--device cuda: "), "{err}");
    }

    #[test]
    fn bad_arguments_are_refused_before_the_rendezvous() {
        let mut args = alone_on(Device::Cpu);
        args.rank = 1;
        assert_eq!(run(&args).unwrap_err().to_string(), "RANK 1 is not below WORLD_SIZE 1");
        let mut args = alone_on(Device::Cpu);
        args.min_bytes = 4096;
        assert_eq!(run(&args).unwrap_err().to_string(), "--min-bytes 4096 is above --max-bytes 1024");
    }

    #[test]
    fn sizes_double_and_bandwidths_follow_nccl_tests() {
        assert_eq!(sizes(1 << 20, 8 << 20), vec![1 << 20, 2 << 20, 4 << 20, 8 << 20]);
        assert!(sizes(8, 4).is_empty());
        let r = Row { bytes: 1_000_000_000, seconds: 2.0 };
        assert_eq!(r.algbw(), 5e8);
        assert_eq!(r.busbw(4), 5e8 * 1.5);
        assert_eq!(r.busbw(1), 0.0);
        let rows = measure(&mut Host(Single), &[1024, 4096], 1, 2).unwrap();
        assert_eq!(rows.iter().map(|r| r.bytes).collect::<Vec<_>>(), [1024, 4096]);
        assert!(rows.iter().all(|r| r.seconds >= 0.0));
        let text = table(&rows, 1, "TCP ring");
        assert!(text.starts_with("# all-reduce (sum, f32), TCP ring, 1 ranks\n") && text.contains("busbw"), "{text}");
    }
}
