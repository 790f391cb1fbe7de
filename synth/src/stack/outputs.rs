//! Stack outputs: how to reach the master (its address, a ready-to-paste SSH
//! command and Session Manager command), the EFS id, the worker group name
//! (to add or remove workers), the cluster security group, and what the
//! master's formation signal reported.

use cfn::{Expr, Output, Template};

use super::compute::Cluster;
use super::context::{Ctx, sub_literal};
use super::parameters::Inputs;
use super::security::Groups;
use super::storage::FileSystem;

/// The stack output with the formation wait condition's data:
/// `{"<master's instance id>": "<the signal's data, JSON>"}`, as AWS gives
/// `Fn::GetAtt [<WaitCondition>, Data]`. The lifecycle commands read it
/// (`crate::deploy::formation`) by this name.
pub(crate) const FORMATION_DATA_OUTPUT: &str = "FormationData";

/// The stack output with the AMI id the nodes boot, as CloudFormation
/// resolved the image at create (or the last update): `synth deploy`
/// reads it and keeps that image on updates (`crate::deploy::image`).
pub(crate) const IMAGE_OUTPUT: &str = "ImageAmi";

pub(super) fn add(t: &mut Template, ctx: &Ctx, inputs: &Inputs, cluster: &Cluster, fs: &FileSystem, groups: &Groups) {
    let spec = ctx.spec;
    let user = sub_literal(&spec.image.user);
    let out = |description: &str, value: Expr| Output { description: description.into(), value, condition: None };

    let address = match &cluster.master_ip {
        Some(eip) => eip.r#ref(),
        None => cluster.master.attr("PrivateIp"),
    };
    t.output(
        "MasterAddress",
        out(
            if spec.master.public {
                "The master's public address (an Elastic IP: it survives stop and start)"
            } else {
                "The master's private address (it has no public address: use Session Manager)"
            },
            address.clone(),
        ),
    );
    t.output("MasterInstanceId", out("The master's instance id", cluster.master.r#ref()));

    // Through Session Manager when the master is private; it tunnels SSH
    // without any inbound rule.
    let proxy = " -o ProxyCommand='aws ssm start-session --target %h --document-name AWS-StartSSHSession --parameters portNumber=%p --region ${AWS::Region}'";
    let (target, via) = if spec.master.public {
        ("${Address}".to_owned(), String::new())
    } else {
        ("${Instance}".to_owned(), proxy.to_owned())
    };
    let vars = |key_part: &str| {
        let login = format!("{user}@{target}");
        let words: Vec<&str> =
            ["ssh", key_part, via.trim_start(), &login].into_iter().filter(|w| !w.is_empty()).collect::<Vec<_>>();
        Expr::SubWith(
            words.join(" "),
            [("Address".to_owned(), address.clone()), ("Instance".to_owned(), cluster.master.r#ref())]
                .into_iter()
                .filter(|(name, _)| target.contains(name.as_str()))
                .collect(),
        )
    };
    // Quoted: a key name may hold spaces, `;` or `$` (never `'`: the
    // KeyName parameter's pattern refuses it), and the command is pasted into a shell.
    let ssh = inputs.has_key.then(vars("-i '${KeyName}.pem'"), vars(""));
    let ssh = if spec.master.public || spec.access.session_manager {
        ssh
    } else {
        Expr::from("none: the master is private and Session Manager is off; reach it from inside the VPC")
    };
    t.output("SshCommand", out("SSH to the master (paste into a terminal)", ssh));

    if spec.access.session_manager {
        t.output(
            "SessionManagerCommand",
            out(
                "A shell on the master through Session Manager (needs the AWS CLI and its Session Manager plugin)",
                Expr::SubWith(
                    "aws ssm start-session --target ${Instance} --region ${AWS::Region}".into(),
                    [("Instance".to_owned(), cluster.master.r#ref())].into(),
                ),
            ),
        );
    }
    t.output("FileSystemId", out("The shared EFS file system", fs.id.clone()));
    t.output(
        "WorkerGroupName",
        out(
            "The workers' Auto Scaling group: change its desired capacity to add or remove workers",
            cluster.workers.r#ref(),
        ),
    );
    t.output("ClusterSecurityGroupId", out("The nodes' security group", groups.cluster.clone()));
    t.output(
        IMAGE_OUTPUT,
        out(
            "The AMI id the nodes boot, as resolved when the stack was created (synth deploy keeps it on updates)",
            inputs.image_id.clone(),
        ),
    );
    // The master's success signal: how many workers joined and the formation
    // timeline's summary, which `synth deploy` and `synth status` print as
    // a phase table. AWS gives `{"<master's instance id>": "<data JSON>"}`,
    // a string, and documents this very output ("Data", in
    // https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-cloudformation-waitcondition.html);
    // cfn-lint's schema types `Data` as an object and flags it (E6101).
    // cfn-lint has no per-output exception, hence the template-wide one.
    t.metadata("cfn-lint", serde_json::json!({"config": {"ignore_checks": ["E6101"]}}));
    t.output(
        FORMATION_DATA_OUTPUT,
        out(
            "What the master reported when the cluster formed (JSON by its instance id: workers joined, per-phase timeline)",
            cluster.formation.attr("Data"),
        ),
    );
}
