//! `Debug` for [`Error`]: as derived, except that driver statuses print their name.

use super::{status_name, Error, NumericalFailure};
use cudarc::driver::DriverError;
use std::time::Duration;

/// `Debug` as derived, except that driver statuses print their name: cudarc's `Debug` for
/// `DriverError` asks the driver for a description and panics when no driver library can be
/// loaded, and an error must print on a machine without CUDA (the simulator's faults carry
/// driver statuses too).
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        macro_rules! variants {
            ($($variant:ident $({ $($field:ident),* })?),* $(,)?) => {
                match self {
                    $(Error::$variant $({ $($field),* })? => {
                        let mut d = f.debug_struct(stringify!($variant));
                        $($(d.field(stringify!($field), &Field($field));)*)?
                        d.finish()
                    })*
                }
            };
        }
        variants!(
            LibraryUnavailable { library, hint },
            NoDevice { ordinal, count },
            Driver { call, status },
            Stale { what, made, current },
            ForeignDevice { what, expected, found },
            UnknownStream { stream, device },
            Untracked { what },
            WouldDeadlock { what },
            Recording { what, hint },
            GraphUpdate { what, reason },
            BufferBusy { buffer, waited },
            InputChanged { op, arg, buffer, what },
            BufferReserved { buffer, waited },
            FailedInput { buffer, label, op, cause },
            UndeclaredUse { buffer, lane, access, access_call },
            InvalidArgument { arg, reason },
            WrongBackend { what, needed, actual },
            OutOfMemory { requested, free },
            Shutdown,
            QueueFull,
            Timeout { waited },
            JobPanicked { message },
            AlreadyTaken,
            Library { call, status },
            Unsupported { library, what, hint },
            Numerical { op, batch, failures },
            CompileFailed { status, log },
            ContextPoisoned { call, status },
            Hazard { hazard, more },
            Collective { call, fault, detail },
            SubmitOrder { buffer, order, older_lane, older_submit, younger_lane, younger_submit },
        )
    }
}

/// One field of an [`Error`] as `Debug` prints it.
struct Field<'a, T: ?Sized>(&'a T);

/// How an error field prints under `Debug`: as itself, except a driver status.
trait FieldDebug {
    fn fmt_field(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result;
}

impl<T: FieldDebug + ?Sized> std::fmt::Debug for Field<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt_field(f)
    }
}

macro_rules! plain_fields {
    ($($t:ty),*) => {$(
        impl FieldDebug for $t {
            fn fmt_field(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(self, f)
            }
        }
    )*};
}
plain_fields!(
    String,
    Option<String>,
    &'static str,
    usize,
    u64,
    Duration,
    Vec<NumericalFailure>,
    Box<crate::hazard::Hazard>,
    Box<Error>,
    super::CollectiveFault
);

impl FieldDebug for DriverError {
    fn fmt_field(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&status_name(self))
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Error;

    #[test]
    fn errors_with_driver_statuses_print_without_a_driver() {
        let status = crate::backend::cuda::ILLEGAL_ADDRESS;
        let driver = format!("{:?}", Error::Driver { call: "cuEventRecord", status });
        assert_eq!(driver, r#"Driver { call: "cuEventRecord", status: CUDA_ERROR_ILLEGAL_ADDRESS }"#);
        let poisoned = format!("{:?}", Error::ContextPoisoned { call: "cuEventQuery", status });
        assert!(poisoned.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{poisoned}");
        let plain = format!("{:?}", Error::InvalidArgument { arg: "n", reason: "too big".into() });
        assert_eq!(plain, r#"InvalidArgument { arg: "n", reason: "too big" }"#);
        assert_eq!(format!("{:?}", Error::Shutdown), "Shutdown");
    }
}
