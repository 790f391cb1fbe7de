//! The network: a new VPC (public and private subnets in two Availability
//! Zones, or one when the nodes must share a zone; one NAT gateway; an S3
//! gateway endpoint), or the blueprint's existing VPC and subnets.
//!
//! Nodes live in private subnets and reach AWS APIs through the NAT gateway
//! (S3 through the free gateway endpoint); only a public master sits in a
//! public subnet, behind its Elastic IP.
//!
//! <https://docs.aws.amazon.com/vpc/latest/userguide/vpc-example-private-subnets-nat.html>

use cfn::resources::ec2;
use cfn::{Attributes, Dependency, Expr, Pseudo, Template};

use super::context::Ctx;
use super::parameters::Inputs;
use crate::spec::NetworkSpec;

/// Where things go, for the other builders.
pub(super) struct Network {
    pub vpc_id: Expr,
    /// The master's subnet.
    pub master_subnet: Expr,
    /// The workers' subnets.
    pub worker_subnets: Vec<Expr>,
    /// One subnet per zone the nodes use, for EFS mount targets.
    pub mount_subnets: Vec<Expr>,
    /// Routes that must exist before a node boots (it needs AWS APIs at once).
    pub ready: Vec<Dependency>,
    /// The internet gateway attachment (an Elastic IP needs it first).
    pub internet: Option<Dependency>,
    /// Whether this template created the VPC (so its mount targets are ours to create).
    pub created: bool,
}

pub(super) fn add(t: &mut Template, ctx: &Ctx, inputs: &Inputs) -> Network {
    match &ctx.spec.network {
        NetworkSpec::New { vpc_cidr } => new_vpc(t, ctx, *vpc_cidr, inputs.block_zone.as_ref().map(|z| z.r#ref())),
        NetworkSpec::Existing { vpc_id, public_subnet_id, private_subnet_ids } => {
            let private: Vec<Expr> = private_subnet_ids.iter().map(|s| Expr::from(s.as_str())).collect();
            // A placement group or EFA needs every node in one zone; the
            // first private subnet is that zone (validation warned about it).
            let workers: Vec<Expr> =
                if ctx.spec.single_zone() { private.iter().take(1).cloned().collect() } else { private.clone() };
            let master_subnet = match (ctx.spec.master.public, public_subnet_id) {
                (true, Some(public)) => Expr::from(public.as_str()),
                _ => workers[0].clone(),
            };
            Network {
                vpc_id: vpc_id.as_str().into(),
                master_subnet,
                mount_subnets: workers.clone(),
                worker_subnets: workers,
                ready: Vec::new(),
                internet: None,
                created: false,
            }
        }
    }
}

/// A new VPC; `zone`: the one zone every node must be in (a Capacity
/// Block's), else the region's first zone(s).
fn new_vpc(t: &mut Template, ctx: &Ctx, cidr: ipnet::Ipv4Net, zone_pinned: Option<Expr>) -> Network {
    let zones = if ctx.spec.single_zone() { 1 } else { 2 };
    // Validation allows /16 to /24 and checks the workers fit these.
    let subnets = crate::spec::vpc_subnets(cidr);
    let range = |blocks: &[ipnet::Ipv4Net], zone: u32| blocks.get(zone as usize).map(ToString::to_string);

    let vpc = t.add(
        "Vpc",
        ec2::Vpc {
            cidr_block: cidr.to_string().into(),
            enable_dns_hostnames: true,
            enable_dns_support: true,
            tags: ctx.tags("vpc"),
        },
    );
    let igw = t.add("InternetGateway", ec2::InternetGateway { tags: ctx.tags("igw") });
    let attach = t.add(
        "InternetGatewayAttachment",
        ec2::VpcGatewayAttachment { vpc_id: vpc.r#ref().into(), internet_gateway_id: igw.r#ref().into() },
    );

    let mut public = Vec::new();
    let mut private = Vec::new();
    for zone in 0..zones {
        let n = zone + 1;
        let az = zone_pinned.clone().unwrap_or_else(|| Expr::availability_zone(zone));
        public.push(t.add(
            &format!("PublicSubnet{n}"),
            ec2::Subnet {
                vpc_id: vpc.r#ref().into(),
                cidr_block: range(&subnets.public, zone).unwrap_or_default().into(),
                availability_zone: az.clone().into(),
                map_public_ip_on_launch: Some(false),
                tags: ctx.tags(&format!("public-{n}")),
            },
        ));
        private.push(t.add(
            &format!("PrivateSubnet{n}"),
            ec2::Subnet {
                vpc_id: vpc.r#ref().into(),
                cidr_block: range(&subnets.private, zone).unwrap_or_default().into(),
                availability_zone: az.into(),
                map_public_ip_on_launch: Some(false),
                tags: ctx.tags(&format!("private-{n}")),
            },
        ));
    }

    let public_rt = t.add("PublicRouteTable", ec2::RouteTable { vpc_id: vpc.r#ref().into(), tags: ctx.tags("public") });
    let public_route = t.add_with(
        "PublicDefaultRoute",
        ec2::Route {
            route_table_id: public_rt.r#ref().into(),
            destination_cidr_block: "0.0.0.0/0".into(),
            gateway_id: Some(igw.r#ref().into()),
            nat_gateway_id: None,
        },
        Attributes { depends_on: vec![attach.dependency()], ..Attributes::default() },
    );
    let nat_ip = t.add_with(
        "NatGatewayEip",
        ec2::Eip { domain: "vpc".into(), instance_id: None, tags: ctx.tags("nat") },
        Attributes { depends_on: vec![attach.dependency()], ..Attributes::default() },
    );
    let nat = t.add(
        "NatGateway",
        ec2::NatGateway {
            allocation_id: nat_ip.attr("AllocationId").into(),
            subnet_id: public[0].r#ref().into(),
            tags: ctx.tags("nat"),
        },
    );
    let private_rt =
        t.add("PrivateRouteTable", ec2::RouteTable { vpc_id: vpc.r#ref().into(), tags: ctx.tags("private") });
    let private_route = t.add(
        "PrivateDefaultRoute",
        ec2::Route {
            route_table_id: private_rt.r#ref().into(),
            destination_cidr_block: "0.0.0.0/0".into(),
            gateway_id: None,
            nat_gateway_id: Some(nat.r#ref().into()),
        },
    );
    for (i, s) in public.iter().enumerate() {
        t.add(
            &format!("PublicSubnet{}RouteTable", i + 1),
            ec2::SubnetRouteTableAssociation { subnet_id: s.r#ref().into(), route_table_id: public_rt.r#ref().into() },
        );
    }
    for (i, s) in private.iter().enumerate() {
        t.add(
            &format!("PrivateSubnet{}RouteTable", i + 1),
            ec2::SubnetRouteTableAssociation { subnet_id: s.r#ref().into(), route_table_id: private_rt.r#ref().into() },
        );
    }
    // Data sets and checkpoints in S3 travel through this free gateway
    // instead of the NAT gateway, which charges per gigabyte.
    t.add(
        "S3GatewayEndpoint",
        ec2::VpcEndpoint {
            vpc_id: vpc.r#ref().into(),
            service_name: Expr::join("", [Expr::from("com.amazonaws."), Pseudo::Region.r#ref(), Expr::from(".s3")])
                .into(),
            vpc_endpoint_type: "Gateway".into(),
            route_table_ids: vec![private_rt.r#ref().into(), public_rt.r#ref().into()],
        },
    );

    let master_subnet = if ctx.spec.master.public { public[0].r#ref() } else { private[0].r#ref() };
    let private_refs: Vec<Expr> = private.iter().map(|s| s.r#ref()).collect();
    Network {
        vpc_id: vpc.r#ref(),
        master_subnet,
        worker_subnets: private_refs.clone(),
        mount_subnets: private_refs,
        ready: vec![private_route.dependency(), public_route.dependency()],
        internet: Some(attach.dependency()),
        created: true,
    }
}
