//! The NCCL/EFA environment of this node: what NCCL (through AWS's
//! aws-ofi-nccl plugin and libfabric) needs to know that it cannot find out
//! reliably by itself. The agent writes it into the profile
//! (`/etc/profile.d/deeplearning.sh`, [`crate::files::profile`]) and
//! `trainer launch` passes it to every rank; `trainer doctor` shows it.
//!
//! Inputs: the node config's [`Efa`] (synth: the launch template gives the
//! node an EFA, and which instance types' EFA does RDMA reads, from synth's
//! catalogue), this node's instance type (instance metadata) and the
//! interface holding its private IP (this host's interfaces,
//! `getifaddrs(3)`). Every value below names its source; nothing is set
//! that the sources do not document:
//!
//! - `NCCL_SOCKET_IFNAME==<interface>` on every node: NVIDIA's NCCL
//!   environment variables (<https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname>):
//!   "specifies which IP interfaces to use for communication"; a leading
//!   `=` matches the exact name. The interface with the private IP the
//!   cluster knows the node by is the one the security group opens; NCCL's
//!   own choice may be another one (a container bridge, a second ENI).
//! - `FI_PROVIDER=efa` on EFA nodes: "specifies the fabric interface
//!   provider. This must be set to `efa`" (EC2 user guide, "Get started
//!   with EFA and NCCL", test step); aws-ofi-nccl's EFA cheatsheet
//!   (`doc/efa-env-var.md`) lists it for plugin versions up to 1.5.0, and
//!   later versions choose `efa` by themselves when it is unset, so setting
//!   it never changes their choice.
//! - `FI_EFA_USE_DEVICE_RDMA=1` on EFA nodes whose type does RDMA reads: the
//!   same guide, "uses the device's RDMA functionality for one-sided and
//!   two-sided transfer"; the cheatsheet: needed for plugin versions before
//!   1.7.0 on p4/p5, "not harmful to set it on p4/p5 instances with the
//!   newer software". On a type without RDMA reads libfabric's EFA provider
//!   aborts the process ("FI_EFA_USE_DEVICE_RDMA=1 was set by user, but EFA
//!   device has no rdma-read capability"), so it is set only where synth's
//!   catalogue says yes.
//!
//! Left out on purpose: `NCCL_PROTO=simple` (the cheatsheet: only for
//! aws-ofi-nccl up to 1.5.0; later versions set it themselves where it is
//! needed, and setting it would keep LL128 off where it is safe) and
//! `FI_EFA_FORK_SAFE` (the cheatsheet: "Not needed anymore", the plugin sets
//! it).

use std::net::IpAddr;

use node_contract::Efa;

/// One variable of the environment: name and value.
pub type Variable = (&'static str, String);

/// The environment for a node: `efa` from its node config (`None`: no
/// EFA), its `instance_type` (`None`: unknown, so no RDMA setting) and the
/// name of the interface holding its private IP (`None`: not found).
pub fn environment(efa: Option<&Efa>, instance_type: Option<&str>, socket_interface: Option<&str>) -> Vec<Variable> {
    let mut vars = Vec::new();
    if let Some(interface) = socket_interface {
        vars.push(("NCCL_SOCKET_IFNAME", format!("={interface}")));
    }
    if let Some(efa) = efa {
        vars.push(("FI_PROVIDER", "efa".to_owned()));
        if instance_type.is_some_and(|t| efa.rdma_instance_types.iter().any(|r| r == t)) {
            vars.push(("FI_EFA_USE_DEVICE_RDMA", "1".to_owned()));
        }
    }
    vars
}

/// The name of this host's interface that holds `ip`; `None` when no
/// interface has it or the interfaces cannot be listed (logged: NCCL then
/// picks one itself, as without this setting).
pub fn interface_with(ip: &str) -> Option<String> {
    let Ok(ip) = ip.parse::<IpAddr>() else {
        tracing::warn!(ip, "not an IP address; NCCL_SOCKET_IFNAME is left to NCCL");
        return None;
    };
    match if_addrs::get_if_addrs() {
        Ok(interfaces) => {
            let found = interfaces.into_iter().find(|i| i.ip() == ip).map(|i| i.name);
            if found.is_none() {
                tracing::warn!(%ip, "no interface holds this node's private IP; NCCL_SOCKET_IFNAME is left to NCCL");
            }
            found
        }
        Err(e) => {
            tracing::warn!("cannot list the network interfaces ({e}); NCCL_SOCKET_IFNAME is left to NCCL");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn efa() -> Efa {
        Efa { rdma_instance_types: vec!["p4d.24xlarge".into(), "p5.48xlarge".into()] }
    }

    #[test]
    fn every_node_names_its_interface_and_efa_nodes_their_provider() {
        assert_eq!(environment(None, Some("c5.xlarge"), Some("ens5")), [("NCCL_SOCKET_IFNAME", "=ens5".to_owned())]);
        assert_eq!(environment(None, None, None), []);
        assert_eq!(
            environment(Some(&efa()), Some("p4d.24xlarge"), Some("enp39s0")),
            [
                ("NCCL_SOCKET_IFNAME", "=enp39s0".to_owned()),
                ("FI_PROVIDER", "efa".to_owned()),
                ("FI_EFA_USE_DEVICE_RDMA", "1".to_owned()),
            ]
        );
    }

    #[test]
    fn rdma_only_on_a_type_the_config_lists() {
        // An EFA type without RDMA reads, a type the deployer changed to, and an unknown type.
        for instance_type in [Some("g5.48xlarge"), Some("p3dn.24xlarge"), None] {
            let vars = environment(Some(&efa()), instance_type, None);
            assert_eq!(vars, [("FI_PROVIDER", "efa".to_owned())], "{instance_type:?}");
        }
    }

    #[test]
    fn the_loopback_address_is_on_the_loopback_interface() {
        // Every Linux host (and network namespace) has lo with 127.0.0.1.
        assert_eq!(interface_with("127.0.0.1").as_deref(), Some("lo"));
        assert_eq!(interface_with("192.0.2.77"), None, "TEST-NET-1 is on no interface here");
        assert_eq!(interface_with("not an ip"), None);
    }
}
