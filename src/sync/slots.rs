//! [`TypeSlots`]: shared values, at most one per type, that a lower layer keeps for the layers
//! above it.

use super::lock;
use std::any::Any;
use std::sync::{Arc, Mutex};

/// Shared values, at most one per type, each made on first use. A lower layer holds one of
/// these for the layers above it (the device keeps a library's per-device caches here), so that
/// it owns their state without naming, and so importing, their types.
#[derive(Default)]
pub(crate) struct TypeSlots(Mutex<Vec<Arc<dyn Any + Send + Sync>>>);

impl TypeSlots {
    /// The value of type `T`, made with `T::default()` on first use.
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    pub(crate) fn get<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut slots = lock(&self.0);
        if let Some(found) = slots.iter().find_map(|s| s.clone().downcast::<T>().ok()) {
            return found;
        }
        let made = Arc::new(T::default());
        slots.push(made.clone());
        made
    }
}
