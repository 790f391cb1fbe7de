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
use std::time::{Duration, Instant};

use crate::exit::{EXIT_FAILED, EXIT_OK};
use crate::train::args::Device;
use crate::train::collective::{Collective, CollectiveError, nccl_id_maker};
use crate::train::elastic::{self, ElasticConfig, Launch, Next};
use crate::train::rendezvous::{HostConfig, RendezvousError, Roster};

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
pub enum BenchError {
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
    #[error("{0}")]
    Device(String),
}

/// One measured size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// Bytes per rank.
    pub bytes: usize,
    /// Mean seconds per all-reduce, slowest rank.
    pub seconds: f64,
}

impl Row {
    /// Algorithm bandwidth, bytes per second.
    pub fn algbw(&self) -> f64 {
        self.bytes as f64 / self.seconds
    }

    /// Bus bandwidth for `world` ranks, bytes per second.
    pub fn busbw(&self, world: usize) -> f64 {
        self.algbw() * 2.0 * (world as f64 - 1.0) / world as f64
    }
}

/// The sizes to measure: doubling from `min` to `max` bytes.
pub fn sizes(min: usize, max: usize) -> Vec<usize> {
    std::iter::successors(Some(min.max(4)), |s| s.checked_mul(2)).take_while(|&s| s <= max).collect()
}

/// What [`measure`] needs of a collective: timed all-reduces of a buffer
/// of a given size, wherever its buffers live, and a sum of a few host
/// numbers over the ranks.
pub trait Timed {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn world_size(&self) -> usize;
    /// `warmup` untimed then `iters` timed in-place all-reduces (sum) of a
    /// buffer of `floats` f32; returns this rank's mean seconds per timed one.
    fn time_all_reduce(&mut self, floats: usize, warmup: u32, iters: u32) -> Result<f64, CollectiveError>;
    /// Replaces `values` on every rank with their sum over the ranks.
    fn sum_host(&mut self, values: &mut [f32]) -> Result<(), CollectiveError>;
}

/// Host buffers summed by a host collective (the TCP ring, or the group of one).
pub struct Host<C>(pub C);

impl<C: Collective<[f32]>> Timed for Host<C> {
    fn rank(&self) -> usize {
        self.0.rank()
    }

    fn world_size(&self) -> usize {
        self.0.world_size()
    }

    fn time_all_reduce(&mut self, floats: usize, warmup: u32, iters: u32) -> Result<f64, CollectiveError> {
        let mut buf = vec![1.0f32; floats];
        mean_seconds(warmup, iters, || self.0.all_reduce_sum(&mut buf))
    }

    fn sum_host(&mut self, values: &mut [f32]) -> Result<(), CollectiveError> {
        self.0.all_reduce_sum(values)
    }
}

/// `warmup` untimed calls of `op`, then the mean seconds of `iters` (at
/// least 1) timed ones.
pub(crate) fn mean_seconds(
    warmup: u32,
    iters: u32,
    mut op: impl FnMut() -> Result<(), CollectiveError>,
) -> Result<f64, CollectiveError> {
    for _ in 0..warmup {
        op()?;
    }
    let t = Instant::now();
    for _ in 0..iters.max(1) {
        op()?;
    }
    Ok(t.elapsed().as_secs_f64() / f64::from(iters.max(1)))
}

/// Measures every size on `c`; every rank gets the same rows.
pub fn measure(c: &mut dyn Timed, sizes: &[usize], warmup: u32, iters: u32) -> Result<Vec<Row>, CollectiveError> {
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
pub fn table(rows: &[Row], world: usize, how: &str) -> String {
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
pub fn run(args: &Args) -> Result<u8, BenchError> {
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
    #[cfg(feature = "cuda")]
    let gpu = match args.device {
        Device::Cpu => None,
        Device::Cuda => Some(
            crate::train::cuda::open_device(args.local_rank as usize)
                .and_then(|stream| {
                    crate::train::cuda::probe(&[crate::train::cuda::Library::Nccl])?;
                    Ok(stream)
                })
                .map_err(|e| BenchError::Device(e.to_string()))?,
        ),
    };
    #[cfg(not(feature = "cuda"))]
    if args.device == Device::Cuda {
        return Err(BenchError::Device(
            "--device cuda: this trainer was built without the `cuda` feature; use --device cpu".to_owned(),
        ));
    }
    let launch = Launch {
        rank: args.rank,
        world_size: args.world_size,
        local_rank: args.local_rank,
        master_addr: args.master_addr.clone(),
        master_port: args.master_port,
    };
    let host = HostConfig {
        report_timeout: Duration::from_secs(args.timeout),
        nccl_id: nccl_id_maker(args.device == Device::Cuda),
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
    #[cfg(feature = "cuda")]
    let (mut timed, how): (Box<dyn Timed>, _) = match gpu {
        Some(stream) => {
            // NCCL carries the sums; the ring only formed the group.
            drop(ring);
            let nccl = crate::train::cuda::DeviceBench::join(&stream, &group)
                .map_err(|e| BenchError::Device(e.to_string()))?;
            (Box::new(nccl), "NCCL")
        }
        None => (Box::new(Host(ring)), "TCP ring"),
    };
    #[cfg(not(feature = "cuda"))]
    let (mut timed, how): (Box<dyn Timed>, _) = (Box::new(Host(ring)), "TCP ring");
    let rows = measure(timed.as_mut(), &sizes(args.min_bytes, args.max_bytes), args.warmup, args.iters)?;
    if group.rank == 0 {
        cli_output::print(&table(&rows, group.world_size, how)).map_err(BenchError::Output)?;
    }
    Ok(if rows.is_empty() { EXIT_FAILED } else { EXIT_OK })
}

/// The arguments of a one-rank run on `device` whose rendezvous port
/// nothing listens on (for the tests of what fails before it).
#[cfg(test)]
pub(crate) fn alone_on(device: Device) -> Args {
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

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn the_gpu_path_without_the_cuda_feature_is_refused_before_the_rendezvous() {
        let err = run(&alone_on(Device::Cuda)).unwrap_err().to_string();
        assert_eq!(err, "--device cuda: this trainer was built without the `cuda` feature; use --device cpu");
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
