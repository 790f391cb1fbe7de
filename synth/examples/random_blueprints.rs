//! Writes random, valid blueprints, for the template lint step
//! (`tests/lint-templates.sh`), which builds every one with `synth build` and
//! lints the templates with cfn-lint and checkov.
//!
//! ```text
//! cargo run -p synth --example random_blueprints -- --seed 42 --count 25 --out DIR
//! ```
//!
//! Every file is `DIR/random-<index>.yaml`; blueprint `i` depends only on the
//! seed and `i`, so one failing blueprint can be made again on its own. Each
//! blueprint stays inside the documented rules (a blueprint this writes that
//! `synth build` rejects is a bug on one side or the other):
//! `min <= count <= max <= 1000`, private VPC ranges /16 to /22 with host bits
//! zero, SSH CIDRs that are never `0.0.0.0/0`, EFA `on` only for p4d.24xlarge
//! on both master and workers with a private master, a public subnet exactly
//! when the master is public, several worker types of one kind, reservations
//! (then perhaps On-Demand), and a Capacity Block only with a pinned region,
//! one type and `min: 0`.
//!
//! The PRNG is splitmix64, written inline: the output only has to vary and be
//! reproducible, and it spares the workspace a dependency.

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Write random valid blueprints.
#[derive(Debug, Parser)]
struct Args {
    /// Seed; the same seed writes the same blueprints.
    #[arg(long)]
    seed: u64,
    /// How many blueprints to write.
    #[arg(long, default_value_t = 25)]
    count: u32,
    /// Output directory (created if missing).
    #[arg(long)]
    out: PathBuf,
}

const REGIONS: [&str; 5] = ["us-east-1", "us-east-2", "us-west-2", "eu-west-1", "ap-southeast-2"];

// Instance types offered in all five regions (checked against the per-region
// `AWS::EC2::Instance` InstanceType enums that cfn-lint 1.58 ships), all of
// which may be launched in a cluster placement group.
const CPU_TYPES: [&str; 4] = ["c5.xlarge", "c5.2xlarge", "m5.2xlarge", "c6i.4xlarge"];
const GPU_TYPES: [&str; 6] = ["p3.2xlarge", "g4dn.xlarge", "g4dn.12xlarge", "g5.xlarge", "g5.12xlarge", "p4d.24xlarge"];
/// The one type both master and workers must be for `efa: on`.
const EFA_TYPE: &str = "p4d.24xlarge";

const WORDS: [&str; 16] = [
    "resnet",
    "bert",
    "llama",
    "train",
    "vision",
    "speech",
    "mnist",
    "cifar",
    "sweep",
    "ablation",
    "gpt",
    "diffusion",
    "lab",
    "prod",
    "dev",
    "exp",
];
const TAG_KEYS: [&str; 6] = ["team", "project", "cost-center", "owner", "env", "purpose"];

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, good enough to vary test inputs.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (the modulo bias is irrelevant at these sizes).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.range(1, 100) <= percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() as u64 - 1) as usize]
    }

    /// `digits` lowercase hex digits, for AWS resource ids.
    fn hex(&mut self, digits: usize) -> String {
        (0..digits).map(|_| char::from_digit(self.range(0, 15) as u32, 16).unwrap()).collect()
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = fs::create_dir_all(&args.out) {
        eprintln!("random_blueprints: cannot create {}: {e}", args.out.display());
        return ExitCode::from(2);
    }
    for index in 0..args.count {
        let path = args.out.join(format!("random-{index:03}.yaml"));
        if let Err(e) = fs::write(&path, blueprint(args.seed, index)) {
            eprintln!("random_blueprints: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    eprintln!("random_blueprints: wrote {} blueprints to {} (seed {})", args.count, args.out.display(), args.seed);
    ExitCode::SUCCESS
}

/// Blueprint number `index` for `seed`, as YAML text.
fn blueprint(seed: u64, index: u32) -> String {
    // Mix the index in through one splitmix step so neighbouring seeds and
    // indices give unrelated streams.
    let mut rng = SplitMix64(seed ^ SplitMix64(u64::from(index)).next_u64());
    let mut y = String::new();
    // `writeln!` into a String cannot fail.
    macro_rules! line { ($($t:tt)*) => { writeln!(y, $($t)*).unwrap() } }

    line!("# Random blueprint {index} for seed {seed}; made again (with those before it) by");
    line!("# cargo run -p synth --example random_blueprints -- --seed {seed} --count {} --out DIR", index + 1);
    line!("name: {}", name(&mut rng, index));

    let region = if rng.chance(20) { None } else { Some(rng.pick(&REGIONS)) };
    if let Some(r) = region {
        line!("region: {r}");
    }

    match rng.range(0, 2) {
        0 => {} // the default image
        1 => {
            line!("image:");
            let (parameter, user) = rng.pick(&[
                (
                    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
                    "ubuntu",
                ),
                ("/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id", "ubuntu"),
                ("/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64", "ec2-user"),
                ("/ml-team/images/trainer-ami", "ubuntu"),
            ]);
            line!("  ssm_parameter: {parameter}");
            line!("  user: {user}");
        }
        _ => {
            line!("image:");
            line!("  ami:");
            // A pinned region needs only its own id; a portable template needs all five.
            let pinned_only = region.is_some() && rng.chance(50);
            for r in REGIONS {
                if !pinned_only || Some(r) == region {
                    line!("    {r}: ami-{}", rng.hex(17));
                }
            }
            line!("  user: {}", rng.pick(&["ubuntu", "ec2-user"]));
        }
    }

    // EFA `on` needs p4d.24xlarge everywhere and a private master; decide it
    // first so the types and `public` follow from it.
    let efa_on = rng.chance(10);
    let pick_type = |rng: &mut SplitMix64| -> &'static str {
        if efa_on {
            EFA_TYPE
        } else if rng.chance(40) {
            rng.pick(&CPU_TYPES)
        } else {
            rng.pick(&GPU_TYPES)
        }
    };
    let master_type = pick_type(&mut rng);
    let worker_type = pick_type(&mut rng);
    let public = !efa_on && rng.chance(50);
    line!("master:");
    line!("  instance_type: {master_type}");
    line!("  public: {public}");

    // Where the workers come from: a Capacity Block (one type, a pinned
    // region, min 0 since it starts after the build), reservations, Spot,
    // or the default; several types unless it is a block or EFA is on.
    let capacity = match (region, rng.range(0, 9)) {
        (Some(r), 0) => Capacity::Block(r),
        (_, 1 | 2) => Capacity::Reserved,
        (_, 3) => Capacity::Spot,
        _ => Capacity::Default,
    };
    let max = if rng.chance(10) { rng.range(1, 1000) } else { rng.range(1, 32) };
    let count = rng.range(1, max);
    let min = if matches!(capacity, Capacity::Block(_)) { 0 } else { rng.range(0, count) };
    line!("workers:");
    if !efa_on && !matches!(capacity, Capacity::Block(_)) && rng.chance(30) {
        // The same kind as the first, so that the image fits every one.
        let kind: &[&str] = if CPU_TYPES.contains(&worker_type) { &CPU_TYPES } else { &GPU_TYPES };
        let mut types = vec![worker_type];
        for _ in 0..rng.range(1, 2) {
            let t = rng.pick(kind);
            if !types.contains(&t) {
                types.push(t);
            }
        }
        line!("  instance_types: [{}]", types.join(", "));
    } else {
        line!("  instance_type: {worker_type}");
    }
    line!("  count: {count}");
    line!("  min: {min}");
    line!("  max: {max}");
    match capacity {
        Capacity::Default => line!("  spot: {}", rng.chance(30)),
        Capacity::Spot => line!("  capacity: [spot]"),
        Capacity::Reserved => {
            line!("  capacity:");
            for _ in 0..rng.range(1, 2) {
                line!("    - reservation: cr-{}", rng.hex(17));
            }
            if rng.chance(40) {
                line!(
                    "    - reservation_group: arn:aws:resource-groups:us-east-1:123456789012:group/gpus-{}",
                    rng.hex(4)
                );
            }
            if rng.chance(60) {
                line!("    - on_demand");
            }
        }
        Capacity::Block(r) => {
            // Years ahead, so the build never finds it started or ended.
            let day = rng.range(1, 20);
            line!("  capacity:");
            line!("    - capacity_block:");
            line!("        id: cr-{}", rng.hex(17));
            line!("        zone: {r}{}", rng.pick(&["a", "b", "c"]));
            line!("        start: 2040-03-{day:02}T11:30:00Z");
            line!("        end: 2040-03-{:02}T11:30:00Z", day + rng.range(1, 7));
        }
    }

    let mount = rng.pick(&["/efs", "/shared", "/mnt/efs", "/data"]);
    line!("storage:");
    line!("  root_volume_gb: {}", rng.range(100, 1000));
    line!("  efs:");
    line!("    mount: {mount}");
    if rng.chance(40) {
        // File system ids have 8 (old) or 17 hex digits.
        let digits = if rng.chance(20) { 8 } else { 17 };
        line!("    file_system_id: fs-{}", rng.hex(digits));
    }
    if rng.chance(30) {
        // FSx for Lustre: either deployment, a size it makes, a prefix or not.
        line!("  fsx_lustre:");
        let persistent = rng.chance(50);
        line!("    deployment: {}", if persistent { "persistent_2" } else { "scratch_2" });
        line!("    capacity_gib: {}", rng.pick(&[1200, 2400, 4800, 9600]));
        if persistent {
            line!("    throughput_per_tib: {}", rng.pick(&[125, 250, 500, 1000]));
        }
        if rng.chance(70) {
            line!(
                "    import: s3://{}/{}",
                rng.pick(&["my-data", "datasets.example"]),
                rng.pick(&["", "imagenet/", "a/b/"])
            );
        }
        line!("    mount: {}", rng.pick(&["/fsx", "/lustre", "/mnt/fsx"]));
    }

    line!("network:");
    if rng.chance(60) {
        line!("  vpc_cidr: {}", private_cidr(&mut rng, max));
    } else {
        line!("  existing:");
        line!("    vpc_id: vpc-{}", rng.hex(17));
        if public {
            line!("    public_subnet_id: subnet-{}", rng.hex(17));
        }
        line!("    private_subnet_ids:");
        for _ in 0..rng.range(1, 3) {
            line!("      - subnet-{}", rng.hex(17));
        }
    }
    // Every listed type may go in a cluster placement group.
    line!("  placement_group: {}", rng.chance(40));
    let efa = if efa_on { "on" } else { rng.pick(&["off", "auto"]) };
    line!("  efa: {efa}");

    // Always leave a way in: SSH from somewhere, or Session Manager.
    line!("access:");
    let key = rng.chance(60).then(|| rng.pick(&["my-key", "ml-team", "alice_laptop", "ci.key"]));
    let cidr = rng.chance(60).then(|| ssh_cidr(&mut rng));
    if key.is_some() || cidr.is_some() {
        line!("  ssh:");
        if let Some(key) = key {
            line!("    key_name: {key}");
        }
        if let Some(cidr) = &cidr {
            line!("    cidr: {cidr}");
        }
    }
    line!("  session_manager: {}", cidr.is_none() || rng.chance(50));

    if rng.chance(40) {
        line!("elastic:");
        line!("  prepare_data_script: {mount}/prepare-data.sh");
    }
    if rng.chance(70) {
        line!("timeouts:");
        line!("  formation_minutes: {}", rng.range(5, 120));
    }
    let tags = rng.range(0, 3);
    if tags > 0 {
        line!("tags:");
        let first = rng.range(0, TAG_KEYS.len() as u64 - 1) as usize;
        // Consecutive keys from a random start: distinct without a retry loop.
        for k in 0..tags as usize {
            let value = format!("{}-{}", rng.pick(&WORDS), rng.range(1, 99));
            line!("  {}: {value}", TAG_KEYS[(first + k) % TAG_KEYS.len()]);
        }
    }
    y
}

/// Where a random blueprint's workers come from.
#[derive(Clone, Copy)]
enum Capacity {
    /// `spot: true|false`, or nothing written.
    Default,
    /// `capacity: [spot]`.
    Spot,
    /// Reservations, perhaps a resource group, perhaps `on_demand` after them.
    Reserved,
    /// A Capacity Block in the pinned region.
    Block(&'static str),
}

/// A name matching `[a-z][a-z0-9-]*`, at most 32 characters; sometimes exactly 32.
fn name(rng: &mut SplitMix64, index: u32) -> String {
    let mut name = format!("{}-{}-{index}", rng.pick(&WORDS), rng.pick(&WORDS));
    if rng.chance(10) {
        // The longest allowed name.
        while name.len() < 32 {
            name.push(char::from(b'a' + rng.range(0, 25) as u8));
        }
    }
    name.truncate(32);
    name
}

/// A private (RFC 1918) range, /16 to /22, host bits zero, large enough for
/// `max` workers: synth splits it into four subnets and, when the nodes
/// share one zone, puts every worker in one of them beside a private master
/// and a mount target (AWS keeps 5 addresses of each).
fn private_cidr(rng: &mut SplitMix64, max: u64) -> String {
    let fits = |prefix: u32| (1u64 << (30 - prefix)) >= max + 7;
    let largest = (16..=22).rev().find(|p| fits(*p)).unwrap_or(16);
    let prefix = rng.range(16, u64::from(largest)) as u32;
    let base: u32 = match rng.range(0, 2) {
        0 => (10 << 24) | ((rng.range(0, 255) as u32) << 16),
        1 => (172 << 24) | ((rng.range(16, 31) as u32) << 16),
        _ => (192 << 24) | (168 << 16),
    };
    let addr = (base | ((rng.range(0, 255) as u32) << 8)) & mask(prefix);
    format!("{}/{prefix}", dotted(addr))
}

/// An SSH source range: never `0.0.0.0/0`, host bits zero.
fn ssh_cidr(rng: &mut SplitMix64) -> String {
    let prefix = rng.pick(&[8u32, 16, 22, 24, 28, 32]);
    // First octet 1..=223 (unicast, never 0), skipping loopback.
    let first = match rng.range(1, 222) as u32 {
        127 => 223,
        o => o,
    };
    let addr = (first << 24) | (rng.next_u64() as u32 & 0x00FF_FFFF);
    format!("{}/{prefix}", dotted(addr & mask(prefix)))
}

fn mask(prefix: u32) -> u32 {
    if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) }
}

fn dotted(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}
