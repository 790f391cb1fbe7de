//! `AWS::EFS::*`: the shared file system and its mount targets.

use serde::Serialize;

use super::{Str, resource};
use crate::Tag;

/// `AWS::EFS::FileSystem`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FileSystem {
    /// Encrypted at rest.
    pub encrypted: bool,
    /// `generalPurpose` or `maxIO`.
    pub performance_mode: Str,
    /// `elastic`, `bursting` or `provisioned`.
    pub throughput_mode: Str,
    /// AWS Backup of the file system.
    pub backup_policy: BackupPolicy,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub file_system_tags: Vec<Tag>,
}
resource!(FileSystem, "AWS::EFS::FileSystem", ["Arn", "FileSystemId"]);

/// `BackupPolicy`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BackupPolicy {
    /// `ENABLED` or `DISABLED`.
    pub status: Str,
}

/// `AWS::EFS::MountTarget`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MountTarget {
    /// The file system.
    pub file_system_id: Str,
    /// One subnet per zone.
    pub subnet_id: Str,
    /// Groups that decide who may mount.
    pub security_groups: Vec<Str>,
}
resource!(MountTarget, "AWS::EFS::MountTarget", ["IpAddress"]);
