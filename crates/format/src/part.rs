//! The footprint's vocabulary: the parts a device's footprint holds besides allocations, and
//! tables indexed by them. Adding a part is a change to [`Part`] here (its variant, then
//! `name`, `words` and `label`, which the compiler asks for), the code that measures it in
//! the interposer, and its two fields in the trace's summary (`<name>` and `<name>_peak` of
//! [`SummaryDevice`](crate::schema::SummaryDevice), which its `part_mut` maps): the trace's
//! names, the CLI's reports, tracks and chart layers all follow from this list. A part that
//! cuquota can trim to make room (as it trims the pool cache and graph memory) says so in
//! [`Part::trim_call`]; the engine's `made_room` (`src/engine/parts.rs`), the log's words
//! (`src/messages.rs`) and the report's answer to a refusal (`crates/cli/src/report/text.rs`)
//! ask it, and the engine's match on the part (in `made_room`) gains the part's trim.

use serde::ser::{Serialize, SerializeMap, Serializer};
use std::ops::{Index, IndexMut};

/// Declares a field-less enum and its `ALL`, every variant in declaration order (the order
/// of their discriminants), from the one list: a variant cannot be left out of `ALL`.
#[macro_export]
macro_rules! listed_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident,)* }
    ) => {
        $(#[$meta])*
        $vis enum $name { $($(#[$vmeta])* $variant,)* }

        impl $name {
            /// Every variant, in declaration order (the order of their discriminants).
            pub const ALL: [$name; [$(stringify!($variant)),*].len()] = [$($name::$variant),*];
        }
    };
}

listed_enum! {
    /// What a device's footprint holds besides live allocations. The interposer charges each
    /// into the same `in_use` as allocations, so one compare-and-swap checks the whole
    /// footprint against the limit, and keeps them apart to say where the room went. `ALL`
    /// (declaration order) indexes the counters and [`PerPart`], and is the order reports
    /// list the parts and charts stack them.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[repr(usize)]
    pub enum Part {
        /// Memory pools' reservation beyond their live allocations.
        PoolCache,
        /// The device's graph memory pool reservation.
        Graph,
        /// What the process's contexts on the device take (measured, or `CUQUOTA_CONTEXT`).
        Context,
    }
}

/// How many parts there are.
pub const PARTS: usize = Part::ALL.len();
/// How many layers a footprint has: allocations, then every part.
pub const LAYERS: usize = PARTS + 1;

impl Part {
    /// The trace's name (`"part"` of a `footprint` or `trim` line, the summary's fields and
    /// the report's JSON keys).
    pub const fn name(self) -> &'static str {
        match self {
            Part::PoolCache => "pool_cache",
            Part::Graph => "graph",
            Part::Context => "context",
        }
    }

    /// The words of the log, the report and the charts.
    pub const fn words(self) -> &'static str {
        match self {
            Part::PoolCache => "pool cache",
            Part::Graph => "graph memory",
            Part::Context => "context",
        }
    }

    /// Its label in the report's tables, whose columns are narrow.
    pub const fn label(self) -> &'static str {
        match self {
            Part::PoolCache => "pool cache",
            Part::Graph => "graph",
            Part::Context => "context",
        }
    }

    /// The driver call with which a process gives back what the part keeps unused: cuquota
    /// makes it in this process to make room for a refused request, and names it where
    /// another process's part holds the room. None: nothing trims the part (a context's
    /// memory is the context's). A new part answers here, and is trimmed and named with
    /// the others.
    pub const fn trim_call(self) -> Option<&'static str> {
        match self {
            Part::PoolCache => Some("cuMemPoolTrimTo"),
            Part::Graph => Some("cuDeviceGraphMemTrim"),
            Part::Context => None,
        }
    }

    /// Whether a trim can give the part back ([`Part::trim_call`]).
    pub const fn trimmable(self) -> bool {
        self.trim_call().is_some()
    }

    /// The part a trace names; None for a name this version does not know.
    pub fn from_name(name: &str) -> Option<Part> {
        Part::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// One value per part, indexed by [`Part`]. Serialised as a map from each part's name, in
/// [`Part::ALL`] order (flattened into a struct, the parts' fields).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerPart<T>(pub [T; PARTS]);

impl<T> PerPart<T> {
    pub fn from_fn(mut f: impl FnMut(Part) -> T) -> PerPart<T> {
        PerPart(Part::ALL.map(&mut f))
    }

    /// Each part with its value, in [`Part::ALL`] order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (Part, &T)> + ExactSizeIterator {
        Part::ALL.into_iter().zip(&self.0)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.0.iter()
    }
}

impl PerPart<u64> {
    /// The bytes of every part together (saturating: only absurd figures could overflow).
    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Every layer with `in_use` bytes charged on the device: when the quota counted the
    /// footprint (`counted`), the allocations are what the parts leave of it; otherwise
    /// `in_use` is of allocations alone.
    pub fn layers(&self, in_use: u64, counted: bool) -> PerLayer<u64> {
        let allocations = if counted {
            in_use.saturating_sub(self.total())
        } else {
            in_use
        };
        PerLayer::from_fn(|layer| match layer {
            Layer::Allocations => allocations,
            Layer::Part(p) => self[p],
        })
    }
}

impl<T> Index<Part> for PerPart<T> {
    type Output = T;
    fn index(&self, part: Part) -> &T {
        &self.0[part as usize]
    }
}

impl<T> IndexMut<Part> for PerPart<T> {
    fn index_mut(&mut self, part: Part) -> &mut T {
        &mut self.0[part as usize]
    }
}

impl<T: Serialize> Serialize for PerPart<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(PARTS))?;
        for (part, value) in self.iter() {
            map.serialize_entry(part.name(), value)?;
        }
        map.end()
    }
}

/// A layer of a device's footprint: allocations, or one of the other parts. Reports list
/// them and charts stack them bottom to top in [`Layer::ALL`] order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    Allocations,
    Part(Part),
}

impl Layer {
    /// Allocations, then every part in [`Part::ALL`] order.
    pub const ALL: [Layer; LAYERS] = {
        let mut all = [Layer::Allocations; LAYERS];
        let mut i = 0;
        while i < PARTS {
            all[i + 1] = Layer::Part(Part::ALL[i]);
            i += 1;
        }
        all
    };

    /// Its name in the report's JSON (`"allocations"`, or the part's trace name).
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Allocations => "allocations",
            Layer::Part(p) => p.name(),
        }
    }

    /// Its words in the report and the charts.
    pub const fn words(self) -> &'static str {
        match self {
            Layer::Allocations => "allocations",
            Layer::Part(p) => p.words(),
        }
    }

    /// Its label in the report's tables.
    pub const fn label(self) -> &'static str {
        match self {
            Layer::Allocations => "allocations",
            Layer::Part(p) => p.label(),
        }
    }

    /// The layer a name of [`Layer::name`] stands for.
    pub fn from_name(name: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.name() == name)
    }

    const fn index(self) -> usize {
        match self {
            Layer::Allocations => 0,
            Layer::Part(p) => p as usize + 1,
        }
    }
}

/// One value per layer, indexed by [`Layer`]; serialised as [`PerPart`] is, allocations first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerLayer<T>(pub [T; LAYERS]);

impl<T> PerLayer<T> {
    pub fn from_fn(mut f: impl FnMut(Layer) -> T) -> PerLayer<T> {
        PerLayer(Layer::ALL.map(&mut f))
    }

    /// Each layer with its value, bottom first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (Layer, &T)> + ExactSizeIterator {
        Layer::ALL.into_iter().zip(&self.0)
    }

    /// The parts' values (every layer but allocations).
    pub fn parts(&self) -> impl DoubleEndedIterator<Item = (Part, &T)> + ExactSizeIterator {
        Part::ALL.into_iter().zip(&self.0[1..])
    }
}

impl<T> Index<Layer> for PerLayer<T> {
    type Output = T;
    fn index(&self, layer: Layer) -> &T {
        &self.0[layer.index()]
    }
}

impl<T> IndexMut<Layer> for PerLayer<T> {
    fn index_mut(&mut self, layer: Layer) -> &mut T {
        &mut self.0[layer.index()]
    }
}

impl<T: Serialize> Serialize for PerLayer<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(LAYERS))?;
        for (layer, value) in self.iter() {
            map.serialize_entry(layer.name(), value)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_index_follows_all() {
        for (i, part) in Part::ALL.into_iter().enumerate() {
            assert_eq!(part as usize, i, "ALL is in discriminant order");
            assert_eq!(Part::from_name(part.name()), Some(part));
            assert_eq!(Layer::from_name(part.name()), Some(Layer::Part(part)));
        }
        assert_eq!(Part::from_name("allocations"), None);
        assert_eq!(Layer::ALL[0], Layer::Allocations);
        assert_eq!(Layer::ALL[1..], Part::ALL.map(Layer::Part));
    }

    #[test]
    fn layers_split_in_use_when_the_footprint_counted() {
        let mut parts = PerPart::<u64>::default();
        parts[Part::Graph] = 3;
        parts[Part::Context] = 5;
        let counted = parts.layers(20, true);
        assert_eq!(counted[Layer::Allocations], 12);
        assert_eq!(counted[Layer::Part(Part::Context)], 5);
        assert_eq!(parts.layers(20, false)[Layer::Allocations], 20);
        assert_eq!(parts.layers(2, true)[Layer::Allocations], 0, "saturates");
    }

    #[test]
    fn tables_serialise_as_maps_in_order() {
        let layers = PerLayer::from_fn(|l| l.name().len());
        assert_eq!(
            serde_json::to_string(&layers).unwrap(),
            r#"{"allocations":11,"pool_cache":10,"graph":5,"context":7}"#
        );
        let parts = PerPart::from_fn(|p| p as usize);
        assert_eq!(
            serde_json::to_string(&parts).unwrap(),
            r#"{"pool_cache":0,"graph":1,"context":2}"#
        );
    }
}
