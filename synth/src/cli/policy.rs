//! `synth policy`: the IAM policies a deploying user needs, one document
//! at a time as JSON on stdout (`crate::deploy::policy` builds them).

use cli_output::errln;

use crate::deploy::policy::{self, Part, Scope};
use crate::exit::{ExitCode, printed};
use crate::region::Region;

/// Arguments of `synth policy`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Two documents (together they pass AWS's 6,144 characters for one managed
policy). Attach both to the user (or group) that runs synth, with the AWS CLI
as an administrator:

  for part in calls resources; do
    synth policy --part $part --stack-name-prefix resnet --region us-east-1 \\
        > synth-$part.json
    aws iam create-policy --policy-name synth-$part --policy-document file://synth-$part.json
    aws iam attach-user-policy --user-name alice \\
        --policy-arn arn:aws:iam::<account>:policy/synth-$part
  done

With them the user can run deploy, diff, status, events, outputs, logs, ssh,
stage, resume, capacity and delete on stacks whose names start with the prefix, and nothing
else. It allows CloudFormation to create what a cluster template holds
(VPC, instances, roles, queues, file system, log group) with the user's
credentials; roles, instance profiles, queues, the worker group and log
groups only under the prefix. A newer synth may need more: print them again
after an upgrade (`aws iam create-policy-version --set-as-default`).")]
pub struct PolicyArgs {
    /// Which document: the calls synth itself makes, or what CloudFormation does on
    /// the user's behalf to the cluster's resources.
    #[arg(long, value_enum)]
    part: Part,

    /// Only stacks whose names start with this (a blueprint's `name` is its
    /// stack's name). Default: every stack name.
    #[arg(long, value_name = "PREFIX", default_value = "", hide_default_value = true)]
    stack_name_prefix: String,

    /// Only this region. Default: every region.
    #[arg(long, short = 'r', value_name = "REGION")]
    region: Option<Region>,
}

/// Runs `synth policy`.
pub(super) fn run(args: &PolicyArgs) -> ExitCode {
    let scope = match Scope::new(&args.stack_name_prefix, args.region.map(|r| r.code())) {
        Ok(scope) => scope,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::Error;
        }
    };
    let document = match policy::document(&scope, args.part) {
        Ok(document) => document,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::Error;
        }
    };
    let size = policy::counted_size(&document);
    if size > policy::MANAGED_POLICY_LIMIT {
        errln!(
            "warning: this document has {size} characters, over the {} AWS allows a managed policy: \
             a shorter --stack-name-prefix makes it fit",
            policy::MANAGED_POLICY_LIMIT
        );
    }
    let text = format!("{document:#}\n");
    printed(cli_output::print(&text), "the policy", ExitCode::Success)
}
