//! Every rule a blueprint must follow, checked before any template is made,
//! and the defaults that turn a [`Blueprint`] into a [`ClusterSpec`].
//!
//! All checks run, so the user sees every problem at once; each message names
//! the field and the value, says what is allowed, and its help line says what
//! to do. Region-specific checks (instance type offerings, AMI maps) run for
//! the one region the template is for, or for all five when it is for all.
//! Instance type facts come from [`crate::catalog`], never from lists here.
//!
//! This file holds the [`Checker`] (where a message points, errors and
//! warnings) and [`Checker::run`], the order of the checks. Each concern is
//! a room of its own: [`cluster`] (name, region, tags), [`instance`]
//! (instance types), [`image`], [`workers`] and [`capacity`], [`storage`]
//! (EFS, mount points), [`data`], [`fsx`], [`network`] (the VPC, placement,
//! EFA), [`access`], [`formation`] (its timeout and network gate), [`gpu`]
//! (the GPU gate) and [`operation`] (elastic restarts, the idle guard, logs).

mod access;
mod capacity;
mod cluster;
mod data;
mod formation;
mod fsx;
mod gpu;
mod image;
mod instance;
mod network;
mod operation;
mod storage;
mod workers;

pub use image::DEFAULT_SSM_PARAMETER;
pub(crate) use image::missing_agent;

use super::diagnostic::{Diagnostic, Location, ticked};
use super::model::Blueprint;
use super::source_map::SourceMap;
use crate::catalog::InstanceType;
use crate::region::Region;
use crate::spec::{ClusterSpec, MasterSpec, NetworkSpec, WorkerSpec};

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
}

/// Where a warning about `path` is shown: at `path` when it is written,
/// else at `shown_at` (for warnings about a field left to its default).
fn near(map: &SourceMap, path: &str, shown_at: &str) -> Location {
    if map.contains(path) { map.value(path) } else { map.value(shown_at) }
}

/// `prefix` followed by 8 or 17 lower-case hex digits, as EC2 and EFS ids are.
fn is_aws_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|hex| {
        matches!(hex.len(), 8 | 17) && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Accelerator, InstanceStore};

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

    /// An instance type with these facts, offered in every region (for the
    /// rooms' tests).
    pub(super) fn fake(
        name: &'static str,
        efa: bool,
        cluster_placement: bool,
        accelerator: Accelerator,
    ) -> InstanceType {
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

    /// What `f` reports on a Checker of the blueprint `text` (for the
    /// rooms' tests: messages point into `text`).
    pub(super) fn checked(text: &str, f: impl FnOnce(&mut Checker<'_>)) -> Vec<Diagnostic> {
        let root = crate::blueprint::document::parse(text).unwrap();
        let map = SourceMap::new(&root, text);
        let mut c = Checker { map: &map, diagnostics: Vec::new(), now_unix: 1_800_000_000 };
        f(&mut c);
        c.diagnostics
    }
}
