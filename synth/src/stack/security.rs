//! Security groups.
//!
//! - The cluster group: every port between nodes (NCCL, MPI and EFA pick
//!   ports at run time; EFA needs all traffic to and from the group itself),
//!   SSH only from the console's SSH range and only when one is given, and
//!   outbound only HTTPS and HTTP (AWS APIs, package mirrors), NFS to EFS and
//!   the cluster itself.
//! - The EFS group: NFS only from the cluster group.
//!
//! No rule anywhere admits `0.0.0.0/0`. Traffic to the VPC's DNS resolver,
//! the instance metadata service and the time service is not filtered by
//! security groups, so it needs no rule:
//! <https://docs.aws.amazon.com/vpc/latest/userguide/security-group-rules.html>
//! EFA's requirement: <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security>

use cfn::resources::ec2::{self, Rule};
use cfn::{Attributes, Expr, Template};

use super::context::Ctx;
use super::network::Network;
use super::parameters::Inputs;

/// The group ids.
pub(super) struct Groups {
    pub cluster: Expr,
    pub efs: Expr,
}

const NFS_PORT: i64 = 2049;

pub(super) fn add(t: &mut Template, ctx: &Ctx, net: &Network, inputs: &Inputs) -> Groups {
    let outbound = |port: i64, why: &str| Rule {
        description: why.into(),
        ip_protocol: "tcp".into(),
        from_port: Some(port),
        to_port: Some(port),
        cidr_ip: Some("0.0.0.0/0".into()),
        ..Rule::default()
    };
    let cluster = t.add(
        "ClusterSecurityGroup",
        ec2::SecurityGroup {
            group_description: format!(
                "Nodes of cluster {}: all traffic between nodes, SSH from the SSH range only",
                ctx.spec.name
            )
            .into(),
            vpc_id: net.vpc_id.clone().into(),
            security_group_egress: vec![
                outbound(
                    443,
                    "HTTPS out: AWS APIs (SQS, Auto Scaling, CloudFormation, SSM), S3, package and model hubs",
                ),
                outbound(80, "HTTP out: operating system package mirrors"),
            ],
            tags: ctx.tags("nodes"),
        },
    );
    let efs = t.add(
        "EfsSecurityGroup",
        ec2::SecurityGroup {
            group_description: format!("EFS mount targets of cluster {}: NFS from the nodes only", ctx.spec.name)
                .into(),
            vpc_id: net.vpc_id.clone().into(),
            // An explicit rule replaces the default allow-all egress; mount
            // targets only answer connections, which security groups allow back.
            security_group_egress: vec![Rule {
                description: "No outbound connections: mount targets only answer NFS clients".into(),
                ip_protocol: "-1".into(),
                cidr_ip: Some("127.0.0.1/32".into()),
                ..Rule::default()
            }],
            tags: ctx.tags("efs"),
        },
    );

    t.add(
        "ClusterIngressFromNodes",
        ec2::SecurityGroupIngress(Rule {
            group_id: Some(cluster.attr("GroupId").into()),
            description: "All traffic between nodes: NCCL, MPI, EFA and SSH pick ports at run time".into(),
            ip_protocol: "-1".into(),
            source_security_group_id: Some(cluster.attr("GroupId").into()),
            ..Rule::default()
        }),
    );
    t.add(
        "ClusterEgressToNodes",
        ec2::SecurityGroupEgress(Rule {
            group_id: Some(cluster.attr("GroupId").into()),
            description: "All traffic between nodes (EFA requires it both ways)".into(),
            ip_protocol: "-1".into(),
            destination_security_group_id: Some(cluster.attr("GroupId").into()),
            ..Rule::default()
        }),
    );
    t.add(
        "ClusterEgressToEfs",
        ec2::SecurityGroupEgress(Rule {
            group_id: Some(cluster.attr("GroupId").into()),
            description: "NFS to the EFS mount targets".into(),
            ip_protocol: "tcp".into(),
            from_port: Some(NFS_PORT),
            to_port: Some(NFS_PORT),
            destination_security_group_id: Some(efs.attr("GroupId").into()),
            ..Rule::default()
        }),
    );
    t.add(
        "EfsIngressFromNodes",
        ec2::SecurityGroupIngress(Rule {
            group_id: Some(efs.attr("GroupId").into()),
            description: "NFS from the cluster's nodes".into(),
            ip_protocol: "tcp".into(),
            from_port: Some(NFS_PORT),
            to_port: Some(NFS_PORT),
            source_security_group_id: Some(cluster.attr("GroupId").into()),
            ..Rule::default()
        }),
    );
    t.add_with(
        "ClusterIngressSsh",
        ec2::SecurityGroupIngress(Rule {
            group_id: Some(cluster.attr("GroupId").into()),
            description: "SSH from the range given in the SshCidr parameter".into(),
            ip_protocol: "tcp".into(),
            from_port: Some(22),
            to_port: Some(22),
            cidr_ip: Some(inputs.ssh_cidr.r#ref().into()),
            ..Rule::default()
        }),
        Attributes { condition: Some(inputs.has_ssh.clone()), ..Attributes::default() },
    );

    Groups { cluster: cluster.attr("GroupId"), efs: efs.attr("GroupId") }
}
