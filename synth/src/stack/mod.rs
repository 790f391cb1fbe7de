//! The cluster template: a [`ClusterSpec`] compiled into a typed
//! CloudFormation model (docs/ARCHITECTURE.md, "The stack").
//!
//! Each submodule adds one concern's resources and hands back the handles the
//! next one needs: [`parameters`] (the console form), [`network`] (VPC or an
//! existing one), [`security`] (security groups), [`queues`] (SQS),
//! [`identity`] (IAM), [`logs`] (the nodes' log group), [`storage`] (EFS), [`fsx`] (FSx for Lustre), [`compute`] (launch templates, the
//! master, the worker group, formation; where the workers' capacity comes
//! from is [`capacity`]) and [`outputs`]. The node config each
//! instance boots with is rendered by [`node_config`].
//!
//! Nothing here can fail: every user-facing check happened in
//! [`crate::blueprint`], and structural problems (a dangling reference, a
//! limit) are caught by [`cfn::Template::render`].

mod capacity;
mod compute;
mod context;
mod fsx;
pub(crate) mod identity;
mod logs;
mod network;
mod node_config;
mod outputs;
mod parameters;
mod queues;
mod security;
mod storage;

pub(crate) use compute::{MASTER_ID, WORKER_GROUP_ID};
pub(crate) use context::{arn, checkov_skip};
pub(crate) use outputs::{FORMATION_DATA_OUTPUT, IMAGE_OUTPUT};
pub(crate) use parameters::{WORKER_COUNT_PARAMETER, blueprint_field};

use cfn::Template;

use context::Ctx;

use crate::spec::ClusterSpec;

/// Compiles a validated cluster into a template (not yet checked or printed:
/// call [`cfn::Template::render`]).
pub(crate) fn compile(spec: &ClusterSpec) -> Template {
    let ctx = Ctx { spec };
    let mut t = Template::new(description(spec));

    let inputs = parameters::add(&mut t, &ctx);
    let net = network::add(&mut t, &ctx, &inputs);
    let groups = security::add(&mut t, &ctx, &net, &inputs);
    let queues = queues::add(&mut t, &ctx);
    let logs = logs::add(&mut t, &ctx);
    let fs = storage::add(&mut t, &ctx, &net, &groups, &inputs);
    let lustre = fsx::add(&mut t, &ctx, &net, &groups);
    let cluster = compute::add(
        &mut t,
        &ctx,
        compute::Deps {
            inputs: &inputs,
            net: &net,
            groups: &groups,
            queues: &queues,
            fs: &fs,
            logs: &logs,
            lustre: lustre.as_ref(),
        },
    );
    outputs::add(&mut t, &ctx, &inputs, &cluster, &fs, &groups);
    t
}

fn description(spec: &ClusterSpec) -> String {
    let region = match spec.region {
        Some(r) => format!("for {r}"),
        None => "for us-east-1, us-east-2, us-west-2, eu-west-1 and ap-southeast-2".to_owned(),
    };
    let fallback = match spec.workers.fallback_types.as_slice() {
        [] => String::new(),
        types => format!(" (or {})", types.join(", ")),
    };
    let lustre = if spec.fsx.is_some() { " and FSx for Lustre" } else { "" };
    format!(
        "Deep learning cluster '{}' {region}: a master, {} x {}{fallback} workers, shared EFS{lustre}. Built by synth {}.",
        spec.name,
        spec.workers.count,
        spec.workers.instance_type,
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::region::Region;
    use crate::spec::*;

    /// A GPU cluster in a new VPC, public master, SSH range, new EFS.
    pub(crate) fn sample() -> ClusterSpec {
        ClusterSpec {
            name: "demo".into(),
            region: Some(Region::UsEast1),
            image: ImageSpec {
                source: ImageSource::SsmParameter(
                    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id".into(),
                ),
                user: "ubuntu".into(),
                root_device: "/dev/sda1".into(),
                package_format: node_contract::PackageFormat::Deb,
                agent_package: None,
            },
            master: MasterSpec { instance_type: "p3.2xlarge".into(), public: true },
            workers: WorkerSpec {
                instance_type: "p3.16xlarge".into(),
                fallback_types: Vec::new(),
                count: 4,
                min: 1,
                max: 8,
                capacity: crate::spec::WorkerCapacity::OnDemand,
            },
            root_volume_gb: 200,
            efs: EfsSpec { mount: "/efs".into(), file_system_id: None },
            scratch: Some("/scratch".into()),
            data: Vec::new(),
            fsx: None,
            network: NetworkSpec::New { vpc_cidr: "10.0.0.0/16".parse().unwrap() },
            placement_group: false,
            efa: false,
            access: AccessSpec {
                key_name: Some("my-key".into()),
                ssh_cidr: Some("203.0.113.0/24".parse().unwrap()),
                session_manager: true,
            },
            prepare_data_script: Some("/efs/prepare.sh".into()),
            formation_minutes: 30,
            network_check: None,
            gpu_check: None,
            idle: None,
            log_retention_days: 14,
            tags: BTreeMap::from([("team".into(), "ml".into())]),
            blueprint: None,
        }
    }

    /// Variants that exercise every branch of the compiler.
    pub(crate) fn variants() -> Vec<(&'static str, ClusterSpec)> {
        let mut out = vec![("sample", sample())];
        let mut s = sample();
        s.master.public = false;
        s.access = AccessSpec { key_name: None, ssh_cidr: None, session_manager: true };
        s.workers.capacity = crate::spec::WorkerCapacity::Spot;
        out.push(("private-spot", s));
        let mut s = sample();
        s.region = None;
        s.image.source =
            ImageSource::AmiMap(Region::ALL.iter().map(|r| (*r, "ami-0123456789abcdef0".to_owned())).collect());
        s.placement_group = true;
        s.efa = true;
        s.master.public = false;
        s.master.instance_type = "p4d.24xlarge".into();
        s.workers.instance_type = "p4d.24xlarge".into();
        out.push(("portable-efa", s));
        let mut s = sample();
        s.network = NetworkSpec::Existing {
            vpc_id: "vpc-0123456789abcdef0".into(),
            public_subnet_id: Some("subnet-0123456789abcdef0".into()),
            private_subnet_ids: vec!["subnet-0123456789abcdef1".into(), "subnet-0123456789abcdef2".into()],
        };
        s.efs.file_system_id = Some("fs-0123456789abcdef0".into());
        s.access.session_manager = false;
        s.region = Some(Region::ApSoutheast2);
        s.image.source = ImageSource::AmiMap([(Region::ApSoutheast2, "ami-12345678".to_owned())].into());
        out.push(("existing", s));
        let mut s = sample();
        s.image.agent_package = Some(AgentPackage {
            url: "s3://my-bucket/agent/deeplearning-agent_0.1.0-1_amd64.deb".into(),
            sha256: "ab".repeat(32),
        });
        out.push(("install-at-boot", s));
        let mut s = sample();
        s.master.public = false;
        s.access = AccessSpec { key_name: Some("k".into()), ssh_cidr: None, session_manager: false };
        s.prepare_data_script = None;
        s.tags.clear();
        out.push(("private-no-ssm", s));
        let mut s = sample();
        s.idle = Some(node_contract::idle::Idle { after_minutes: 30, action: node_contract::idle::IdleAction::Stop });
        out.push(("idle-stop", s));
        let mut s = sample();
        s.workers.fallback_types = vec!["p3dn.24xlarge".into(), "p3.8xlarge".into()];
        s.workers.capacity = crate::spec::WorkerCapacity::Reserved {
            ids: vec!["cr-0123456789abcdef0".into()],
            groups: vec!["arn:aws:resource-groups:us-east-1:123456789012:group/gpus".into()],
            then_on_demand: true,
        };
        out.push(("types-reserved", s));
        let mut s = sample();
        s.workers.fallback_types = vec!["p3dn.24xlarge".into()];
        s.workers.capacity = crate::spec::WorkerCapacity::Spot;
        out.push(("types-spot", s));
        let mut s = sample();
        s.workers.min = 0;
        s.workers.capacity = crate::spec::WorkerCapacity::CapacityBlock(crate::spec::CapacityBlock {
            id: "cr-0123456789abcdef0".into(),
            zone: "us-east-1b".into(),
            start_unix: Some(1_900_000_000),
            end_unix: 1_900_604_800,
        });
        out.push(("capacity-block", s));
        let mut s = sample();
        s.fsx = Some(FsxSpec {
            deployment: FsxDeployment::Scratch2,
            capacity_gib: 1200,
            import: Some(S3Prefix { bucket: "my-data".into(), prefix: "imagenet/".into() }),
            mount: "/fsx".into(),
            throughput_per_tib: None,
        });
        out.push(("fsx-scratch", s));
        let mut s = sample();
        s.placement_group = true;
        s.fsx = Some(FsxSpec {
            deployment: FsxDeployment::Persistent2,
            capacity_gib: 4800,
            import: Some(S3Prefix { bucket: "my-data".into(), prefix: String::new() }),
            mount: "/mnt/lustre".into(),
            throughput_per_tib: Some(500),
        });
        out.push(("fsx-persistent", s));
        out
    }

    /// `synth validate` says where the workers come from and in how many zones.
    #[test]
    fn the_workers_summary_names_the_source_and_the_zones() {
        let all: std::collections::HashMap<_, _> = variants().into_iter().collect();
        let two = "in two Availability Zones (Auto Scaling launches where there is capacity)";
        let cases = [
            ("sample", format!("workers: 4 x p3.16xlarge, On-Demand, {two}")),
            (
                "portable-efa",
                "workers: 4 x p4d.24xlarge, On-Demand, in one Availability Zone (the cluster placement group's)".into(),
            ),
            ("existing", "workers: 4 x p3.16xlarge, On-Demand, in the 2 private subnets listed".into()),
            ("types-spot", format!("workers: 4 x p3.16xlarge (then p3dn.24xlarge), Spot, {two}")),
            (
                "types-reserved",
                format!(
                    "workers: 4 x p3.16xlarge (then p3dn.24xlarge, p3.8xlarge), reservations first (cr-0123456789abcdef0, \
                     arn:aws:resource-groups:us-east-1:123456789012:group/gpus), then On-Demand, {two}"
                ),
            ),
            (
                "capacity-block",
                "workers: 4 x p3.16xlarge, Capacity Block cr-0123456789abcdef0 (2030-03-17T17:46:40Z to \
                 2030-03-24T17:46:40Z, scaled to 0 at 2030-03-24T17:06:40Z), in one Availability Zone (the block's)"
                    .into(),
            ),
        ];
        for (name, expected) in cases {
            assert_eq!(all[name].workers_summary(), expected, "{name}");
        }
    }

    /// Each capacity shape compiles to what Auto Scaling launches it with.
    #[test]
    fn capacity_shapes_compile_to_what_auto_scaling_takes() {
        let all: std::collections::HashMap<_, _> = variants().into_iter().collect();
        let template = |name: &str| -> serde_json::Value {
            serde_json::from_str(&compile(&all[name]).render().unwrap().json).unwrap()
        };
        let group = |t: &serde_json::Value| t["Resources"]["WorkerGroup"]["Properties"].clone();

        let t = template("sample");
        assert!(group(&t).get("MixedInstancesPolicy").is_none());
        assert!(group(&t).get("CapacityReservationSpecification").is_none());
        assert!(t["Resources"].get("CapacityBlockEnd").is_none());

        let g = group(&template("types-reserved"));
        let mixed = &g["MixedInstancesPolicy"];
        assert_eq!(mixed["InstancesDistribution"]["OnDemandAllocationStrategy"], "prioritized");
        assert_eq!(mixed["InstancesDistribution"]["OnDemandPercentageAboveBaseCapacity"], 100);
        let types: Vec<_> = mixed["LaunchTemplate"]["Overrides"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["InstanceType"].clone())
            .collect();
        assert_eq!(
            types,
            vec![serde_json::json!({"Ref": "WorkerInstanceType"}), "p3dn.24xlarge".into(), "p3.8xlarge".into()]
        );
        let reservation = &g["CapacityReservationSpecification"];
        assert_eq!(reservation["CapacityReservationPreference"], "capacity-reservations-first");
        assert_eq!(reservation["CapacityReservationTarget"]["CapacityReservationIds"][0], "cr-0123456789abcdef0");

        let g = group(&template("types-spot"));
        assert_eq!(
            g["MixedInstancesPolicy"]["InstancesDistribution"]["SpotAllocationStrategy"],
            "price-capacity-optimized"
        );
        assert_eq!(g["MixedInstancesPolicy"]["InstancesDistribution"]["OnDemandPercentageAboveBaseCapacity"], 0);
        assert_eq!(g["MixedInstancesPolicy"]["LaunchTemplate"]["Overrides"].as_array().unwrap().len(), 2);

        let t = template("capacity-block");
        let g = group(&t);
        assert_eq!(g["DesiredCapacity"], "0", "a block that has not started waits at 0");
        assert!(g.get("MixedInstancesPolicy").is_none());
        assert_eq!(g["VPCZoneIdentifier"].as_array().unwrap().len(), 1, "one zone");
        let data = &t["Resources"]["WorkerLaunchTemplate"]["Properties"]["LaunchTemplateData"];
        assert_eq!(data["InstanceMarketOptions"]["MarketType"], "capacity-block");
        assert_eq!(
            data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"],
            "cr-0123456789abcdef0"
        );
        let master = &t["Resources"]["MasterLaunchTemplate"]["Properties"]["LaunchTemplateData"];
        assert!(master.get("InstanceMarketOptions").is_none(), "the master is not in the block");
        assert_eq!(
            t["Resources"]["PrivateSubnet1"]["Properties"]["AvailabilityZone"],
            serde_json::json!({"Ref": "CapacityBlockZone"})
        );
        assert_eq!(t["Parameters"]["CapacityBlockZone"]["Default"], "us-east-1b");
        assert!(t["Resources"].get("PrivateSubnet2").is_none(), "one zone");
        let start = &t["Resources"]["CapacityBlockStart"]["Properties"];
        assert_eq!(start["StartTime"], "2030-03-17T17:46:40Z");
        assert_eq!(start["DesiredCapacity"], serde_json::json!({"Ref": "WorkerCount"}));
        let end = &t["Resources"]["CapacityBlockEnd"]["Properties"];
        assert_eq!(end["StartTime"], "2030-03-24T17:06:40Z", "40 minutes before the end");
        assert_eq!(end["DesiredCapacity"], "0");
    }

    #[test]
    fn every_variant_renders() {
        for (name, spec) in variants() {
            let rendered = compile(&spec).render().unwrap_or_else(|e| panic!("{name}: {e}"));
            if let Ok(dir) = std::env::var("SYNTH_DUMP_DIR") {
                std::fs::write(format!("{dir}/{name}.json"), &rendered.json).unwrap();
            }
            assert!(rendered.json.contains("\"HttpTokens\": \"required\""), "{name}");
        }
    }
}
