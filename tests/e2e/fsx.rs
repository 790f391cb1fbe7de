//! FSx for Lustre end to end: the example blueprint with
//! `storage.fsx_lustre` (`blueprints/fsx-imagenet.yaml`: PERSISTENT_2,
//! linked to S3 by a data repository association) is created in the local
//! AWS (launcher patches (aa) and (ab) make the file system and the link),
//! every node's config names the file system by the id, DNS name and Lustre
//! mount name CloudFormation gave it, and every node's agent writes AWS's
//! fstab line for it beside EFS's and makes the mount point (`mount` itself
//! is off in these tests, as for EFS: no Lustre here).

use std::time::Duration;

use e2e::scenario::{managed_block, read, wait_until};
use e2e::{Cluster, TestResult};
use node_contract::NodeConfig;

#[tokio::test(flavor = "multi_thread")]
async fn every_node_gets_the_lustre_file_system_in_its_config_and_its_fstab() -> TestResult {
    let cluster = Cluster::start("blueprints/fsx-imagenet.yaml", "fsx", 2).await?;
    let stack = cluster.stack();
    let fs_id = stack.resource("FsxFileSystem")?.to_string();
    assert!(fs_id.starts_with("fs-"), "{fs_id}");
    assert_eq!(stack.outputs.get("FsxFileSystemId"), Some(&fs_id));
    let association = stack.resource("FsxDataRepositoryAssociation")?;
    assert!(association.starts_with("dra-"), "{association}");

    let dns = format!("{fs_id}.fsx.us-east-1.amazonaws.com");
    let mut mount_names = Vec::new();
    for template in ["MasterLaunchTemplate", "WorkerLaunchTemplate"] {
        let config = NodeConfig::from_json(&stack.node_config_json(cluster.aws(), template)?)
            .unwrap_or_else(|e| panic!("{template}'s node config: {e}"));
        let fsx = config.fsx.unwrap_or_else(|| panic!("{template}'s node config has no fsx"));
        assert_eq!(fsx.file_system_id, fs_id, "{template}");
        assert_eq!(fsx.dns_name, dns, "{template}");
        assert_eq!(fsx.mount, "/fsx", "{template}");
        assert!(
            fsx.mount_name.len() == 8 && fsx.mount_name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{template}: mount name {:?}",
            fsx.mount_name
        );
        mount_names.push(fsx.mount_name);
    }
    assert_eq!(mount_names[0], mount_names[1], "one file system for every node");

    let lustre = format!(
        "{dns}@tcp:/{} /fsx lustre defaults,relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network.service 0 0",
        mount_names[0]
    );
    let agents = cluster.spawn_agents()?;
    let agent_refs: Vec<_> = agents.iter().collect();
    // Written at boot (the mount step) and again with every manifest: wait
    // for the cluster to form, so both writers have had their turn.
    wait_until("every node to apply a 3-node manifest", Duration::from_secs(90), &agent_refs, || {
        cluster.nodes().iter().all(|n| read(n.root(), "/var/lib/deeplearning/state.json").contains("\"generation\""))
    })?;
    wait_until("every node's fstab block to hold the Lustre line", Duration::from_secs(30), &agent_refs, || {
        cluster.nodes().iter().all(|n| managed_block(&read(n.root(), "/etc/fstab")).contains(&lustre))
    })?;
    for node in cluster.nodes() {
        let block = managed_block(&read(node.root(), "/etc/fstab"));
        let lines: Vec<&str> = block.lines().collect();
        // EFS's, Lustre's, and the scratch volume's (on by default; by its
        // label, nofail: these nodes have no instance store).
        assert_eq!(lines.len(), 3, "EFS's line, Lustre's and the scratch volume's: {block}");
        assert!(lines[0].contains(" /efs nfs4 "), "{block}");
        assert_eq!(lines[1], lustre);
        assert!(lines[2].starts_with("LABEL=dlscratch /scratch "), "{block}");
        assert!(node.root().join("fsx").is_dir(), "no mount point under {}", node.root().display());
    }
    Ok(())
}
