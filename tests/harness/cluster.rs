//! A whole simulated cluster in one call: a [`Network`] of 1 + N nodes,
//! moto on its bridge, the blueprint's stack with N workers, and one
//! [`Node`] per instance moto launched (node 0 is the master, with the
//! master launch template's user data; nodes 1..=N the worker group's
//! instances, with the worker template's). Agents are started by the test.
//! Spare namespaces ([`Cluster::start_with_spares`]) take instances that
//! join later ([`Cluster::add_worker`]), as when the group scales out.
//! [`Cluster::adopt`] makes the nodes of a stack created elsewhere (by
//! `synth deploy`); [`Node::boot`](crate::Node::boot) boots one from its user data.

use crate::moto::LocalAws;
use crate::netns::Network;
use crate::node::{AgentProcess, Node, NodeSpec};
use crate::stack::ClusterStack;
use crate::{Error, Result};

/// The instance type the nodes' metadata reports.
pub const INSTANCE_TYPE: &str = "g4dn.xlarge";

/// A simulated cluster; everything is torn down on drop, nodes first.
pub struct Cluster {
    // Field order is drop order: agents' nodes, then moto, then the network.
    nodes: Vec<Node>,
    worker_user_data: String,
    worker_profile: String,
    allowed_refusals: Vec<String>,
    stack: ClusterStack,
    aws: LocalAws,
    network: Network,
}

impl Cluster {
    /// Starts a cluster of `blueprint` (path from the repository root) with
    /// `workers` workers; the stack is named `stack_name`.
    pub async fn start(blueprint: &str, stack_name: &str, workers: u32) -> Result<Cluster> {
        Cluster::start_with(blueprint, stack_name, workers, &[]).await
    }

    /// [`Cluster::start`] with extra stack parameters (e.g. `MinWorkers`).
    pub async fn start_with(
        blueprint: &str,
        stack_name: &str,
        workers: u32,
        parameters: &[(&str, &str)],
    ) -> Result<Cluster> {
        Cluster::start_with_spares(blueprint, stack_name, workers, parameters, 0).await
    }

    /// [`Cluster::start_with`] with `spares` more namespaces in the network,
    /// for nodes added later with [`Cluster::add_worker`].
    pub async fn start_with_spares(
        blueprint: &str,
        stack_name: &str,
        workers: u32,
        parameters: &[(&str, &str)],
        spares: usize,
    ) -> Result<Cluster> {
        let network = Network::create(1 + workers as usize + spares)?;
        let aws = LocalAws::start(network.host_ip().into())?;
        let stack = ClusterStack::create(&aws, blueprint, stack_name, workers, parameters).await?;
        Cluster::adopt(network, aws, stack).await
    }

    /// The cluster of a stack that exists in `aws` (created by `synth
    /// deploy`, say), on `network` (moto listening on its bridge): one node
    /// per instance, as [`Cluster::start`] makes them; the namespaces past
    /// them are spares.
    pub async fn adopt(network: Network, aws: LocalAws, stack: ClusterStack) -> Result<Cluster> {
        let master_user_data = stack.user_data(&aws, "MasterLaunchTemplate")?;
        let worker_user_data = stack.user_data(&aws, "WorkerLaunchTemplate")?;
        let worker_ids = stack.worker_instance_ids(&aws).await?;
        let desired = aws.auto_scaling_group(stack.worker_group()?).await?.desired_capacity().unwrap_or_default();
        if worker_ids.len() != desired as usize || network.len() < 1 + worker_ids.len() {
            return Err(Error::Unexpected {
                what: format!("worker group {}", stack.worker_group()?),
                detail: format!(
                    "{} instances for a desired capacity of {desired}, {} namespaces",
                    worker_ids.len(),
                    network.len()
                ),
            });
        }
        let worker_profile = stack.resource("WorkerInstanceProfile")?.to_string();
        let mut nodes = Vec::new();
        let master = NodeSpec {
            instance_id: stack.master_instance_id()?.to_string(),
            instance_type: INSTANCE_TYPE.into(),
            user_data: Some(master_user_data),
            instance_profile: Some(stack.resource("MasterInstanceProfile")?.to_string()),
        };
        nodes.push(Node::create(&network, 0, &aws, master)?);
        for (i, id) in worker_ids.into_iter().enumerate() {
            let spec = NodeSpec {
                instance_id: id,
                instance_type: INSTANCE_TYPE.into(),
                user_data: Some(worker_user_data.clone()),
                instance_profile: Some(worker_profile.clone()),
            };
            nodes.push(Node::create(&network, i + 1, &aws, spec)?);
        }
        Ok(Cluster { nodes, worker_user_data, worker_profile, allowed_refusals: Vec::new(), stack, aws, network })
    }

    /// Makes a node for worker instance `instance_id` (one moto launched
    /// after the start, e.g. when the desired capacity was raised) in the
    /// next spare namespace, with the worker launch template's user data.
    pub fn add_worker(&mut self, instance_id: &str) -> Result<&Node> {
        let index = self.nodes.len();
        if index >= self.network.len() {
            return Err(Error::Setup(format!(
                "no spare namespace for {instance_id}: start the cluster with Cluster::start_with_spares"
            )));
        }
        let spec = NodeSpec {
            instance_id: instance_id.to_string(),
            instance_type: INSTANCE_TYPE.into(),
            user_data: Some(self.worker_user_data.clone()),
            instance_profile: Some(self.worker_profile.clone()),
        };
        self.nodes.push(Node::create(&self.network, index, &self.aws, spec)?);
        Ok(&self.nodes[index])
    }

    /// Raises the worker group's desired capacity to `desired` through the
    /// Auto Scaling API (moto launches the instances at once) and returns
    /// the group's instances that are not yet nodes of this cluster, for
    /// [`Cluster::add_worker`].
    pub async fn scale_out(&self, desired: i32) -> Result<Vec<String>> {
        let group = self.stack.worker_group()?;
        self.aws
            .autoscaling()
            .set_desired_capacity()
            .auto_scaling_group_name(group)
            .desired_capacity(desired)
            .send()
            .await
            .map_err(|e| Error::aws("SetDesiredCapacity", &e))?;
        let known: Vec<String> = self.nodes.iter().map(|n| n.instance_id()).collect();
        let ids = self.stack.worker_instance_ids(&self.aws).await?;
        Ok(ids.into_iter().filter(|id| !known.contains(id)).collect())
    }

    /// The local AWS.
    pub fn aws(&self) -> &LocalAws {
        &self.aws
    }

    /// The stack.
    pub fn stack(&self) -> &ClusterStack {
        &self.stack
    }

    /// The network.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// Every node, master first.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The master node.
    pub fn master(&self) -> &Node {
        &self.nodes[0]
    }

    /// One `trainer train` rank per node, master first (rank 0, the
    /// rendezvous), started as `trainer launch` starts them, training for
    /// far longer than a test runs, on the MNIST fixture in `data`. Each
    /// node's config file is written from its user data first when the
    /// agent has not (the rendezvous reads it).
    pub fn start_training(&self, data: &std::path::Path) -> Result<Vec<AgentProcess>> {
        let trainer = crate::sshd::trainer_bin()?;
        let master_ip = self.master().ip().to_string();
        let world = self.nodes().len().to_string();
        let mut ranks = Vec::new();
        for (rank, node) in self.nodes().iter().enumerate() {
            let config = node.root().join("etc/deeplearning/node.json");
            if !config.exists() {
                // The config in the node's own user data, as the agent reads it.
                let script = node.imds().identity().user_data.unwrap_or_default();
                let json = node_contract::config_from_user_data(&script).map_err(|e| Error::Unexpected {
                    what: format!("user data of {}", node.ip()),
                    detail: e.to_string(),
                })?;
                std::fs::create_dir_all(config.parent().unwrap_or(node.root()))
                    .map_err(Error::io("creating the config directory", &config))?;
                std::fs::write(&config, json).map_err(Error::io("writing the node config", &config))?;
            }
            let mut command = node.command(&trainer);
            command.args(["train", "--model", "mlp", "--epochs", "100000", "--batch-size", "8", "--threads", "1"]);
            command.arg("--data").arg(data).arg("--root").arg(node.root());
            command.arg("--checkpoint-dir").arg(self.master().root().join("checkpoints"));
            command.env("RANK", rank.to_string()).env("WORLD_SIZE", &world).env("LOCAL_RANK", "0");
            command.env("MASTER_ADDR", &master_ip).env("MASTER_PORT", "29500");
            ranks.push(node.spawn_logged(command, "trainer")?);
        }
        Ok(ranks)
    }

    /// The worker nodes.
    pub fn workers(&self) -> &[Node] {
        &self.nodes[1..]
    }

    /// Lets the local AWS refuse calls whose `REFUSED` line contains
    /// `text` (a test that makes a refused call on purpose); any other
    /// refusal fails the test when the cluster is dropped.
    pub fn allow_refusals(&mut self, text: &str) {
        self.allowed_refusals.push(text.to_owned());
    }

    /// The calls the local AWS refused that no [`Cluster::allow_refusals`] allows.
    pub fn unexpected_refusals(&self) -> Vec<String> {
        let allowed = |line: &String| self.allowed_refusals.iter().any(|a| line.contains(a.as_str()));
        self.aws.refused().into_iter().filter(|l| !allowed(l)).collect()
    }

    /// [`Node::set_env`] on every node.
    pub fn set_env(&mut self, key: &str, value: &str) {
        for node in &mut self.nodes {
            node.set_env(key, value);
        }
    }

    /// Starts `agent run --root ... --no-mount` on every node, master first.
    pub fn spawn_agents(&self) -> Result<Vec<AgentProcess>> {
        self.nodes.iter().map(|n| n.spawn_agent(&[])).collect()
    }
}

impl Drop for Cluster {
    /// IAM is enforced (tests/moto/README.md, patch (t)): a call the
    /// template's policies refuse fails the test, even one the agent
    /// retries or tolerates, since it would fail on AWS too.
    fn drop(&mut self) {
        let refused = self.unexpected_refusals();
        if !refused.is_empty() && !std::thread::panicking() {
            panic!("the local AWS refused calls (IAM enforced):\n{}", refused.join("\n"));
        }
    }
}
