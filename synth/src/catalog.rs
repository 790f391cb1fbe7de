//! The EC2 instance type catalogue: what synth knows about each instance type
//! a blueprint may name.
//!
//! synth uses it to reject instance types that do not exist or are not offered
//! in the target region (with a "did you mean" from [`suggest`]), to know how
//! many accelerators a node has and of which kind, and to decide whether the
//! template may attach Elastic Fabric Adapters and put the nodes in a cluster
//! placement group.
//!
//! The table itself lives in the generated module `catalog/table.rs`, written by
//! `synth/tools/gen_catalog.py` from two inputs ([`SOURCE`] says which versions):
//!
//! * which types each of the five supported regions offers, taken from the
//!   per-region instance type enum that cfn-lint ships (built by cfn-lint from
//!   the AWS pricing API), and
//! * hand-maintained facts in `synth/data/instance-families.tsv`: accelerator
//!   kind and count, EFA support, cluster placement group support and EFA
//!   RDMA support (from AWS's aws-ofi-nccl platform table), per
//!   family with per-size overrides, transcribed from the AWS documentation
//!   pages named there and in [`SOURCE`], and
//! * the baseline network bandwidth per type (`synth/data/instance-bandwidth.tsv`,
//!   from the AWS instance type pages; the network gate's expected figure),
//!   where transcribed: GPU, Trainium, EFA and the common CPU families, and
//! * the instance store per type (`synth/data/instance-storage.tsv`, from the
//!   AWS instance type pages): how many NVMe drives of what size, or none
//!   (EBS only), where transcribed; the scratch volume is built from them.
//!
//! The facts err on the side of "no": a type wrongly marked without EFA or
//! cluster placement only runs slower, while one wrongly marked with them makes
//! the CloudFormation stack fail. Doubtful entries carry a note in the TSV.
//! Do not edit `table.rs` by hand; edit the TSV and rerun the generator
//! (the command is at the top of `table.rs`).

use crate::region::Region;

mod gpus;
mod table;

pub(crate) use gpus::expect as gpu_expect;

/// Where the table's data comes from (cfn-lint version and file, AWS
/// documentation pages, generation date).
#[allow(dead_code)] // Provenance for the people who read the code (and its docs).
pub(crate) const SOURCE: &str = table::SOURCE;

/// The kind of accelerator an instance type has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Accelerator {
    /// CPU only.
    None,
    /// NVIDIA GPUs (CUDA, NCCL).
    Nvidia,
    /// AWS Trainium or Inferentia (Neuron).
    Neuron,
    /// Another accelerator (AMD GPU, Gaudi, FPGA, ...).
    Other,
}

/// The instance store of an instance type: the local NVMe drives the agent
/// stripes into the scratch volume (docs/ARCHITECTURE.md, "Scratch on local
/// NVMe"). Sizes are as AWS documents them, in GB (10^9 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InstanceStore {
    /// Not transcribed: the type may or may not have one (the agent finds
    /// out on the node).
    Unknown,
    /// EBS only: no instance store.
    None,
    /// `drives` NVMe instance store drives of `gb_each` GB each.
    Nvme {
        /// How many drives.
        drives: u32,
        /// The size of each, in GB.
        gb_each: u32,
    },
}

// The table's tests read the drives through these; synth's checks match on
// the variants.
#[cfg(test)]
impl InstanceStore {
    /// The drives' total size in GB; `None` when unknown or there are none.
    pub(crate) fn total_gb(self) -> Option<u64> {
        match self {
            InstanceStore::Nvme { drives, gb_each } => Some(u64::from(drives) * u64::from(gb_each)),
            InstanceStore::Unknown | InstanceStore::None => None,
        }
    }

    /// Whether the type is known to have NVMe instance store.
    pub(crate) fn has_drives(self) -> bool {
        matches!(self, InstanceStore::Nvme { .. })
    }
}

/// One EC2 instance type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InstanceType {
    /// For example `p4d.24xlarge`.
    pub name: &'static str,
    /// Accelerator kind.
    pub accelerator: Accelerator,
    /// Number of accelerators (GPUs); 0 for CPU types.
    pub accelerators: u32,
    /// Supports Elastic Fabric Adapter.
    pub efa: bool,
    /// May be launched in a cluster placement group.
    pub cluster_placement: bool,
    /// Its EFA device does RDMA reads, so libfabric may use them
    /// (`FI_EFA_USE_DEVICE_RDMA=1`: GPUDirect RDMA for NCCL). Meaningful
    /// only with [`efa`](Self::efa).
    pub efa_rdma: bool,
    /// Baseline network bandwidth in Mbit/s, from the AWS instance type
    /// pages (`synth/data/instance-bandwidth.tsv`); `None`: not transcribed.
    pub network_mbps: Option<u32>,
    /// Its instance store (`synth/data/instance-storage.tsv`).
    pub instance_store: InstanceStore,
    /// Regions (of the five) where it is offered: OR of [`Region::bit`].
    pub regions: u8,
}

impl InstanceType {
    /// Baseline network bandwidth in Gbit/s, when known.
    pub(crate) fn network_gbps(&self) -> Option<f64> {
        self.network_mbps.map(|m| f64::from(m) / 1000.0)
    }

    /// Whether it is offered in `region`.
    pub(crate) fn offered_in(&self, region: Region) -> bool {
        self.regions & region.bit() != 0
    }

    /// Whether it has NVIDIA GPUs.
    pub(crate) fn has_nvidia_gpus(&self) -> bool {
        self.accelerator == Accelerator::Nvidia && self.accelerators > 0
    }
}

/// The instance types whose EFA does RDMA reads, by name: what the node
/// config tells the agent (`node_contract::Efa`), so a node whose type
/// the deployer changed from the blueprint's still gets the right setting.
pub(crate) fn efa_rdma_types() -> impl Iterator<Item = &'static str> {
    table::TABLE.iter().filter(|t| t.efa && t.efa_rdma).map(|t| t.name)
}

/// Looks an instance type up by its exact (lower-case) name.
pub(crate) fn lookup(name: &str) -> Option<&'static InstanceType> {
    // The generator sorts the table by name (byte order, which is what `str`'s
    // `Ord` uses), so a binary search finds any of the ~1,400 rows in about
    // eleven comparisons; a test checks the order.
    table::TABLE.binary_search_by(|t| t.name.cmp(name)).ok().and_then(|i| table::TABLE.get(i))
}

/// The instance store of the instance type `name`: [`InstanceStore::Unknown`]
/// for a name that is not in the catalogue as well as for a type whose
/// instance store is not transcribed.
pub(crate) fn instance_store(name: &str) -> InstanceStore {
    lookup(name).map_or(InstanceStore::Unknown, |t| t.instance_store)
}

/// The known instance type closest to `name`, for "did you mean"; `None` when
/// nothing is close enough to be a plausible typo.
pub(crate) fn suggest(name: &str) -> Option<&'static str> {
    let wanted = name.trim().to_ascii_lowercase();
    if wanted.is_empty() {
        return None;
    }
    // Wrong case or stray spaces: the user meant exactly this type.
    if let Some(t) = lookup(&wanted) {
        return Some(t.name);
    }
    // Count typos as edits (insertions, deletions, substitutions and swaps of
    // adjacent letters). Allow one edit per five characters, between one and
    // three: enough for `p3.16xlarg` or `g5.12xlrage`, while a short or unrelated
    // word stays too far from every name to get a suggestion.
    let max_edits = (wanted.chars().count() / 5).clamp(1, 3);
    table::TABLE
        .iter()
        // A name whose length differs by more than the allowed edits cannot
        // be close enough; skipping it keeps a 100 KB value from costing a
        // quadratic distance against every name (it took 53 s).
        .filter(|t| t.name.len().abs_diff(wanted.len()) <= max_edits)
        .map(|t| (strsim::osa_distance(&wanted, t.name), t.name))
        .filter(|(edits, _)| *edits <= max_edits)
        // Fewest edits wins. Among equals prefer the name sharing the longest
        // start with the input (Jaro-Winkler weighs the prefix), since typos
        // are rarer in the family than in the size; then alphabetical order,
        // so that the answer never depends on iteration details.
        .min_by(|(ea, a), (eb, b)| {
            ea.cmp(eb)
                .then_with(|| strsim::jaro_winkler(&wanted, b).total_cmp(&strsim::jaro_winkler(&wanted, a)))
                .then_with(|| a.cmp(b))
        })
        .map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(name: &str) -> &'static InstanceType {
        lookup(name).unwrap_or_else(|| panic!("{name} should be in the catalogue"))
    }

    #[test]
    fn p3_2xlarge_has_one_gpu_and_no_efa() {
        let t = get("p3.2xlarge");
        assert_eq!(t.name, "p3.2xlarge");
        assert_eq!(t.accelerator, Accelerator::Nvidia);
        assert_eq!(t.accelerators, 1);
        assert!(t.has_nvidia_gpus());
        assert!(!t.efa);
        assert!(t.cluster_placement);
    }

    #[test]
    fn p4d_24xlarge_has_eight_gpus_and_efa() {
        let t = get("p4d.24xlarge");
        assert_eq!(t.accelerator, Accelerator::Nvidia);
        assert_eq!(t.accelerators, 8);
        assert!(t.efa);
        assert!(t.cluster_placement);
        for region in Region::ALL {
            assert!(t.offered_in(region), "p4d.24xlarge in {region}");
        }
    }

    #[test]
    fn c5_xlarge_is_cpu_only() {
        let t = get("c5.xlarge");
        assert_eq!(t.accelerator, Accelerator::None);
        assert_eq!(t.accelerators, 0);
        assert!(!t.has_nvidia_gpus());
        assert!(!t.efa);
        assert!(t.cluster_placement);
    }

    #[test]
    fn burstable_mac_and_flex_types_have_no_cluster_placement() {
        for name in
            ["t3.large", "t2.micro", "t3a.medium", "t4g.small", "mac2.metal", "m7i-flex.large", "c7i-flex.xlarge"]
        {
            assert!(!get(name).cluster_placement, "{name}");
        }
    }

    #[test]
    fn gpu_counts_per_size() {
        let expected = [
            ("p3.8xlarge", 4),
            ("p3.16xlarge", 8),
            ("p3dn.24xlarge", 8),
            ("g5.xlarge", 1),
            ("g5.12xlarge", 4),
            ("g5.48xlarge", 8),
            ("g4dn.xlarge", 1),
            ("g4dn.12xlarge", 4),
            ("g4dn.metal", 8),
            ("g6e.48xlarge", 8),
            ("p5.48xlarge", 8),
            ("p5.4xlarge", 1),
            ("p5en.48xlarge", 8),
        ];
        for (name, gpus) in expected {
            let t = get(name);
            assert_eq!(t.accelerator, Accelerator::Nvidia, "{name}");
            assert_eq!(t.accelerators, gpus, "{name}");
        }
    }

    #[test]
    fn neuron_and_other_accelerators() {
        let trn1 = get("trn1.32xlarge");
        assert_eq!((trn1.accelerator, trn1.accelerators, trn1.efa), (Accelerator::Neuron, 16, true));
        let trn1_small = get("trn1.2xlarge");
        assert_eq!((trn1_small.accelerators, trn1_small.efa), (1, false));
        assert_eq!(get("inf2.48xlarge").accelerator, Accelerator::Neuron);
        assert_eq!(get("dl1.24xlarge").accelerator, Accelerator::Other);
        let amd = get("g4ad.16xlarge");
        assert_eq!((amd.accelerator, amd.accelerators), (Accelerator::Other, 4));
        assert!(!amd.has_nvidia_gpus());
    }

    #[test]
    fn efa_rdma_only_where_aws_ofi_nccl_says_gpudirect_rdma() {
        let rdma: Vec<&str> = efa_rdma_types().collect();
        for name in ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "trn1.32xlarge"] {
            assert!(rdma.contains(&name), "{name} does EFA RDMA: {rdma:?}");
        }
        // EFA without RDMA reads (p3dn, g5, the CPU types), and p5.4xlarge.
        for name in ["p3dn.24xlarge", "g5.48xlarge", "c5n.18xlarge", "p5.4xlarge", "inf1.24xlarge", "dl1.24xlarge"] {
            assert!(!rdma.contains(&name), "{name} does not: {rdma:?}");
        }
        assert!(rdma.iter().all(|n| get(n).efa), "only EFA types are listed");
    }

    #[test]
    fn efa_only_on_the_documented_sizes() {
        for name in
            ["c5n.9xlarge", "c5n.18xlarge", "c5n.metal", "g5.8xlarge", "g4dn.8xlarge", "hpc7g.4xlarge", "m5zn.12xlarge"]
        {
            assert!(get(name).efa, "{name} has EFA");
        }
        for name in ["c5n.4xlarge", "g5.4xlarge", "g4dn.4xlarge", "m5zn.6xlarge", "p3.16xlarge", "c5.24xlarge"] {
            assert!(!get(name).efa, "{name} has no EFA");
        }
    }

    #[test]
    fn regional_offerings_differ() {
        // cfn-lint 1.58.0 lists p4de.24xlarge only in us-east-1 and us-west-2,
        // and trn2.48xlarge (of our five) only in us-east-2. Checking several
        // regions also pins the bit order to Region::bit.
        let p4de = get("p4de.24xlarge");
        assert!(p4de.offered_in(Region::UsEast1));
        assert!(p4de.offered_in(Region::UsWest2));
        assert!(!p4de.offered_in(Region::UsEast2));
        assert!(!p4de.offered_in(Region::EuWest1));
        assert!(!p4de.offered_in(Region::ApSoutheast2));
        let trn2 = get("trn2.48xlarge");
        assert!(trn2.offered_in(Region::UsEast2));
        assert!(!trn2.offered_in(Region::UsEast1));
    }

    #[test]
    fn instance_store_of_the_gpu_and_trainium_types() {
        let nvme = |drives, gb_each| InstanceStore::Nvme { drives, gb_each };
        let expected = [
            ("p3dn.24xlarge", nvme(2, 900)),
            ("p4d.24xlarge", nvme(8, 1000)),
            ("p4de.24xlarge", nvme(8, 1000)),
            ("p5.48xlarge", nvme(8, 3800)),
            ("p5.4xlarge", nvme(1, 3800)),
            ("p5e.48xlarge", nvme(8, 3800)),
            ("p5en.48xlarge", nvme(8, 3800)),
            ("p6-b200.48xlarge", nvme(8, 3800)),
            ("g4dn.xlarge", nvme(1, 125)),
            ("g4dn.metal", nvme(2, 900)),
            ("g5.48xlarge", nvme(2, 3800)),
            ("g6.8xlarge", nvme(2, 450)),
            ("g6e.48xlarge", nvme(4, 1900)),
            ("gr6.4xlarge", nvme(1, 600)),
            ("trn1.32xlarge", nvme(4, 1900)),
            ("trn1n.32xlarge", nvme(4, 1900)),
            ("trn2.48xlarge", nvme(4, 1900)),
            ("c5d.18xlarge", nvme(2, 900)),
            ("c6id.32xlarge", nvme(4, 1900)),
            ("m5d.24xlarge", nvme(4, 900)),
            ("m6id.large", nvme(1, 118)),
            ("r5d.4xlarge", nvme(2, 300)),
        ];
        for (name, store) in expected {
            assert_eq!(instance_store(name), store, "{name}");
            assert_eq!(get(name).instance_store, store, "{name}");
        }
        assert_eq!(instance_store("p4d.24xlarge").total_gb(), Some(8000));
        assert!(instance_store("p5.48xlarge").has_drives());
    }

    #[test]
    fn ebs_only_and_unknown_instance_store() {
        for name in ["p3.2xlarge", "p3.16xlarge", "p2.xlarge", "inf2.48xlarge", "c5.xlarge", "m5.large", "t3.micro"] {
            assert_eq!(instance_store(name), InstanceStore::None, "{name}");
            assert_eq!(instance_store(name).total_gb(), None, "{name}");
            assert!(!instance_store(name).has_drives(), "{name}");
        }
        // Not transcribed (newer than the sources), and not a type at all.
        for name in ["c7i.large", "m8i.48xlarge", "zz.9xlarge", ""] {
            assert_eq!(instance_store(name), InstanceStore::Unknown, "{name}");
        }
        // Every type the catalogue knows is one of the three, and every GPU
        // family of the project's blueprints is transcribed.
        for t in table::TABLE {
            if let InstanceStore::Nvme { drives, gb_each } = t.instance_store {
                assert!((1..=24).contains(&drives) && gb_each > 0, "{}", t.name);
            }
            if t.has_nvidia_gpus()
                && ["p3", "p4d", "p5", "g4dn", "g5", "g6", "g6e"].iter().any(|f| t.name.starts_with(&format!("{f}.")))
            {
                assert_ne!(t.instance_store, InstanceStore::Unknown, "{}", t.name);
            }
        }
    }

    #[test]
    fn unknown_names_are_not_found() {
        assert_eq!(lookup(""), None);
        assert_eq!(lookup("p3.16xlarg"), None);
        assert_eq!(lookup("P3.2XLARGE"), None);
        assert_eq!(lookup("zz.9xlarge"), None);
    }

    #[test]
    fn suggestions_for_typos() {
        assert_eq!(suggest("p3.16xlarg"), Some("p3.16xlarge"));
        assert_eq!(suggest("c5.xlarg"), Some("c5.xlarge"));
        assert_eq!(suggest("g5.12xlrage"), Some("g5.12xlarge"));
        assert_eq!(suggest("p4d.24xlarg"), Some("p4d.24xlarge"));
        assert_eq!(suggest("P3.2XLARGE"), Some("p3.2xlarge"));
        assert_eq!(suggest(" p5.48xlarge "), Some("p5.48xlarge"));
    }

    #[test]
    fn no_suggestion_for_garbage() {
        for garbage in ["", "   ", "banana", "xlarge", "gpu", "p3", "hello.world", "not-an-instance-type-at-all"] {
            assert_eq!(suggest(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn table_is_sorted_without_duplicates() {
        for pair in table::TABLE.windows(2) {
            assert!(pair[0].name < pair[1].name, "{} before {}", pair[0].name, pair[1].name);
        }
        // The binary search finds every row.
        for t in table::TABLE {
            assert_eq!(lookup(t.name), Some(t));
        }
    }

    #[test]
    fn every_row_is_consistent() {
        let all_regions = Region::ALL.iter().fold(0u8, |bits, r| bits | r.bit());
        assert!(table::TABLE.len() > 1000, "only {} rows", table::TABLE.len());
        for t in table::TABLE {
            assert_ne!(t.regions, 0, "{} is offered nowhere", t.name);
            assert_eq!(t.regions & !all_regions, 0, "{} has stray region bits", t.name);
            assert_eq!(t.accelerator == Accelerator::None, t.accelerators == 0, "{}", t.name);
            assert_eq!(t.name.matches('.').count(), 1, "{}", t.name);
        }
    }

    #[test]
    fn source_names_its_inputs() {
        assert!(SOURCE.contains("cfn-lint "));
        assert!(SOURCE.contains("instancetype_enum.json"));
        assert!(SOURCE.contains("https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html"));
        assert!(SOURCE.contains("https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html"));
        assert!(SOURCE.contains("https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html"));
        assert!(SOURCE.contains("generated on "));
        assert!(SOURCE.contains("aws-ofi-nccl"));
        assert!(SOURCE.contains("instance-storage.tsv"));
    }
}
