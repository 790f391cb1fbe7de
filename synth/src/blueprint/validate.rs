//! Every rule a blueprint must follow, checked before any template is made,
//! and the defaults that turn a [`Blueprint`] into a [`ClusterSpec`].
//!
//! All checks run, so the user sees every problem at once; each message names
//! the field and the value, says what is allowed, and its help line says what
//! to do. Region-specific checks (instance type offerings, AMI maps) run for
//! the one region the template is for, or for all five when it is for all.
//! Instance type facts come from [`crate::catalog`], never from lists here.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

mod capacity;
mod data;
mod fsx;
mod gpu;

use ipnet::{IpNet, Ipv4Net};

use super::diagnostic::{Diagnostic, Location, ticked};
use node_contract::idle::{Idle, IdleAction};
use node_contract::{NetworkAction, NetworkCheck, PackageFormat, is_login_name};

use super::model::{Blueprint, EfaMode, ExistingNetwork, ImageFamily};
use super::source_map::SourceMap;
use super::suggestion::{backticked, did_you_mean};
use crate::catalog::{self, Accelerator, InstanceType};
use crate::region::Region;
use crate::spec::{
    AccessSpec, AgentPackage, ClusterSpec, DEFAULT_LOG_RETENTION_DAYS, EfsSpec, ImageSource, ImageSpec,
    LOG_RETENTION_DAYS, MasterSpec, NetworkSpec, WorkerCapacity, WorkerSpec,
};

/// The VPC ranges synth lays subnets out in: a /16 has room for many, a
/// /24 is the smallest its four subnets fit in.
const VPC_PREFIXES: std::ops::RangeInclusive<u8> = 16..=24;

/// The shortest time budget of a network check, seconds: the probes'
/// schedule alone takes up to 14 s (agent/src/netgate.rs).
const NETWORK_CHECK_MIN_SECONDS: u32 = 20;

/// The AWS Deep Learning Base AMI (Ubuntu 22.04, NVIDIA driver), through the
/// public SSM parameter AWS keeps pointing at the newest build:
/// <https://docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html>
pub const DEFAULT_SSM_PARAMETER: &str =
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id";

/// A CPU image to suggest for CPU-only clusters: Canonical's Ubuntu 22.04
/// parameter (<https://documentation.ubuntu.com/aws/en/latest/aws-how-to/instances/find-ubuntu-images/>).
const CPU_SSM_PARAMETER: &str = "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id";

/// Root volumes below this are too small for a Deep Learning AMI: its
/// snapshot alone is around 100 GiB, and the launch fails with a smaller volume.
const DLAMI_MIN_ROOT_GB: u32 = 100;

/// Types to name when saying which types support EFA; only the ones the
/// catalog confirms are shown, so the message never claims a wrong type.
const EFA_EXAMPLES: [&str; 6] =
    ["p4d.24xlarge", "p5.48xlarge", "p4de.24xlarge", "g5.48xlarge", "c5n.18xlarge", "hpc7g.16xlarge"];

/// More than this and the worker group is not a cluster this project can
/// form in one formation window (and past the default Auto Scaling quotas).
const MAX_WORKERS: u32 = 1000;

/// We leave room under AWS's 50 tags per resource for the tags CloudFormation
/// and synth add (`aws:cloudformation:*` do not count, synth's own do).
const MAX_TAGS: usize = 40;

/// Checks `blueprint` and fills its defaults. Returns the spec when there is
/// no error, and every diagnostic (errors and warnings) either way.
pub(crate) fn validate(
    blueprint: Blueprint,
    map: &SourceMap,
    region_arg: Option<Region>,
) -> (Option<ClusterSpec>, Vec<Diagnostic>) {
    // A Capacity Block's times are checked against the clock: one that has
    // ended is refused, one that has not started scales the group up at its start.
    let now_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut c = Checker { map, diagnostics: Vec::new(), now_unix };
    let spec = c.run(blueprint, region_arg);
    let has_errors = c.diagnostics.iter().any(|d| d.severity == super::diagnostic::Severity::Error);
    (if has_errors { None } else { spec }, c.diagnostics)
}

struct Checker<'m> {
    map: &'m SourceMap,
    diagnostics: Vec<Diagnostic>,
    /// Unix seconds when the check runs.
    now_unix: u64,
}

/// Where a message points: the field's value, or its key.
#[derive(Clone, Copy)]
enum At {
    Value,
    Key,
}

impl Checker<'_> {
    fn error(&mut self, path: &str, at: At, message: impl Into<String>, help: impl Into<String>) {
        let location = match at {
            At::Value => self.map.value(path),
            At::Key => self.map.key(path),
        };
        self.diagnostics.push(Diagnostic::error(path, location, message).with_help(help));
    }

    fn warning(&mut self, path: &str, at: At, message: impl Into<String>, help: impl Into<String>) {
        let location = match at {
            At::Value => self.map.value(path),
            At::Key => self.map.key(path),
        };
        self.diagnostics.push(Diagnostic::warning(path, location, message).with_help(help));
    }

    /// A warning about `path` shown at `shown_at` (a field that is written),
    /// for warnings about a field the user left to its default.
    fn warning_near(&mut self, path: &str, shown_at: &str, message: impl Into<String>, help: impl Into<String>) {
        let location = near(self.map, path, shown_at);
        self.diagnostics.push(Diagnostic::warning(path, location, message).with_help(help));
    }

    /// `value` of the required `parent.field`; when it is left out, says so
    /// (and the checks that need it are skipped, every other one runs).
    fn required<T>(&mut self, parent: &str, field: &str, value: Option<T>) -> Option<T> {
        if value.is_none() {
            self.diagnostics.push(super::deserialize::missing_field(parent, field, self.map));
        }
        value
    }

    /// Every check, whatever is missing; the spec when every required field
    /// is there (the caller drops it when any check found an error).
    fn run(&mut self, bp: Blueprint, region_arg: Option<Region>) -> Option<ClusterSpec> {
        let name = self.required("", "name", bp.name);
        if let Some(name) = &name {
            self.name(name);
        }
        let region = self.region(bp.region.as_deref(), region_arg);
        let targets: Vec<Region> = match region {
            Some(r) => vec![r],
            None => Region::ALL.to_vec(),
        };

        let master = self.required("", "master", bp.master);
        let master_type_name =
            self.field_of("master", "instance_type", master.as_ref().map(|m| m.instance_type.clone()));
        let master_type = self.type_of("master.instance_type", master_type_name.as_deref(), region, &targets);
        let mut bp_workers = self.required("", "workers", bp.workers);
        let worker_type_names = bp_workers.as_mut().and_then(|w| capacity::type_names(self, w));
        // Every listed type the catalogue knows, with its path; the first
        // is the primary type only when it is known.
        let mut worker_types: Vec<(&str, &'static InstanceType)> = Vec::new();
        let mut primary_known = false;
        for (i, (path, name)) in worker_type_names.iter().flatten().enumerate() {
            if let Some(t) = self.instance_type(path, name, region, &targets) {
                primary_known |= i == 0;
                worker_types.push((path.as_str(), t));
            }
        }
        capacity::mixed_types(self, &worker_types);
        let worker_type = worker_types.first().filter(|_| primary_known).map(|(_, t)| *t);
        let all_worker_types: Vec<&InstanceType> = worker_types.iter().map(|(_, t)| *t).collect();
        let master_public = master.as_ref().and_then(|m| m.public).unwrap_or(true);

        let (image, gpu_dlami) = self.image(bp.image, region, &targets);
        let type_count = worker_type_names.as_ref().map_or(1, Vec::len);
        let workers = bp_workers.and_then(|w| {
            let count = self.required("workers", "count", w.count);
            self.workers(w, count, type_count, region)
        });

        let storage = bp.storage.unwrap_or_default();
        let root_volume_gb = self.root_volume(storage.root_volume_gb, &image);
        let efs = self.efs(storage.efs);
        let scratch = data::scratch(self, storage.scratch, &efs);
        let data = data::data_sets(self, bp.data, scratch.as_deref(), &efs);
        let fsx = storage.fsx_lustre.map(|f| fsx::fsx(self, f, &efs.mount));

        let network = bp.network.unwrap_or(super::model::Network {
            vpc_cidr: None,
            existing: None,
            placement_group: None,
            efa: None,
        });
        let placement_group = network.placement_group.unwrap_or(false);
        let network_spec = self.network(network.vpc_cidr, network.existing, master_public, placement_group);
        self.placement(placement_group, master_type, &all_worker_types);
        let efa = self.efa(network.efa.unwrap_or_default(), master_type, &all_worker_types, master_public);
        if let Some(workers) = &workers {
            let one_zone = crate::spec::single_zone(placement_group, efa, workers);
            self.subnet_capacity(&network_spec, workers, master_public, one_zone);
            if let (Some(block), NetworkSpec::Existing { .. }) = (workers.capacity_block(), &network_spec) {
                self.warning(
                    "network.existing.private_subnet_ids",
                    At::Key,
                    format!("the workers launch in the first private subnet only, which must be in the Capacity Block's zone `{}`", block.zone),
                    "list a private subnet of that zone first",
                );
            }
        }

        let access = self.access(bp.access, master_public);
        let prepare_data_script = self.prepare_data_script(bp.elastic.and_then(|e| e.prepare_data_script));
        let formation_minutes = self.formation_minutes(bp.timeouts.and_then(|t| t.formation_minutes));
        let (network_check, gpu_check) = bp.formation.map_or((None, None), |f| (f.network_check, f.gpu_check));
        let network_check = network_check.map(|c| self.network_check(c, master_type, &all_worker_types));
        let gpu_check = gpu::gpu_check(self, gpu_check, master_type, &all_worker_types, efa);
        let log_retention_days = self.log_retention(bp.logs.and_then(|l| l.retention_days));
        let idle = bp.idle.and_then(|i| self.idle(i));
        let tags = self.tags(bp.tags.unwrap_or_default());
        self.gpu_image_on_cpus(gpu_dlami, master_type, worker_type);
        data::scratch_types(self, &data, master_type.map(|t| ("master.instance_type", t)), &worker_types);

        Some(ClusterSpec {
            name: name?,
            region,
            image,
            master: MasterSpec { instance_type: master_type_name?, public: master_public },
            workers: {
                let mut names = worker_type_names?.into_iter().map(|(_, name)| name);
                WorkerSpec { instance_type: names.next()?, fallback_types: names.collect(), ..workers? }
            },
            root_volume_gb,
            efs,
            scratch,
            data,
            fsx,
            network: network_spec,
            placement_group,
            efa,
            access,
            prepare_data_script,
            formation_minutes,
            network_check,
            gpu_check,
            log_retention_days,
            idle,
            tags,
            blueprint: None,
        })
    }

    /// `parent.field`, from `value`: `None` when the section `parent` is
    /// missing (reported already), else the field, reported when missing.
    fn field_of<T>(&mut self, parent: &str, field: &str, value: Option<Option<T>>) -> Option<T> {
        value.and_then(|v| self.required(parent, field, v))
    }

    /// The catalog's entry for the instance type written at `path`, if any.
    fn type_of(
        &mut self,
        path: &str,
        name: Option<&str>,
        region: Option<Region>,
        targets: &[Region],
    ) -> Option<&'static InstanceType> {
        name.and_then(|t| self.instance_type(path, t, region, targets))
    }

    /// The gate's settings; without the blueprint's `expected_gbps`, the
    /// catalogue's baseline bandwidth of the slower of the master's and the
    /// workers' types (a ring runs at its slowest link), or none when
    /// either is not known (the master then compares with the median).
    fn network_check(
        &mut self,
        c: super::model::NetworkCheck,
        master: Option<&InstanceType>,
        workers: &[&InstanceType],
    ) -> NetworkCheck {
        let path = "formation.network_check";
        let min_fraction = c.min_fraction.unwrap_or(0.5);
        if !(min_fraction > 0.0 && min_fraction <= 1.0) {
            self.error(
                &format!("{path}.min_fraction"),
                At::Value,
                format!("{min_fraction} is not a fraction above 0 and at most 1"),
                "write the share of the expected bandwidth a node must reach, for example 0.5",
            );
        }
        let action = self.named(
            &format!("{path}.action"),
            c.action.as_deref(),
            NetworkAction::Warn,
            NetworkAction::from_name,
            &NetworkAction::NAMES,
            "an action",
        );
        let timeout_seconds = c.timeout_seconds.unwrap_or(60);
        // The probe's schedule alone takes up to 14 s (agent/src/netgate.rs).
        let (min, max) = (NETWORK_CHECK_MIN_SECONDS, node_contract::NETWORK_CHECK_MAX_SECONDS);
        if !(min..=max).contains(&timeout_seconds) {
            self.error(
                &format!("{path}.timeout_seconds"),
                At::Value,
                format!("{timeout_seconds} seconds is outside the allowed {min} to {max}"),
                "the nodes' probes take up to 14 seconds; the formation signal waits at most this long (default 60)",
            );
        }
        if let Some(g) = c.expected_gbps
            && !(g.is_finite() && g > 0.0)
        {
            self.error(
                &format!("{path}.expected_gbps"),
                At::Value,
                format!("{g} is not a positive bandwidth"),
                "write the instance type's network bandwidth in Gbit/s, for example 25, or leave it out",
            );
        }
        // The slowest of every type a node may be; unknown when any is.
        let catalogue = std::iter::once(master)
            .chain(workers.iter().copied().map(Some))
            .map(|t| t.and_then(InstanceType::network_gbps))
            .try_fold(f64::INFINITY, |slowest, gbps| gbps.map(|g| slowest.min(g)))
            .filter(|g| g.is_finite() && !workers.is_empty());
        NetworkCheck { min_fraction, action, timeout_seconds, expected_gbps: c.expected_gbps.or(catalogue) }
    }

    /// The value a blueprint names at `path` (`written`; `default` when it
    /// names none), or an error listing `names` and `default` when it names
    /// something else ("`reboot` is not an action").
    pub(super) fn named<T>(
        &mut self,
        path: &str,
        written: Option<&str>,
        default: T,
        parse: impl Fn(&str) -> Option<T>,
        names: &[&str],
        noun: &str,
    ) -> T {
        let Some(name) = written else { return default };
        parse(name).unwrap_or_else(|| {
            self.error(
                path,
                At::Value,
                format!("{} is not {noun}", ticked(&name.escape_debug().to_string())),
                format!("write one of {}", names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")),
            );
            default
        })
    }

    fn name(&mut self, name: &str) {
        let pattern_ok = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if pattern_ok && name.len() <= 32 {
            return;
        }
        let why = if name.is_empty() {
            "is empty".to_owned()
        } else if !pattern_ok {
            "may only hold lower-case letters, digits and `-`, and must start with a letter".to_owned()
        } else {
            format!("is {} characters long; at most 32 are allowed", name.len())
        };
        let help = match suggest_name(name) {
            Some(s) if s != name => format!("the name prefixes AWS resource names, which limit length and characters; for example `name: {s}`"),
            _ => "the name prefixes AWS resource names, which limit length and characters; for example `name: resnet-training`".to_owned(),
        };
        self.error("name", At::Value, format!("{} {why}", ticked(name)), help);
    }

    fn region(&mut self, written: Option<&str>, arg: Option<Region>) -> Option<Region> {
        let Some(text) = written else { return arg };
        match text.parse::<Region>() {
            Ok(r) => match arg {
                Some(a) if a != r => {
                    self.error(
                        "region",
                        At::Value,
                        format!("the blueprint is for `{r}`, but the build was asked for `{a}`"),
                        format!("drop the region given to the build to use `{r}`, or remove `region:` from the blueprint so it can be built for any region"),
                    );
                    Some(a)
                }
                _ => Some(r),
            },
            Err(_) => {
                let codes = Region::ALL.map(Region::code);
                let hint = match did_you_mean(text, codes) {
                    Some(close) => {
                        format!("did you mean `{close}`? Or remove `region:` to build for all five")
                    }
                    None => "remove `region:` to build one template for all five regions".to_owned(),
                };
                self.error(
                    "region",
                    At::Value,
                    format!("{} is not a supported region; supported: {}", ticked(text), backticked(codes)),
                    hint,
                );
                arg
            }
        }
    }

    /// Looks the type up and checks it is offered where the template is for.
    fn instance_type(
        &mut self,
        path: &str,
        name: &str,
        region: Option<Region>,
        targets: &[Region],
    ) -> Option<&'static InstanceType> {
        let Some(t) = catalog::lookup(name) else {
            let help = match catalog::suggest(name) {
                Some(close) => format!("did you mean `{close}`?"),
                None => "use an EC2 instance type name such as `p4d.24xlarge`; see https://aws.amazon.com/ec2/instance-types/".to_owned(),
            };
            self.error(path, At::Value, format!("{} is not a known EC2 instance type", ticked(name)), help);
            return None;
        };
        if let Some(message) = offering_problem(t, targets) {
            let help = match region {
                Some(r) => format!("choose a type offered in {r}, or another region"),
                None => {
                    let offered: Vec<_> = targets.iter().filter(|r| t.offered_in(**r)).map(|r| r.code()).collect();
                    match offered.first() {
                        Some(first) => format!(
                            "pin a region where it is offered (for example `region: {first}`), or choose another type"
                        ),
                        None => "choose another type".to_owned(),
                    }
                }
            };
            self.error(path, At::Value, message, help);
        }
        Some(t)
    }

    /// The image; also whether it is the NVIDIA GPU Deep Learning AMI.
    fn image(
        &mut self,
        image: Option<super::model::Image>,
        region: Option<Region>,
        targets: &[Region],
    ) -> (ImageSpec, bool) {
        let image = image.unwrap_or_default();
        if image.ssm_parameter.is_some() && image.ami.is_some() {
            self.error(
                "image",
                At::Key,
                "both `ssm_parameter` and `ami` are set; the image must come from one of them",
                "keep `ssm_parameter` to follow the newest image, or `ami` to pin exact AMI ids",
            );
        }
        let (source, inferred) = match (image.ssm_parameter, image.ami) {
            (Some(p), _) => {
                self.ssm_parameter(&p);
                let inferred = family_of(&p);
                (ImageSource::SsmParameter(p), inferred)
            }
            (None, Some(amis)) => (ImageSource::AmiMap(self.ami_map(amis, region, targets)), Some(ImageFamily::Ubuntu)),
            (None, None) => (ImageSource::SsmParameter(DEFAULT_SSM_PARAMETER.to_owned()), Some(ImageFamily::Ubuntu)),
        };
        let family = match (image.family, inferred) {
            (Some(f), _) | (None, Some(f)) => f,
            (None, None) => {
                if image.user.is_none() || image.root_device.is_none() {
                    self.warning(
                        "image.ssm_parameter",
                        At::Value,
                        "cannot tell the image's operating system from this parameter's path; assuming Ubuntu (user `ubuntu`, root device `/dev/sda1`)",
                        "set `image.family: amazon-linux` (or `ubuntu`) to say which it is",
                    );
                }
                ImageFamily::Ubuntu
            }
        };
        let (default_user, default_device) = match family {
            ImageFamily::Ubuntu => ("ubuntu", "/dev/sda1"),
            ImageFamily::AmazonLinux => ("ec2-user", "/dev/xvda"),
        };
        let user = image.user.unwrap_or_else(|| default_user.to_owned());
        if !is_login_name(&user) {
            self.error(
                "image.user",
                At::Value,
                format!("{} is not a valid login user name", ticked(&user)),
                "a Linux user name: lower-case letters, digits, `_` and `-`, starting with a letter or `_`, at most 32 characters (usually `ubuntu` or `ec2-user`)",
            );
        }
        let root_device = image.root_device.unwrap_or_else(|| default_device.to_owned());
        let device_ok = root_device
            .strip_prefix("/dev/")
            .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
        if !device_ok {
            self.error(
                "image.root_device",
                At::Value,
                format!("{} is not a device name", ticked(&root_device)),
                "write the AMI's root device as shown by `aws ec2 describe-images`, for example `/dev/sda1` or `/dev/xvda`",
            );
        }
        let gpu_dlami = matches!(&source, ImageSource::SsmParameter(p)
            if p.contains("/deeplearning/") && (p.contains("gpu") || p.contains("nvidia")));
        let agent_package = self.agent_package(image.agent_package_url, image.agent_package_sha256);
        let package_format = match family {
            ImageFamily::Ubuntu => PackageFormat::Deb,
            ImageFamily::AmazonLinux => PackageFormat::Tarball,
        };
        (ImageSpec { source, user, root_device, package_format, agent_package }, gpu_dlami)
    }

    /// `agent_package_url` and `agent_package_sha256`: both or neither.
    fn agent_package(&mut self, url: Option<String>, sha256: Option<String>) -> Option<AgentPackage> {
        const URL: &str = "image.agent_package_url";
        const SHA: &str = "image.agent_package_sha256";
        // Whether each is absent or well-formed; a malformed one is reported here.
        let url_ok = match url.as_deref().and_then(package_url_problem) {
            Some(problem) => {
                self.error(URL, At::Value, problem, "write `s3://BUCKET/KEY` (the nodes may read exactly that object) or an `https://` URL of the package that `packaging/build` made");
                false
            }
            None => true,
        };
        let sha_ok = match sha256.as_deref() {
            Some(h) if !(h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit())) => {
                self.error(
                    SHA,
                    At::Value,
                    format!("{} is not a SHA-256 checksum ({} characters; it needs 64 hex digits)", ticked(h), h.chars().count()),
                    "copy the package's line from the SHA256SUMS that `packaging/build` writes, or run `sha256sum PACKAGE`",
                );
                false
            }
            _ => true,
        };
        match (url, sha256) {
            (Some(_), None) => {
                self.error(URL, At::Key, "`agent_package_url` is set without `agent_package_sha256`", "add `agent_package_sha256:` with the package's SHA-256 (`sha256sum PACKAGE`): nodes install only a package whose checksum matches");
                None
            }
            (None, Some(_)) => {
                self.error(SHA, At::Key, "`agent_package_sha256` is set without `agent_package_url`", "add `agent_package_url:` (s3:// or https://) with where nodes download the package, or remove the checksum");
                None
            }
            (Some(url), Some(sha256)) if url_ok && sha_ok => {
                Some(AgentPackage { url, sha256: sha256.to_ascii_lowercase() })
            }
            _ => None,
        }
    }

    fn ssm_parameter(&mut self, p: &str) {
        if !p.starts_with('/') || p.len() < 2 || p.chars().any(char::is_whitespace) {
            let help = if !p.starts_with('/') && !p.is_empty() && !p.chars().any(char::is_whitespace) {
                format!("a parameter path starts with `/`: write `/{p}`")
            } else {
                format!("a parameter path starts with `/` and has no spaces, for example `{DEFAULT_SSM_PARAMETER}`")
            };
            self.error("image.ssm_parameter", At::Value, format!("{} is not an SSM parameter path", ticked(p)), help);
        }
    }

    /// Checks every entry; returns the entries for the template's regions.
    fn ami_map(
        &mut self,
        amis: BTreeMap<String, String>,
        region: Option<Region>,
        targets: &[Region],
    ) -> BTreeMap<Region, String> {
        let mut out = BTreeMap::new();
        for (key, id) in &amis {
            let path = format!("image.ami.{key}");
            match key.parse::<Region>() {
                Ok(r) => {
                    if targets.contains(&r) {
                        out.insert(r, id.clone());
                    }
                }
                Err(_) => {
                    let codes = Region::ALL.map(Region::code);
                    let help = match did_you_mean(key, codes) {
                        Some(close) => format!("did you mean `{close}`?"),
                        None => format!("the keys of `image.ami` are region codes: {}", backticked(codes)),
                    };
                    self.error(&path, At::Key, format!("{} is not a supported region", ticked(key)), help);
                }
            }
            if !is_aws_id(id, "ami-") {
                self.error(
                    &path,
                    At::Value,
                    format!("{} is not an AMI id", ticked(id)),
                    "an AMI id is `ami-` followed by 8 or 17 lower-case hex digits, for example `ami-0123456789abcdef0`",
                );
            }
        }
        let missing: Vec<&str> = targets.iter().filter(|r| !out.contains_key(r)).map(|r| r.code()).collect();
        if !missing.is_empty() {
            let help = match region {
                Some(r) => format!("add `{r}: ami-...` under `image.ami`, or use `image.ssm_parameter`"),
                None => "AMI ids differ per region: add an id for each of them, pin one region with `region:`, or use `image.ssm_parameter`, which resolves in every region".to_owned(),
            };
            let message = if region.is_some() {
                format!("has no AMI for {}, the region the template is for", backticked(missing))
            } else {
                format!(
                    "has no AMI for {}; without `region:`, the template needs one for each of the five regions",
                    backticked(missing)
                )
            };
            self.error("image.ami", At::Key, message, help);
        }
        out
    }

    /// The workers' sizes and capacity, or `None` when `count` is missing
    /// (reported by the caller; the checks that do not need it still run).
    fn workers(
        &mut self,
        w: super::model::Workers,
        count: Option<u32>,
        type_count: usize,
        region: Option<Region>,
    ) -> Option<WorkerSpec> {
        let min = w.min.unwrap_or(0);
        if let Some(written_max) = w.max
            && written_max > MAX_WORKERS
        {
            self.error(
                "workers.max",
                At::Value,
                format!("{written_max} workers is more than the {MAX_WORKERS} allowed"),
                format!("set `max` to {MAX_WORKERS} or fewer"),
            );
        }
        let capacity = capacity::capacity(self, w.spot, w.capacity, type_count, region, self.now_unix);
        let spot = capacity == WorkerCapacity::Spot;
        if spot && min > 0 {
            self.warning(
                "workers.min",
                At::Value,
                format!("Spot capacity may not be there for {min} workers, and Spot workers can be reclaimed at any time; formation fails when fewer than min join"),
                "set `min: 0`, or use on-demand workers (`spot: false`) when the cluster must reach min",
            );
        }
        if let WorkerCapacity::CapacityBlock(block) = &capacity
            && block.start_unix.is_some()
            && min > 0
        {
            self.error(
                "workers.min",
                At::Value,
                format!("min is {min}, but the Capacity Block starts after the deploy: the cluster forms with the master alone and the workers join at the block's start"),
                "set `min: 0`",
            );
        }
        let count = count?;
        let max = w.max.unwrap_or(count);
        if min > count {
            self.error(
                "workers.min",
                At::Value,
                format!("min is {min} but count is {count}; min may not be more than count"),
                format!("lower `min` to at most {count}, or raise `count`"),
            );
        }
        match w.max {
            Some(written_max) if count > written_max => self.error(
                "workers.count",
                At::Value,
                format!("count is {count} but max is {written_max}; count may not be more than max"),
                format!("raise `max` to at least {count}, or lower `count`"),
            ),
            None if count > MAX_WORKERS => self.error(
                "workers.count",
                At::Value,
                format!("{count} workers is more than the {MAX_WORKERS} allowed"),
                format!("set `count` to {MAX_WORKERS} or fewer"),
            ),
            _ => {}
        }
        Some(WorkerSpec { instance_type: String::new(), fallback_types: Vec::new(), count, min, max, capacity })
    }

    fn root_volume(&mut self, written: Option<u32>, image: &ImageSpec) -> u32 {
        let gb = written.unwrap_or(200);
        if !(8..=16384).contains(&gb) {
            self.error(
                "storage.root_volume_gb",
                At::Value,
                format!("{gb} GiB is outside the allowed 8 to 16384"),
                "gp3 volumes are 1 to 16384 GiB and no Linux AMI fits in less than 8; the default is 200",
            );
        } else if gb < DLAMI_MIN_ROOT_GB
            && matches!(&image.source, ImageSource::SsmParameter(p) if p.contains("/deeplearning/"))
        {
            self.warning(
                "storage.root_volume_gb",
                At::Value,
                format!("{gb} GiB is likely smaller than the Deep Learning AMI's snapshot (about {DLAMI_MIN_ROOT_GB} GiB), and EC2 refuses to launch an instance whose root volume is smaller than its snapshot"),
                format!("set `root_volume_gb` to {DLAMI_MIN_ROOT_GB} or more, or use a smaller image"),
            );
        }
        gb
    }

    fn efs(&mut self, efs: Option<super::model::Efs>) -> EfsSpec {
        let (mount, id) = efs.map_or((None, None), |e| (e.mount, e.file_system_id));
        let mount = mount.unwrap_or_else(|| "/efs".to_owned());
        if let Some(problem) = mount_problem(&mount) {
            self.error(
                "storage.efs.mount",
                At::Value,
                format!("{} {problem}", ticked(&mount)),
                "use an absolute path of its own, such as `/efs` or `/mnt/efs`",
            );
        }
        if let Some(id) = &id
            && !is_aws_id(id, "fs-")
        {
            self.error(
                    "storage.efs.file_system_id",
                    At::Value,
                    format!("{} is not an EFS file system id", ticked(id)),
                    "an id is `fs-` followed by 8 or 17 lower-case hex digits, for example `fs-0123456789abcdef0`; omit the field to create a new file system",
                );
        }
        EfsSpec { mount, file_system_id: id }
    }

    fn network(
        &mut self,
        vpc_cidr: Option<String>,
        existing: Option<ExistingNetwork>,
        master_public: bool,
        placement_group: bool,
    ) -> NetworkSpec {
        if vpc_cidr.is_some() && existing.is_some() {
            self.error(
                "network.vpc_cidr",
                At::Key,
                "both `vpc_cidr` and `existing` are set; the cluster goes in a new VPC or an existing one, not both",
                "remove `vpc_cidr` to use the existing VPC, or `existing` to create a new VPC",
            );
        }
        if let Some(existing) = existing {
            return self.existing_network(existing, master_public, placement_group);
        }
        let text = vpc_cidr.unwrap_or_else(|| "10.0.0.0/16".to_owned());
        let vpc_cidr = match parse_cidr(&text) {
            Err(problem) => {
                self.error(
                    "network.vpc_cidr",
                    At::Value,
                    format!("{} {problem}", ticked(&text)),
                    "write a private IPv4 range such as `10.0.0.0/16`",
                );
                default_vpc_cidr()
            }
            Ok(net) if net.trunc() != net => {
                self.error(
                    "network.vpc_cidr",
                    At::Value,
                    format!("{} has host bits set; the network is `{}`", ticked(&text), net.trunc()),
                    format!("write `{}`", net.trunc()),
                );
                net.trunc()
            }
            Ok(net) if !VPC_PREFIXES.contains(&net.prefix_len()) => {
                self.error(
                    "network.vpc_cidr",
                    At::Value,
                    format!("{} is a /{} range; a VPC is /16 to /24 here", ticked(&text), net.prefix_len()),
                    "use a /16 (room for many subnets) such as `10.0.0.0/16`; /24 is the smallest the subnets fit in",
                );
                net
            }
            Ok(net) if !is_private(&net) => {
                self.error(
                    "network.vpc_cidr",
                    At::Value,
                    format!("{} is not a private (RFC 1918) range", ticked(&text)),
                    "use a range inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16, such as `10.0.0.0/16`",
                );
                net
            }
            Ok(net) => net,
        };
        NetworkSpec::New { vpc_cidr }
    }

    fn existing_network(&mut self, e: ExistingNetwork, master_public: bool, placement_group: bool) -> NetworkSpec {
        let private_subnet_ids = e.private_subnet_ids.unwrap_or_default();
        if !is_aws_id(&e.vpc_id, "vpc-") {
            self.error(
                "network.existing.vpc_id",
                At::Value,
                format!("{} is not a VPC id", ticked(&e.vpc_id)),
                "a VPC id is `vpc-` followed by 8 or 17 lower-case hex digits, for example `vpc-0123456789abcdef0`",
            );
        }
        let subnet_help = "a subnet id is `subnet-` followed by 8 or 17 lower-case hex digits, for example `subnet-0123456789abcdef0`";
        if let Some(id) = &e.public_subnet_id {
            if !is_aws_id(id, "subnet-") {
                self.error(
                    "network.existing.public_subnet_id",
                    At::Value,
                    format!("{} is not a subnet id", ticked(id)),
                    subnet_help,
                );
            }
            if !master_public {
                self.warning(
                    "network.existing.public_subnet_id",
                    At::Value,
                    "is not used: the master is private (`master.public: false`) and goes in a private subnet",
                    "remove `public_subnet_id`, or set `master.public: true`",
                );
            }
        } else if master_public {
            self.error(
                "network.existing.public_subnet_id",
                At::Key,
                "is missing; a public master (`master.public` is true by default) needs a public subnet",
                "add `public_subnet_id: subnet-...` (a subnet whose route table has an internet gateway), or set `master.public: false`",
            );
        }
        if private_subnet_ids.is_empty() {
            self.error(
                "network.existing.private_subnet_ids",
                At::Key,
                "is empty or missing; the workers need at least one private subnet",
                "list the private subnets the workers may use, for example `private_subnet_ids: [subnet-0123456789abcdef0]`",
            );
        }
        let mut seen = std::collections::HashSet::new();
        for (i, id) in private_subnet_ids.iter().enumerate() {
            let path = format!("network.existing.private_subnet_ids[{i}]");
            if !is_aws_id(id, "subnet-") {
                self.error(&path, At::Value, format!("{} is not a subnet id", ticked(id)), subnet_help);
            } else if !seen.insert(id.as_str()) {
                self.error(&path, At::Value, format!("{} is listed twice", ticked(id)), "list each subnet once");
            }
        }
        if private_subnet_ids.len() == 1 && !placement_group {
            self.warning(
                "network.existing.private_subnet_ids",
                At::Key,
                "one private subnet puts every worker in one Availability Zone; when that zone runs out of capacity, no worker can launch",
                "list private subnets in two or more zones, unless you want one zone (then also set `network.placement_group: true`)",
            );
        }
        NetworkSpec::Existing { vpc_id: e.vpc_id, public_subnet_id: e.public_subnet_id, private_subnet_ids }
    }

    /// Whether the new VPC's subnets hold `workers.max` workers beside the
    /// master, the EFS mount targets and the NAT gateway. Subnets of an
    /// existing VPC are not known here (their free addresses even less): a
    /// launch that finds no address fails there, and the master's formation
    /// message names the group's launch failure.
    fn subnet_capacity(&mut self, network: &NetworkSpec, workers: &WorkerSpec, master_public: bool, one_zone: bool) {
        let NetworkSpec::New { vpc_cidr } = network else {
            return;
        };
        // A range outside /16 to /24 is refused on its own (above), and the
        // subnet arithmetic holds only within it (a /31 has no /33 subnets).
        if !VPC_PREFIXES.contains(&vpc_cidr.prefix_len()) {
            return;
        }
        // A public range is refused on its own too: one error per mistake,
        // and a larger range around it would be no more private.
        if !is_private(vpc_cidr) {
            return;
        }
        let layout =
            |prefix: u8| SubnetLayout { vpc_prefix: prefix, zones: if one_zone { 1 } else { 2 }, master_public };
        let here = layout(vpc_cidr.prefix_len());
        if here.fits(workers.max) {
            return;
        }
        let smallest = VPC_PREFIXES
            .rev()
            .find(|p| layout(*p).fits(workers.max))
            .and_then(|p| Ipv4Net::new(vpc_cidr.network(), p).ok())
            .map(|n| n.trunc());
        let (subnets, each, hold) = if here.zones == 1 {
            ("its one private subnet", "", "holds")
        } else {
            ("its 2 private subnets", " each", "hold")
        };
        let message = format!(
            "`{vpc_cidr}` is too small for {} workers: {subnets} (/{}{each}: {} addresses after the 5 AWS reserves in every subnet) {hold} at most {} workers beside the master and the EFS mount targets",
            workers.max,
            here.subnet_prefix(),
            here.usable(),
            here.max_workers()
        );
        let help = match smallest {
            Some(net) => format!(
                "use `vpc_cidr: {net}` or a larger range (the smallest that holds {} workers), or lower `workers.max` to {}",
                workers.max,
                here.max_workers()
            ),
            None => format!("lower `workers.max` to {}", here.max_workers()),
        };
        self.error("network.vpc_cidr", At::Value, message, help);
    }

    fn placement(&mut self, placement_group: bool, master: Option<&InstanceType>, workers: &[&InstanceType]) {
        if !placement_group {
            return;
        }
        let nodes = std::iter::once(("the master's", master)).chain(workers.iter().map(|t| ("the workers'", Some(*t))));
        for (whose, t) in nodes {
            if let Some(t) = t.filter(|t| !t.cluster_placement) {
                self.error(
                    "network.placement_group",
                    At::Value,
                    format!("is on, but {whose} type `{}` cannot be launched in a cluster placement group", t.name),
                    "set `placement_group: false`, or choose a type that supports cluster placement groups (see https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html)",
                );
            }
        }
    }

    fn efa(
        &mut self,
        mode: EfaMode,
        master: Option<&InstanceType>,
        workers: &[&InstanceType],
        master_public: bool,
    ) -> bool {
        match mode {
            EfaMode::Off => false,
            EfaMode::On => {
                let nodes = std::iter::once(("master", master)).chain(workers.iter().map(|t| ("workers", Some(*t))));
                for (role, t) in nodes {
                    if let Some(t) = t.filter(|t| !t.efa) {
                        let whose = if role == "master" { "the master's" } else { "the workers'" };
                        self.error(
                            "network.efa",
                            At::Value,
                            format!("is `on`, but {whose} type `{}` does not support Elastic Fabric Adapter", t.name),
                            format!(
                                "choose an EFA type for `{role}.instance_type` ({}), or set `efa: auto`",
                                efa_examples()
                            ),
                        );
                    }
                }
                if master_public {
                    self.error(
                        "network.efa",
                        At::Value,
                        "is `on`, but the master is public; EFA traffic does not leave its subnet, so the master must sit in the workers' private subnet",
                        "set `master.public: false` and reach the master through Session Manager",
                    );
                }
                true
            }
            EfaMode::Auto => {
                let (Some(m), Some(w)) = (master, workers.first()) else {
                    return false;
                };
                // On only when every type a worker may be has EFA.
                let on = m.efa && workers.iter().all(|t| t.efa) && !master_public;
                let without = workers.iter().find(|t| !t.efa);
                if !on && w.efa {
                    let why = if !m.efa {
                        format!("the master's type `{}` does not support it", m.name)
                    } else if let Some(t) = without {
                        format!("the workers' type `{}` does not support it", t.name)
                    } else {
                        "the master is public, and EFA traffic does not leave the workers' private subnet".to_owned()
                    };
                    let help = if !m.efa {
                        format!(
                            "for EFA, choose an EFA type for the master ({}) and set `master.public: false`; or set `network.efa: off` to silence this",
                            efa_examples()
                        )
                    } else if without.is_some() {
                        "for EFA, list only EFA types under `workers.instance_types`; or set `network.efa: off` to silence this".to_owned()
                    } else {
                        "for EFA, set `master.public: false` and use Session Manager; or set `network.efa: off` to silence this".to_owned()
                    };
                    self.warning_near(
                        "network.efa",
                        "workers.instance_type",
                        format!("Elastic Fabric Adapter stays off although `{}` supports it: {why}", w.name),
                        help,
                    );
                }
                on
            }
        }
    }

    fn access(&mut self, access: Option<super::model::Access>, master_public: bool) -> AccessSpec {
        let (ssh, session_manager) = access.map_or((None, None), |a| (a.ssh, a.session_manager));
        let session_manager = session_manager.unwrap_or(true);
        let (key_name, cidr_text) = ssh.map_or((None, None), |s| (s.key_name, s.cidr));
        if let Some(problem) = key_name.as_deref().and_then(crate::spec::key_name_problem) {
            self.error(
                "access.ssh.key_name",
                At::Value,
                problem,
                "write the name of an EC2 key pair in the region (rename or import the key under a plainer name if needed), or remove `key_name`",
            );
        }
        let ssh_cidr = cidr_text.as_deref().and_then(|text| self.ssh_cidr(text));
        if cidr_text.is_some() && key_name.is_none() {
            self.warning(
                "access.ssh.cidr",
                At::Value,
                "SSH is opened to this range, but no key pair is set, so nobody outside the cluster holds a key that logs in",
                "set `access.ssh.key_name` to an EC2 key pair you have, or drop `cidr` and use Session Manager",
            );
        }
        if cidr_text.is_some() && !master_public {
            self.warning(
                "access.ssh.cidr",
                At::Value,
                "the master is private (`master.public: false`), so SSH from this range only reaches it from inside the VPC (a VPN or peering)",
                "use Session Manager to reach a private master, or set `master.public: true`",
            );
        }
        if cidr_text.is_none() && !session_manager {
            self.warning(
                "access.session_manager",
                At::Value,
                "with Session Manager off and no SSH range, nobody can log into the cluster",
                "keep `session_manager: true`, or set `access.ssh.cidr` to your own address (`x.x.x.x/32`)",
            );
        }
        AccessSpec { key_name, ssh_cidr, session_manager }
    }

    fn ssh_cidr(&mut self, text: &str) -> Option<Ipv4Net> {
        const PATH: &str = "access.ssh.cidr";
        match parse_cidr(text) {
            Err(problem) => {
                let help = if text.parse::<Ipv4Addr>().is_ok() {
                    format!("for this one address, write `{text}/32`")
                } else {
                    "write an IPv4 range such as `203.0.113.7/32` (your own address)".to_owned()
                };
                self.error(PATH, At::Value, format!("{} {problem}", ticked(text)), help);
                None
            }
            Ok(net) if net.prefix_len() == 0 => {
                self.error(
                    PATH,
                    At::Value,
                    format!("`{text}` opens SSH to the whole internet"),
                    "allow only your own address (`x.x.x.x/32`, see https://checkip.amazonaws.com), or drop `ssh.cidr` and use Session Manager",
                );
                None
            }
            Ok(net) if net.trunc() != net => {
                self.error(
                    PATH,
                    At::Value,
                    format!("{} has host bits set; the network is `{}`", ticked(text), net.trunc()),
                    format!("write `{}` for the whole range, or `{}/32` for this one address", net.trunc(), net.addr()),
                );
                None
            }
            Ok(net) => Some(net),
        }
    }

    fn prepare_data_script(&mut self, script: Option<String>) -> Option<String> {
        let s = script?;
        let problem = if !s.starts_with('/') {
            Some("is not an absolute path")
        } else if s.contains("${") {
            Some("contains `${`, which would be read as a CloudFormation substitution")
        } else if s.chars().any(char::is_control) {
            Some("contains a control character")
        } else {
            None
        };
        if let Some(problem) = problem {
            self.error(
                "elastic.prepare_data_script",
                At::Value,
                format!("{} {problem}", ticked(&s.escape_debug().to_string())),
                "write an absolute path that every node can read, usually on EFS, for example `/efs/prepare-data.sh`",
            );
        }
        Some(s)
    }

    fn formation_minutes(&mut self, written: Option<u32>) -> u32 {
        let m = written.unwrap_or(30);
        if !(5..=720).contains(&m) {
            self.error(
                "timeouts.formation_minutes",
                At::Value,
                format!("{m} minutes is outside the allowed 5 to 720"),
                "instances need a few minutes to boot, and CloudFormation waits at most 12 hours for a signal; the default is 30",
            );
        }
        m
    }

    /// The idle guard's settings: `after_minutes` is required, the action
    /// defaults to `scale_workers`.
    fn idle(&mut self, written: super::model::Idle) -> Option<Idle> {
        let minutes = self.required("idle", "after_minutes", written.after_minutes);
        let (min, max) = (node_contract::idle::MIN_MINUTES, node_contract::idle::MAX_MINUTES);
        if let Some(m) = minutes
            && !(min..=max).contains(&m)
        {
            self.error(
                "idle.after_minutes",
                At::Value,
                format!("{m} minutes is outside the allowed {min} to {max}"),
                "a job needs a few minutes to start, and a week is the longest wait; for example 30",
            );
        }
        let name = written.action.as_deref().unwrap_or("scale_workers");
        let action = IdleAction::from_name(name).or_else(|| {
            self.error(
                "idle.action",
                At::Value,
                format!("{} is not an idle action", ticked(&name.escape_debug().to_string())),
                format!("write one of {}", IdleAction::NAMES.map(|n| format!("`{n}`")).join(", ")),
            );
            None
        });
        Some(Idle { after_minutes: minutes?, action: action? })
    }

    fn log_retention(&mut self, written: Option<u32>) -> u32 {
        let days = written.unwrap_or(DEFAULT_LOG_RETENTION_DAYS);
        if !LOG_RETENTION_DAYS.contains(&days) {
            let allowed: Vec<String> = LOG_RETENTION_DAYS.iter().map(u32::to_string).collect();
            self.error(
                "logs.retention_days",
                At::Value,
                format!("{days} days is not a retention CloudWatch Logs allows"),
                format!("use one of {} (the default is {DEFAULT_LOG_RETENTION_DAYS})", allowed.join(", ")),
            );
        }
        days
    }

    fn tags(&mut self, tags: BTreeMap<String, String>) -> BTreeMap<String, String> {
        if tags.len() > MAX_TAGS {
            self.error(
                "tags",
                At::Key,
                format!("{} tags is more than the {MAX_TAGS} allowed", tags.len()),
                "AWS allows 50 tags per resource and synth adds its own; merge or drop some",
            );
        }
        for (key, value) in &tags {
            let path = format!("tags.{key}");
            if key.to_ascii_lowercase().starts_with("aws:") {
                self.error(
                    &path,
                    At::Key,
                    format!("tag key {} starts with `aws:`, which AWS reserves for itself", ticked(key)),
                    "choose a key without the `aws:` prefix",
                );
            }
            let key_chars = key.chars().count();
            if key_chars == 0 || key_chars > 128 {
                self.error(
                    &path,
                    At::Key,
                    format!("a tag key is 1 to 128 characters; this one has {key_chars}"),
                    "shorten the key",
                );
            }
            let value_chars = value.chars().count();
            if value_chars > 256 {
                self.error(
                    &path,
                    At::Value,
                    format!("a tag value is at most 256 characters; this one has {value_chars}"),
                    "shorten the value",
                );
            }
        }
        tags
    }

    /// The default image is the NVIDIA GPU Deep Learning AMI: wasted (and
    /// large) on a cluster with no GPU, and wrong for Neuron accelerators.
    fn gpu_image_on_cpus(&mut self, gpu_dlami: bool, master: Option<&InstanceType>, workers: Option<&InstanceType>) {
        let (Some(m), Some(w)) = (master, workers) else {
            return;
        };
        if !gpu_dlami {
            return;
        }
        const PATH: &str = "image.ssm_parameter";
        if !m.has_nvidia_gpus() && !w.has_nvidia_gpus() {
            let types = if m.name == w.name {
                format!("the master and workers (`{}`) have no NVIDIA GPU", m.name)
            } else {
                format!("neither `{}` nor `{}` has an NVIDIA GPU", m.name, w.name)
            };
            self.warning_near(
                PATH,
                "workers.instance_type",
                format!("the image is the NVIDIA GPU Deep Learning AMI, but {types}"),
                format!("for a CPU-only cluster, set `image.ssm_parameter: {CPU_SSM_PARAMETER}`, or choose GPU instance types"),
            );
        } else if let Some(t) = [w, m].into_iter().find(|t| t.accelerator == Accelerator::Neuron) {
            self.warning_near(
                PATH,
                "workers.instance_type",
                format!("the image is the NVIDIA GPU Deep Learning AMI, but `{}` has AWS Neuron accelerators, which need the Neuron SDK", t.name),
                "use a Neuron Deep Learning AMI through `image.ssm_parameter` (see https://docs.aws.amazon.com/dlami/latest/devguide/appendix-ami-release-notes.html)",
            );
        }
    }
}

/// How [`crate::stack`] splits a new VPC: four equal blocks (two public, two
/// private subnets), of which one of each is used when every node must share
/// one zone. Workers spread evenly over the private subnets (Auto Scaling
/// balances zones); each private subnet also holds an EFS mount target, and
/// the first one a private master.
/// <https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html>
struct SubnetLayout {
    vpc_prefix: u8,
    zones: u32,
    master_public: bool,
}

impl SubnetLayout {
    /// Addresses AWS keeps in every subnet (network, router, DNS, future, broadcast).
    const RESERVED: u32 = 5;

    fn subnet_prefix(&self) -> u8 {
        self.vpc_prefix + 2
    }

    fn usable(&self) -> u32 {
        (1u32 << (32 - u32::from(self.subnet_prefix()))).saturating_sub(Self::RESERVED)
    }

    /// Workers the first (fullest) private subnet takes, per zone.
    fn room_per_zone(&self) -> u32 {
        self.usable().saturating_sub(1 + u32::from(!self.master_public))
    }

    fn max_workers(&self) -> u32 {
        self.room_per_zone() * self.zones
    }

    fn fits(&self, workers: u32) -> bool {
        workers.div_ceil(self.zones) <= self.room_per_zone()
    }
}

/// Where a warning about `path` is shown: at `path` when it is written,
/// else at `shown_at` (for warnings about a field left to its default).
fn near(map: &SourceMap, path: &str, shown_at: &str) -> Location {
    if map.contains(path) { map.value(path) } else { map.value(shown_at) }
}

/// The image, in words, when it is a stock one (the default Deep Learning
/// AMI, or any public `/aws/service/` parameter) with no agent package:
/// without one to install at boot, formation fails at once ("the image has
/// no deeplearning agent"). Not a warning on a field: what it means depends
/// on what the user does (`synth deploy` stages the package itself, a
/// template for the console needs `synth stage`'s lines), so each command
/// says it in its own words ([`super::Loaded::missing_agent`]). The caller
/// asks only once the blueprint is otherwise right.
pub(crate) fn missing_agent(image: &ImageSpec, map: &SourceMap) -> Option<String> {
    const SSM: &str = "image.ssm_parameter";
    if image.agent_package.is_some() {
        return None;
    }
    let ImageSource::SsmParameter(p) = &image.source else {
        return None;
    };
    if !p.starts_with("/aws/service/") {
        return None;
    }
    Some(if map.contains(SSM) {
        format!("the stock public image {}", ticked(p))
    } else {
        "the default image (the stock Deep Learning AMI)".to_owned()
    })
}

/// Why `t` cannot be used in every target region, if it cannot.
fn offering_problem(t: &InstanceType, targets: &[Region]) -> Option<String> {
    let missing: Vec<&str> = targets.iter().filter(|r| !t.offered_in(**r)).map(|r| r.code()).collect();
    if missing.is_empty() {
        return None;
    }
    Some(if targets.len() == 1 {
        format!("`{}` is not offered in {}", t.name, missing.join(", "))
    } else {
        format!(
            "`{}` is not offered in {}, and a template without `region:` is for all five regions",
            t.name,
            missing.join(", ")
        )
    })
}

/// "p4d.24xlarge, ..." from the EFA examples the catalog confirms.
fn efa_examples() -> String {
    let known: Vec<&str> = EFA_EXAMPLES.into_iter().filter(|n| catalog::lookup(n).is_some_and(|t| t.efa)).collect();
    if known.is_empty() {
        "see https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types".to_owned()
    } else {
        format!(
            "for example {}; all are listed at https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types",
            backticked(known)
        )
    }
}

/// What is wrong with an agent package URL, if anything.
fn package_url_problem(url: &str) -> Option<String> {
    if let Some(rest) = url.strip_prefix("s3://") {
        match rest.split_once('/') {
            Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() && !key.ends_with('/') => {
                let bucket_ok = (3..=63).contains(&bucket.len())
                    && bucket.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
                (!bucket_ok).then(|| format!("{} is not an S3 bucket name", ticked(bucket)))
            }
            _ => Some(format!("{} does not name an object: write `s3://BUCKET/KEY`", ticked(url))),
        }
    } else if let Some(rest) = url.strip_prefix("https://") {
        (rest.is_empty() || rest.starts_with('/')).then(|| format!("{} has no host", ticked(url)))
    } else {
        Some(format!("{} is neither an `s3://` nor an `https://` URL", ticked(url)))
    }
    .or_else(|| {
        url.chars()
            .any(|c| c.is_whitespace() || c.is_control() || "'\"`$\\".contains(c))
            .then(|| format!("{} has spaces, quotes, `$` or backslashes, which a URL does not need", ticked(url)))
    })
}

/// The OS family an SSM parameter path names, if it names one.
fn family_of(path: &str) -> Option<ImageFamily> {
    let p = path.to_ascii_lowercase();
    if p.contains("ubuntu") {
        Some(ImageFamily::Ubuntu)
    } else if p.contains("amazon-linux") || p.contains("al2") {
        Some(ImageFamily::AmazonLinux)
    } else {
        None
    }
}

/// `prefix` followed by 8 or 17 lower-case hex digits, as EC2 and EFS ids are.
fn is_aws_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|hex| {
        matches!(hex.len(), 8 | 17) && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Parses an IPv4 CIDR; the error says what is wrong with it.
fn parse_cidr(text: &str) -> Result<Ipv4Net, &'static str> {
    if !text.contains('/') {
        return Err("has no prefix length (the `/N` part)");
    }
    match text.parse::<IpNet>() {
        Ok(IpNet::V4(net)) => Ok(net),
        Ok(IpNet::V6(_)) => Err("is an IPv6 range; only IPv4 ranges are supported here"),
        Err(_) => Err("is not an IPv4 range (CIDR) such as `10.0.0.0/16`"),
    }
}

fn default_vpc_cidr() -> Ipv4Net {
    Ipv4Net::new(Ipv4Addr::new(10, 0, 0, 0), 16).unwrap_or_default()
}

/// Whether `net` lies inside one of the RFC 1918 private ranges.
fn is_private(net: &Ipv4Net) -> bool {
    [(Ipv4Addr::new(10, 0, 0, 0), 8), (Ipv4Addr::new(172, 16, 0, 0), 12), (Ipv4Addr::new(192, 168, 0, 0), 16)]
        .into_iter()
        .filter_map(|(a, p)| Ipv4Net::new(a, p).ok())
        .any(|private| private.contains(net))
}

/// Why `mount` cannot be a file system's mount point (EFS's, FSx's), if it cannot.
fn mount_problem(mount: &str) -> Option<&'static str> {
    const SYSTEM: [&str; 6] = ["/etc", "/usr", "/proc", "/sys", "/dev", "/boot"];
    if !mount.starts_with('/') {
        Some("is not an absolute path")
    } else if mount == "/" || mount.trim_end_matches('/').is_empty() {
        Some("is the root directory; mounting there would hide the whole system")
    } else if mount.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("contains a space or control character, which /etc/fstab cannot hold")
    } else if mount.contains("${") {
        Some("contains `${`, which would be read as a CloudFormation substitution")
    } else if mount.split('/').any(|part| part == "..") {
        Some("contains `..`")
    } else if SYSTEM.iter().any(|s| mount == *s || mount.starts_with(&format!("{s}/"))) {
        Some("is a system directory (or under one); mounting there would hide files the system needs")
    } else {
        None
    }
}

/// A valid name close to `name`: lower-cased, other characters turned into
/// `-`, cut to 32.
fn suggest_name(name: &str) -> Option<String> {
    let mut s: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '-' })
        .collect();
    s = s.trim_start_matches(|c: char| !c.is_ascii_lowercase()).to_owned();
    s.truncate(32);
    let s = s.trim_end_matches('-').to_owned();
    if s.is_empty() { None } else { Some(s) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::InstanceStore;

    #[test]
    fn cidrs() {
        assert!(parse_cidr("10.0.0.0/16").is_ok());
        assert!(parse_cidr("10.0.0.0").unwrap_err().contains("prefix length"));
        assert!(parse_cidr("fd00::/8").unwrap_err().contains("IPv6"));
        assert!(parse_cidr("10.0.0.300/16").is_err());
        assert!(parse_cidr("10.0.0.0/33").is_err());
        let net = parse_cidr("203.0.113.7/24").unwrap();
        assert_ne!(net.trunc(), net);
        assert_eq!(net.trunc().to_string(), "203.0.113.0/24");
    }

    #[test]
    fn subnet_layouts() {
        // A /24 VPC: four /26 subnets of 59 usable addresses.
        let two = SubnetLayout { vpc_prefix: 24, zones: 2, master_public: true };
        assert_eq!((two.subnet_prefix(), two.usable(), two.max_workers()), (26, 59, 116));
        assert!(two.fits(116) && !two.fits(117));
        let private_one_zone = SubnetLayout { vpc_prefix: 24, zones: 1, master_public: false };
        assert_eq!(private_one_zone.max_workers(), 57);
        // The default /16: /18 subnets hold every allowed worker count.
        assert!(SubnetLayout { vpc_prefix: 16, zones: 1, master_public: false }.fits(MAX_WORKERS));
    }

    #[test]
    fn key_names() {
        use crate::spec::key_name_problem;
        for ok in ["my-key", "dev key (2024)", "a;b$c", &"k".repeat(255)] {
            assert_eq!(key_name_problem(ok), None, "{ok}");
        }
        for bad in ["", " lead", "trail ", "it's", "tab\there", "ключ", &"k".repeat(256)] {
            assert!(key_name_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn private_ranges() {
        for ok in ["10.0.0.0/16", "172.16.0.0/16", "172.31.255.0/24", "192.168.0.0/16"] {
            assert!(is_private(&ok.parse().unwrap()), "{ok}");
        }
        for bad in ["11.0.0.0/16", "172.32.0.0/16", "192.169.0.0/16", "8.8.8.0/24"] {
            assert!(!is_private(&bad.parse().unwrap()), "{bad}");
        }
    }

    #[test]
    fn aws_ids() {
        assert!(is_aws_id("fs-12345678", "fs-"));
        assert!(is_aws_id("fs-0123456789abcdef0", "fs-"));
        assert!(!is_aws_id("fs-0123456789ABCDEF0", "fs-"));
        assert!(!is_aws_id("fs-1234567", "fs-"));
        assert!(!is_aws_id("fs-0123456789abcdef", "fs-"));
        assert!(!is_aws_id("vpc-12345678", "fs-"));
        assert!(is_aws_id("subnet-0123456789abcdef0", "subnet-"));
    }

    #[test]
    fn mount_points() {
        assert_eq!(mount_problem("/efs"), None);
        assert_eq!(mount_problem("/mnt/shared"), None);
        assert_eq!(mount_problem("/etcetera"), None);
        for bad in ["efs", "/", "//", "/my efs", "/efs/${x}", "/mnt/../etc", "/etc", "/usr/local/efs", "/proc/x"] {
            assert!(mount_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn names_are_suggested() {
        assert_eq!(suggest_name("ResNet_Training").as_deref(), Some("resnet-training"));
        assert_eq!(suggest_name("1st cluster").as_deref(), Some("st-cluster"));
        assert_eq!(suggest_name("___"), None);
        assert_eq!(suggest_name(&"a".repeat(40)).map(|s| s.len()), Some(32));
    }

    #[test]
    fn families_are_inferred_from_parameter_paths() {
        assert_eq!(family_of(DEFAULT_SSM_PARAMETER), Some(ImageFamily::Ubuntu));
        assert_eq!(
            family_of("/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"),
            Some(ImageFamily::AmazonLinux)
        );
        assert_eq!(family_of("/my/images/latest"), None);
    }

    #[test]
    fn offerings_name_the_missing_regions() {
        let t = InstanceType {
            name: "x1.test",
            accelerator: Accelerator::None,
            accelerators: 0,
            efa: false,
            cluster_placement: true,
            efa_rdma: false,
            network_mbps: None,
            instance_store: InstanceStore::Unknown,
            regions: Region::UsEast1.bit() | Region::UsWest2.bit(),
        };
        assert_eq!(offering_problem(&t, &[Region::UsEast1]), None);
        assert_eq!(offering_problem(&t, &[Region::EuWest1]).unwrap(), "`x1.test` is not offered in eu-west-1");
        let all = offering_problem(&t, &Region::ALL).unwrap();
        assert!(all.contains("us-east-2, eu-west-1, ap-southeast-2"), "{all}");
    }

    fn fake(name: &'static str, efa: bool, cluster_placement: bool, accelerator: Accelerator) -> InstanceType {
        InstanceType {
            name,
            accelerator,
            accelerators: 1,
            efa,
            cluster_placement,
            efa_rdma: false,
            network_mbps: None,
            instance_store: InstanceStore::Unknown,
            regions: 0b11111,
        }
    }

    #[test]
    fn the_network_checks_expected_bandwidth_comes_from_the_blueprint_else_the_slower_type() {
        let spec = |extra: &str, master: &str, workers: &str| {
            let text = format!(
                "name: demo\nmaster:\n  instance_type: {master}\nworkers:\n  instance_type: {workers}\n  count: 2\n\
                 formation:\n  network_check:\n    action: fail\n{extra}"
            );
            crate::blueprint::load(&text, "bp.yaml", None).map(|l| l.spec.network_check.unwrap())
        };
        let c = spec("", "c5.xlarge", "c5n.18xlarge").unwrap();
        assert_eq!(c.expected_gbps, Some(1.25), "the slower of the two types");
        assert_eq!((c.min_fraction, c.action, c.timeout_seconds), (0.5, NetworkAction::Fail, 60));
        assert_eq!(spec("", "p4d.24xlarge", "p4d.24xlarge").unwrap().expected_gbps, Some(400.0));
        assert_eq!(spec("    expected_gbps: 12\n", "c5.xlarge", "c5.xlarge").unwrap().expected_gbps, Some(12.0));
        // A type without a transcribed figure: unknown, the median decides.
        assert_eq!(spec("", "c5.xlarge", "t3.large").unwrap().expected_gbps, None);
        assert!(crate::catalog::lookup("t3.large").is_some_and(|t| t.network_mbps.is_none()));
    }

    fn checked(text: &str, f: impl FnOnce(&mut Checker<'_>)) -> Vec<Diagnostic> {
        let root = crate::blueprint::document::parse(text).unwrap();
        let map = SourceMap::new(&root, text);
        let mut c = Checker { map: &map, diagnostics: Vec::new(), now_unix: 1_800_000_000 };
        f(&mut c);
        c.diagnostics
    }

    #[test]
    fn log_retention_is_one_cloudwatch_allows() {
        let text = "logs:\n  retention_days: 10\n";
        let mut days = 0;
        let d = checked(text, |c| days = c.log_retention(Some(10)));
        assert_eq!(days, 10);
        let [e] = &d[..] else { panic!("{d:?}") };
        assert!(e.message.contains("10 days is not a retention CloudWatch Logs allows"), "{}", e.message);
        let help = e.help.as_deref().unwrap_or_default();
        assert!(help.contains("1, 3, 5, 7, 14, 30") && help.contains("3653"), "{help}");
        assert_eq!((e.line, e.column), (2, 19));
        assert!(checked(text, |c| assert_eq!(c.log_retention(None), DEFAULT_LOG_RETENTION_DAYS)).is_empty());
        assert!(checked(text, |c| assert_eq!(c.log_retention(Some(3653)), 3653)).is_empty());
    }

    #[test]
    fn placement_groups_need_types_that_allow_them() {
        let text = "network:\n  placement_group: true\n";
        let no = fake("t2.test", false, false, Accelerator::None);
        let yes = fake("c5.test", false, true, Accelerator::None);
        let d = checked(text, |c| c.placement(true, Some(&yes), &[&no]));
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("the workers' type `t2.test`"), "{}", d[0].message);
        assert_eq!((d[0].line, d[0].column), (2, 20));
        assert!(checked(text, |c| c.placement(false, Some(&no), &[&no])).is_empty());
    }

    #[test]
    fn efa_on_names_each_unsupported_type() {
        let text = "network:\n  efa: on\n";
        let no = fake("g4.test", false, true, Accelerator::Nvidia);
        let d = checked(text, |c| {
            assert!(c.efa(EfaMode::On, Some(&no), &[&no], false));
        });
        assert_eq!(d.len(), 2);
        assert!(d[0].message.contains("the master's type `g4.test`"));
        assert!(d[1].help.as_deref().unwrap_or_default().contains("workers.instance_type"));
    }

    #[test]
    fn neuron_types_warn_about_the_nvidia_image() {
        let neuron = fake("trn1.test", true, true, Accelerator::Neuron);
        let gpu = fake("p3.test", false, true, Accelerator::Nvidia);
        let d =
            checked("workers:\n  instance_type: trn1.test\n", |c| c.gpu_image_on_cpus(true, Some(&gpu), Some(&neuron)));
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("Neuron"), "{}", d[0].message);
        assert_eq!(d[0].line, 2);
    }
}
