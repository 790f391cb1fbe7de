//! The FSx for Lustre file system (blueprint `storage.fsx_lustre`): the
//! file system in the first private subnet (a Lustre file system lives in
//! one subnet, so one Availability Zone; a cluster kept in one zone is in
//! that one), its security group, and its link to S3.
//!
//! - The S3 link: a `SCRATCH_2` file system takes it as `ImportPath`
//!   (listed when the file system is made, each file loaded on first read);
//!   `PERSISTENT_2` does not take `ImportPath`, and is linked by an
//!   `AWS::FSx::DataRepositoryAssociation` of its root directory
//!   (<https://docs.aws.amazon.com/fsx/latest/LustreGuide/create-dra-linked-data-repo.html>).
//! - Lustre's ports: TCP 988 and 1018-1023, both ways, between the file
//!   system's network interfaces and from the clients
//!   (<https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html>).
//!   The cluster group's outbound rules are explicit (security.rs), so it
//!   gets its own rules to the file system's group.
//! - The nodes' configs name the file system through `Fn::GetAtt` (its DNS
//!   and Lustre mount names), so the launch templates wait for it.

use cfn::resources::{ec2, fsx};
use cfn::{Expr, Output, Template};

use super::context::Ctx;
use super::network::Network;
use super::security::Groups;
use crate::spec::FsxDeployment;

/// The ports Lustre's network (LNet) uses: 988 and 1018 to 1023.
const LUSTRE_PORTS: [(i64, i64); 2] = [(988, 988), (1018, 1023)];

/// The Lustre version: 2.15, which the Deep Learning AMIs' clients mount
/// (FSx's newest; <https://docs.aws.amazon.com/fsx/latest/LustreGuide/lustre-client-matrix.html>).
const LUSTRE_VERSION: &str = "2.15";

/// What the node configs need.
pub(super) struct Lustre {
    /// `fs-...` (`Ref`).
    pub id: Expr,
    /// `Fn::GetAtt [FsxFileSystem, DNSName]`.
    pub dns_name: Expr,
    /// `Fn::GetAtt [FsxFileSystem, LustreMountName]`.
    pub mount_name: Expr,
}

/// Adds the file system when the spec has one.
pub(super) fn add(t: &mut Template, ctx: &Ctx, net: &Network, groups: &Groups) -> Option<Lustre> {
    let spec = ctx.spec.fsx.as_ref()?;
    let cluster = groups.cluster.clone();
    let ports = |(from, to): (i64, i64)| if from == to { format!("{from}") } else { format!("{from}-{to}") };
    let group = t.add(
        "FsxSecurityGroup",
        ec2::SecurityGroup {
            group_description: format!("FSx for Lustre of cluster {}: Lustre from the nodes only", ctx.spec.name)
                .into(),
            vpc_id: net.vpc_id.clone().into(),
            // Inline outbound rules replace the default allow-all egress;
            // the rules to the group itself follow as their own resources
            // (inline, they would refer to the group being made).
            security_group_egress: LUSTRE_PORTS
                .into_iter()
                .map(|(from, to)| ec2::Rule {
                    description: format!("Lustre (TCP {}) to the cluster's nodes", ports((from, to))).into(),
                    ip_protocol: "tcp".into(),
                    from_port: Some(from),
                    to_port: Some(to),
                    destination_security_group_id: Some(cluster.clone().into()),
                    ..ec2::Rule::default()
                })
                .collect(),
            tags: ctx.tags("fsx"),
        },
    );
    let fsx_group = group.attr("GroupId");
    for (i, (from, to)) in LUSTRE_PORTS.into_iter().enumerate() {
        let ports = ports((from, to));
        let rule = |group_id: &Expr, description: String| ec2::Rule {
            group_id: Some(group_id.clone().into()),
            description: description.into(),
            ip_protocol: "tcp".into(),
            from_port: Some(from),
            to_port: Some(to),
            ..ec2::Rule::default()
        };
        let n = if i == 0 { "Lnet" } else { "LnetServers" };
        t.add(
            &format!("FsxIngress{n}FromNodes"),
            ec2::SecurityGroupIngress(ec2::Rule {
                source_security_group_id: Some(cluster.clone().into()),
                ..rule(&fsx_group, format!("Lustre (TCP {ports}) from the cluster's nodes"))
            }),
        );
        t.add(
            &format!("FsxIngress{n}FromItself"),
            ec2::SecurityGroupIngress(ec2::Rule {
                source_security_group_id: Some(fsx_group.clone().into()),
                ..rule(&fsx_group, format!("Lustre (TCP {ports}) between the file system's servers"))
            }),
        );
        t.add(
            &format!("FsxEgress{n}ToItself"),
            ec2::SecurityGroupEgress(ec2::Rule {
                destination_security_group_id: Some(fsx_group.clone().into()),
                ..rule(&fsx_group, format!("Lustre (TCP {ports}) between the file system's servers"))
            }),
        );
        t.add(
            &format!("ClusterEgress{n}ToFsx"),
            ec2::SecurityGroupEgress(ec2::Rule {
                destination_security_group_id: Some(fsx_group.clone().into()),
                ..rule(&cluster, format!("Lustre (TCP {ports}) to the FSx file system"))
            }),
        );
        t.add(
            &format!("ClusterIngress{n}FromFsx"),
            ec2::SecurityGroupIngress(ec2::Rule {
                source_security_group_id: Some(fsx_group.clone().into()),
                ..rule(&cluster, format!("Lustre (TCP {ports}) from the FSx file system"))
            }),
        );
    }

    let (import_path, throughput) = match spec.deployment {
        FsxDeployment::Scratch2 => (spec.import.as_ref().map(|s| s.url().into()), None),
        FsxDeployment::Persistent2 => (None, spec.throughput_per_tib.map(Into::into)),
    };
    let fs = t.add_with(
        "FsxFileSystem",
        fsx::FileSystem {
            file_system_type: "LUSTRE".into(),
            file_system_type_version: Some(LUSTRE_VERSION.into()),
            storage_capacity: spec.capacity_gib.into(),
            storage_type: "SSD".into(),
            // The first private subnet: the workers' first (and, when the
            // cluster is kept in one zone, only) subnet.
            subnet_ids: vec![net.worker_subnets[0].clone().into()],
            security_group_ids: vec![fsx_group.clone().into()],
            lustre_configuration: fsx::LustreConfiguration {
                deployment_type: spec.deployment.aws_name().into(),
                import_path,
                per_unit_storage_throughput: throughput,
                // Compression costs the servers little and saves space and
                // network on most training data (text, tensors).
                data_compression_type: Some("LZ4".into()),
            },
            tags: ctx.tags("fsx"),
        },
        // The data's home is S3: the file system goes with the stack. FSx
        // encrypts every Lustre file system at rest with its own key
        // (checkov 3.3 has no FSx check for CloudFormation; a customer key
        // would be scheduled for deletion with the stack).
        cfn::Attributes { deletion_policy: Some("Delete"), ..cfn::Attributes::default() },
    );
    if let (FsxDeployment::Persistent2, Some(link)) = (spec.deployment, &spec.import) {
        t.add(
            "FsxDataRepositoryAssociation",
            fsx::DataRepositoryAssociation {
                file_system_id: fs.r#ref().into(),
                file_system_path: "/".into(),
                data_repository_path: link.url().into(),
                batch_import_meta_data_on_create: true,
                // New and changed objects in S3 show up in the file system
                // while the cluster runs, as a scratch import path's do not.
                s3: Some(fsx::S3Policies {
                    auto_import_policy: Some(fsx::EventPolicy {
                        events: vec!["NEW".into(), "CHANGED".into(), "DELETED".into()],
                    }),
                }),
                tags: ctx.tags("fsx-s3"),
            },
        );
    }
    t.output(
        "FsxFileSystemId",
        Output {
            description: format!("The FSx for Lustre file system (mounted at {} on every node)", spec.mount),
            value: fs.r#ref(),
            condition: None,
        },
    );
    Some(Lustre { id: fs.r#ref(), dns_name: fs.attr("DNSName"), mount_name: fs.attr("LustreMountName") })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value as Json, json};

    use crate::stack::{compile, tests::variants};

    fn template(name: &str) -> Json {
        let (_, spec) = variants().into_iter().find(|(n, _)| *n == name).unwrap();
        serde_json::from_str(&compile(&spec).render().unwrap().json).unwrap()
    }

    /// A scratch file system links S3 with `ImportPath`; a persistent one
    /// cannot, and gets a data repository association of its root instead.
    #[test]
    fn each_deployment_links_s3_the_way_fsx_takes_it() {
        let t = template("fsx-scratch");
        let fs = &t["Resources"]["FsxFileSystem"]["Properties"];
        assert_eq!(fs["FileSystemType"], "LUSTRE");
        assert_eq!(fs["StorageCapacity"], 1200);
        assert_eq!(fs["SubnetIds"], json!([{"Ref": "PrivateSubnet1"}]));
        let lustre = &fs["LustreConfiguration"];
        assert_eq!(lustre["DeploymentType"], "SCRATCH_2");
        assert_eq!(lustre["ImportPath"], "s3://my-data/imagenet/");
        assert!(lustre.get("PerUnitStorageThroughput").is_none());
        assert!(t["Resources"].get("FsxDataRepositoryAssociation").is_none());

        let t = template("fsx-persistent");
        let lustre = &t["Resources"]["FsxFileSystem"]["Properties"]["LustreConfiguration"];
        assert_eq!(lustre["DeploymentType"], "PERSISTENT_2");
        assert_eq!(lustre["PerUnitStorageThroughput"], 500);
        assert!(lustre.get("ImportPath").is_none());
        let dra = &t["Resources"]["FsxDataRepositoryAssociation"]["Properties"];
        assert_eq!(dra["FileSystemId"], json!({"Ref": "FsxFileSystem"}));
        assert_eq!(dra["FileSystemPath"], "/");
        assert_eq!(dra["DataRepositoryPath"], "s3://my-data/");
        assert_eq!(t["Outputs"]["FsxFileSystemId"]["Value"], json!({"Ref": "FsxFileSystem"}));

        let t = template("sample");
        assert!(t["Resources"].as_object().unwrap().keys().all(|k| !k.contains("Fsx")));
    }

    /// TCP 988 and 1018-1023 both ways between the nodes' group and the
    /// file system's, and within the file system's; nothing else.
    #[test]
    fn lustre_ports_are_open_between_the_nodes_and_the_file_system_only() {
        let t = template("fsx-scratch");
        let resources = t["Resources"].as_object().unwrap();
        let group = json!({"Fn::GetAtt": ["FsxSecurityGroup", "GroupId"]});
        let cluster = json!({"Fn::GetAtt": ["ClusterSecurityGroup", "GroupId"]});
        let mut seen = Vec::new();
        for (id, r) in resources {
            let kind = r["Type"].as_str().unwrap();
            if !(kind.starts_with("AWS::EC2::SecurityGroupIngress")
                || kind.starts_with("AWS::EC2::SecurityGroupEgress"))
            {
                continue;
            }
            let p = &r["Properties"];
            let peer = p.get("SourceSecurityGroupId").or(p.get("DestinationSecurityGroupId")).cloned();
            if p["GroupId"] != group && peer.as_ref() != Some(&group) {
                continue;
            }
            assert_eq!(p["IpProtocol"], "tcp", "{id}");
            let ports = (p["FromPort"].as_i64().unwrap(), p["ToPort"].as_i64().unwrap());
            assert!(ports == (988, 988) || ports == (1018, 1023), "{id}: {ports:?}");
            let inbound = kind.ends_with("Ingress");
            let from_to = if p["GroupId"] == group { "fsx" } else { "cluster" };
            let other = if peer == Some(group.clone()) { "fsx" } else { "cluster" };
            seen.push((from_to, inbound, other, ports.0));
        }
        seen.sort();
        for (mine, inbound, other) in [
            ("cluster", false, "fsx"),
            ("cluster", true, "fsx"),
            ("fsx", false, "fsx"),
            ("fsx", true, "cluster"),
            ("fsx", true, "fsx"),
        ] {
            for port in [988, 1018] {
                assert!(seen.contains(&(mine, inbound, other, port)), "{mine} {inbound} {other} {port}: {seen:?}");
            }
        }
        let fsx_group = &resources["FsxSecurityGroup"]["Properties"];
        let egress = fsx_group["SecurityGroupEgress"].as_array().unwrap();
        assert_eq!(egress.len(), 2, "inline: to the nodes on both ranges, so no allow-all default");
        assert!(egress.iter().all(|r| r["DestinationSecurityGroupId"] == cluster));
    }
}

#[cfg(test)]
mod summary_tests {
    use crate::stack::tests::variants;

    /// `synth validate` says which zone the file system is in, and that
    /// nodes in the other zone reach it across zones.
    #[test]
    fn the_summary_names_the_zone() {
        let all: std::collections::HashMap<_, _> = variants().into_iter().collect();
        assert_eq!(
            all["fsx-scratch"].fsx_summary().unwrap(),
            "fsx: 1200 GiB FSx for Lustre SCRATCH_2, linked to s3://my-data/imagenet/, mounted at /fsx, in one \
             Availability Zone (the first private subnet's); nodes in the other zone reach it across zones"
        );
        assert_eq!(
            all["fsx-persistent"].fsx_summary().unwrap(),
            "fsx: 4800 GiB FSx for Lustre PERSISTENT_2, linked to s3://my-data/, mounted at /mnt/lustre, in the \
             nodes' one Availability Zone"
        );
        assert_eq!(all["sample"].fsx_summary(), None);
    }
}
