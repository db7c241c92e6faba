//! The placement policies: which open instance a task goes to. One type
//! per policy, each in its own file, registered in [`PLACEMENTS`], from
//! which gnoded's `--placement-policy`, its help and the simulator's
//! presets take their names.

use super::PlacementPolicy;

mod blind;
mod case;
mod exclusive;
mod mgb_sm;

pub use blind::BlindPlacement;
pub use case::CasePlacement;
pub use exclusive::ExclusivePlacement;
pub use mgb_sm::MgbSmPlacement;

/// A placement policy as settings name it.
pub struct PlacementEntry {
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    pub build: fn() -> Box<dyn PlacementPolicy>,
}

/// Every placement policy, the default first.
pub const PLACEMENTS: &[PlacementEntry] = &[
    PlacementEntry {
        name: "case",
        about: "CASE Algorithm 2: the least busy instance where the task fits",
        build: || Box::new(CasePlacement),
    },
    PlacementEntry {
        name: "mgb-sm",
        about: "MGB: memory and the first wave's blocks and warps per SM both hard",
        build: || Box::new(MgbSmPlacement),
    },
    PlacementEntry {
        name: "exclusive",
        about: "one task per instance (Slurm's whole instance per job)",
        build: || Box::new(ExclusivePlacement),
    },
    PlacementEntry {
        name: "blind",
        about: "round robin, blind to memory (sharing without reservations)",
        build: || Box::new(BlindPlacement),
    },
];

/// The names [`placement_policy`] knows.
pub fn placement_names() -> Vec<&'static str> {
    PLACEMENTS.iter().map(|p| p.name).collect()
}

/// The placement policy called `name`.
pub fn placement_policy(name: &str) -> Option<Box<dyn PlacementPolicy>> {
    PLACEMENTS
        .iter()
        .find(|p| p.name == name)
        .map(|p| (p.build)())
}
