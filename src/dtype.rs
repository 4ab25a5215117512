//! `gpurt_dtype_t`: the one element type enum of the whole library (elementwise
//! kernels and random fills; collectives will take the same codes).

use crate::error::{Error, Result};

/// An element type, for the calls that take a `dtype`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum gpurt_dtype_t {
    GPURT_DTYPE_F32 = 0,
    GPURT_DTYPE_F16 = 1,
    GPURT_DTYPE_BF16 = 2,
    GPURT_DTYPE_I32 = 3,
    GPURT_DTYPE_F64 = 4,
    GPURT_DTYPE_I64 = 5,
}

impl gpurt_dtype_t {
    const ALL: [gpurt_dtype_t; 6] =
        [Self::GPURT_DTYPE_F32, Self::GPURT_DTYPE_F16, Self::GPURT_DTYPE_BF16, Self::GPURT_DTYPE_I32, Self::GPURT_DTYPE_F64, Self::GPURT_DTYPE_I64];

    /// The dtype of a C caller's code; an unknown code is an invalid argument.
    pub fn from_raw(raw: i32) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|d| *d as i32 == raw)
            .ok_or_else(|| Error::invalid_argument(format!("unknown dtype {raw}")))
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Self::GPURT_DTYPE_F32 | Self::GPURT_DTYPE_I32 => 4,
            Self::GPURT_DTYPE_F16 | Self::GPURT_DTYPE_BF16 => 2,
            Self::GPURT_DTYPE_F64 | Self::GPURT_DTYPE_I64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        !matches!(self, Self::GPURT_DTYPE_I32 | Self::GPURT_DTYPE_I64)
    }
}

#[cfg(test)]
mod tests {
    use super::gpurt_dtype_t::{self, *};

    #[test]
    fn codes_round_trip_and_unknown_codes_are_refused() {
        for d in gpurt_dtype_t::ALL {
            assert_eq!(gpurt_dtype_t::from_raw(d as i32).unwrap(), d);
        }
        assert_eq!(gpurt_dtype_t::from_raw(2).unwrap(), GPURT_DTYPE_BF16);
        assert!(gpurt_dtype_t::from_raw(9).is_err() && gpurt_dtype_t::from_raw(-1).is_err());
        assert_eq!((GPURT_DTYPE_F32.size(), GPURT_DTYPE_BF16.size(), GPURT_DTYPE_I64.size()), (4, 2, 8));
        assert!(GPURT_DTYPE_F64.is_float() && !GPURT_DTYPE_I64.is_float());
    }
}
