//! `AWS::EC2::*`: network, security groups, launch templates, instances.

use serde::Serialize;

use super::{Str, resource};
use crate::{Tag, Value};

/// `AWS::EC2::VPC`
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Vpc {
    /// The IPv4 range.
    pub cidr_block: Str,
    /// Instances get DNS host names (EFS mount names need this).
    pub enable_dns_hostnames: bool,
    /// The Amazon-provided DNS resolver is on.
    pub enable_dns_support: bool,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(Vpc, "AWS::EC2::VPC", ["CidrBlock", "DefaultNetworkAcl", "DefaultSecurityGroup", "VpcId"]);

/// `AWS::EC2::InternetGateway`
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct InternetGateway {
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(InternetGateway, "AWS::EC2::InternetGateway", ["InternetGatewayId"]);

/// `AWS::EC2::VPCGatewayAttachment`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct VpcGatewayAttachment {
    /// The VPC.
    pub vpc_id: Str,
    /// The internet gateway.
    pub internet_gateway_id: Str,
}
resource!(VpcGatewayAttachment, "AWS::EC2::VPCGatewayAttachment", []);

/// `AWS::EC2::Subnet`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Subnet {
    /// The VPC.
    pub vpc_id: Str,
    /// The IPv4 range, inside the VPC's.
    pub cidr_block: Str,
    /// The zone.
    pub availability_zone: Str,
    /// Give instances a public IPv4 address at launch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_public_ip_on_launch: Option<bool>,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(Subnet, "AWS::EC2::Subnet", ["AvailabilityZone", "CidrBlock", "SubnetId", "VpcId"]);

/// `AWS::EC2::RouteTable`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct RouteTable {
    /// The VPC.
    pub vpc_id: Str,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(RouteTable, "AWS::EC2::RouteTable", ["RouteTableId"]);

/// `AWS::EC2::Route`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Route {
    /// The table the route goes into.
    pub route_table_id: Str,
    /// Destination range.
    pub destination_cidr_block: Str,
    /// Through an internet gateway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_id: Option<Str>,
    /// Through a NAT gateway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nat_gateway_id: Option<Str>,
}
resource!(Route, "AWS::EC2::Route", []);

/// `AWS::EC2::SubnetRouteTableAssociation`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SubnetRouteTableAssociation {
    /// The subnet.
    pub subnet_id: Str,
    /// The route table it uses.
    pub route_table_id: Str,
}
resource!(SubnetRouteTableAssociation, "AWS::EC2::SubnetRouteTableAssociation", []);

/// `AWS::EC2::EIP`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Eip {
    /// Always `vpc`.
    pub domain: Str,
    /// The instance it is associated with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<Str>,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(Eip, "AWS::EC2::EIP", ["AllocationId", "PublicIp"]);

/// `AWS::EC2::NatGateway`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct NatGateway {
    /// The Elastic IP's allocation id.
    pub allocation_id: Str,
    /// The public subnet it sits in.
    pub subnet_id: Str,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(NatGateway, "AWS::EC2::NatGateway", ["NatGatewayId"]);

/// `AWS::EC2::VPCEndpoint`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct VpcEndpoint {
    /// The VPC.
    pub vpc_id: Str,
    /// For example `com.amazonaws.us-east-1.s3`.
    pub service_name: Str,
    /// `Gateway` or `Interface`.
    pub vpc_endpoint_type: Str,
    /// Route tables that get a route to the service (gateway endpoints).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub route_table_ids: Vec<Str>,
}
resource!(VpcEndpoint, "AWS::EC2::VPCEndpoint", ["Id"]);

/// `AWS::EC2::SecurityGroup`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SecurityGroup {
    /// What it is for.
    pub group_description: Str,
    /// The VPC.
    pub vpc_id: Str,
    /// Outbound rules given inline.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub security_group_egress: Vec<Rule>,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(SecurityGroup, "AWS::EC2::SecurityGroup", ["GroupId", "VpcId"]);

/// One security group rule, inline in a group or as its own resource.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Rule {
    /// The group the rule belongs to (standalone rules only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<Str>,
    /// Why the rule exists.
    pub description: Str,
    /// `tcp`, `udp`, `icmp` or `-1` for all.
    pub ip_protocol: Str,
    /// First port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_port: Option<i64>,
    /// Last port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_port: Option<i64>,
    /// An IPv4 range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cidr_ip: Option<Str>,
    /// Another group (ingress).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_security_group_id: Option<Str>,
    /// Another group (egress).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination_security_group_id: Option<Str>,
}

/// `AWS::EC2::SecurityGroupIngress`
#[derive(Clone, Debug, Serialize)]
pub struct SecurityGroupIngress(pub Rule);
resource!(SecurityGroupIngress, "AWS::EC2::SecurityGroupIngress", ["Id"]);

/// `AWS::EC2::SecurityGroupEgress`
#[derive(Clone, Debug, Serialize)]
pub struct SecurityGroupEgress(pub Rule);
resource!(SecurityGroupEgress, "AWS::EC2::SecurityGroupEgress", ["Id"]);

/// `AWS::EC2::PlacementGroup`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PlacementGroup {
    /// `cluster`, `partition` or `spread`.
    pub strategy: Str,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(PlacementGroup, "AWS::EC2::PlacementGroup", ["GroupName"]);

/// `AWS::EC2::LaunchTemplate`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LaunchTemplate {
    /// What instances launched from it look like.
    pub launch_template_data: LaunchTemplateData,
    /// Tags of the launch template itself.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tag_specifications: Vec<TagSpecification>,
}
resource!(
    LaunchTemplate,
    "AWS::EC2::LaunchTemplate",
    ["DefaultVersionNumber", "LatestVersionNumber", "LaunchTemplateId"]
);

/// `LaunchTemplateData`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LaunchTemplateData {
    /// The AMI.
    pub image_id: Str,
    /// The instance type.
    pub instance_type: Str,
    /// An EC2 key pair for SSH.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_name: Option<Str>,
    /// The instance profile.
    pub iam_instance_profile: IamInstanceProfile,
    /// Network interfaces (security groups go here, not in `SecurityGroupIds`).
    pub network_interfaces: Vec<NetworkInterface>,
    /// Instance metadata service options.
    pub metadata_options: MetadataOptions,
    /// Volumes.
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// Detailed monitoring.
    pub monitoring: Monitoring,
    /// Placement (a cluster placement group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// The market: `capacity-block` for a Capacity Block's instances.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_market_options: Option<InstanceMarketOptions>,
    /// Which Capacity Reservation (or Capacity Block) instances launch into.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_specification: Option<CapacityReservationSpecification>,
    /// Tags for what the template launches.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tag_specifications: Vec<TagSpecification>,
    /// Base64 user data.
    pub user_data: Str,
}

/// `InstanceMarketOptions` of launch template data.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceMarketOptions {
    /// `spot` or `capacity-block`.
    pub market_type: Str,
}

/// `CapacityReservationSpecification` of launch template data.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CapacityReservationSpecification {
    /// The reservation instances launch into.
    pub capacity_reservation_target: CapacityReservationTarget,
}

/// `CapacityReservationTarget` of launch template data.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CapacityReservationTarget {
    /// `cr-...`
    pub capacity_reservation_id: Str,
}

/// `IamInstanceProfile` of launch template data.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct IamInstanceProfile {
    /// The profile's ARN.
    pub arn: Str,
}

/// A launch template network interface.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkInterface {
    /// 0 for the primary interface.
    pub device_index: u32,
    /// `efa` for an Elastic Fabric Adapter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface_type: Option<Str>,
    /// Security groups.
    pub groups: Vec<Str>,
    /// The subnet (when the launcher does not choose it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<Str>,
    /// Public IPv4 at launch.
    pub associate_public_ip_address: bool,
    /// Deleted with the instance.
    pub delete_on_termination: bool,
}

/// `MetadataOptions`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MetadataOptions {
    /// `enabled`
    pub http_endpoint: Str,
    /// `required` means IMDSv2 only.
    pub http_tokens: Str,
    /// Network hops a metadata response may travel.
    pub http_put_response_hop_limit: u32,
}

/// `BlockDeviceMapping`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BlockDeviceMapping {
    /// The device, for example `/dev/sda1` for the root of Ubuntu images.
    pub device_name: Str,
    /// The EBS volume.
    pub ebs: Ebs,
}

/// `Ebs` of a block device mapping.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Ebs {
    /// GiB.
    pub volume_size: Value<u32>,
    /// `gp3`.
    pub volume_type: Str,
    /// Encrypted at rest.
    pub encrypted: bool,
    /// Deleted with the instance.
    pub delete_on_termination: bool,
}

/// `Monitoring`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Monitoring {
    /// Detailed (1-minute) CloudWatch monitoring.
    pub enabled: bool,
}

/// `Placement`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Placement {
    /// The placement group's name.
    pub group_name: Str,
}

/// `TagSpecification`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TagSpecification {
    /// `instance`, `volume`, `network-interface` or `launch-template`.
    pub resource_type: Str,
    /// Tags.
    pub tags: Vec<Tag>,
}

/// `LaunchTemplateSpecification`: which template and version to launch from.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LaunchTemplateSpecification {
    /// The template.
    pub launch_template_id: Str,
    /// Its version.
    pub version: Str,
}

/// `AWS::EC2::Instance`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Instance {
    /// Everything else comes from the launch template.
    pub launch_template: LaunchTemplateSpecification,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(
    Instance,
    "AWS::EC2::Instance",
    ["AvailabilityZone", "InstanceId", "PrivateDnsName", "PrivateIp", "PublicDnsName", "PublicIp"]
);
