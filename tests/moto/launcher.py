"""Runs moto 5.2.5 as a local AWS stand-in for the end-to-end tests, with the
few patches the project needs that moto lacks (tests/moto/README.md lists
them, and why).

Usage: launcher.py --host 10.213.0.1 --port 0 [--hold-wait-conditions]

It prints one line, `READY <host> <port>`, on stdout once the server answers,
then serves until it is killed. Port 0 picks a free port.

Extra routes, served next to moto's own:
  PUT  /_waitcondition/<account>/<region>/<stack>/<handle>  a wait condition
       signal (JSON: Status, Reason, UniqueId, Data), as a node PUTs it to
       the presigned URL of a WaitConditionHandle in AWS;
  GET  /_signals/<stack>  every signal received for that stack (wait
       condition PUTs and SignalResource calls), oldest first, as JSON;
  GET  /_calls  every AWS API request received since the start or the last
       reset, oldest first, as JSON (see record_call);
  GET  /_lifecycle_completions  every CompleteLifecycleAction call, oldest
       first, as JSON (patch (e));
  POST /_scaling_activities/<group>  adds a scaling activity (JSON:
       StatusMessage, optional StatusCode, default Failed, and Description)
       that DescribeScalingActivities returns for the group (patch (f));
  POST /_fail_resource  makes the next creation of a logical id fail (JSON:
       LogicalResourceId, Reason), as a resource failing in AWS does (patch (i));
  POST /_insufficient_capacity  takes an instance type off the shelves (JSON:
       InstanceType, optional AvailabilityZone and Region), as EC2 running
       out of it does (patch (z));
  POST /_hold_dispatcher?seconds=N  holds moto's request dispatcher lock for
       N seconds (at most 10), for the self-test of patch (s);
  POST /_service_credentials  a role's temporary credentials as the service
       that assumes it gets them (JSON: Service, InstanceProfile or RoleArn,
       SessionName, DurationSeconds), as the instance metadata serves them
       (patch (t5));
  POST /_users/<name>  makes IAM user <name> (administrator policy) once and
       answers its access key (a deploying user; patch (t));
  POST /_service_quotas  sets an EC2 vCPU quota's value (JSON: ServiceCode,
       QuotaCode, Value, optional Region; patch (v));
  POST /_capacity_reservations  makes a Capacity Reservation or Capacity
       Block that DescribeCapacityReservations answers (patch (w));
  POST /_spot_placement_scores  sets a region's Spot placement score (JSON:
       Region, Score; patch (y)).

IAM is enforced from the first request (patch (t)); the administrator
e2e-admin (key AKIAE2EADMINISTRATOR) is made at start and after each reset.
Every refused call is written to stderr as `REFUSED <principal>
<service>:<Action> <code>: <message>`.
"""

import argparse
import ast
import datetime
import io
import json
import os
import random
import re
import sys
import threading
import time
import urllib.parse
import uuid

# Patch (t): IAM is enforced from the first request. moto reads
# INITIAL_NO_AUTH_ACTION_COUNT once, when its settings module is imported: it
# lets that many requests through unchecked, then checks every request's
# signature and the caller's policies. The administrator the harness sets up
# with is made in moto's IAM backend directly (create_principals), so no
# request needs to go unchecked: 0.
os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"

from moto.autoscaling.models import AutoScalingBackend, FakeAutoScalingGroup, autoscaling_backends
from moto.autoscaling.responses import AutoScalingResponse
from moto.cloudformation import parsing as cfn_parsing
from moto.cloudformation.models import Event, Stack, cloudformation_backends
from moto.cloudformation.responses import CloudFormationResponse
from moto.core.common_models import CloudFormationModel
from moto.core.responses import EmptyResult
from moto.core.utils import unix_time
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models import instances as ec2_instances
from moto.ec2.models.instances import InstanceBackend as EC2InstanceBackend
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.sqs.models import Message as SqsMessage
from moto.sqs.models import SQSBackend
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)

# The address the server is reachable at, for the wait condition handle URLs.
# Set once in main() before any request is served.
PUBLIC_BASE = ""

# Signals by stack name, oldest first; read by GET /_signals/<stack>.
SIGNALS: dict[str, list[dict]] = {}
SIGNALS_LOCK = threading.Lock()

SIGNAL_STATUS = "SIGNAL_RECEIVED"

# Every AWS API request, oldest first; read by GET /_calls (the formation
# benchmark counts calls per node by access key id).
CALLS: list[dict] = []
CALLS_LOCK = threading.Lock()
# CompleteLifecycleAction calls, oldest first; read by GET /_lifecycle_completions.
COMPLETIONS: list[dict] = []
# Injected scaling activities by group name, oldest first; POST /_scaling_activities/<group>.
ACTIVITIES: dict[str, list[dict]] = {}
# --hold-wait-conditions (patch (h)): a create waits on its wait conditions.
HOLD_WAIT_CONDITIONS = False
# Logical ids whose next creation fails, with the reason (patch (i)).
FAILURES: dict[str, str] = {}
# OnFailure of the CreateStack call being served (patch (h)).
ON_FAILURE = threading.local()


def record_signal(account, region, stack_name, logical_id, resource_type, signal):
    """Appends a signal to the stack's events (what DescribeStackEvents returns)
    and to SIGNALS. Raises KeyError when there is no such stack."""
    backend = cloudformation_backends[account][region]
    stack = backend.get_stack(stack_name)
    reason = f"Received {signal['Status']} signal with UniqueId {signal['UniqueId']}"
    if signal.get("Reason"):
        reason += f": {signal['Reason']}"
    resource = stack.resource_map._parsed_resources.get(logical_id)
    physical_id = getattr(resource, "physical_resource_id", None) or logical_id
    stack.events.append(
        Event(
            stack_id=stack.stack_id,
            stack_name=stack.name,
            logical_resource_id=logical_id,
            physical_resource_id=physical_id,
            resource_type=resource_type,
            resource_status=SIGNAL_STATUS,
            resource_status_reason=reason,
            resource_properties=None,
        )
    )
    with SIGNALS_LOCK:
        SIGNALS.setdefault(stack.name, []).append(dict(signal, LogicalResourceId=logical_id))
    # Patch (q): moto evaluates outputs once and keeps them; a signal changes
    # its wait condition's Data, so the next DescribeStacks evaluates again.
    output_map = getattr(stack, "output_map", None)
    if output_map is not None:
        output_map._parsed_outputs.clear()


# --- Patch (a): SignalResource -------------------------------------------------
# moto 5.2.5 has no SignalResource (HTTP 500). The master signals its
# CreationPolicy with it; record the call as a stack event on the resource.
def signal_resource(self):
    stack_name = self._get_param("StackName")
    logical_id = self._get_param("LogicalResourceId")
    signal = {"Status": self._get_param("Status"), "UniqueId": self._get_param("UniqueId")}
    backend = self.cloudformation_backend
    stack = backend.get_stack(stack_name)
    resource_json = stack.template_dict.get("Resources", {}).get(logical_id)
    if resource_json is None:
        from moto.cloudformation.exceptions import ValidationError

        raise ValidationError(message=f"Resource {logical_id} does not exist for stack {stack_name}")
    record_signal(self.current_account, self.region, stack.name, logical_id, resource_json["Type"], signal)
    return EmptyResult()


CloudFormationResponse.signal_resource = signal_resource


# --- Patch (b): WaitConditionHandle -------------------------------------------
# moto 5.2.5 drops AWS::CloudFormation::WaitConditionHandle (NULL_MODELS), so
# `Ref` to it resolves to nothing and the user data carries no URL. Model it
# with a physical id that is a URL on this launcher, where PUTs are accepted.
def stack_name_of(stack_id):
    """arn:aws:cloudformation:<region>:<account>:stack/<name>/<uuid> -> <name>."""
    return stack_id.split(":stack/", 1)[1].split("/", 1)[0]


class WaitConditionHandle(CloudFormationModel):
    # moto's model metaclass files every model under the service named by the
    # second part of its module; this one belongs to cloudformation.
    __module__ = "moto.cloudformation.launcher"

    def __init__(self, url):
        self.url = url

    @staticmethod
    def cloudformation_type():
        return "AWS::CloudFormation::WaitConditionHandle"

    @staticmethod
    def cloudformation_name_type():
        return ""

    @property
    def physical_resource_id(self):
        return self.url

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        parts = [account_id, region_name, stack_name_of(kwargs["StackId"]), kwargs["LogicalId"]]
        return cls(PUBLIC_BASE + "/_waitcondition/" + "/".join(urllib.parse.quote(p, safe="") for p in parts))


cfn_parsing.NULL_MODELS.remove("AWS::CloudFormation::WaitConditionHandle")


# --- Patch (q): WaitCondition and its Data -------------------------------------
# moto 5.2.5 drops AWS::CloudFormation::WaitCondition too (NULL_MODELS), so
# `Fn::GetAtt [<WaitCondition>, Data]` (the template's FormationData output)
# is an HTTP 500. Model it: Data is what AWS gives, a JSON object of the
# SUCCESS signals' Data by UniqueId ("{}" before any), read from the signals
# that (b) records when outputs are evaluated (DescribeStacks).
class WaitCondition(CloudFormationModel):
    __module__ = "moto.cloudformation.launcher"

    def __init__(self, stack_id, logical_id):
        self.stack_id = stack_id
        self.logical_id = logical_id

    @staticmethod
    def cloudformation_type():
        return "AWS::CloudFormation::WaitCondition"

    @staticmethod
    def cloudformation_name_type():
        return ""

    @property
    def physical_resource_id(self):
        return f"{self.stack_id}/{self.logical_id}"

    @classmethod
    def has_cfn_attr(cls, attr):
        return attr == "Data"

    def get_cfn_attribute(self, attribute_name):
        from moto.cloudformation.exceptions import UnformattedGetAttTemplateException

        if attribute_name != "Data":
            raise UnformattedGetAttTemplateException()
        stack_name = stack_name_of(self.stack_id)
        with SIGNALS_LOCK:
            signals = list(SIGNALS.get(stack_name, []))
        return json.dumps(
            {
                s["UniqueId"]: s.get("Data", "")
                for s in signals
                if s.get("LogicalResourceId") == self.logical_id and s.get("Status") == "SUCCESS"
            }
        )

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        return cls(kwargs["StackId"], kwargs["LogicalId"])

    @classmethod
    def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
        # The signals (and so the Data) stay with the wait condition.
        return original_resource

    def delete(self, account_id, region_name):
        pass


cfn_parsing.NULL_MODELS.remove("AWS::CloudFormation::WaitCondition")
# get_model_map() is cached; clear it so the new subclass is seen.
cfn_parsing.get_model_list.cache_clear()
cfn_parsing.get_model_map.cache_clear()
cfn_parsing.get_name_type_map.cache_clear()


# --- Patch (c): SSM parameter defaults that are overridden ---------------------
# moto 5.2.5 resolves the Default of every `AWS::SSM::Parameter::Value<...>`
# parameter before it applies the values passed to CreateStack, and fails
# with HTTP 500 when that default names no parameter. The templates default
# ImageId to a public `/aws/service/...` path, which moto has not got (and
# refuses to create: reserved name); the tests pass their own parameter name.
# A missing parameter now resolves to None, which moto reports as a missing
# parameter when nothing overrides it.
_parse_ssm_parameter = cfn_parsing.ResourceMap.parse_ssm_parameter


def parse_ssm_parameter(self, value, value_type):
    from moto.ssm.models import ssm_backends

    if ssm_backends[self._account_id][self._region_name].get_parameter(value) is None:
        return None
    return _parse_ssm_parameter(self, value, value_type)


cfn_parsing.ResourceMap.parse_ssm_parameter = parse_ssm_parameter


# --- Patch (d): AWS::EC2::Instance from a launch template --------------------
# moto 5.2.5 creates a CloudFormation instance from its own ImageId property
# only (KeyError 'ImageId', HTTP 500) although RunInstances takes a launch
# template. The master instance has nothing but LaunchTemplate and Tags:
# launch it from the template, as RunInstances does.
_create_instance = ec2_instances.Instance.create_from_cloudformation_json.__func__


def create_instance(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
    properties = cloudformation_json["Properties"]
    if "ImageId" in properties or "LaunchTemplate" not in properties:
        return _create_instance(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
    from moto.ec2.models import ec2_backends

    reservation = ec2_backends[account_id][region_name].run_instances(
        image_id=None,
        user_data=None,
        count=1,
        security_group_names=[],
        is_instance_type_default=True,
        launch_template=properties["LaunchTemplate"],
    )
    instance = reservation.instances[0]
    for tag in properties.get("Tags", []):
        instance.add_tag(tag["Key"], tag["Value"])
    return instance


ec2_instances.Instance.create_from_cloudformation_json = classmethod(create_instance)


# --- Patch (e): CompleteLifecycleAction ---------------------------------------
# moto 5.2.5 has no CompleteLifecycleAction (HTTP 500). The master completes
# a terminating worker's lifecycle action once every remaining node applied
# the generation without it; record the call (and when it came) so a test
# can check that it came, and when.
def complete_lifecycle_action(self):
    group = self._get_param("AutoScalingGroupName")
    if group not in autoscaling_backends[self.current_account][self.region].autoscaling_groups:
        from moto.autoscaling.exceptions import ValidationError

        raise ValidationError(f"No Auto Scaling group named {group}")
    call = {
        k: self._get_param(k)
        for k in (
            "AutoScalingGroupName",
            "LifecycleHookName",
            "LifecycleActionToken",
            "InstanceId",
            "LifecycleActionResult",
        )
    }
    call["ReceivedAt"] = time.time()
    with SIGNALS_LOCK:
        COMPLETIONS.append(call)
    return EmptyResult()


AutoScalingResponse.complete_lifecycle_action = complete_lifecycle_action


# --- Patch (f): DescribeScalingActivities ---------------------------------------
# moto 5.2.5 always answers DescribeScalingActivities with no activities,
# so a launch failure (the reason a formation fails) cannot be shown. A test
# adds activities with POST /_scaling_activities/<group>; they are returned
# newest first, as AWS lists them.
def describe_scaling_activities(self):
    from moto.core.responses import ActionResult

    group = self._get_param("AutoScalingGroupName")
    with SIGNALS_LOCK:
        activities = list(reversed(ACTIVITIES.get(group, [])))
    return ActionResult({"Activities": activities})


AutoScalingResponse.describe_scaling_activities = describe_scaling_activities


def scaling_activity(group, request):
    """An activity as DescribeScalingActivities returns it, from a test's JSON."""
    message = request.get("StatusMessage")
    if not isinstance(message, str) or not message:
        raise ValueError("StatusMessage (a non-empty string) is required")
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "ActivityId": str(uuid.uuid4()),
        "AutoScalingGroupName": group,
        "Description": request.get("Description", "Launching a new EC2 instance.  Status Reason: " + message),
        "Cause": "At " + now.strftime("%Y-%m-%dT%H:%M:%SZ") + " an instance was started in response to a "
        "difference between desired and actual capacity.",
        "StartTime": now,
        "EndTime": now,
        "StatusCode": request.get("StatusCode", "Failed"),
        "StatusMessage": message,
        "Progress": 100,
    }



# --- Patch (v): Service Quotas answers EC2's vCPU quotas ------------------------
# moto 5.2.5 answers GetServiceQuota for service code `vpc` only; any `ec2`
# quota is NoSuchResourceException, so the capacity check (`synth capacity`,
# `synth deploy` before it creates anything) could read no vCPU quota. It now
# answers EC2's running-instance vCPU quotas (the codes below, AWS's names)
# as AWS does, with the value a test set with POST /_service_quotas (JSON
# ServiceCode, QuotaCode, Value, optional Region: every region without it),
# else EC2_DEFAULT_VCPUS, a roomy account's value, so that the tests that
# deploy and never think of quotas are not refused. Another code is still
# NoSuchResourceException, as AWS answers a code it does not have.
EC2_VCPU_QUOTAS = {
    "L-1216C47A": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    "L-DB2E81BA": "Running On-Demand G and VT instances",
    "L-417A185B": "Running On-Demand P instances",
    "L-1945791B": "Running On-Demand Inf instances",
    "L-2C3B7624": "Running On-Demand Trn instances",
    "L-6E869C2A": "Running On-Demand DL instances",
    "L-74FC7D96": "Running On-Demand F instances",
    "L-7295265B": "Running On-Demand X instances",
    "L-34B43A08": "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
    "L-3819A6DF": "All G and VT Spot Instance Requests",
    "L-7212CCBC": "All P4, P3 and P2 Spot Instance Requests",
    "L-C4BD4855": "All P5 Spot Instance Requests",
    "L-B5D1601B": "All Inf Spot Instance Requests",
    "L-6B0D517C": "All Trn Spot Instance Requests",
    "L-85EED4F7": "All DL Spot Instance Requests",
    "L-88CF9481": "All F Spot Instance Requests",
    "L-E3A00192": "All X Spot Instance Requests",
}
EC2_DEFAULT_VCPUS = 4096.0
# (region or "*", service code, quota code) -> value; POST /_service_quotas.
QUOTA_VALUES: dict[tuple[str, str, str], float] = {}

from moto.servicequotas.exceptions import NoSuchResource  # noqa: E402
from moto.servicequotas.models import ServiceQuotasBackend  # noqa: E402

_get_service_quota = ServiceQuotasBackend.get_service_quota


def get_service_quota(self, service_code, quota_code):
    if service_code != "ec2":
        return _get_service_quota(self, service_code, quota_code)
    if quota_code not in EC2_VCPU_QUOTAS:
        raise NoSuchResource()
    with SIGNALS_LOCK:
        value = QUOTA_VALUES.get(
            (self.region_name, service_code, quota_code),
            QUOTA_VALUES.get(("*", service_code, quota_code), EC2_DEFAULT_VCPUS),
        )
    return {
        "ServiceCode": "ec2",
        "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
        "QuotaArn": f"arn:aws:servicequotas:{self.region_name}:{self.account_id}:ec2/{quota_code}",
        "QuotaCode": quota_code,
        "QuotaName": EC2_VCPU_QUOTAS[quota_code],
        "Value": float(value),
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


ServiceQuotasBackend.get_service_quota = get_service_quota


def set_quota(request):
    """POST /_service_quotas: {ServiceCode, QuotaCode, Value, Region?}."""
    service, code = str(request["ServiceCode"]), str(request["QuotaCode"])
    value = float(request["Value"])
    if value < 0:
        raise ValueError("Value must be 0 or more")
    region = str(request.get("Region") or "*")
    with SIGNALS_LOCK:
        QUOTA_VALUES[(region, service, code)] = value
    return {"Region": region, "ServiceCode": service, "QuotaCode": code, "Value": value}


# --- Patch (w): EC2 Capacity Reservations ---------------------------------------
# moto 5.2.5 has no Capacity Reservations: DescribeCapacityReservations is not
# implemented. A test makes one with POST /_capacity_reservations (JSON
# InstanceType, AvailabilityZone, TotalInstanceCount, optional
# CapacityReservationId (else a new cr- id), AvailableInstanceCount (else the
# total), State (else active), StartDate and EndDate (ISO 8601 UTC) and
# CapacityBlock (true: ReservationType capacity-block)); DescribeCapacityReservations
# answers in EC2's XML, every reservation of the region or those its
# CapacityReservationId.N name, and an unknown id is
# InvalidCapacityReservationId.NotFound, as AWS answers it.
# (account, region) -> id -> the reservation as JSON.
CAPACITY_RESERVATIONS: dict[tuple[str, str], dict[str, dict]] = {}


def add_capacity_reservation(request):
    zone = str(request["AvailabilityZone"])
    region = zone[:-1]
    total = int(request["TotalInstanceCount"])
    reservation = {
        "CapacityReservationId": str(request.get("CapacityReservationId") or "cr-" + uuid.uuid4().hex[:17]),
        "InstanceType": str(request["InstanceType"]),
        "AvailabilityZone": zone,
        "TotalInstanceCount": total,
        "AvailableInstanceCount": int(request.get("AvailableInstanceCount", total)),
        "State": str(request.get("State") or "active"),
        "StartDate": request.get("StartDate"),
        "EndDate": request.get("EndDate"),
        "ReservationType": "capacity-block" if request.get("CapacityBlock") else "default",
    }
    if not re.fullmatch(r"cr-[0-9a-f]{17}", reservation["CapacityReservationId"]):
        raise ValueError("CapacityReservationId is cr- and 17 hex digits")
    with SIGNALS_LOCK:
        CAPACITY_RESERVATIONS.setdefault((ACCOUNT, region), {})[reservation["CapacityReservationId"]] = reservation
    return reservation


def xml_escape(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def describe_capacity_reservations(self):
    from moto.ec2.exceptions import EC2ClientError

    ids = self._get_param("CapacityReservationIds", []) or []
    with SIGNALS_LOCK:
        known = dict(CAPACITY_RESERVATIONS.get((self.current_account, self.region), {}))
    for rid in ids:
        if rid not in known:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{rid}' does not exist"
            )
    chosen = [known[rid] for rid in ids] if ids else list(known.values())
    items = []
    for r in chosen:
        fields = [
            ("capacityReservationId", r["CapacityReservationId"]),
            ("ownerId", self.current_account),
            ("capacityReservationArn", f"arn:aws:ec2:{self.region}:{self.current_account}:capacity-reservation/{r['CapacityReservationId']}"),
            ("instanceType", r["InstanceType"]),
            ("instancePlatform", "Linux/UNIX"),
            ("availabilityZone", r["AvailabilityZone"]),
            ("tenancy", "default"),
            ("totalInstanceCount", r["TotalInstanceCount"]),
            ("availableInstanceCount", r["AvailableInstanceCount"]),
            ("ebsOptimized", "true"),
            ("state", r["State"]),
            ("instanceMatchCriteria", "targeted"),
            ("reservationType", r["ReservationType"]),
        ]
        if r.get("StartDate"):
            fields.append(("startDate", r["StartDate"]))
        if r.get("EndDate"):
            fields.append(("endDate", r["EndDate"]))
            fields.append(("endDateType", "limited"))
        else:
            fields.append(("endDateType", "unlimited"))
        items.append("<item>" + "".join(f"<{k}>{xml_escape(v)}</{k}>" for k, v in fields) + "<tagSet/></item>")
    return (
        '<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>{uuid.uuid4()}</requestId>"
        f"<capacityReservationSet>{''.join(items)}</capacityReservationSet>"
        "</DescribeCapacityReservationsResponse>"
    )


from moto.ec2.responses import EC2Response as _EC2Response  # noqa: E402

_EC2Response.describe_capacity_reservations = describe_capacity_reservations


# --- Patch (y): Spot placement scores ------------------------------------------
# moto 5.2.5 has no GetSpotPlacementScores. It answers in EC2's XML, for each
# region asked (RegionName.N, else the request's), the score a test set with
# POST /_spot_placement_scores (JSON Region, Score 1 to 10), else 5.
SPOT_SCORES: dict[str, int] = {}


def set_spot_score(request):
    region, score = str(request["Region"]), int(request["Score"])
    if not 1 <= score <= 10:
        raise ValueError("Score is 1 to 10")
    with SIGNALS_LOCK:
        SPOT_SCORES[region] = score
    return {"Region": region, "Score": score}


def get_spot_placement_scores(self):
    regions = self._get_param("RegionNames", []) or [self.region]
    with SIGNALS_LOCK:
        scores = [(r, SPOT_SCORES.get(r, 5)) for r in regions]
    items = "".join(f"<item><regionName>{xml_escape(r)}</regionName><score>{s}</score></item>" for r, s in scores)
    return (
        '<GetSpotPlacementScoresResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>{uuid.uuid4()}</requestId><spotPlacementScoreSet>{items}</spotPlacementScoreSet>"
        "</GetSpotPlacementScoresResponse>"
    )


_EC2Response.get_spot_placement_scores = get_spot_placement_scores

# --- Patch (x): P3 instance types ----------------------------------------------
# moto 5.2.5's instance type data has no p3.2xlarge nor p3.16xlarge (only
# p3dn.24xlarge), so DescribeInstanceTypes refuses them (InvalidInstanceType)
# and DescribeInstanceTypeOfferings offers them nowhere, although AWS still
# offers them (the reserved-gpus example's master and fallback workers).
# Added from p3dn.24xlarge with their own vCPUs, memory and GPUs (Amazon EC2
# instance types: P3), offered in the zones below.
from moto.ec2.models import instance_types as ec2_instance_types  # noqa: E402

P3_TYPES = {"p3.2xlarge": (8, 61 * 1024, 1), "p3.16xlarge": (64, 488 * 1024, 8)}
P3_ZONES = {
    "us-east-1": "abcdf",
    "us-east-2": "ab",
    "us-west-2": "abc",
    "eu-west-1": "abc",
    "ap-southeast-2": "ab",
}


def add_p3_types():
    import copy

    base = ec2_instance_types.INSTANCE_TYPES.get("p3dn.24xlarge")
    if base is None:
        return
    for name, (vcpus, memory, gpus) in P3_TYPES.items():
        if name in ec2_instance_types.INSTANCE_TYPES:
            continue
        t = copy.deepcopy(base)
        t["InstanceType"] = name
        t["VCpuInfo"] = {"DefaultVCpus": vcpus, "DefaultCores": vcpus // 2, "DefaultThreadsPerCore": 2}
        t["MemoryInfo"] = {"SizeInMiB": memory}
        t["GpuInfo"] = {
            "Gpus": [{"Name": "V100", "Manufacturer": "NVIDIA", "Count": gpus, "MemoryInfo": {"SizeInMiB": 16384}}],
            "TotalGpuMemoryInMiB": 16384 * gpus,
        }
        t.setdefault("NetworkInfo", {})["EfaSupported"] = False
        ec2_instance_types.INSTANCE_TYPES[name] = t
        ec2_instance_types.InstanceTypeBackend.instance_types.append(ec2_instance_types.InstanceType(name))
        offerings = ec2_instance_types.INSTANCE_TYPE_OFFERINGS["availability-zone"]
        for region, letters in P3_ZONES.items():
            for letter in letters:
                offerings.setdefault(region, []).append(
                    {"InstanceType": name, "Location": region + letter, "LocationType": "availability-zone"}
                )


add_p3_types()

# --- Patch (g): resource events ------------------------------------------------
# moto 5.2.5 records only the stack's own events; AWS records each resource's
# CREATE/UPDATE/DELETE _IN_PROGRESS and _COMPLETE (what `synth deploy` shows
# progress from). Wrap the three resource operations to add them.
def add_resource_event(stack, logical_id, resource_type, status, reason=None, physical_id=None):
    stack.events.append(
        Event(
            stack_id=stack.stack_id,
            stack_name=stack.name,
            logical_resource_id=logical_id,
            physical_resource_id=physical_id or "",
            resource_type=resource_type,
            resource_status=status,
            resource_status_reason=reason,
            resource_properties=None,
        )
    )


def stack_of(resources_map):
    backend = cloudformation_backends[resources_map._account_id][resources_map._region_name]
    return backend.stacks.get(resources_map.stack_id)


class InjectedFailure(Exception):
    """A resource failed on purpose (patch (i))."""

    def __init__(self, logical_id, resource_type, reason):
        super().__init__(reason)
        self.logical_id, self.resource_type, self.reason = logical_id, resource_type, reason


_parse_and_create = cfn_parsing.parse_and_create_resource


def parse_and_create_resource(logical_id, resource_json, resources_map, account_id, region_name):
    condition = resource_json.get("Condition")
    stack = stack_of(resources_map)
    if stack is None or (condition and not resources_map.lazy_condition_map[condition]):
        return _parse_and_create(logical_id, resource_json, resources_map, account_id, region_name)
    rtype = resource_json["Type"]
    add_resource_event(stack, logical_id, rtype, "CREATE_IN_PROGRESS")
    with SIGNALS_LOCK:
        reason = FAILURES.pop(logical_id, None)
    if reason is not None:
        add_resource_event(stack, logical_id, rtype, "CREATE_FAILED", reason)
        raise InjectedFailure(logical_id, rtype, reason)
    try:
        resource = _parse_and_create(logical_id, resource_json, resources_map, account_id, region_name)
    except InsufficientCapacity as shortage:
        # Patch (z): the instance's launch met no capacity; as in AWS, the
        # resource fails with EC2's message and the stack with it. moto
        # creates a failed stack's resources again when they are read
        # (ListStackResources, outputs): then the instance is not there.
        if stack.status != "CREATE_IN_PROGRESS":
            return None
        add_resource_event(stack, logical_id, rtype, "CREATE_FAILED", shortage.cloudformation_reason())
        raise InjectedFailure(logical_id, rtype, shortage.cloudformation_reason()) from None
    held = HOLD_WAIT_CONDITIONS and rtype == "AWS::CloudFormation::WaitCondition"
    if not held:
        physical = getattr(resource, "physical_resource_id", None)
        add_resource_event(stack, logical_id, rtype, "CREATE_COMPLETE", physical_id=physical)
    return resource


cfn_parsing.parse_and_create_resource = parse_and_create_resource

_parse_and_update = cfn_parsing.parse_and_update_resource


def parse_and_update_resource(logical_id, resource_json, resources_map, account_id, region_name):
    stack = stack_of(resources_map)
    if stack is not None:
        add_resource_event(stack, logical_id, resource_json["Type"], "UPDATE_IN_PROGRESS")
    resource = _parse_and_update(logical_id, resource_json, resources_map, account_id, region_name)
    if stack is not None:
        physical = getattr(resource, "physical_resource_id", None)
        add_resource_event(stack, logical_id, resource_json["Type"], "UPDATE_COMPLETE", physical_id=physical)
    return resource


cfn_parsing.parse_and_update_resource = parse_and_update_resource

_delete_resource = cfn_parsing.ResourceMap._delete_resource


def delete_resource(self, parsed_resource, resource_json):
    stack = stack_of(self)
    logical_id = getattr(parsed_resource, "logical_resource_id", None)
    if stack is not None and logical_id:
        add_resource_event(stack, logical_id, resource_json["Type"], "DELETE_IN_PROGRESS")
    _delete_resource(self, parsed_resource, resource_json)
    if stack is not None and logical_id:
        add_resource_event(stack, logical_id, resource_json["Type"], "DELETE_COMPLETE")


cfn_parsing.ResourceMap._delete_resource = delete_resource


# --- Patch (h): wait conditions hold the stack (with --hold-wait-conditions) ---
# moto 5.2.5 completes a stack at once and a FAILURE signal changes nothing.
# With the option, a create that has wait conditions stays CREATE_IN_PROGRESS
# until each has its Count of SUCCESS signals (then CREATE_COMPLETE); a
# FAILURE fails the wait condition with AWS's reason ("WaitCondition received
# failed message: '<Reason>' for uniqueId: <UniqueId>") and the stack: with
# CreateStack's OnFailure=DO_NOTHING it stays CREATE_FAILED, else it rolls
# back (ROLLBACK_IN_PROGRESS, every resource deleted, ROLLBACK_COMPLETE).
_create_stack_response = CloudFormationResponse.create_stack


def create_stack_response(self):
    ON_FAILURE.keep = self._get_param("OnFailure") == "DO_NOTHING" or str(self._get_param("DisableRollback")).lower() == "true"
    try:
        return _create_stack_response(self)
    finally:
        ON_FAILURE.keep = False


CloudFormationResponse.create_stack = create_stack_response

_create_resources = Stack.create_resources


def fail_stack(stack, failed_id):
    """The stack after a resource failed: CREATE_FAILED, or rolled back."""
    summary = f"The following resource(s) failed to create: [{failed_id}]."
    if stack.disable_rollback:
        stack._add_stack_event("CREATE_FAILED", summary)
        stack.status = "CREATE_FAILED"
        return
    stack._add_stack_event("ROLLBACK_IN_PROGRESS", summary + " Rollback requested by user.")
    stack.status = "ROLLBACK_IN_PROGRESS"
    try:
        stack.resource_map.delete()
    except Exception:  # what moto cannot delete stays; the rollback still ends
        pass
    stack._add_stack_event("ROLLBACK_COMPLETE")
    stack.status = "ROLLBACK_COMPLETE"


def create_resources(self):
    self.disable_rollback = getattr(ON_FAILURE, "keep", False)
    # Signals that arrive while the resources are still being created (the
    # handle exists before the rest) are applied once the stack is held.
    self.early_signals = []
    try:
        _create_resources(self)
    except InjectedFailure as failure:
        # Everything else that had not finished is cancelled, as in AWS.
        created = {e.logical_resource_id for e in self.events if e.resource_status == "CREATE_COMPLETE"}
        for logical_id, resource in self.template_dict.get("Resources", {}).items():
            if logical_id != failure.logical_id and logical_id not in created:
                add_resource_event(self, logical_id, resource["Type"], "CREATE_FAILED", "Resource creation cancelled")
        fail_stack(self, failure.logical_id)
        return
    waits = {
        logical_id: int(resource.get("Properties", {}).get("Count", 1))
        for logical_id, resource in self.template_dict.get("Resources", {}).items()
        if resource.get("Type") == "AWS::CloudFormation::WaitCondition"
    }
    if HOLD_WAIT_CONDITIONS and waits and self.status == "CREATE_COMPLETE":
        if self.events and self.events[-1].resource_type == "AWS::CloudFormation::Stack":
            self.events.pop()  # the CREATE_COMPLETE moto just added
        self.status = "CREATE_IN_PROGRESS"
        self.held = waits
        early, self.early_signals = self.early_signals, None
        for logical_id, signal in early:
            on_wait_condition_signal(self, logical_id, signal)
    else:
        self.early_signals = None


Stack.create_resources = create_resources


def on_wait_condition_signal(stack, logical_id, signal):
    """Patch (h): a wait condition's signal completes or fails a held stack."""
    if getattr(stack, "early_signals", None) is not None:
        stack.early_signals.append((logical_id, signal))
        return
    held = getattr(stack, "held", {})
    if logical_id not in held or stack.status != "CREATE_IN_PROGRESS":
        return
    rtype = "AWS::CloudFormation::WaitCondition"
    if signal["Status"] == "FAILURE":
        reason = f"WaitCondition received failed message: '{signal.get('Reason', '')}' for uniqueId: {signal['UniqueId']}"
        add_resource_event(stack, logical_id, rtype, "CREATE_FAILED", reason)
        held.clear()
        fail_stack(stack, logical_id)
        return
    held[logical_id] -= 1
    if held[logical_id] <= 0:
        del held[logical_id]
        add_resource_event(stack, logical_id, rtype, "CREATE_COMPLETE")
    if not held:
        stack.mark_creation_complete()


# An instance whose create-only properties change is replaced, as in AWS
# (moto 5.2.5 has no update for AWS::EC2::Instance and would drop it).
def replace_instance(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
    from moto.ec2.models import ec2_backends

    ec2_backends[account_id][region_name].terminate_instances([original_resource.id])
    return create_instance(cls, new_resource_name, cloudformation_json, account_id, region_name)


ec2_instances.Instance.update_from_cloudformation_json = classmethod(replace_instance)


# --- Patch (k): the stored template stays as sent ------------------------------
# moto 5.2.5's parse_resource inserts `"Properties": {}` into the stored
# template of a resource that has none (the formation WaitConditionHandle),
# so every later change set lists that resource as modified although nothing
# changed. Parse a shallow copy instead; moto copies everything else anyway.
_parse_resource = cfn_parsing.parse_resource


def parse_resource(resource_json, resources_map):
    return _parse_resource(dict(resource_json), resources_map)


cfn_parsing.parse_resource = parse_resource


# --- Patch (l): updates follow resolved values --------------------------------
# moto 5.2.5 updates a resource only when its text in the template changes.
# CloudFormation updates it when its resolved properties change, e.g. the
# master instance's `Fn::GetAtt [MasterLaunchTemplate, LatestVersionNumber]`
# after its launch template got a new version (which replaces the instance:
# patch (j)). After moto's update, every resource whose text did not change
# is resolved again and updated when the result differs, until nothing does.
_update_resources = cfn_parsing.ResourceMap.update


def resolved_properties(resources_map, resource_json):
    """A resource's properties with every intrinsic resolved, or None when
    moto cannot resolve them (an unsupported resource type, say)."""
    try:
        return cfn_parsing.clean_json(resource_json.get("Properties", {}), resources_map)
    except Exception:
        return None


def update_resources(self, template, parameters=None):
    old = self._resource_json_map
    same = [name for name, r in template.get("Resources", {}).items() if old.get(name) == r and name in self._parsed_resources]
    before = {name: resolved_properties(self, old[name]) for name in same}
    _update_resources(self, template, parameters)
    for _ in range(len(same)):
        changed = False
        for name in same:
            resource_json = self._resource_json_map[name]
            after = resolved_properties(self, resource_json)
            if before[name] is None or after is None or after == before[name]:
                continue
            before[name] = after
            cls = cfn_parsing.resource_class_from_type(resource_json["Type"])
            if cls is None or hasattr(cls.update_from_cloudformation_json, "__isabstractmethod__"):
                continue  # moto cannot update this type; it keeps the old value
            updated = cfn_parsing.parse_and_update_resource(name, resource_json, self, self._account_id, self._region_name)
            if updated is not None:
                self._parsed_resources[name] = updated
                changed = True
        if not changed:
            break


cfn_parsing.ResourceMap.update = update_resources


# --- Patch (u): a parameter whose resolved value is unchanged changes nothing ---
# moto 5.2.5 marks for update every resource that refers to a parameter whose
# value *as passed* changed. CloudFormation compares resolved values: a
# parameter sent as the AMI id an SSM parameter resolved to before (what
# `synth deploy` does to keep a stack's image) changes no resource. The
# diff sees such a parameter as unchanged; the stack still stores the value
# as passed.
_build_resource_diff = cfn_parsing.ResourceMap.build_resource_diff


def build_resource_diff(self, other_template, parameters=None):
    if parameters:
        slots = other_template.get("Parameters", {})
        same = {}
        for key, value in parameters.items():
            value_type = slots.get(key, {}).get("Type", "String")
            resolved = self.parse_ssm_parameter(value, value_type) if value_type.startswith("AWS::SSM::Parameter::") else value
            old = self.resolved_parameters.get(key)
            # Unchanged when it resolves to what the stack resolved before.
            same[key] = self.input_parameters.get(key, value) if resolved == old else value
        parameters = same
    return _build_resource_diff(self, other_template, parameters)


cfn_parsing.ResourceMap.build_resource_diff = build_resource_diff


# --- Patch (m): a worker group update keeps the group ---------------------------
# moto 5.2.5 "updates" an AWS::AutoScaling::AutoScalingGroup by deleting it and
# creating one under a new generated name, with new instances. AWS updates a
# group in place (its create-only property is AutoScalingGroupName, which the
# templates do not set): same name, the instances kept, one more launched or
# one terminated for a new desired capacity, tags replaced. The new name
# changed `Ref WorkerGroup` in the master's user data, so a worker-count
# update replaced the master (patch (l)), which AWS does not do.
from moto.autoscaling.models import FakeAutoScalingGroup  # noqa: E402

_update_group = FakeAutoScalingGroup.update_from_cloudformation_json.__func__


def update_group(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
    props = cloudformation_json["Properties"]
    if props.get("AutoScalingGroupName", original_resource.name) != original_resource.name:
        return _update_group(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name)

    def number(key):
        return None if props.get(key) is None else int(props[key])

    group = autoscaling_backends[account_id][region_name].update_auto_scaling_group(
        name=original_resource.name,
        availability_zones=props.get("AvailabilityZones", []),
        desired_capacity=number("DesiredCapacity"),
        max_size=number("MaxSize"),
        min_size=number("MinSize"),
        launch_config_name=props.get("LaunchConfigurationName"),
        launch_template=props.get("LaunchTemplate", {}),
        vpc_zone_identifier=",".join(props.get("VPCZoneIdentifier", [])) or None,
        health_check_period=number("HealthCheckGracePeriod"),
        health_check_type=props.get("HealthCheckType"),
        mixed_instances_policy=props.get("MixedInstancesPolicy"),
    )
    group.tags = [dict(tag) for tag in props.get("Tags", [])]
    return group


FakeAutoScalingGroup.update_from_cloudformation_json = classmethod(update_group)


# --- Patch (n): a stack's route tables are deleted with it -----------------------
# moto 5.2.5's AWS::EC2::RouteTable has no delete, so deleting a stack leaves
# its route tables, and then its VPC cannot go (DependencyViolation): no
# stack with a VPC can be deleted. Delete them as DeleteRouteTable does.
from moto.ec2.models.route_tables import RouteTable  # noqa: E402


def delete_route_table(self, account_id, region_name):
    from moto.ec2.models import ec2_backends

    ec2_backends[account_id][region_name].delete_route_table(self.id)


RouteTable.delete = delete_route_table


# --- Patch (aa): AWS::FSx::FileSystem from CloudFormation ------------------------
# moto 5.2.5 has an FSx backend (CreateFileSystem, DescribeFileSystems,
# DeleteFileSystem) but no CloudFormation model for it: a template with an
# FSx for Lustre file system gets nothing, and `Fn::GetAtt [<fs>, DNSName]`
# (in the nodes' user data) is an HTTP 500. Model it on the backend: the
# file system is made by create_file_system (`Ref` is its id), `DNSName` is
# the backend's (`<id>.fsx.<region>.amazonaws.com`, as AWS names it),
# `LustreMountName` is eight lower-case letters and digits as AWS gives a
# SCRATCH_2 or PERSISTENT_2 file system (also in its LustreConfiguration's
# `MountName`, as DescribeFileSystems shows it), `ResourceARN` the backend's;
# an update keeps the file system (the templates change only what FSx
# updates in place), a delete deletes it.
class FsxFileSystem(CloudFormationModel):
    __module__ = "moto.fsx.launcher"

    ATTRIBUTES = ("DNSName", "LustreMountName", "ResourceARN", "RootVolumeId")

    def __init__(self, file_system):
        self.file_system = file_system

    @staticmethod
    def cloudformation_type():
        return "AWS::FSx::FileSystem"

    @staticmethod
    def cloudformation_name_type():
        return ""

    @property
    def physical_resource_id(self):
        return self.file_system.file_system_id

    @classmethod
    def has_cfn_attr(cls, attr):
        return attr in cls.ATTRIBUTES

    def get_cfn_attribute(self, attribute_name):
        from moto.cloudformation.exceptions import UnformattedGetAttTemplateException

        fs = self.file_system
        if attribute_name == "DNSName":
            return fs.dns_name
        if attribute_name == "LustreMountName":
            return (fs.lustre_configuration or {}).get("MountName", "")
        if attribute_name == "ResourceARN":
            return fs.resource_arn
        raise UnformattedGetAttTemplateException()

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        from moto.fsx.models import fsx_backends

        p = cloudformation_json["Properties"]
        lustre = dict(p.get("LustreConfiguration") or {})
        if p["FileSystemType"] == "LUSTRE":
            lustre["MountName"] = uuid.uuid4().hex[:8]
        file_system = fsx_backends[account_id][region_name].create_file_system(
            client_request_token=str(uuid.uuid4()),
            file_system_type=p["FileSystemType"],
            storage_capacity=int(p.get("StorageCapacity", 0)),
            storage_type=p.get("StorageType", "SSD"),
            subnet_ids=p["SubnetIds"],
            security_group_ids=p.get("SecurityGroupIds", []),
            tags=p.get("Tags"),
            kms_key_id=p.get("KmsKeyId"),
            windows_configuration=p.get("WindowsConfiguration"),
            lustre_configuration=lustre or None,
            ontap_configuration=p.get("OntapConfiguration"),
            file_system_type_version=p.get("FileSystemTypeVersion"),
            open_zfs_configuration=p.get("OpenZFSConfiguration"),
        )
        return cls(file_system)

    @classmethod
    def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
        p = cloudformation_json["Properties"]
        fs = original_resource.file_system
        fs.storage_capacity = int(p.get("StorageCapacity", fs.storage_capacity))
        mount_name = (fs.lustre_configuration or {}).get("MountName")
        fs.lustre_configuration = dict(p.get("LustreConfiguration") or {}, **({"MountName": mount_name} if mount_name else {}))
        return original_resource

    def delete(self, account_id, region_name):
        from moto.fsx.models import fsx_backends

        backend = fsx_backends[account_id][region_name]
        if self.file_system.file_system_id in backend.file_systems:
            backend.delete_file_system(self.file_system.file_system_id, str(uuid.uuid4()), None, None, None)


# --- Patch (ab): AWS::FSx::DataRepositoryAssociation ------------------------------
# moto 5.2.5 has no data repository associations at all (neither the API nor
# a CloudFormation model). Model the resource: its file system must exist in
# the FSx backend (an unknown FileSystemId fails the resource, as in AWS),
# `Ref` and `AssociationId` are `dra-` and 17 hex digits, `ResourceARN` is
# the association's ARN; the file system lists it (its
# `data_repository_associations`, for tests) until the association is deleted.
class FsxDataRepositoryAssociation(CloudFormationModel):
    __module__ = "moto.fsx.launcher"

    def __init__(self, association_id, arn, file_system, properties):
        self.association_id = association_id
        self.arn = arn
        self.file_system = file_system
        self.properties = properties

    @staticmethod
    def cloudformation_type():
        return "AWS::FSx::DataRepositoryAssociation"

    @staticmethod
    def cloudformation_name_type():
        return ""

    @property
    def physical_resource_id(self):
        return self.association_id

    @classmethod
    def has_cfn_attr(cls, attr):
        return attr in ("AssociationId", "ResourceARN")

    def get_cfn_attribute(self, attribute_name):
        return self.association_id if attribute_name == "AssociationId" else self.arn

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        from moto.fsx.exceptions import FileSystemNotFound
        from moto.fsx.models import fsx_backends

        p = cloudformation_json["Properties"]
        fs = fsx_backends[account_id][region_name].file_systems.get(p["FileSystemId"])
        if fs is None:
            raise FileSystemNotFound(p["FileSystemId"])
        association_id = "dra-" + uuid.uuid4().hex[:17]
        arn = f"arn:aws:fsx:{region_name}:{account_id}:association/{fs.file_system_id}/{association_id}"
        association = cls(association_id, arn, fs, dict(p))
        if not hasattr(fs, "data_repository_associations"):
            fs.data_repository_associations = {}
        fs.data_repository_associations[association_id] = p
        return association

    @classmethod
    def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
        original_resource.properties = dict(cloudformation_json["Properties"])
        return original_resource

    def delete(self, account_id, region_name):
        getattr(self.file_system, "data_repository_associations", {}).pop(self.association_id, None)


cfn_parsing.get_model_list.cache_clear()
cfn_parsing.get_model_map.cache_clear()
cfn_parsing.get_name_type_map.cache_clear()


# --- Patch (z): no capacity ------------------------------------------------------
# moto 5.2.5 launches any instance type anywhere. POST /_insufficient_capacity
# (JSON InstanceType, optional AvailabilityZone and Region: every zone, every
# region) takes a type off the shelves: RunInstances of it there fails with
# EC2's InsufficientInstanceCapacity, so an AWS::EC2::Instance fails its
# stack (as in patch (i)); an Auto Scaling launch tries its types in order
# (the mixed instances policy's overrides, "prioritized", else the launch
# template's type) in each of its subnets, launches the first that has
# capacity, and when none has records a failed scaling activity (patch (f))
# with EC2's message. POST /moto-api/reset forgets it.
SHORTAGES: list[dict] = []


class InsufficientCapacity(EC2ClientError):
    """EC2's InsufficientInstanceCapacity, with AWS's words."""

    def __init__(self, instance_type, zone, others):
        message = (
            f"We currently do not have sufficient {instance_type} capacity in the Availability Zone you requested "
            f"({zone}). Our system will be working on provisioning additional capacity."
        )
        if others:
            message += (
                f" You can currently get {instance_type} capacity by not specifying an Availability Zone in your "
                f"request or choosing {', '.join(others)}."
            )
        super().__init__("InsufficientInstanceCapacity", message)
        self.instance_type, self.zone = instance_type, zone

    def cloudformation_reason(self):
        """The reason CloudFormation gives a resource whose launch failed so."""
        return (
            f"{self.message} (Service: AmazonEC2; Status Code: 500; Error Code: InsufficientInstanceCapacity; "
            f"Request ID: {uuid.uuid4()}; Proxy: null)"
        )


def shortage(request):
    """A shortage from a test's JSON."""
    entry = {"InstanceType": request.get("InstanceType")}
    for key in ("AvailabilityZone", "Region"):
        if request.get(key) is not None:
            entry[key] = request[key]
    if not all(isinstance(v, str) and v for v in entry.values()):
        raise ValueError("InstanceType (a non-empty string) is required; AvailabilityZone and Region are strings")
    return entry


def has_capacity(instance_type, zone, region):
    with SIGNALS_LOCK:
        return not any(
            s["InstanceType"] == instance_type
            and s.get("AvailabilityZone", zone) == zone
            and s.get("Region", region) == region
            for s in SHORTAGES
        )


def capacity_check(backend, instance_type, zone):
    """Raises InsufficientCapacity when `instance_type` has none in `zone`."""
    region = backend.region_name
    if has_capacity(instance_type, zone, region):
        return
    zones = [z.name for z in backend.describe_availability_zones()]
    others = [z for z in zones if z != zone and has_capacity(instance_type, z, region)]
    raise InsufficientCapacity(instance_type, zone, others)


_run_instances = EC2InstanceBackend.run_instances


# The type an Auto Scaling launch chose (replace_group_instances), for run_instances.
LAUNCHING = threading.local()


def run_instances(self, image_id, count, user_data, security_group_names, **kwargs):
    if getattr(LAUNCHING, "instance_type", None):
        kwargs["instance_type"], kwargs["is_instance_type_default"] = LAUNCHING.instance_type, False
    instance_type = kwargs.get("instance_type") or "m1.small"
    if kwargs.get("launch_template") and kwargs.get("is_instance_type_default"):
        template = self._get_template_from_args(kwargs["launch_template"]).data
        instance_type = template.get("InstanceType") or instance_type
    # The zone moto places the instance in (Instance.__init__).
    subnet_id = kwargs.get("subnet_id") or next(
        (n["SubnetId"] for n in kwargs.get("nics") or [] if "SubnetId" in n), None
    )
    if subnet_id:
        zone = self.get_subnet(subnet_id).availability_zone
    else:
        zone = kwargs.get("placement") or self.region_name + "a"
    capacity_check(self, instance_type, zone)
    return _run_instances(self, image_id, count, user_data, security_group_names, **kwargs)


EC2InstanceBackend.run_instances = run_instances

_replace_group_instances = FakeAutoScalingGroup.replace_autoscaling_group_instances


def replace_group_instances(self, count_needed, propagated_tags):
    overrides = ((self.mixed_instances_policy or {}).get("LaunchTemplate") or {}).get("Overrides") or []
    types = [o["InstanceType"] for o in overrides if o.get("InstanceType")] or [self.instance_type]
    subnets = [s for s in (self.vpc_zone_identifier or "").split(",") if s] or [None]
    ec2 = self.autoscaling_backend.ec2_backend
    shortage = None
    for instance_type in types:
        for subnet_id in subnets:
            zone = ec2.get_subnet(subnet_id).availability_zone if subnet_id else random.choice(self.availability_zones)
            try:
                capacity_check(ec2, instance_type, zone)
            except InsufficientCapacity as e:
                shortage = shortage or e
                continue
            # moto launches the template's type in the first subnet: this
            # type (run_instances reads LAUNCHING), in this subnet.
            vpc_zone_identifier, self.vpc_zone_identifier = self.vpc_zone_identifier, subnet_id
            LAUNCHING.instance_type = instance_type
            try:
                return _replace_group_instances(self, count_needed, propagated_tags)
            finally:
                LAUNCHING.instance_type = None
                self.vpc_zone_identifier = vpc_zone_identifier
    message = f"{shortage.message} Launching EC2 instance failed."
    with SIGNALS_LOCK:
        ACTIVITIES.setdefault(self.name, []).append(scaling_activity(self.name, {"StatusMessage": message}))


FakeAutoScalingGroup.replace_autoscaling_group_instances = replace_group_instances

# Patch (ac): SetInstanceHealth only records the status; AWS terminates an
# instance marked Unhealthy and launches a replacement (the desired capacity
# unchanged). The GPU gate's `replace` relies on it.
_set_instance_health = AutoScalingBackend.set_instance_health


def set_instance_health(self, instance_id, health_status, *args, **kwargs):
    _set_instance_health(self, instance_id, health_status, *args, **kwargs)
    if health_status == "Unhealthy":
        self.terminate_instance(instance_id, should_decrement=False)


AutoScalingBackend.set_instance_health = set_instance_health

_stack_outputs = Stack.outputs


def outputs_unless_short(self):
    """A failed stack whose outputs name an instance that had no capacity
    has no outputs (as a rolled-back stack in AWS)."""
    try:
        return _stack_outputs.fget(self)
    except Exception:
        if self.status == "CREATE_IN_PROGRESS" or not self.status.endswith(("_FAILED", "ROLLBACK_COMPLETE")):
            raise
        return None


Stack.outputs = property(outputs_unless_short)


def wait_condition_for(stack, handle_id):
    """The logical id of the WaitCondition whose Handle is `Ref handle_id`
    (the signal belongs to it in AWS), or the handle itself when none is."""
    for logical_id, resource in stack.template_dict.get("Resources", {}).items():
        if resource.get("Type") == "AWS::CloudFormation::WaitCondition":
            if resource.get("Properties", {}).get("Handle") == {"Ref": handle_id}:
                return logical_id, resource["Type"]
    return handle_id, "AWS::CloudFormation::WaitConditionHandle"


def json_response(start_response, status, body):
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


# --- Patch (o): CloudFormation requests one at a time ----------------------------
# moto 5.2.5 creates a stack's resources lazily: a read while CreateStack is
# still creating them (ListStackResources, or DescribeStacks evaluating the
# outputs) creates them again from another thread (InvalidSubnet.Conflict,
# or two of one resource). The watcher of `synth deploy` and the tests read
# during creates, so CloudFormation requests are served one at a time.
CLOUDFORMATION_LOCK = threading.Lock()

# --- Patch (s): SQS requests bypass the dispatcher's lock -----------------------
# moto's DomainDispatcherApplication finds the backend of every request under
# one threading.Lock. With a thousand agents' requests in flight on a busy
# machine it is a convoy: the thread that takes the lock must then wait for
# the GIL (and for a core), and every other request queues behind it. In the
# formation benchmark at 1,000 nodes, 1,037 of moto's 1,095 threads were
# waiting on that lock (py-spy dump) while moto used a third of a core. A
# signed SQS request (credential scope service `sqs`) always resolves to the
# same Flask app; it is looked up under the lock once, then used directly.
# POST /_hold_dispatcher?seconds=N holds the lock, for the self-test.
SQS_APP: dict[str, object] = {}

# The access key id and service of a SigV4 Authorization header.
CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/[^/]*/[^/]*/([^/]*)/")


def record_call(environ):
    """Appends one AWS API request to CALLS, when it is signed (has an
    `Authorization: ... Credential=<key>/<date>/<region>/<service>/...`):
    `t` (unix seconds at arrival, before moto handles it: a long poll is
    logged when it starts), `key` (access key id), `principal` (patch (t): `user/<name>` or
    `assumed-role/<role>/<session>`, when known), `service`, `action`
    (from X-Amz-Target, else Action= in the query string or form body),
    and for SQS `queue` (the last part of QueueUrl) and, for SendMessage,
    `kind` (the message body's "kind", e.g. register); for S3 `method`,
    `path` (`/<bucket>/<key>`) and `range` (the Range header, when sent). The body is read
    and put back for moto. Returns the call, or None when unsigned."""
    t = time.time()
    match = CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    if not match:
        return None
    key, service = match.group(1), match.group(2)
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    # Patch (t6): the signature is checked against the body as sent.
    environ["launcher.body"] = body
    call = {"t": t, "key": key, "service": service}
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    params = {}
    if target:
        call["action"] = target.rsplit(".", 1)[-1]
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            params = {}
    else:
        form = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        if environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
            form.update(urllib.parse.parse_qs(body.decode("utf-8", "replace")))
        params = {k: v[0] for k, v in form.items()}
        call["action"] = params.get("Action", "?")
    if isinstance(params, dict) and params.get("QueueUrl"):
        call["queue"] = str(params["QueueUrl"]).rstrip("/").rsplit("/", 1)[-1]
    if isinstance(params, dict) and call["action"] == "SendMessage":
        try:
            call["kind"] = json.loads(params.get("MessageBody", "")).get("kind")
        except (ValueError, AttributeError):
            pass
    if service == "s3":
        # S3 names its operation by method and path: which object a node
        # read, and which bytes of it (the data fetch's ranged GETs).
        call["method"] = environ.get("REQUEST_METHOD")
        call["path"] = urllib.parse.unquote(environ.get("PATH_INFO", ""))
        if environ.get("HTTP_RANGE"):
            call["range"] = environ["HTTP_RANGE"]
    principal = principal_of(key)
    if principal is not None:
        call["principal"] = principal
    with CALLS_LOCK:
        CALLS.append(call)
    return call


def extra_routes(app):
    """WSGI middleware: the /_waitcondition, /_signals and /_calls routes,
    else moto (each signed request recorded first)."""

    def wrapped(environ, start_response):
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD")
        if path.startswith("/_waitcondition/") and method == "PUT":
            parts = [urllib.parse.unquote(p) for p in path[len("/_waitcondition/") :].split("/")]
            if len(parts) != 4:
                return json_response(start_response, "404 Not Found", {"error": "no such handle"})
            account, region, stack_name, handle_id = parts
            length = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                signal = json.loads(environ["wsgi.input"].read(length))
                signal = {k: signal[k] for k in ("Status", "Reason", "UniqueId", "Data") if k in signal}
                if signal.get("Status") not in ("SUCCESS", "FAILURE") or "UniqueId" not in signal:
                    raise ValueError("Status must be SUCCESS or FAILURE, and UniqueId is required")
            except (ValueError, TypeError) as e:
                return json_response(start_response, "400 Bad Request", {"error": str(e)})
            try:
                stack = cloudformation_backends[account][region].get_stack(stack_name)
            except Exception:
                return json_response(start_response, "404 Not Found", {"error": f"no stack {stack_name}"})
            logical_id, resource_type = wait_condition_for(stack, handle_id)
            record_signal(account, region, stack_name, logical_id, resource_type, signal)
            on_wait_condition_signal(stack, logical_id, signal)
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
        if path.startswith("/_signals/") and method == "GET":
            stack_name = urllib.parse.unquote(path[len("/_signals/") :])
            with SIGNALS_LOCK:
                return json_response(start_response, "200 OK", list(SIGNALS.get(stack_name, [])))
        if path == "/_calls" and method == "GET":
            with CALLS_LOCK:
                return json_response(start_response, "200 OK", list(CALLS))
        if path == "/_lifecycle_completions" and method == "GET":
            with SIGNALS_LOCK:
                return json_response(start_response, "200 OK", list(COMPLETIONS))
        if path.startswith("/_scaling_activities/") and method == "POST":
            group = urllib.parse.unquote(path[len("/_scaling_activities/") :])
            length = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                activity = scaling_activity(group, json.loads(environ["wsgi.input"].read(length)))
            except (ValueError, TypeError, AttributeError) as e:
                return json_response(start_response, "400 Bad Request", {"error": str(e)})
            with SIGNALS_LOCK:
                ACTIVITIES.setdefault(group, []).append(activity)
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
        if path in ("/_service_quotas", "/_capacity_reservations", "/_spot_placement_scores") and method == "POST":
            # Patches (v), (w) and (y): a quota's value, a reservation, a Spot placement score.
            length = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                request = json.loads(environ["wsgi.input"].read(length))
                if path == "/_service_quotas":
                    answer = set_quota(request)
                elif path == "/_spot_placement_scores":
                    answer = set_spot_score(request)
                else:
                    answer = add_capacity_reservation(request)
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                return json_response(start_response, "400 Bad Request", {"error": f"{type(e).__name__}: {e}"})
            return json_response(start_response, "200 OK", answer)
        if path == "/_fail_resource" and method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                request = json.loads(environ["wsgi.input"].read(length))
                logical_id, reason = str(request["LogicalResourceId"]), str(request["Reason"])
            except (ValueError, TypeError, KeyError) as e:
                return json_response(start_response, "400 Bad Request", {"error": f"{e}: LogicalResourceId and Reason are required"})
            with SIGNALS_LOCK:
                FAILURES[logical_id] = reason
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
        if path == "/_insufficient_capacity" and method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                entry = shortage(json.loads(environ["wsgi.input"].read(length)))
            except (ValueError, TypeError, AttributeError) as e:
                return json_response(start_response, "400 Bad Request", {"error": str(e)})
            with SIGNALS_LOCK:
                SHORTAGES.append(entry)
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
        if path == "/_hold_dispatcher" and method == "POST":
            # Self-test of patch (s): holds moto's dispatcher lock for
            # ?seconds= (at most 10), as a slow request under it would.
            try:
                seconds = float(urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))["seconds"][0])
                if not 0 <= seconds <= 10:
                    raise ValueError("seconds must be 0 to 10")
            except (KeyError, ValueError) as e:
                return json_response(start_response, "400 Bad Request", {"error": f"{e}: ?seconds=0..10 is required"})
            with app.lock:
                time.sleep(seconds)
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
        if path.startswith("/_users/") and method == "POST":
            # Patch (t): a deploying user (administrator policy), made once.
            try:
                answer = user_credentials(urllib.parse.unquote(path[len("/_users/") :]))
            except ValueError as e:
                return json_response(start_response, "400 Bad Request", {"error": str(e)})
            return json_response(start_response, "200 OK", answer)
        if path == "/_service_credentials" and method == "POST":
            # Patch (t5): a role's credentials as the service that assumes it gets them.
            length = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                answer = service_credentials(json.loads(environ["wsgi.input"].read(length)))
            except PermissionError as e:
                return json_response(start_response, "403 Forbidden", {"error": str(e)})
            except Exception as e:  # noqa: BLE001 - an unknown profile or role, a bad request
                return json_response(start_response, "400 Bad Request", {"error": f"{type(e).__name__}: {e}"})
            return json_response(start_response, "200 OK", answer)
        if path == "/moto-api/reset" and method == "POST":
            with SIGNALS_LOCK:
                SIGNALS.clear()
                COMPLETIONS.clear()
                ACTIVITIES.clear()
                FAILURES.clear()
                QUOTA_VALUES.clear()
                CAPACITY_RESERVATIONS.clear()
                SPOT_SCORES.clear()
                SHORTAGES.clear()
            with CALLS_LOCK:
                CALLS.clear()
            # Patch (t): the reset wipes IAM; the harness's principals come back.
            answer = app(environ, start_response)
            create_principals()
            return answer
        call = record_call(environ)
        if call is not None and call["service"] not in ("ec2", "s3"):
            # Patch (t7): a refusal in the shape of the service's protocol.
            return refusals_as_aws_sends_them(route(app, call), environ, start_response, call)
        return route(app, call)(environ, start_response)

    return wrapped


def refusals_as_aws_sends_them(inner, environ, start_response, call):
    """Runs `inner`; when it refuses a request (a refused signature or
    credentials, a call no policy allows) with moto's EC2-shaped XML error
    (`<ErrorResponse><Errors><Error>`), answers what AWS sends instead, which
    the SDK reads the error code from: for the JSON protocol (SQS,
    CloudWatch Logs) `{"__type": ..., "message": ...}` (and SQS's
    `x-amzn-query-error`), for the query protocol (Auto Scaling,
    CloudFormation, STS) `<ErrorResponse><Error>...</Error></ErrorResponse>`."""
    answer = {}

    def keep(status, headers, exc_info=None):
        answer["status"], answer["headers"] = status, headers
        return lambda data: None

    body = b"".join(inner(environ, keep))
    status = answer.get("status", "500 Internal Server Error")
    if status.startswith("403") and body.lstrip().startswith(b"<"):
        text = body.decode("utf-8", "replace")
        code = re.search(r"<Code>([^<]*)</Code>", text)
        message = re.search(r"<Message>([^<]*)</Message>", text)
        code = code.group(1) if code else "AccessDenied"
        message = message.group(1) if message else ""
        # On stderr (the harness's moto log), for the tests to list.
        who = call.get("principal", call["key"])
        print(f"REFUSED {who} {call['service']}:{call['action']} {code}: {message}", file=sys.stderr, flush=True)
        if environ.get("HTTP_X_AMZ_TARGET"):
            data = json.dumps({"__type": code, "message": message}).encode()
            headers = [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-query-error", f"{code};Sender")]
        else:
            data = (
                '<ErrorResponse><Error><Type>Sender</Type>'
                f"<Code>{code}</Code><Message>{message}</Message></Error>"
                f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
            ).encode()
            headers = [("Content-Type", "text/xml")]
        headers.append(("Content-Length", str(len(data))))
        start_response(status, headers)
        return [data]
    start_response(status, answer.get("headers", []))
    return [body]


def route(app, call):
    """The app a signed request goes to (patches (o) and (s))."""

    def routed(environ, start_response):
        if call is not None and call["service"] == "sqs":
            # Patch (s): SQS requests skip the dispatcher's lock.
            sqs_app = SQS_APP.get("app")
            if sqs_app is None:
                sqs_app = SQS_APP["app"] = app.get_application(environ)
            return sqs_app(environ, start_response)
        if call is not None and call["service"] == "cloudformation":
            # Patch (o): one CloudFormation request at a time.
            with CLOUDFORMATION_LOCK:
                return app(environ, start_response)
        return app(environ, start_response)

    return routed


# --- Patch (r): ReceiveMessage in time linear in the queue ---------------------
# moto 5.2.5 checks every message it returns against the queue's retention
# period by calling get_queue_attributes(["MessageRetentionPeriod"]), which
# computes every attribute of the queue three times over, among them
# ApproximateNumberOfMessages(NotVisible): a pass over every message in the
# queue, each taking the time twice through datetime. A receive of 10 from a
# queue holding n messages so costs 60 passes over n, with the GIL held: 0.2 s
# at n = 500 (the master queue at 256 nodes holds 512 registrations and
# acknowledgements), over 1 s at 2,000, and at 1,000 nodes moto could serve
# nothing else. The retention period is read from the queue itself; the check
# is the same (a message past retention is not returned).
#
# Every SendMessage computes every attribute once too (to read
# ContentBasedDeduplication), and every receive lists the visible messages:
# passes over the queue that remain, but each message's visibility and delay
# are compared with time.time() (the same unix milliseconds moto's
# unix_time_millis computes through two datetimes), a tenth of the cost.
def is_message_valid_based_on_retention_period(self, queue_name, message):
    queue = self.get_queue(queue_name)
    return queue.message_retention_period + message.sent_timestamp / 1000 > unix_time()


def message_visible(self):
    return time.time() * 1000.0 > self.visible_at


def message_delayed(self):
    return time.time() * 1000.0 < self.delayed_until


SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period
SqsMessage.visible = property(message_visible)
SqsMessage.delayed = property(message_delayed)


# --- Patch (t): IAM enforced as AWS enforces it ---------------------------------
# With INITIAL_NO_AUTH_ACTION_COUNT at 0 (top of this file), moto checks
# every signed request's signature and evaluates the caller's identity
# policies. What it lacks for the template's policies to be evaluated as
# AWS evaluates them, each fixed here:
#
# (t1) Only SQS, IAM and STS name the resource a call acts on; every other
#      service is authorized against `*`, so a statement scoped to an ARN
#      (the master's worker group, its stack, its log group) never matches
#      and AWS's allowed calls are denied. `_determine_resource` computes
#      the ARN AWS authorizes against for Auto Scaling (the group's ARN for
#      the actions that support resource-level permissions; an instance's
#      group for TerminateInstanceInAutoScalingGroup; the tags' group for
#      CreateOrUpdateTags and DeleteTags), CloudFormation (the
#      stack id) and CloudWatch Logs (the stream's ARN for CreateLogStream
#      and PutLogEvents, `log-group:<name>:*` for the group's other actions).
# (t2) AWS::Logs::LogGroup's `Arn` attribute lacks AWS's trailing `:*`, so a
#      statement on it covers no stream; it gets the `:*`, as in AWS.
# (t3) A role created by CloudFormation keeps its inline policies as Python
#      dicts; moto's evaluator expects JSON text (KeyError, HTTP 500) and
#      GetRolePolicy returns them as Python-style strings. They are stored
#      as JSON.
# (t4) Assumed-role credentials never expire. A request signed with
#      credentials past their expiration is refused with AWS's code and
#      message (ExpiredToken, "The security token included in the request is
#      expired"; moto has only InvalidClientTokenId). S3 and EC2 keep moto's
#      own refusals (their codes are not ExpiredToken's shape there).
# (t6) The signature of a form-encoded request (the query protocol: Auto
#      Scaling, CloudFormation, EC2) is checked against moto's own
#      re-encoding of the parsed form (werkzeug leaves no raw body once it
#      parsed the form), which differs from the SDK's encoding in which
#      characters are escaped: a large CreateStack from the Rust SDK was
#      refused (SignatureDoesNotMatch). It is checked against the bytes sent.
# (t7) Those refusals come in EC2's XML shape (`<Errors><Error>`) for every
#      service; the SDK finds no error code in them. They are answered in
#      the service's own protocol (refusals_as_aws_sends_them).
# (t5) moto cannot assume a role for a service: a user assuming a role whose
#      trust names only a `Service` principal crashes its trust check
#      (TypeError, HTTP 500). POST /_service_credentials gives what the
#      service gets: for EC2, an instance profile's role credentials (what
#      the instance metadata serves), for Auto Scaling a hook role's,
#      provided the role's trust policy lets that service assume it.
from moto.autoscaling.responses import AutoScalingResponse as _AutoScalingResponse  # noqa: E402
from moto.core.exceptions import _RESTError  # noqa: E402
from moto.iam.access_control import AssumedRoleAccessKey, CreateAccessKeyFailure, IAMRequest  # noqa: E402
from moto.iam.models import Role as IamRole  # noqa: E402
from moto.iam.models import iam_backends  # noqa: E402
from moto.logs.models import LogGroup as LogsLogGroup  # noqa: E402
from moto.logs.responses import LogsResponse  # noqa: E402
from moto.sts.models import sts_backends  # noqa: E402

from moto.core.authorization import ActionAuthenticatorMixin  # noqa: E402
from moto.core.responses import BaseResponse  # noqa: E402

_setup_class = BaseResponse.setup_class
_authorize = ActionAuthenticatorMixin._authenticate_and_authorize_action


def setup_class_keeping_the_body(self, request, *args, **kwargs):
    self.launcher_body = request.environ.get("launcher.body")
    return _setup_class(self, request, *args, **kwargs)


def authorize_with_the_sent_body(self, iam_request_cls, resource="*"):
    sent = getattr(self, "launcher_body", None)
    if not sent or getattr(self, "raw_body", None):
        return _authorize(self, iam_request_cls, resource)
    kept = self.raw_body
    self.raw_body = sent
    try:
        return _authorize(self, iam_request_cls, resource)
    finally:
        self.raw_body = kept


BaseResponse.setup_class = setup_class_keeping_the_body
ActionAuthenticatorMixin._authenticate_and_authorize_action = authorize_with_the_sent_body

# (t8) SQS's batch actions are authorized as the action they batch
#      (sqs:DeleteMessage for DeleteMessageBatch, ...; AWS has no
#      sqs:DeleteMessageBatch permission); moto asked for the batch name, so
#      the master's retirement of old manifests was refused.
from moto.iam.access_control import IAMRequestBase  # noqa: E402

BATCHED_AS = {
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}
_iam_request_init = IAMRequestBase.__init__


def iam_request_init(self, *args, **kwargs):
    _iam_request_init(self, *args, **kwargs)
    self._action = BATCHED_AS.get(self._action, self._action)


IAMRequestBase.__init__ = iam_request_init

ACCOUNT = "123456789012"
# The harness's administrator: the principal that sets up and inspects a
# test's resources (tests/harness/moto.rs ACCESS_KEY and SECRET_KEY).
ADMIN = ("e2e-admin", "AKIAE2EADMINISTRATOR", "e2e-administrator-secret-access-key")
ADMIN_POLICY = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
# Users made with POST /_users/<name> (a deploying user), name -> (key, secret),
# made again after a reset with the same keys.
USERS: dict[str, tuple[str, str]] = {}


def create_user(name, key, secret):
    """An IAM user with the administrator policy and exactly one access key,
    `key`/`secret`, made in the backend (no request, so nothing unchecked)."""
    iam = iam_backends[ACCOUNT]["aws"]
    if name not in iam.users:
        iam.create_user(region_name="us-east-1", user_name=name)
        iam.put_user_policy(name, "administrator", ADMIN_POLICY)
    user = iam.users[name]
    if not any(k.access_key_id == key for k in user.access_keys):
        access_key = iam.create_access_key(name)
        access_key.access_key_id = key
        access_key.secret_access_key = secret


def create_principals():
    create_user(*ADMIN)
    with SIGNALS_LOCK:
        users = dict(USERS)
    for name, (key, secret) in users.items():
        create_user(name, key, secret)


def user_credentials(name):
    """The access key of user `name`, made when it does not exist yet."""
    if not re.fullmatch(r"[\w+=,.@-]{1,64}", name):
        raise ValueError(f"{name!r} is not an IAM user name")
    with SIGNALS_LOCK:
        if name not in USERS:
            USERS[name] = ("AKIA" + uuid.uuid4().hex[:16].upper(), uuid.uuid4().hex + uuid.uuid4().hex[:8])
        key, secret = USERS[name]
    create_user(name, key, secret)
    return {"UserName": name, "AccessKeyId": key, "SecretAccessKey": secret}


# Auto Scaling actions without resource-level permissions (authorized against `*`).
AUTOSCALING_UNSCOPED = re.compile(r"^Describe|^CreateLaunchConfiguration$|^DeleteLaunchConfiguration$")


def autoscaling_resource(self):
    action = self._get_action()
    if AUTOSCALING_UNSCOPED.match(action):
        return "*"
    groups = self.autoscaling_backend.autoscaling_groups
    name = self._get_param("AutoScalingGroupName")
    if not name and self._get_param("InstanceId"):
        instance_id = self._get_param("InstanceId")
        name = next(
            (g.name for g in groups.values() if any(s.instance.id == instance_id for s in g.instance_states)), None
        )
    if not name and action in ("CreateOrUpdateTags", "DeleteTags"):
        # A tag names its group as its ResourceId; AWS authorizes the call
        # against that group (the master tags its own: the idle guard).
        ids = {t.get("ResourceId") for t in self._get_param("Tags", []) or []}
        if len(ids) == 1:
            name = ids.pop()
    if not name:
        return "*"
    group = groups.get(name)
    if group is not None:
        return group.arn
    return f"arn:aws:autoscaling:{self.region}:{self.current_account}:autoScalingGroup:*:autoScalingGroupName/{name}"


def cloudformation_resource(self):
    name = self._get_param("StackName")
    change_set = self._get_param("ChangeSetName")
    if not name and change_set:
        # A change set named by its ARN alone (Describe/Execute/DeleteChangeSet):
        # AWS authorizes the call against the change set's stack.
        found = self.cloudformation_backend.change_sets.get(change_set)
        return found.stack_id if found is not None else "*"
    if not name:
        return "*"
    try:
        return self.cloudformation_backend.get_stack(name).stack_id
    except Exception:
        if name.startswith("arn:"):
            return name
        return f"arn:aws:cloudformation:{self.region}:{self.current_account}:stack/{name}/*"


def logs_resource(self):
    group = self._get_param("logGroupName")
    if not group:
        return "*"
    base = f"arn:aws:logs:{self.region}:{self.current_account}:log-group:{group}"
    if self._get_action() in ("CreateLogStream", "PutLogEvents"):
        return f"{base}:log-stream:{self._get_param('logStreamName')}"
    return f"{base}:*"


# (t9) S3 calls are authorized under moto's own names for some operations,
#      not AWS's: HeadBucket as s3:HeadBucket (AWS: s3:ListBucket), and
#      PutBucketEncryption, PutBucketOwnershipControls and
#      PutPublicAccessBlock as s3:CreateBucket (moto's default for a bucket
#      PUT; its `public_access_block` key never matches the
#      `publicAccessBlock` query). They get AWS's action names, so a policy
#      that allows exactly what AWS checks (`synth policy`) is enough here.
from moto.s3.responses import ACTION_MAP as S3_ACTION_MAP  # noqa: E402

S3_ACTION_MAP["BUCKET"]["HEAD"]["DEFAULT"] = "ListBucket"
S3_ACTION_MAP["BUCKET"]["PUT"]["encryption"] = "PutEncryptionConfiguration"
S3_ACTION_MAP["BUCKET"]["PUT"]["ownershipControls"] = "PutBucketOwnershipControls"
S3_ACTION_MAP["BUCKET"]["PUT"]["publicAccessBlock"] = "PutBucketPublicAccessBlock"

# (t10) Conditions in identity policies: moto evaluates `StringEquals` only
#       and gives identity policies no request values, so every condition
#       holds there; and a statement whose condition fails is an explicit
#       deny in moto, whatever its resource. The nodes may list their data's
#       bucket only under the data's prefixes (`s3:ListBucket` with a
#       `StringLike` condition on `s3:prefix`; synth's `read_data`). Here an
#       S3 listing's `prefix` (empty without one) is the `s3:prefix` value,
#       `StringLike` is evaluated (`*` and `?`, as AWS matches them), and a
#       statement whose action, resource or condition does not match does
#       not apply (neither allows nor denies), as in AWS.
from moto.iam import policy_conditions  # noqa: E402
from moto.iam.access_control import IAMPolicy, IAMPolicyStatement, PermissionResult, S3IAMRequest  # noqa: E402


def string_like(expected, actual):
    patterns = expected if isinstance(expected, list) else [expected]
    return any(
        re.fullmatch(re.escape(p).replace(r"\*", ".*").replace(r"\?", "."), actual, re.DOTALL) for p in patterns
    )


policy_conditions.CONDITION_OPERATIONS["StringLike"] = string_like


def statement_permits(self, action, resource="*", principal=None, incoming_condition_values=None):
    if "NotAction" in self._statement:
        concerned = not self._check_element_matches("NotAction", action)
    else:
        concerned = self._check_element_matches("Action", action)
    if not concerned or self.is_unknown_principal(self._statement.get("Principal")):
        return PermissionResult.NEUTRAL
    if principal and not self._check_principal(principal):
        return PermissionResult.DENIED
    if not self._check_conditions(incoming_condition_values):
        return PermissionResult.NEUTRAL
    if self._statement.get("Resource") and not self._check_element_matches("Resource", resource):
        return PermissionResult.NEUTRAL
    return PermissionResult.PERMITTED if self._statement["Effect"] == "Allow" else PermissionResult.DENIED


IAMPolicyStatement.is_action_permitted = statement_permits


def s3_check_action_permitted(self, resource):
    values = None
    if self._action == "s3:ListBucket":
        prefix = self._data.get("prefix", "") if isinstance(self._data, dict) else ""
        if isinstance(prefix, list):
            prefix = prefix[0] if prefix else ""
        values = {"s3:prefix": prefix}
    permitted = False
    for policy in self._access_key.collect_policies():
        result = IAMPolicy(policy).is_action_permitted(self._action, resource, None, values)
        if result == PermissionResult.DENIED:
            self._raise_access_denied()
        elif result == PermissionResult.PERMITTED:
            permitted = True
    if not permitted:
        self._raise_access_denied()


S3IAMRequest.check_action_permitted = s3_check_action_permitted

# (t1) EC2: StartInstances and StopInstances of one instance are authorized
#      against the instance's ARN, as AWS does, so the deploying user's
#      ec2:StartInstances statement (`synth resume`, scoped to
#      `arn:aws:ec2:<region>:*:instance/*`) can be allowed at all; every
#      other EC2 call stays on `*`. moto evaluates only `StringEquals`
#      conditions and ignores the rest: that statement's `StringLike` on the
#      instance's aws:cloudformation:stack-name tag is not evaluated here.
from moto.ec2.responses import EC2Response  # noqa: E402

EC2_SCOPED = ("StartInstances", "StopInstances")


def ec2_resource(self):
    if self._get_action() not in EC2_SCOPED:
        return "*"
    ids = self._get_param("InstanceIds", []) or []
    if len(ids) == 1:
        return f"arn:aws:ec2:{self.region}:{self.current_account}:instance/{ids[0]}"
    return "*"


EC2Response._determine_resource = ec2_resource
_AutoScalingResponse._determine_resource = autoscaling_resource
CloudFormationResponse._determine_resource = cloudformation_resource
LogsResponse._determine_resource = logs_resource

_log_group_attribute = LogsLogGroup.get_cfn_attribute


def log_group_attribute(self, attribute_name):
    value = _log_group_attribute(self, attribute_name)
    return value + ":*" if attribute_name == "Arn" else value


LogsLogGroup.get_cfn_attribute = log_group_attribute


def put_role_policy_json(self, policy_name, policy_json):
    self.policies[policy_name] = policy_json if isinstance(policy_json, str) else json.dumps(policy_json)


IamRole.put_policy = put_role_policy_json

_assumed_role_key_init = AssumedRoleAccessKey.__init__


def assumed_role_key_init(self, account_id, partition, access_key_id, headers):
    _assumed_role_key_init(self, account_id, partition, access_key_id, headers)
    for assumed_role in sts_backends[account_id][partition].assumed_roles:
        if assumed_role.access_key_id == access_key_id:
            expiration = assumed_role.expiration
            now = datetime.datetime.now(expiration.tzinfo) if expiration.tzinfo else datetime.datetime.utcnow()
            if expiration <= now:
                raise CreateAccessKeyFailure(reason="ExpiredToken")


AssumedRoleAccessKey.__init__ = assumed_role_key_init


class ExpiredTokenError(_RESTError):
    """AWS's refusal of expired credentials (moto has no such error)."""

    code = 403

    def __init__(self):
        super().__init__("ExpiredToken", "The security token included in the request is expired")


_raise_invalid_access_key = IAMRequest._raise_invalid_access_key


def raise_invalid_access_key(self, reason):
    if reason == "ExpiredToken" and self._service != "ec2":
        raise ExpiredTokenError()
    _raise_invalid_access_key(self, reason)


IAMRequest._raise_invalid_access_key = raise_invalid_access_key


def policy_json(document):
    """A policy document as moto keeps it (JSON text, a dict, or the
    Python-style text of a dict) as a dict."""
    if isinstance(document, dict):
        return document
    try:
        return json.loads(document)
    except ValueError:
        return ast.literal_eval(document)


def trusts_service(role, service):
    """Whether `role`'s trust policy lets `service` (ec2.amazonaws.com)
    assume it: an Allow of sts:AssumeRole naming it as a Service principal."""
    statements = policy_json(role.assume_role_policy_document).get("Statement", [])
    for statement in statements if isinstance(statements, list) else [statements]:
        actions = statement.get("Action", [])
        services = statement.get("Principal", {}).get("Service", [])
        actions = actions if isinstance(actions, list) else [actions]
        services = services if isinstance(services, list) else [services]
        if statement.get("Effect") == "Allow" and "sts:AssumeRole" in actions and service in services:
            return True
    return False


def service_credentials(request):
    """Patch (t5): the credentials `Service` gets for a role, as JSON in the
    shape the instance metadata serves them. The role is `RoleArn`, or the
    role of `InstanceProfile` (name or ARN) for EC2; `SessionName` (an
    instance id for EC2), `DurationSeconds` (900 to 43200, default 3600)."""
    service = str(request["Service"])
    iam = iam_backends[ACCOUNT]["aws"]
    if request.get("InstanceProfile"):
        profile = str(request["InstanceProfile"])
        profile = (
            iam.get_instance_profile_by_arn(profile) if profile.startswith("arn:") else iam.get_instance_profile(profile)
        )
        if not profile.roles:
            raise ValueError(f"instance profile {profile.name} has no role")
        role = profile.roles[0]
    else:
        role = iam.get_role_by_arn(str(request["RoleArn"]))
    if not trusts_service(role, service):
        raise PermissionError(f"role {role.name} does not trust {service}")
    duration = int(request.get("DurationSeconds", 3600))
    if not 60 <= duration <= 43200:
        raise ValueError("DurationSeconds must be 60 to 43200")
    session = str(request.get("SessionName") or service.split(".")[0])
    assumed = sts_backends[ACCOUNT]["aws"].assume_role(
        region_name="us-east-1",
        role_session_name=session,
        role_arn=role.arn,
        policy=None,
        duration=duration,
        external_id=None,
    )
    expiration = assumed.expiration.astimezone(datetime.timezone.utc) if assumed.expiration.tzinfo else assumed.expiration
    return {
        "Code": "Success",
        "LastUpdated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "Type": "AWS-HMAC",
        "RoleName": role.name,
        "AccessKeyId": assumed.access_key_id,
        "SecretAccessKey": assumed.secret_access_key,
        "Token": assumed.session_token,
        "Expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def principal_of(key):
    """Who signs with access key id `key`: `user/<name>` or
    `assumed-role/<role>/<session>` (for GET /_calls), else None."""
    if key.startswith("AKIA"):
        for user in iam_backends[ACCOUNT]["aws"].users.values():
            if any(k.access_key_id == key for k in user.access_keys):
                return f"user/{user.name}"
        return None
    for assumed_role in list(sts_backends[ACCOUNT]["aws"].assumed_roles):
        if assumed_role.access_key_id == key:
            return f"assumed-role/{assumed_role.role_arn.split('/')[-1]}/{assumed_role.session_name}"
    return None


# Patch (p): the listen backlog. werkzeug listens with a backlog of 128; when
# hundreds of agents connect at once (the formation benchmark starts 1,000)
# the accept loop, which needs the GIL among a thousand long-polling threads,
# falls behind, SYNs are dropped and clients time out connecting. The kernel
# caps the backlog at net.core.somaxconn (4096 here).
LISTEN_BACKLOG = 4096


class LauncherServer(ThreadedMotoServer):
    # ThreadedMotoServer builds its WSGI app inside _server_entry; this is the
    # same code with the extra routes wrapped around the app.
    def _server_entry(self):
        from werkzeug.serving import BaseWSGIServer

        BaseWSGIServer.request_queue_size = LISTEN_BACKLOG
        app = extra_routes(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()


def main():
    global PUBLIC_BASE, HOLD_WAIT_CONDITIONS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--hold-wait-conditions", action="store_true")
    args = parser.parse_args()
    HOLD_WAIT_CONDITIONS = args.hold_wait_conditions
    server = LauncherServer(args.host, args.port, verbose=False)
    create_principals()
    server.start()
    host, port = server.get_host_and_port()
    PUBLIC_BASE = f"http://{host}:{port}"
    print(f"READY {host} {port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    sys.exit(main())
