//! The rendezvous' roster: the membership the agent published (its state
//! file's generation and manifest), this process's identity in it, and
//! whether a node has prepared its data.
//!
//! Inputs, under a filesystem root: the agent's state file
//! `/var/lib/deeplearning/state.json`, the node config
//! `/etc/deeplearning/node.json` (EFS mount, prepare-data script) and the
//! prepare-data markers `$EFS_MOUNT/prepare_data_success_<ip>`
//! (`node_contract::files::prepare_data`). Read only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::RendezvousError;
use super::protocol::Hello;
use node_contract::files::prepare_data;
use node_contract::state::{STATE_PATH, State};

/// The membership the agent published: generation, manifest, and which
/// nodes have prepared their data. Read from the files under a root.
#[derive(Debug, Clone)]
pub struct Roster {
    root: PathBuf,
    /// Where prepare-data markers are, when the blueprint set a script.
    markers: Option<PathBuf>,
}

impl Roster {
    /// A roster reading the agent's files under `root`; markers are checked in
    /// `markers` (`$EFS_MOUNT` under the root) when a prepare-data script is set.
    pub fn new(root: impl Into<PathBuf>, markers: Option<PathBuf>) -> Self {
        Self { root: root.into(), markers }
    }

    /// A roster from the node config under `root` (EFS mount and prepare-data script).
    pub fn from_node_config(root: &Path) -> Result<Self, RendezvousError> {
        let path = node_contract::files::under(root, node_contract::NODE_CONFIG_PATH);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| RendezvousError::ReadConfig { path: path.clone(), reason: e.to_string() })?;
        let config = node_contract::NodeConfig::from_json(&text)
            .map_err(|e| RendezvousError::ReadConfig { path, reason: e.to_string() })?;
        let markers =
            config.elastic.prepare_data_script.as_ref().map(|_| node_contract::files::under(root, &config.efs.mount));
        Ok(Self::new(root, markers))
    }

    /// The agent's state now.
    pub fn read(&self) -> Result<State, RendezvousError> {
        let reason = match crate::agent_state::read(&self.root) {
            Ok(Some(s)) => return Ok(s),
            Ok(None) => "no such file".to_owned(),
            // The error's own text names the file again; keep just the reason.
            Err(crate::Error::Read { source, .. }) => source.to_string(),
            Err(crate::Error::AgentState { source, .. }) => source.to_string(),
            Err(e) => e.to_string(),
        };
        Err(RendezvousError::ReadState { path: node_contract::files::under(&self.root, STATE_PATH), reason })
    }

    /// Whether the node with address `ip` may join: its prepare-data marker
    /// exists, or no prepare-data script is set.
    pub fn prepared(&self, ip: &str) -> bool {
        self.markers.as_ref().is_none_or(|dir| dir.join(prepare_data::marker_name(ip)).exists())
    }

    /// This process's [`Hello`], holding no state (epoch and step 0; the
    /// caller fills in what it holds).
    pub fn identity(&self, local_rank: u32, data_addr: SocketAddr) -> Result<Hello, RendezvousError> {
        let snap = self.read()?;
        let node = snap.manifest.node(&snap.instance_id).ok_or_else(|| RendezvousError::NotInManifest {
            instance_id: snap.instance_id.clone(),
            generation: snap.generation,
            path: node_contract::files::under(&self.root, STATE_PATH),
        })?;
        Ok(Hello {
            instance_id: node.instance_id.clone(),
            alias: node.alias.clone(),
            ip: node.private_ip.clone(),
            index: node.index,
            local_rank,
            data_addr,
            epoch: 0,
            step: 0,
        })
    }
}
