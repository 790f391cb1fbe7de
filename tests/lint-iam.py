#!/usr/bin/env python3
"""Lints every IAM policy in CloudFormation templates with parliament.

Usage: lint-iam.py TEMPLATE.json...

A file that is an IAM policy document itself (a top-level `Statement`, no
`Resources`: what `synth policy` prints, the deploying user's policy) is
linted as it is. Four of parliament's findings are what deploying a stack
with IAM roles (and an FSx for Lustre file system linked to S3) means, not
mistakes, and are expected there (printed as `expected:`, not counted): PERMISSIONS_MANAGEMENT_ACTIONS and
PRIVILEGE_ESCALATION (CloudFormation, with the user's credentials, creates
the stack's roles, writes their policies and passes them to instances; the
roles are limited to the stack-name prefix, but a user who can deploy can
write a role's policy), and RESOURCE_STAR (EC2 and EFS resources, and the
calls that take no resource, cannot be named before CloudFormation makes
them), and RESOURCE_POLICY_PRIVILEGE_ESCALATION (the handler of
`AWS::FSx::DataRepositoryAssociation` declares `s3:PutBucketPolicy` and
`s3:GetBucketPolicy`: FSx sets the linked bucket's policy as the caller; the
bucket is the blueprint's, which `synth policy` does not know, so `*`). Any
other finding fails, as for templates.

For each template: every identity policy of every `AWS::IAM::Role` (its inline
`Policies`), `AWS::IAM::Policy` and `AWS::IAM::ManagedPolicy`, and every resource
policy (`AWS::SQS::QueuePolicy`, `AWS::S3::BucketPolicy`), goes through
parliament (https://github.com/duo-labs/parliament), after its intrinsic
functions are replaced by values of the shape CloudFormation gives them (an
SQS queue's `Arn` is an SQS queue ARN, the stack id a stack ARN, ...), so that
parliament can match each action against the resource types it applies to.
Where a policy depends on a condition (`Fn::If`), both branches are linted.

Prints one line per finding (template, resource, policy, finding, details) and
a summary; exit 1 when there is any finding or a template cannot be read.
"""

import json
import re
import sys

from parliament import analyze_policy_string

ACCOUNT = "123456789012"
REGION = "us-east-1"
PARTITION = "aws"
STACK_NAME = "example-stack"
STACK_ID = f"arn:{PARTITION}:cloudformation:{REGION}:{ACCOUNT}:stack/{STACK_NAME}/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
PSEUDO = {
    "AWS::AccountId": ACCOUNT,
    "AWS::Region": REGION,
    "AWS::Partition": PARTITION,
    "AWS::StackName": STACK_NAME,
    "AWS::StackId": STACK_ID,
    "AWS::URLSuffix": "amazonaws.com",
}
# Values for template parameters that have no default, by name.
PARAMETER_EXAMPLES = {
    "PackageUrl": "s3://example-bucket/agent/deeplearning-agent_0.1.0-1_amd64.deb",
}
NO_VALUE = object()
# Findings expected in the deploying user's policy (see the docstring).
EXPECTED_IN_DEPLOYER_POLICY = {
    "PERMISSIONS_MANAGEMENT_ACTIONS",
    "PRIVILEGE_ESCALATION",
    "RESOURCE_STAR",
    "RESOURCE_POLICY_PRIVILEGE_ESCALATION",
}


class Unresolved(Exception):
    pass


def physical_name(logical_id):
    return f"{STACK_NAME}-{logical_id}-ABCDEF123456"


def attribute(resources, logical_id, name):
    """`Fn::GetAtt [logical_id, name]` as CloudFormation would return it."""
    if logical_id not in resources:
        raise Unresolved(f"GetAtt of unknown resource {logical_id}")
    kind = resources[logical_id].get("Type", "")
    phys = physical_name(logical_id)
    if name == "Arn":
        arns = {
            "AWS::SQS::Queue": f"arn:{PARTITION}:sqs:{REGION}:{ACCOUNT}:{phys}",
            "AWS::Logs::LogGroup": f"arn:{PARTITION}:logs:{REGION}:{ACCOUNT}:log-group:/{phys}:*",
            "AWS::IAM::Role": f"arn:{PARTITION}:iam::{ACCOUNT}:role/{phys}",
            "AWS::IAM::InstanceProfile": f"arn:{PARTITION}:iam::{ACCOUNT}:instance-profile/{phys}",
            "AWS::S3::Bucket": f"arn:{PARTITION}:s3:::{phys.lower()}",
            "AWS::EFS::FileSystem": f"arn:{PARTITION}:elasticfilesystem:{REGION}:{ACCOUNT}:file-system/fs-0123456789abcdef0",
            "AWS::KMS::Key": f"arn:{PARTITION}:kms:{REGION}:{ACCOUNT}:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
            "AWS::SNS::Topic": f"arn:{PARTITION}:sns:{REGION}:{ACCOUNT}:{phys}",
        }
        if kind in arns:
            return arns[kind]
        raise Unresolved(f"no ARN shape known for {kind} ({logical_id}.Arn): add it to lint-iam.py")
    if name == "QueueName":
        return phys
    if name == "QueueUrl":
        return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{phys}"
    return phys


def reference(template, name):
    if name in PSEUDO:
        return PSEUDO[name]
    if name in template.get("Parameters", {}):
        default = template["Parameters"][name].get("Default", PARAMETER_EXAMPLES.get(name))
        if default is None:
            raise Unresolved(f"parameter {name} has no default: give lint-iam.py an example value for it")
        return str(default)
    if name in template.get("Resources", {}):
        kind = template["Resources"][name].get("Type", "")
        if kind == "AWS::SQS::Queue":
            return attribute(template["Resources"], name, "QueueUrl")
        return physical_name(name)
    raise Unresolved(f"Ref to unknown name {name}")


def substitute(template, text, variables, branch):
    def one(match):
        name = match.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        if name in variables:
            return str(resolve(template, variables[name], branch))
        if "." in name:
            logical_id, attr = name.split(".", 1)
            return attribute(template["Resources"], logical_id, attr)
        return reference(template, name)

    return re.sub(r"\$\{([^}]+)\}", one, text)


def resolve(template, value, branch):
    """`value` with its intrinsics replaced; `branch` picks Fn::If's side."""
    if isinstance(value, list):
        out = [resolve(template, v, branch) for v in value]
        return [v for v in out if v is not NO_VALUE]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, arg), = value.items()
        if key == "Ref":
            return NO_VALUE if arg == "AWS::NoValue" else reference(template, arg)
        if key == "Fn::GetAtt":
            logical_id, name = arg if isinstance(arg, list) else arg.split(".", 1)
            return attribute(template["Resources"], logical_id, name)
        if key == "Fn::Sub":
            if isinstance(arg, list):
                return substitute(template, arg[0], arg[1], branch)
            return substitute(template, arg, {}, branch)
        if key == "Fn::Join":
            sep, items = arg
            return sep.join(str(v) for v in resolve(template, items, branch))
        if key == "Fn::If":
            _, yes, no = arg
            return resolve(template, yes if branch else no, branch)
        if key == "Fn::Select":
            index, items = arg
            items = resolve(template, items, branch)
            index = int(resolve(template, index, branch))
            if not 0 <= index < len(items):
                raise Unresolved(f"Fn::Select index {index} of {items}")
            return items[index]
        if key == "Fn::Split":
            sep, text = arg
            return str(resolve(template, text, branch)).split(sep)
        if key == "Fn::ImportValue":
            raise Unresolved("Fn::ImportValue in a policy")
    out = {k: resolve(template, v, branch) for k, v in value.items()}
    return {k: v for k, v in out.items() if v is not NO_VALUE}


def has_if(value):
    if isinstance(value, dict):
        return "Fn::If" in value or any(has_if(v) for v in value.values())
    if isinstance(value, list):
        return any(has_if(v) for v in value)
    return False


def policies(template):
    """(resource, policy name, document) for every policy in `template`."""
    for logical_id, resource in sorted(template.get("Resources", {}).items()):
        kind = resource.get("Type")
        props = resource.get("Properties", {})
        if kind == "AWS::IAM::Role":
            for policy in props.get("Policies", []):
                yield logical_id, policy.get("PolicyName", "?"), policy["PolicyDocument"]
        elif kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            yield logical_id, props.get("PolicyName", logical_id), props["PolicyDocument"]
        elif kind in ("AWS::SQS::QueuePolicy", "AWS::S3::BucketPolicy"):
            yield logical_id, "resource policy", props["PolicyDocument"]


def lint(path):
    """The findings of one template, as printable lines, and the number of policies read."""
    with open(path) as f:
        template = json.load(f)
    lines = []
    count = 0
    deployer = "Statement" in template and "Resources" not in template
    if deployer:
        found = [("(policy document)", "document", template)]
    else:
        found = policies(template)
    for logical_id, name, document in found:
        for branch in ([True, False] if has_if(document) else [True]):
            count += 1
            where = f"{path}: {logical_id} policy {name!r}" + ("" if branch else " (Fn::If false)")
            try:
                resolved = resolve(template, document, branch)
            except Unresolved as e:
                lines.append(f"{where}: cannot resolve: {e}")
                continue
            # Resource policies name a principal; parliament reads the same document shape.
            analyzed = analyze_policy_string(json.dumps(resolved), include_community_auditors=True)
            for finding in analyzed.findings:
                if deployer and finding.issue in EXPECTED_IN_DEPLOYER_POLICY:
                    print(f"expected: {where}: {finding.issue}")
                    continue
                lines.append(f"{where}: {finding.issue}: {json.dumps(finding.detail)}")
    return lines, count


def main(paths):
    if not paths:
        print("usage: lint-iam.py TEMPLATE.json...", file=sys.stderr)
        return 2
    findings = []
    policies_read = 0
    for path in paths:
        try:
            lines, count = lint(path)
        except (OSError, ValueError, KeyError, TypeError) as e:
            lines, count = [f"{path}: cannot read: {type(e).__name__}: {e}"], 0
        findings += lines
        policies_read += count
    for line in findings:
        print(line)
    print(f"parliament: {len(paths)} templates, {policies_read} policies, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
