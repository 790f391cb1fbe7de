//! `AWS::ImageBuilder::*`: what an EC2 Image Builder pipeline needs
//! (components, an image recipe, infrastructure and distribution
//! configurations, the pipeline).
//!
//! Image Builder takes tags as a plain map (`{"key": "value"}`), not the
//! common list of `Key`/`Value` pairs.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Str, resource};

/// Image Builder's tag map.
pub type Tags = BTreeMap<String, String>;

/// `AWS::ImageBuilder::Component`: a YAML document of build or test steps.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Component {
    /// Its name (unique with `Version` in the account and region).
    pub name: Str,
    /// Semantic version `x.y.z`; a changed document needs a new version.
    pub version: Str,
    /// `Linux` or `Windows`.
    pub platform: Str,
    /// What it does.
    pub description: Str,
    /// The component document (YAML).
    pub data: Str,
    /// Tags.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
}
resource!(Component, "AWS::ImageBuilder::Component", ["Arn", "Encrypted", "Name", "Type"]);

/// A component in a recipe.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ComponentConfiguration {
    /// The component's ARN.
    pub component_arn: Str,
}

/// `AWS::ImageBuilder::ImageRecipe`: the parent image and the components applied to it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ImageRecipe {
    /// Its name.
    pub name: Str,
    /// Semantic version `x.y.z`.
    pub version: Str,
    /// What it builds.
    pub description: Str,
    /// An AMI id (or `ssm:` parameter) to start from.
    pub parent_image: Str,
    /// Build and test components, in order.
    pub components: Vec<ComponentConfiguration>,
    /// Tags.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
}
resource!(ImageRecipe, "AWS::ImageBuilder::ImageRecipe", ["Arn", "Name"]);

/// `AWS::ImageBuilder::InfrastructureConfiguration`: the instance images are built and tested on.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct InfrastructureConfiguration {
    /// Its name.
    pub name: Str,
    /// What it is for.
    pub description: Str,
    /// The build instance's profile (by name).
    pub instance_profile_name: Str,
    /// Instance types to build on.
    pub instance_types: Vec<Str>,
    /// Terminate a failed build's instance (instead of keeping it to debug).
    pub terminate_instance_on_failure: bool,
    /// IMDS settings of the build instance.
    pub instance_metadata_options: InstanceMetadataOptions,
    /// Tags.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
}
resource!(InfrastructureConfiguration, "AWS::ImageBuilder::InfrastructureConfiguration", ["Arn", "Name"]);

/// IMDS settings of the build instance.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceMetadataOptions {
    /// `required`: IMDSv2 only.
    pub http_tokens: Str,
    /// Hops a metadata response may take.
    pub http_put_response_hop_limit: u32,
}

/// `AWS::ImageBuilder::DistributionConfiguration`: where the image goes.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DistributionConfiguration {
    /// Its name.
    pub name: Str,
    /// What it does.
    pub description: Str,
    /// One entry per region.
    pub distributions: Vec<Distribution>,
    /// Tags.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
}
resource!(DistributionConfiguration, "AWS::ImageBuilder::DistributionConfiguration", ["Arn", "Name"]);

/// The image in one region.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Distribution {
    /// The region.
    pub region: Str,
    /// The AMI's name, description and tags.
    pub ami_distribution_configuration: AmiDistributionConfiguration,
    /// SSM parameters that get the AMI id (created or updated by the distribution).
    pub ssm_parameter_configurations: Vec<SsmParameterConfiguration>,
}

/// The AMI's name, description and tags.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AmiDistributionConfiguration {
    /// Its name; `{{ imagebuilder:buildDate }}` makes it unique per build.
    pub name: Str,
    /// Its description.
    pub description: Str,
    /// Tags on the AMI.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ami_tags: Tags,
}

/// An SSM parameter that holds the AMI id in one region.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SsmParameterConfiguration {
    /// Its name.
    pub parameter_name: Str,
    /// `aws:ec2:image`: SSM checks the value is an AMI id.
    pub data_type: Str,
}

/// `AWS::ImageBuilder::ImagePipeline`: recipe + infrastructure + distribution.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ImagePipeline {
    /// Its name.
    pub name: Str,
    /// What it builds.
    pub description: Str,
    /// The recipe's ARN.
    pub image_recipe_arn: Str,
    /// The infrastructure configuration's ARN.
    pub infrastructure_configuration_arn: Str,
    /// The distribution configuration's ARN.
    pub distribution_configuration_arn: Str,
    /// Run the test components on an instance of the new image.
    pub image_tests_configuration: ImageTestsConfiguration,
    /// `ENABLED`.
    pub status: Str,
    /// Tags.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
}
resource!(ImagePipeline, "AWS::ImageBuilder::ImagePipeline", ["Arn", "Name"]);

/// Whether and how long the image is tested.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ImageTestsConfiguration {
    /// Run the test phase.
    pub image_tests_enabled: bool,
    /// Minutes the tests may take (60 to 1440).
    pub timeout_minutes: u32,
}
