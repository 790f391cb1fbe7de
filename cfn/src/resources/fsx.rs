//! `AWS::FSx::*`: an FSx for Lustre file system and its link to S3.
//!
//! <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-fsx-filesystem.html>,
//! <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-fsx-datarepositoryassociation.html>

use serde::Serialize;

use super::{Str, resource};
use crate::{Tag, Value};

/// `AWS::FSx::FileSystem` (only the Lustre properties this project sets).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FileSystem {
    /// `LUSTRE`.
    pub file_system_type: Str,
    /// `2.15` (the newest Lustre version FSx offers; clients of the Deep
    /// Learning AMIs mount it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_system_type_version: Option<Str>,
    /// GiB.
    pub storage_capacity: Value<u32>,
    /// `SSD`.
    pub storage_type: Str,
    /// One subnet: a Lustre file system lives in one Availability Zone.
    pub subnet_ids: Vec<Str>,
    /// The groups of its network interfaces.
    pub security_group_ids: Vec<Str>,
    /// The Lustre settings.
    pub lustre_configuration: LustreConfiguration,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(FileSystem, "AWS::FSx::FileSystem", ["DNSName", "LustreMountName", "ResourceARN", "RootVolumeId"]);

/// `LustreConfiguration`
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LustreConfiguration {
    /// `SCRATCH_2` or `PERSISTENT_2` (among others this project does not use).
    pub deployment_type: Str,
    /// Scratch file systems only: `s3://bucket[/prefix]` whose objects are
    /// listed into the file system and loaded on first read (lazy load).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub import_path: Option<Str>,
    /// Persistent file systems only: MB/s per TiB (125, 250, 500, 1000 for
    /// `PERSISTENT_2`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_unit_storage_throughput: Option<Value<u32>>,
    /// `NONE` or `LZ4`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_compression_type: Option<Str>,
}

/// `AWS::FSx::DataRepositoryAssociation`: a directory of a persistent
/// Lustre file system linked to an S3 prefix.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DataRepositoryAssociation {
    /// The file system (`Ref`).
    pub file_system_id: Str,
    /// The directory in the file system, `/` for its root.
    pub file_system_path: Str,
    /// `s3://bucket/prefix/`.
    pub data_repository_path: Str,
    /// List the repository's objects into the file system when the
    /// association is made.
    pub batch_import_meta_data_on_create: bool,
    /// Which changes in S3 follow into the file system afterwards.
    #[serde(rename = "S3", skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Policies>,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(DataRepositoryAssociation, "AWS::FSx::DataRepositoryAssociation", ["AssociationId", "ResourceARN"]);

/// `S3` of a data repository association.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct S3Policies {
    /// What is imported automatically.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_import_policy: Option<EventPolicy>,
}

/// `AutoImportPolicy` / `AutoExportPolicy`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct EventPolicy {
    /// `NEW`, `CHANGED`, `DELETED`.
    pub events: Vec<Str>,
}
