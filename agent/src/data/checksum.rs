//! S3's full-object checksums, computed here: CRC-32, CRC-32C and
//! CRC-64/NVME (hardware-accelerated by `crc-fast`, the crate the SDK's
//! own checksums use) and SHA-256.
//!
//! A large object arrives in parts, out of order. A CRC of the whole is
//! the CRCs of its parts combined in order ([`Parts`]), so no byte is read
//! twice; SHA-256 cannot be combined, so an object with one is hashed
//! again from the file once it is complete ([`sha256_file`]).

use std::io::Read;
use std::path::Path;

use crc_fast::CrcAlgorithm;
use sha2::Digest;

use super::store::Checksum;

fn algorithm(c: &Checksum) -> Option<CrcAlgorithm> {
    match c {
        Checksum::Crc32(_) => Some(CrcAlgorithm::Crc32IsoHdlc),
        Checksum::Crc32c(_) => Some(CrcAlgorithm::Crc32Iscsi),
        Checksum::Crc64Nvme(_) => Some(CrcAlgorithm::Crc64Nvme),
        Checksum::Sha256(_) => None,
    }
}

fn of_kind(like: &Checksum, crc: u64) -> Checksum {
    match like {
        Checksum::Crc32(_) => Checksum::Crc32(crc as u32),
        Checksum::Crc32c(_) => Checksum::Crc32c(crc as u32),
        _ => Checksum::Crc64Nvme(crc),
    }
}

/// The checksum of `bytes` by the algorithm of `like`.
pub fn compute(like: &Checksum, bytes: &[u8]) -> Checksum {
    match algorithm(like) {
        Some(alg) => of_kind(like, crc_fast::checksum(alg, bytes)),
        None => Checksum::Sha256(sha2::Sha256::digest(bytes).into()),
    }
}

/// The SHA-256 of a file, read in 1 MiB blocks.
pub fn sha256_file(path: &Path) -> std::io::Result<Checksum> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(Checksum::Sha256(hasher.finalize().into()))
}

/// The CRCs of an object's parts, by part number, combined in order
/// once every part is in. Empty for SHA-256 (see [`sha256_file`]).
#[derive(Debug)]
pub struct Parts {
    like: Checksum,
    sums: Vec<Option<(u64, u64)>>,
}

impl Parts {
    /// For an object of `count` parts whose expected checksum is `like`.
    pub fn new(like: &Checksum, count: usize) -> Parts {
        Parts { like: like.clone(), sums: vec![None; count] }
    }

    /// Whether the algorithm combines (a CRC), so parts are summed as they come.
    pub fn combines(&self) -> bool {
        algorithm(&self.like).is_some()
    }

    /// Part `index`'s bytes.
    pub fn add(&mut self, index: usize, bytes: &[u8]) {
        if let Some(alg) = algorithm(&self.like) {
            self.sums[index] = Some((crc_fast::checksum(alg, bytes), bytes.len() as u64));
        }
    }

    /// The whole object's checksum, once every part was added; `None`
    /// when a part is missing or the algorithm does not combine.
    pub fn total(&self) -> Option<Checksum> {
        let alg = algorithm(&self.like)?;
        let mut total: Option<u64> = None;
        for sum in &self.sums {
            let (crc, len) = (*sum)?;
            total = Some(match total {
                None => crc,
                Some(t) => crc_fast::checksum_combine(alg, t, crc, len),
            });
        }
        Some(of_kind(&self.like, total.unwrap_or_else(|| crc_fast::checksum(alg, b""))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check values of the CRC catalogue ("123456789") and SHA-256 of
    /// "abc", and parts combined equal the whole.
    #[test]
    fn known_values_and_combined_parts() {
        let data = b"123456789";
        assert_eq!(compute(&Checksum::Crc32(0), data), Checksum::Crc32(0xcbf43926));
        assert_eq!(compute(&Checksum::Crc32c(0), data), Checksum::Crc32c(0xe3069283));
        assert_eq!(compute(&Checksum::Crc64Nvme(0), data), Checksum::Crc64Nvme(0xae8b14860a799888));
        assert_eq!(
            compute(&Checksum::Sha256([0; 32]), b"abc").hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for like in [Checksum::Crc32(0), Checksum::Crc32c(0), Checksum::Crc64Nvme(0)] {
            let mut parts = Parts::new(&like, 3);
            // Out of order, as they arrive.
            parts.add(2, &big[70_000..]);
            parts.add(0, &big[..30_000]);
            assert_eq!(parts.total(), None);
            parts.add(1, &big[30_000..70_000]);
            assert_eq!(parts.total(), Some(compute(&like, &big)));
        }
        assert!(!Parts::new(&Checksum::Sha256([0; 32]), 2).combines());
    }
}
