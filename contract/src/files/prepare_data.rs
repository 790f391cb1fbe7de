//! The prepare-data marker: `$EFS_MOUNT/prepare_data_success_<ip>`. A worker
//! whose node config has `elastic.prepare_data_script` writes it when the
//! script succeeded (the agent's boot step); the master admits the worker
//! only once it exists, and `trainer train`'s rendezvous lets a process of
//! that address join a group only then.

/// The marker's file name for the node with private address `ip`.
pub fn marker_name(ip: &str) -> String {
    format!("prepare_data_success_{ip}")
}

/// The marker of the node with private address `ip`, as a node path under
/// the EFS mount `efs_mount`.
pub fn marker(efs_mount: &str, ip: &str) -> String {
    format!("{}/{}", efs_mount.trim_end_matches('/'), marker_name(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_named_by_the_address_under_the_mount() {
        assert_eq!(marker("/efs", "10.0.0.5"), "/efs/prepare_data_success_10.0.0.5");
        assert_eq!(marker("/mnt/efs/", "10.0.0.5"), "/mnt/efs/prepare_data_success_10.0.0.5");
        let path = super::super::under(std::path::Path::new("/r"), marker("/efs", "10.0.0.5"));
        assert_eq!(path, std::path::Path::new("/r/efs").join(marker_name("10.0.0.5")));
    }
}
