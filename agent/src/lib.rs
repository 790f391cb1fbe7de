//! `agent`: the node bootstrap daemon baked into the AMI.
//!
//! Every node runs it at boot. It reads the node config that the template's
//! user data wrote (the `node-contract` crate), finds out who it is from the
//! instance metadata service (IMDSv2) and the CUDA driver, registers with the
//! master over SQS, and applies every manifest the master publishes: the same
//! `/etc/hosts` block, workers file, hostfile, environment, known hosts,
//! authorized keys and EFS mount on every node. On the master it also forms
//! the cluster, signals CloudFormation, and keeps membership current as
//! workers join and leave (docs/ARCHITECTURE.md, "The node contract").
//!
//! Layout:
//! - [`ports`]: the small traits at the edges (queue, worker group, stack
//!   signals); [`aws`] implements them with the AWS SDK, tests may fake them.
//! - [`cluster`]: the membership logic, pure (no I/O): the master's state
//!   machine and a node's view of manifests.
//! - [`files`]: what a manifest means on disk, written atomically under `--root`.
//! - [`identity`], [`gpu`]: who this node is; [`fabric`]: its NCCL/EFA
//!   environment (EFA and RDMA from the node config, the socket interface);
//!   [`interruption`]: the watcher for Spot and rebalance notices.
//! - [`netgate`]: the network gate's schedule, pure (its verdict is the
//!   master's, in [`cluster`]; its sockets are the runner's).
//! - [`logs`]: the node's lines shipped to its CloudWatch Logs stream.
//! - [`data`]: the training data fetched from S3 before a node registers,
//!   shared between the nodes.
//! - [`memory`]: freed heap given back to the system after bursts.
//! - [`activity`]: what keeps this node busy (jobs, SSH, GPUs), for the
//!   idle guard; [`power`]: the master's power-off for its `stop`.
//! - [`scratch`]: the scratch volume striped over the instance store's NVMe drives.
//! - [`runner`]: the loops that tie them together; [`cli`]: the command line.

mod activity;
pub mod aws;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod data;
pub mod fabric;
pub mod files;
mod gpu;
pub mod identity;
mod interruption;
pub mod logs;
mod memory;
pub mod netgate;
pub mod ports;
mod power;
mod runner;
pub mod scratch;
