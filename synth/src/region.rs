//! The regions this project supports; every example blueprint is
//! snapshot-tested in each (docs/ARCHITECTURE.md, "The stack").

use std::fmt;
use std::str::FromStr;

/// A supported AWS region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Region {
    /// US East (N. Virginia)
    UsEast1,
    /// US East (Ohio)
    UsEast2,
    /// US West (Oregon)
    UsWest2,
    /// Europe (Ireland)
    EuWest1,
    /// Asia Pacific (Sydney)
    ApSoutheast2,
}

impl Region {
    /// Every supported region, in the order they are listed to users.
    pub const ALL: [Region; 5] =
        [Region::UsEast1, Region::UsEast2, Region::UsWest2, Region::EuWest1, Region::ApSoutheast2];

    /// The region code, for example `us-east-1`.
    pub fn code(self) -> &'static str {
        match self {
            Region::UsEast1 => "us-east-1",
            Region::UsEast2 => "us-east-2",
            Region::UsWest2 => "us-west-2",
            Region::EuWest1 => "eu-west-1",
            Region::ApSoutheast2 => "ap-southeast-2",
        }
    }

    /// The name the console shows.
    pub fn long_name(self) -> &'static str {
        match self {
            Region::UsEast1 => "US East (N. Virginia)",
            Region::UsEast2 => "US East (Ohio)",
            Region::UsWest2 => "US West (Oregon)",
            Region::EuWest1 => "Europe (Ireland)",
            Region::ApSoutheast2 => "Asia Pacific (Sydney)",
        }
    }

    /// A bit for [`crate::catalog`]'s region sets.
    pub const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The region is not one of the five supported ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a supported region; supported: us-east-1, us-east-2, us-west-2, eu-west-1, ap-southeast-2")]
pub struct UnknownRegion(pub String);

impl FromStr for Region {
    type Err = UnknownRegion;

    fn from_str(s: &str) -> Result<Region, UnknownRegion> {
        Region::ALL.into_iter().find(|r| r.code() == s).ok_or_else(|| UnknownRegion(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_bits_are_distinct() {
        let mut bits = 0u8;
        for r in Region::ALL {
            assert_eq!(r.code().parse::<Region>(), Ok(r));
            assert_eq!(bits & r.bit(), 0);
            bits |= r.bit();
        }
        assert!("us-west-1".parse::<Region>().is_err());
    }
}
