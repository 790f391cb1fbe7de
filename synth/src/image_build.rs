//! The image build template (`synth image`): an EC2 Image Builder pipeline
//! that bakes the `deeplearning-agent` package into the blueprint's base
//! image and distributes the result to the five regions.
//!
//! Input: a validated [`ClusterSpec`] (its image: the base image, its OS
//! family, and the package URL and checksum as parameter defaults when the
//! blueprint has them). Output: a [`Template`] with
//! - an install component: downloads the package from the `PackageUrl`
//!   parameter (s3://), checks `PackageSha256`, installs it (the `.deb` with
//!   apt on Ubuntu images, the tarball's `install.sh` on Amazon Linux), the
//!   same steps the cluster's user data runs when it installs at boot;
//! - a test component, run on an instance of the new image:
//!   `agent --version` and `trainer doctor --local`;
//! - an image recipe from the base image, a build role that may read exactly
//!   the package object, an infrastructure configuration (IMDSv2 only), a
//!   distribution to the five regions that writes the new AMI id to the SSM
//!   parameter `ImageParameterName` in each, and the pipeline.
//!
//! A cluster blueprint then uses the image with
//! `image: { ssm_parameter: <ImageParameterName> }`.
//!
//! Image Builder components and recipes cannot change under one version:
//! a new package needs a new `ImageVersion` (the parameter says so).

use std::collections::BTreeMap;

use cfn::resources::{iam, imagebuilder as ib};
use cfn::{Attributes, Expr, Output, Parameter, ParameterType, Template};
use node_contract::{PackageFormat, PackageSource};
use serde_json::json;

use crate::region::Region;
use crate::spec::{ClusterSpec, ImageSource};
use crate::stack::identity::{SSM_CORE, document, trust};
use crate::stack::{arn, checkov_skip};

/// Instance type images are built and tested on: no GPU is needed to
/// install the package, and every supported region offers it.
const BUILD_INSTANCE_TYPE: &str = "m6i.large";

/// The SSM parameter that gets the new AMI id, by default.
fn default_parameter_name(spec: &ClusterSpec) -> String {
    format!("/deeplearning/{}/ami-id", spec.name)
}

/// `AWS::StackName`-prefixed name, unique per stack in the account and region.
fn named(what: &str) -> cfn::Value<String> {
    Expr::sub(format!("${{AWS::StackName}}-{what}")).into()
}

/// `text` indented by `spaces` on every non-empty line (YAML block scalars).
fn indent(text: &str, spaces: usize) -> String {
    let pad = " ".repeat(spaces);
    text.lines().map(|l| if l.is_empty() { String::new() } else { format!("{pad}{l}\n") }).collect()
}

/// The install component's document: the contract's install steps, with
/// `fail` reporting to Image Builder's log and failing the build.
fn install_document(format: PackageFormat) -> String {
    let steps = node_contract::install_step(&PackageSource {
        url: "s3://${PackageObject}",
        sha256: "${PackageSha256}",
        format,
        region: "${AWS::Region}",
    });
    let script = format!("set -euo pipefail\nfail() {{ echo \"deeplearning: $1\" >&2; exit 1; }}\n{steps}");
    let mut doc = String::from(
        "name: deeplearning-agent-install
description: Downloads the deeplearning-agent package, checks its SHA-256 and installs it.
schemaVersion: 1.0
phases:
  - name: build
    steps:
      - name: InstallAgentPackage
        action: ExecuteBash
        inputs:
          commands:
            - |
",
    );
    doc.push_str(&indent(&script, 14));
    doc.push_str(
        "  - name: validate
    steps:
      - name: AgentRuns
        action: ExecuteBash
        inputs:
          commands:
            - agent --version
            - trainer --version
",
    );
    doc
}

/// The test component's document, run on an instance of the new image.
const TEST_DOCUMENT: &str = "name: deeplearning-agent-test
description: The agent runs, and trainer finds the agent, its unit and an ssh client (trainer doctor --local).
schemaVersion: 1.0
phases:
  - name: test
    steps:
      - name: AgentVersion
        action: ExecuteBash
        inputs:
          commands:
            - agent --version
      - name: TrainerDoctorLocal
        action: ExecuteBash
        inputs:
          commands:
            - trainer doctor --local
";

/// Compiles the image build template for `spec`.
pub(crate) fn compile(spec: &ClusterSpec) -> Template {
    let mut t = Template::new(format!(
        "EC2 Image Builder pipeline: the base image of blueprint {} with the deeplearning agent, in {} (synth {})",
        spec.name,
        Region::ALL.iter().map(|r| r.code()).collect::<Vec<_>>().join(", "),
        env!("CARGO_PKG_VERSION")
    ));
    let tags: ib::Tags = spec
        .tags
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain([("deeplearning:image".to_owned(), spec.name.clone())])
        .collect();
    // The package's URL and checksum are the defaults only when it is an
    // s3:// object: the build downloads it from S3.
    let package = spec.image.agent_package.as_ref().filter(|p| p.s3_object().is_some());

    let mut url = Parameter::new(
        ParameterType::String,
        "Agent package (S3 URL)",
        match spec.image.package_format {
            PackageFormat::Deb => {
                "s3:// URL of the deeplearning-agent .deb that packaging/build made (upload it first)."
            }
            PackageFormat::Tarball => {
                "s3:// URL of the deeplearning-agent .tar.gz that packaging/build made (upload it first)."
            }
        },
    )
    .constrained(
        "^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^'\"`$\\\\ ]+$",
        "s3://BUCKET/KEY, with no quotes, spaces or $",
    );
    if let Some(p) = package {
        url = url.default(p.url.as_str());
    }
    let url = t.parameter("PackageUrl", url);
    let mut sha = Parameter::new(
        ParameterType::String,
        "Agent package SHA-256",
        "The package's SHA-256 (64 hex digits, from packaging/build's SHA256SUMS); the build fails on a mismatch.",
    )
    .constrained("^[0-9a-f]{64}$", "64 lower-case hex digits");
    if let Some(p) = package {
        sha = sha.default(p.sha256.as_str());
    }
    let sha = t.parameter("PackageSha256", sha);
    let version = Parameter::new(
        ParameterType::String,
        "Image version",
        "Version x.y.z of the components and recipe. Image Builder cannot change them under one version: raise it with every new package.",
    )
    .default("1.0.0")
    .constrained("^[0-9]+\\.[0-9]+\\.[0-9]+$", "a version such as 1.0.0");
    let version = t.parameter("ImageVersion", version);
    let ssm_name = Parameter::new(
        ParameterType::String,
        "SSM parameter for the image id",
        "Every build writes the new AMI id to this parameter in each region; a blueprint uses it as image.ssm_parameter.",
    )
    .default(default_parameter_name(spec))
    .constrained("^/[a-zA-Z0-9_.\\-/]+$", "a parameter path such as /deeplearning/my-image/ami-id");
    let ssm_name = t.parameter("ImageParameterName", ssm_name);
    let parent = match (&spec.image.source, spec.region) {
        (ImageSource::SsmParameter(path), _) => Parameter::new(
            ParameterType::SsmValue("AWS::EC2::Image::Id"),
            "Base image (SSM parameter)",
            "SSM parameter that holds the AMI id the image starts from (the blueprint's image).",
        )
        .default(path.as_str()),
        (ImageSource::AmiMap(amis), region) => {
            // Without a pinned region the build runs where the stack is; the
            // blueprint's entry for us-east-1 is only the form's default.
            let default =
                region.and_then(|r| amis.get(&r)).or_else(|| amis.values().next()).cloned().unwrap_or_default();
            Parameter::new(
                ParameterType::Aws("AWS::EC2::Image::Id"),
                "Base image (AMI id)",
                "AMI id the image starts from, in the region of this stack.",
            )
            .default(default)
        }
    };
    let parent = t.parameter("BaseImage", parent);
    t.parameter_group("Agent package", &[&url, &sha]);
    t.parameter_group("Image", &[&parent, &version, &ssm_name]);

    // `bucket/key` of the s3:// URL: the build role may read exactly that object.
    let object = Expr::Select(1, Box::new(Expr::Split("s3://".into(), Box::new(url.r#ref()))));
    let role = t.add(
        "BuildRole",
        iam::Role {
            description: format!("Image Builder instances of image {}: read the agent package, report to Image Builder", spec.name).into(),
            assume_role_policy_document: trust("ec2.amazonaws.com"),
            managed_policy_arns: vec![
                arn("iam::aws:policy/EC2InstanceProfileForImageBuilder").into(),
                arn(SSM_CORE).into(),
            ],
            policies: vec![iam::Policy {
                policy_name: "agent-package".into(),
                policy_document: document(vec![json!({
                    "Sid": "ReadAgentPackage",
                    "Effect": "Allow",
                    "Action": "s3:GetObject",
                    "Resource": Expr::SubWith("arn:${AWS::Partition}:s3:::${Object}".into(), [("Object".to_owned(), object.clone())].into())
                })]),
            }],
            tags: vec![cfn::Tag::new("deeplearning:image", spec.name.as_str())],
        },
    );
    let profile = t.add("BuildInstanceProfile", iam::InstanceProfile { roles: vec![role.r#ref().into()] });

    let component_skip = || Attributes {
        metadata: Some(checkov_skip(&[(
            "CKV_AWS_180",
            "The component document is a public install script with no secrets; Image Builder encrypts it with an AWS owned key.",
        )])),
        ..Attributes::default()
    };
    let install = t.add_with(
        "InstallComponent",
        ib::Component {
            name: named("install-agent"),
            version: version.r#ref().into(),
            platform: "Linux".into(),
            description: "Downloads the deeplearning-agent package, checks its SHA-256 and installs it".into(),
            data: Expr::SubWith(
                install_document(spec.image.package_format),
                BTreeMap::from([("PackageObject".to_owned(), object), ("PackageSha256".to_owned(), sha.r#ref())]),
            )
            .into(),
            tags: tags.clone(),
        },
        component_skip(),
    );
    let test = t.add_with(
        "TestComponent",
        ib::Component {
            name: named("test-agent"),
            version: version.r#ref().into(),
            platform: "Linux".into(),
            description: "agent --version and trainer doctor --local on an instance of the new image".into(),
            data: TEST_DOCUMENT.into(),
            tags: tags.clone(),
        },
        component_skip(),
    );
    let recipe = t.add(
        "ImageRecipe",
        ib::ImageRecipe {
            name: named("recipe"),
            version: version.r#ref().into(),
            description: format!("The base image of blueprint {} with the deeplearning agent", spec.name).into(),
            parent_image: parent.r#ref().into(),
            components: vec![
                ib::ComponentConfiguration { component_arn: install.attr("Arn").into() },
                ib::ComponentConfiguration { component_arn: test.attr("Arn").into() },
            ],
            tags: tags.clone(),
        },
    );
    let infrastructure = t.add(
        "BuildInfrastructure",
        ib::InfrastructureConfiguration {
            name: named("build"),
            description: "Builds and tests the image (no GPU needed); IMDSv2 only".into(),
            instance_profile_name: profile.r#ref().into(),
            instance_types: vec![BUILD_INSTANCE_TYPE.into()],
            terminate_instance_on_failure: true,
            instance_metadata_options: ib::InstanceMetadataOptions {
                http_tokens: "required".into(),
                http_put_response_hop_limit: 1,
            },
            tags: tags.clone(),
        },
    );
    let distribution = t.add_with(
        "Distribution",
        ib::DistributionConfiguration {
            name: named("distribution"),
            description: "The image in every supported region, its id in an SSM parameter in each".into(),
            distributions: Region::ALL
                .iter()
                .map(|r| ib::Distribution {
                    region: r.code().into(),
                    ami_distribution_configuration: ib::AmiDistributionConfiguration {
                        name: named("{{ imagebuilder:buildDate }}"),
                        description: format!("Blueprint {}'s base image with the deeplearning agent", spec.name).into(),
                        ami_tags: tags.clone(),
                    },
                    ssm_parameter_configurations: vec![ib::SsmParameterConfiguration {
                        parameter_name: ssm_name.r#ref().into(),
                        data_type: "aws:ec2:image".into(),
                    }],
                })
                .collect(),
            tags: tags.clone(),
        },
        Attributes {
            metadata: Some(checkov_skip(&[(
                "CKV_AWS_199",
                "The AMIs keep the default EBS encryption of each region: a customer managed key would be needed in all five regions, and clusters in other accounts could not launch them.",
            )])),
            ..Attributes::default()
        },
    );
    let pipeline = t.add(
        "Pipeline",
        ib::ImagePipeline {
            name: named("pipeline"),
            description: format!("Bakes the deeplearning agent into blueprint {}'s base image", spec.name).into(),
            image_recipe_arn: recipe.attr("Arn").into(),
            infrastructure_configuration_arn: infrastructure.attr("Arn").into(),
            distribution_configuration_arn: distribution.attr("Arn").into(),
            image_tests_configuration: ib::ImageTestsConfiguration { image_tests_enabled: true, timeout_minutes: 60 },
            status: "ENABLED".into(),
            tags,
        },
    );
    t.output(
        "StartBuild",
        Output {
            description: "Build the image now (about 30 minutes, then distribution to every region)".into(),
            value: Expr::SubWith(
                "aws imagebuilder start-image-pipeline-execution --region ${AWS::Region} --image-pipeline-arn ${Pipeline}"
                    .into(),
                [("Pipeline".to_owned(), pipeline.r#ref())].into(),
            ),
            condition: None,
        },
    );
    t.output(
        "BlueprintImage",
        Output {
            description: "What a cluster blueprint writes to boot the built image".into(),
            value: Expr::SubWith(
                "image: { ssm_parameter: ${Name} }".into(),
                [("Name".to_owned(), ssm_name.r#ref())].into(),
            ),
            condition: None,
        },
    );
    t
}
