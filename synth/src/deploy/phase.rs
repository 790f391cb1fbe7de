//! The phases a user thinks in while a cluster's stack is created: network,
//! storage, identity and queues, master, workers, formation. Every resource
//! of the templates belongs to one, by its type and, for the compute
//! resources both roles share, by its logical id (the ids are synth's own:
//! `Master...`, `Worker...`, `Formation...`).

/// A group of resources shown as one line of progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Phase {
    /// VPC, subnets, gateways, routes, security groups, placement group.
    Network,
    /// EFS and its mount targets.
    Storage,
    /// IAM roles and instance profiles, SQS queues.
    Identity,
    /// The master's launch template, instance and address.
    Master,
    /// The workers' launch template and Auto Scaling group.
    Workers,
    /// The formation wait condition: the master reports the cluster formed.
    Formation,
    /// Anything else (a resource type synth does not make).
    Other,
}

impl Phase {
    /// Every phase, in the order a create goes through them.
    pub(crate) const ALL: [Phase; 7] = [
        Phase::Network,
        Phase::Storage,
        Phase::Identity,
        Phase::Master,
        Phase::Workers,
        Phase::Formation,
        Phase::Other,
    ];

    /// The name shown in progress lines.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Phase::Network => "network",
            Phase::Storage => "storage",
            Phase::Identity => "identity and queues",
            Phase::Master => "master",
            Phase::Workers => "workers",
            Phase::Formation => "formation",
            Phase::Other => "other",
        }
    }

    /// The phase of a resource.
    pub(crate) fn of(logical_id: &str, resource_type: &str) -> Phase {
        match resource_type {
            "AWS::CloudFormation::WaitCondition" | "AWS::CloudFormation::WaitConditionHandle" => Phase::Formation,
            "AWS::AutoScaling::AutoScalingGroup" | "AWS::AutoScaling::ScheduledAction" => Phase::Workers,
            "AWS::EC2::Instance" => Phase::Master,
            "AWS::EC2::LaunchTemplate" | "AWS::EC2::EIP" if logical_id.starts_with("Master") => Phase::Master,
            "AWS::EC2::LaunchTemplate" => Phase::Workers,
            "AWS::EFS::FileSystem" | "AWS::EFS::MountTarget" => Phase::Storage,
            "AWS::IAM::Role"
            | "AWS::IAM::InstanceProfile"
            | "AWS::IAM::Policy"
            | "AWS::SQS::Queue"
            | "AWS::Logs::LogGroup" => Phase::Identity,
            t if t.starts_with("AWS::EC2::") => Phase::Network,
            _ => Phase::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resource_of_the_templates_has_its_phase() {
        let cases = [
            ("Vpc", "AWS::EC2::VPC", Phase::Network),
            ("NatAddress", "AWS::EC2::EIP", Phase::Network),
            ("MasterElasticIp", "AWS::EC2::EIP", Phase::Master),
            ("ClusterSecurityGroup", "AWS::EC2::SecurityGroup", Phase::Network),
            ("ClusterPlacementGroup", "AWS::EC2::PlacementGroup", Phase::Network),
            ("FileSystem", "AWS::EFS::FileSystem", Phase::Storage),
            ("MountTarget1", "AWS::EFS::MountTarget", Phase::Storage),
            ("NodeLogGroup", "AWS::Logs::LogGroup", Phase::Identity),
            ("MasterRole", "AWS::IAM::Role", Phase::Identity),
            ("MasterQueue", "AWS::SQS::Queue", Phase::Identity),
            ("MasterLaunchTemplate", "AWS::EC2::LaunchTemplate", Phase::Master),
            ("MasterInstance", "AWS::EC2::Instance", Phase::Master),
            ("WorkerLaunchTemplate", "AWS::EC2::LaunchTemplate", Phase::Workers),
            ("WorkerGroup", "AWS::AutoScaling::AutoScalingGroup", Phase::Workers),
            ("FormationHandle", "AWS::CloudFormation::WaitConditionHandle", Phase::Formation),
            ("FormationWaitCondition", "AWS::CloudFormation::WaitCondition", Phase::Formation),
            ("Topic", "AWS::SNS::Topic", Phase::Other),
        ];
        for (id, ty, phase) in cases {
            assert_eq!(Phase::of(id, ty), phase, "{id} {ty}");
        }
    }
}
