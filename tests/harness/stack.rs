//! A cluster's CloudFormation stack in the local AWS: the template built
//! in process with `synth::build`, created with the SDK, waited for, and
//! read back (outputs, physical ids, Auto Scaling instances, and the user
//! data moto stored in each launch template, so a test sees exactly what
//! `Fn::Sub` made of the template).

use crate::moto::{LocalAws, REGION};
use crate::{Error, Result, repo_root};
use aws_sdk_cloudformation::types::{Capability, Parameter, StackStatus};
use base64::Engine;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The SSM parameter the stacks' `ImageId` names: moto refuses to create
/// the templates' default (`/aws/service/...` is reserved).
pub const IMAGE_PARAMETER: &str = "/e2e/ami-id";

/// A created stack.
#[derive(Clone, Debug)]
pub struct ClusterStack {
    /// The stack name.
    pub name: String,
    /// The stack id (an ARN).
    pub id: String,
    /// Outputs by key.
    pub outputs: BTreeMap<String, String>,
    /// Physical resource ids by logical id (queue URLs, the group name,
    /// the wait condition handle URL, ...).
    pub resources: BTreeMap<String, String>,
}

impl ClusterStack {
    /// Builds the template of `blueprint` (a path relative to the repository
    /// root, or absolute) for us-east-1, and creates stack `name` from it in
    /// `aws` with `WorkerCount` = `workers` (and `MaxWorkers` at least that)
    /// plus `parameters`; waits for CREATE_COMPLETE.
    pub async fn create(
        aws: &LocalAws,
        blueprint: &str,
        name: &str,
        workers: u32,
        parameters: &[(&str, &str)],
    ) -> Result<ClusterStack> {
        let template = build_template(blueprint)?;
        ensure_image_parameter(aws)?;
        let mut params: BTreeMap<String, String> = BTreeMap::new();
        params.insert("ImageId".into(), IMAGE_PARAMETER.into());
        params.insert("WorkerCount".into(), workers.to_string());
        params.insert("MaxWorkers".into(), workers.max(2).to_string());
        for (k, v) in parameters {
            params.insert(k.to_string(), v.to_string());
        }
        let cfn = aws.cloudformation();
        let created = cfn
            .create_stack()
            .stack_name(name)
            .template_body(template)
            .set_parameters(Some(
                params.iter().map(|(k, v)| Parameter::builder().parameter_key(k).parameter_value(v).build()).collect(),
            ))
            .capabilities(Capability::CapabilityIam)
            .capabilities(Capability::CapabilityNamedIam)
            .send()
            .await
            .map_err(|e| Error::aws(format!("CreateStack {name} (moto log: {})", aws.log_path().display()), &e))?;
        let id = created.stack_id.unwrap_or_default();
        let stack = wait_for_create(aws, name).await?;
        ClusterStack::read(aws, name, id, &stack).await
    }

    /// The stack `name` as it is now, in whatever status (one that `synth
    /// deploy` is creating, say): id, outputs so far, resources.
    pub async fn describe(aws: &LocalAws, name: &str) -> Result<ClusterStack> {
        let stack = describe_stack(aws, name).await?;
        let id = stack.stack_id().unwrap_or_default().to_string();
        ClusterStack::read(aws, name, id, &stack).await
    }

    async fn read(
        aws: &LocalAws,
        name: &str,
        id: String,
        stack: &aws_sdk_cloudformation::types::Stack,
    ) -> Result<ClusterStack> {
        let cfn = aws.cloudformation();
        let outputs = stack
            .outputs()
            .iter()
            .filter_map(|o| Some((o.output_key.clone()?, o.output_value.clone().unwrap_or_default())))
            .collect();
        let listed = cfn
            .list_stack_resources()
            .stack_name(name)
            .send()
            .await
            .map_err(|e| Error::aws(format!("ListStackResources {name}"), &e))?;
        let resources = listed
            .stack_resource_summaries()
            .iter()
            .filter_map(|r| Some((r.logical_resource_id.clone()?, r.physical_resource_id.clone()?)))
            .filter(|(_, physical)| !physical.is_empty())
            .collect();
        Ok(ClusterStack { name: name.to_string(), id, outputs, resources })
    }

    /// The physical id of `logical_id`, or an error naming it.
    pub fn resource(&self, logical_id: &str) -> Result<&str> {
        self.resources.get(logical_id).map(String::as_str).ok_or_else(|| Error::Unexpected {
            what: format!("stack {}", self.name),
            detail: format!("no physical id for {logical_id}; resources: {:?}", self.resources.keys()),
        })
    }

    /// The master's instance id (moto's instance for `MasterInstance`).
    pub fn master_instance_id(&self) -> Result<&str> {
        self.resource("MasterInstance")
    }

    /// The worker Auto Scaling group's name.
    pub fn worker_group(&self) -> Result<&str> {
        self.resource("WorkerGroup")
    }

    /// The instance ids moto launched in the worker group, sorted.
    pub async fn worker_instance_ids(&self, aws: &LocalAws) -> Result<Vec<String>> {
        let group = self.worker_group()?;
        let mut ids: Vec<String> =
            aws.auto_scaling_group(group).await?.instances().iter().filter_map(|i| i.instance_id.clone()).collect();
        ids.sort();
        Ok(ids)
    }

    /// The user data script of launch template `logical_id`
    /// (`MasterLaunchTemplate`, `WorkerLaunchTemplate`), as moto stored it
    /// (`DescribeLaunchTemplateVersions`, latest version), decoded.
    pub fn user_data(&self, aws: &LocalAws, logical_id: &str) -> Result<String> {
        let template_id = self.resource(logical_id)?;
        let xml = aws.query(
            "ec2",
            &[
                ("Action", "DescribeLaunchTemplateVersions"),
                ("Version", "2016-11-15"),
                ("LaunchTemplateId", template_id),
                ("LaunchTemplateVersion.1", "$Latest"),
            ],
        )?;
        let encoded = xml_text(&xml, "userData").ok_or_else(|| Error::Unexpected {
            what: format!("DescribeLaunchTemplateVersions {template_id}"),
            detail: format!("no <userData> in {xml}"),
        })?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).map_err(|e| {
            Error::Unexpected { what: format!("user data of {logical_id}"), detail: format!("not base64: {e}") }
        })?;
        String::from_utf8(bytes)
            .map_err(|e| Error::Unexpected { what: format!("user data of {logical_id}"), detail: e.to_string() })
    }

    /// The node config JSON in launch template `logical_id`'s user data.
    pub fn node_config_json(&self, aws: &LocalAws, logical_id: &str) -> Result<String> {
        let script = self.user_data(aws, logical_id)?;
        node_contract::config_from_user_data(&script)
            .map(str::to_string)
            .map_err(|e| Error::Unexpected { what: format!("user data of {logical_id}"), detail: e.to_string() })
    }
}

/// The template JSON of `blueprint` for [`REGION`], built with `synth`.
pub fn build_template(blueprint: &str) -> Result<String> {
    let path = repo_root().join(blueprint);
    let text = std::fs::read_to_string(&path).map_err(Error::io("reading the blueprint", &path))?;
    let region = REGION.parse().map_err(|_| Error::Setup(format!("synth does not know region {REGION}")))?;
    let built = synth::build(&text, &path.display().to_string(), Some(region))
        .map_err(|e| Error::Setup(format!("synth could not build {}: {e}", path.display())))?;
    Ok(built.json)
}

/// Creates [`IMAGE_PARAMETER`] with an AMI id moto knows, once per moto.
/// Puts the SSM parameter `IMAGE_PARAMETER` (an AMI moto knows) that stacks pass as `ImageId`.
pub fn ensure_image_parameter(aws: &LocalAws) -> Result<()> {
    ensure_image_parameter_in(aws, REGION)
}

/// [`ensure_image_parameter`] in `region` (SSM parameters and images are per region).
pub fn ensure_image_parameter_in(aws: &LocalAws, region: &str) -> Result<()> {
    let images = aws.query_in(region, "ec2", &[("Action", "DescribeImages"), ("Version", "2016-11-15")])?;
    let image = xml_text(&images, "imageId")
        .ok_or_else(|| Error::Unexpected { what: "DescribeImages".into(), detail: "moto lists no image".into() })?;
    let body = serde_json::json!({
        "Name": IMAGE_PARAMETER, "Value": image, "Type": "String", "Overwrite": true,
    });
    aws.json_call_in(region, "ssm", "AmazonSSM.PutParameter", &body)?;
    Ok(())
}

/// How long moto may take to create a stack (it does so within the call).
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// `DescribeStacks` of one stack.
async fn describe_stack(aws: &LocalAws, name: &str) -> Result<aws_sdk_cloudformation::types::Stack> {
    let out = aws
        .cloudformation()
        .describe_stacks()
        .stack_name(name)
        .send()
        .await
        .map_err(|e| Error::aws(format!("DescribeStacks {name}"), &e))?;
    out.stacks()
        .first()
        .cloned()
        .ok_or_else(|| Error::Unexpected { what: format!("DescribeStacks {name}"), detail: "no stack".into() })
}

async fn wait_for_create(aws: &LocalAws, name: &str) -> Result<aws_sdk_cloudformation::types::Stack> {
    let deadline = Instant::now() + CREATE_TIMEOUT;
    loop {
        let stack = describe_stack(aws, name).await?;
        match stack.stack_status() {
            Some(StackStatus::CreateComplete) => return Ok(stack),
            Some(StackStatus::CreateInProgress) | Some(StackStatus::ReviewInProgress) | None => {}
            Some(other) => {
                return Err(Error::Unexpected {
                    what: format!("stack {name}"),
                    detail: format!("status {other}: {}", stack.stack_status_reason().unwrap_or("")),
                });
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: format!("stack {name} CREATE_COMPLETE"),
                seconds: CREATE_TIMEOUT.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The text of the first `<tag>...</tag>` in `xml`, unescaped. Enough for
/// moto's flat EC2 answers; not a general XML parser.
pub fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{tag}>"))?;
    Some(
        xml[start..end]
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}
