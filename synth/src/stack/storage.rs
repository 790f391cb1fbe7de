//! The shared file system: a new encrypted EFS file system unless the
//! console's `EfsFileSystemId` names an existing one, and a mount target in
//! each zone the nodes use.
//!
//! In an existing VPC with an existing file system, its mount targets are
//! assumed to exist already (a zone takes only one mount target per file
//! system); they must admit NFS from the cluster security group (output
//! `ClusterSecurityGroupId`).

use cfn::resources::efs;
use cfn::{Attributes, Dependency, Expr, Template};

use super::context::Ctx;
use super::network::Network;
use super::parameters::Inputs;
use super::security::Groups;

/// The file system, for the node config and the outputs.
pub(super) struct FileSystem {
    /// The file system id, new or existing.
    pub id: Expr,
    /// Mount targets that always exist (nodes wait for them before booting).
    pub mount_targets: Vec<Dependency>,
}

pub(super) fn add(t: &mut Template, ctx: &Ctx, net: &Network, groups: &Groups, inputs: &Inputs) -> FileSystem {
    let fs = t.add_with(
        "FileSystem",
        efs::FileSystem {
            encrypted: true,
            performance_mode: "generalPurpose".into(),
            // Elastic throughput follows the load (data loading bursts,
            // checkpoint writes) without provisioning.
            throughput_mode: "elastic".into(),
            // Daily AWS Backup copies outlive the stack: deleting the stack
            // deletes the file system, but not last night's checkpoints.
            backup_policy: efs::BackupPolicy { status: "ENABLED".into() },
            file_system_tags: ctx.tags("efs"),
        },
        Attributes {
            condition: Some(inputs.create_fs.clone()),
            deletion_policy: Some("Delete"),
            ..Attributes::default()
        },
    );
    let id = inputs.create_fs.then(fs.r#ref(), inputs.efs_id.r#ref());

    let mut mount_targets = Vec::new();
    for (i, subnet) in net.mount_subnets.iter().enumerate() {
        // Mount targets of our own VPC serve whichever file system is used;
        // in an existing VPC they exist only for a file system we create.
        let target_fs = if net.created { id.clone() } else { fs.r#ref() };
        let target = efs::MountTarget {
            file_system_id: target_fs.into(),
            subnet_id: subnet.clone().into(),
            security_groups: vec![groups.efs.clone().into()],
        };
        let name = format!("MountTarget{}", i + 1);
        if net.created {
            let handle = t.add(&name, target);
            mount_targets.push(handle.dependency());
        } else {
            t.add_with(
                &name,
                target,
                Attributes { condition: Some(inputs.create_fs.clone()), ..Attributes::default() },
            );
        }
    }
    FileSystem { id, mount_targets }
}
