//! Typed metadata getters: each refuses a missing key or a value of another
//! type with an error naming the key.

use super::value::{Array, ArrayIter, Value, ValueKind, ValueType};
use super::{Gguf, GgufError, Name};

fn wrong(key: &str, expected: ValueKind, found: &Value<'_>) -> GgufError {
    GgufError::WrongType {
        key: Name::new(key.as_bytes()),
        expected,
        found: found.kind(),
    }
}

macro_rules! scalar_getter {
    ($(#[$doc:meta])* $fn:ident, $ty:ty, $variant:ident) => {
        $(#[$doc])*
        pub fn $fn(&self, key: &str) -> Result<$ty, GgufError> {
            match self.require(key)? {
                Value::$variant(v) => Ok(v),
                other => Err(wrong(key, ValueKind::Scalar(ValueType::$variant), &other)),
            }
        }
    };
}

impl<'a> Gguf<'a> {
    scalar_getter!(
        /// The u32 under `key`.
        get_u32, u32, U32
    );
    scalar_getter!(
        /// The u64 under `key`.
        get_u64, u64, U64
    );
    scalar_getter!(
        /// The i32 under `key`.
        get_i32, i32, I32
    );
    scalar_getter!(
        /// The f32 under `key`.
        get_f32, f32, F32
    );
    scalar_getter!(
        /// The bool under `key`.
        get_bool, bool, Bool
    );

    /// The string under `key`, which must be UTF-8.
    pub fn get_str(&self, key: &str) -> Result<&'a str, GgufError> {
        match self.require(key)? {
            Value::String(s) => core::str::from_utf8(s).map_err(|_| GgufError::NotUtf8 {
                offset: (s.as_ptr() as usize - self.bytes().as_ptr() as usize) as u64,
            }),
            other => Err(wrong(key, ValueKind::Scalar(ValueType::String), &other)),
        }
    }

    fn array_of(&self, key: &str, elem: ValueType) -> Result<Array<'a>, GgufError> {
        match self.require(key)? {
            Value::Array(a) if a.elem_type() == elem => Ok(a),
            other => Err(wrong(key, ValueKind::ArrayOf(elem), &other)),
        }
    }

    /// The array of i32 under `key` (e.g. `tokenizer.ggml.token_type`).
    pub fn get_i32_array(&self, key: &str) -> Result<I32Array<'a>, GgufError> {
        self.array_of(key, ValueType::I32)
            .map(|a| I32Array(a.raw()))
    }

    /// The array of f32 under `key` (e.g. `tokenizer.ggml.scores`).
    pub fn get_f32_array(&self, key: &str) -> Result<F32Array<'a>, GgufError> {
        self.array_of(key, ValueType::F32)
            .map(|a| F32Array(a.raw()))
    }

    /// The array of strings under `key` (e.g. `tokenizer.ggml.tokens`).
    pub fn get_str_array(&self, key: &str) -> Result<StrArray<'a>, GgufError> {
        self.array_of(key, ValueType::String).map(StrArray)
    }
}

macro_rules! pod_array {
    ($(#[$doc:meta])* $name:ident, $ty:ty) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        pub struct $name<'a>(&'a [u8]);

        impl<'a> $name<'a> {
            /// Number of elements.
            pub fn len(&self) -> usize {
                self.0.len() / 4
            }

            /// Whether it is empty.
            pub fn is_empty(&self) -> bool {
                self.0.is_empty()
            }

            /// Element `i`, or `None` past the end.
            pub fn get(&self, i: usize) -> Option<$ty> {
                let at = i.checked_mul(4)?;
                let b = self.0.get(at..at.checked_add(4)?)?;
                Some(<$ty>::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }

            /// The elements in order.
            pub fn iter(&self) -> impl Iterator<Item = $ty> + 'a {
                self.0
                    .chunks_exact(4)
                    .map(|b| <$ty>::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
        }
    };
}

pod_array!(
    /// A borrowed array of little-endian i32.
    I32Array,
    i32
);
pod_array!(
    /// A borrowed array of little-endian f32.
    F32Array,
    f32
);

/// A borrowed array of strings, read lazily (each element's bytes; GGUF says
/// UTF-8, token texts are checked by whoever uses them).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct StrArray<'a>(Array<'a>);

impl<'a> StrArray<'a> {
    /// Number of strings.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The strings in order.
    pub fn iter(&self) -> StrIter<'a> {
        StrIter(self.0.iter())
    }
}

/// Iterator over a [`StrArray`].
#[derive(Clone)]
pub struct StrIter<'a>(ArrayIter<'a>);

impl<'a> Iterator for StrIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        match self.0.next()? {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}
