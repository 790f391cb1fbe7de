//! Create-only properties of the resource types the cluster templates use:
//! changing one replaces the resource. Generated from the CloudFormation
//! resource schemas that cfn-lint 1.58.0 ships (`createOnlyProperties`), plus the
//! few the schemas miss (`EXTRA_CREATE_ONLY` in the generator, with its source);
//! do not edit, regenerate with `python3 synth/tools/gen_create_only.py`.

/// The create-only properties of `resource_type`, as paths under
/// `Properties` (`LaunchTemplate`, `DnsOptions/PrivateDnsPreference`), or
/// `None` for a type the table does not know.
#[rustfmt::skip]
pub(crate) fn create_only(resource_type: &str) -> Option<&'static [&'static str]> {
    Some(match resource_type {
        "AWS::AutoScaling::AutoScalingGroup" => &["AutoScalingGroupName", "InstanceId"],
        "AWS::AutoScaling::ScheduledAction" => &["AutoScalingGroupName"],
        "AWS::CloudFormation::WaitCondition" => &[],
        "AWS::CloudFormation::WaitConditionHandle" => &[],
        "AWS::EC2::EIP" => &["Address", "IpamPoolId", "NetworkBorderGroup", "TransferAddress"],
        "AWS::EC2::Instance" => &["AvailabilityZone", "CpuOptions", "ElasticGpuSpecifications", "ElasticInferenceAccelerators", "EnclaveOptions", "HibernationOptions", "HostResourceGroupArn", "ImageId", "Ipv6AddressCount", "Ipv6Addresses", "KeyName", "LaunchTemplate", "LicenseSpecifications", "NetworkInterfaces", "PlacementGroupName", "PrivateIpAddress", "SecurityGroups", "SubnetId"],
        "AWS::EC2::InternetGateway" => &[],
        "AWS::EC2::LaunchTemplate" => &["LaunchTemplateName"],
        "AWS::EC2::NatGateway" => &["AllocationId", "AvailabilityMode", "ConnectivityType", "PrivateIpAddress", "SubnetId", "VpcId"],
        "AWS::EC2::PlacementGroup" => &["ParentGroupId", "PartitionCount", "SpreadLevel", "Strategy", "Tags"],
        "AWS::EC2::Route" => &["DestinationCidrBlock", "DestinationIpv6CidrBlock", "DestinationPrefixListId", "RouteTableId"],
        "AWS::EC2::RouteTable" => &["VpcId"],
        "AWS::EC2::SecurityGroup" => &["GroupDescription", "GroupName", "VpcId"],
        "AWS::EC2::SecurityGroupEgress" => &["CidrIp", "CidrIpv6", "DestinationPrefixListId", "DestinationSecurityGroupId", "FromPort", "GroupId", "IpProtocol", "ToPort"],
        "AWS::EC2::SecurityGroupIngress" => &["CidrIp", "CidrIpv6", "FromPort", "GroupId", "GroupName", "IpProtocol", "SourcePrefixListId", "SourceSecurityGroupId", "SourceSecurityGroupName", "SourceSecurityGroupOwnerId", "ToPort"],
        "AWS::EC2::Subnet" => &["AvailabilityZone", "AvailabilityZoneId", "CidrBlock", "Ipv4IpamPoolId", "Ipv4NetmaskLength", "Ipv6IpamPoolId", "Ipv6Native", "Ipv6NetmaskLength", "OutpostArn", "VpcId"],
        "AWS::EC2::SubnetRouteTableAssociation" => &["RouteTableId", "SubnetId"],
        "AWS::EC2::VPC" => &["CidrBlock", "Ipv4IpamPoolId", "Ipv4NetmaskLength", "VpcEncryptionControl"],
        "AWS::EC2::VPCEndpoint" => &["DnsOptions/PrivateDnsPreference", "DnsOptions/PrivateDnsSpecifiedDomains", "ResourceConfigurationArn", "ServiceName", "ServiceNetworkArn", "ServiceRegion", "VpcEndpointType", "VpcId"],
        "AWS::EC2::VPCGatewayAttachment" => &["VpcId"],
        "AWS::EFS::FileSystem" => &["AvailabilityZoneName", "Encrypted", "KmsKeyId", "PerformanceMode"],
        "AWS::EFS::MountTarget" => &["FileSystemId", "IpAddress", "IpAddressType", "Ipv6Address", "SubnetId"],
        "AWS::FSx::DataRepositoryAssociation" => &["BatchImportMetaDataOnCreate", "DataRepositoryPath", "FileSystemId", "FileSystemPath"],
        "AWS::FSx::FileSystem" => &["BackupId", "FileSystemType", "KmsKeyId", "LustreConfiguration/DeploymentType", "LustreConfiguration/ImportPath", "SecurityGroupIds", "StorageType", "SubnetIds"],
        "AWS::IAM::InstanceProfile" => &["InstanceProfileName", "Path"],
        "AWS::IAM::Role" => &["Path", "RoleName"],
        "AWS::Logs::LogGroup" => &["LogGroupName"],
        "AWS::SQS::Queue" => &["FifoQueue", "QueueName"],
        _ => return None,
    })
}
