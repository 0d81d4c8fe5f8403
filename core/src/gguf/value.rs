//! Metadata values: their type ids, a borrowed view of each value, and lazy
//! iteration over arrays (nested ones too) without collecting anything.

use core::fmt;

use super::cursor::Cursor;
use super::{GgufError, MAX_ARRAY_DEPTH};

/// A GGUF metadata value type (`gguf_type`), by its id.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// 0
    U8,
    /// 1
    I8,
    /// 2
    U16,
    /// 3
    I16,
    /// 4
    U32,
    /// 5
    I32,
    /// 6
    F32,
    /// 7: one byte, 0 or 1.
    Bool,
    /// 8: u64 length, then UTF-8 bytes.
    String,
    /// 9: element type id, u64 count, then the elements.
    Array,
    /// 10
    U64,
    /// 11
    I64,
    /// 12
    F64,
}

impl ValueType {
    /// The type an id names, or `None` for an unknown id.
    pub const fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The type's name in messages.
    pub const fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// Bytes of a value of this type, when fixed.
    pub const fn fixed_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The fewest bytes a value of this type takes: bounds array counts.
    const fn min_size(self) -> usize {
        match self.fixed_size() {
            Some(n) => n,
            None if matches!(self, ValueType::String) => 8,
            None => 12,
        }
    }
}

/// A value's type as a caller asks for it: a scalar, or an array of elements.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// A single value (not an array).
    Scalar(ValueType),
    /// An array with this element type (`Array` for nested arrays).
    ArrayOf(ValueType),
}

impl fmt::Display for ValueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueKind::Scalar(t) => f.write_str(t.name()),
            ValueKind::ArrayOf(t) => write!(f, "array of {}", t.name()),
        }
    }
}

/// One metadata value, borrowing strings and arrays from the file.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Value<'a> {
    /// u8
    U8(u8),
    /// i8
    I8(i8),
    /// u16
    U16(u16),
    /// i16
    I16(i16),
    /// u32
    U32(u32),
    /// i32
    I32(i32),
    /// f32
    F32(f32),
    /// bool
    Bool(bool),
    /// A string's bytes (GGUF says UTF-8; [`Gguf::get_str`](super::Gguf::get_str) checks).
    String(&'a [u8]),
    /// An array, read lazily.
    Array(Array<'a>),
    /// u64
    U64(u64),
    /// i64
    I64(i64),
    /// f64
    F64(f64),
}

impl Value<'_> {
    /// The value's type.
    pub fn kind(&self) -> ValueKind {
        use ValueType as T;
        ValueKind::Scalar(match self {
            Value::U8(_) => T::U8,
            Value::I8(_) => T::I8,
            Value::U16(_) => T::U16,
            Value::I16(_) => T::I16,
            Value::U32(_) => T::U32,
            Value::I32(_) => T::I32,
            Value::F32(_) => T::F32,
            Value::Bool(_) => T::Bool,
            Value::String(_) => T::String,
            Value::Array(a) => return ValueKind::ArrayOf(a.elem),
            Value::U64(_) => T::U64,
            Value::I64(_) => T::I64,
            Value::F64(_) => T::F64,
        })
    }
}

/// An array value: its element type, its length and where its elements are.
/// Elements are read when iterated, never collected.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Array<'a> {
    pub(super) elem: ValueType,
    pub(super) len: u64,
    /// The whole file; the elements are `file[start..end]`.
    pub(super) file: &'a [u8],
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) depth: u32,
}

impl<'a> Array<'a> {
    /// The element type.
    pub fn elem_type(&self) -> ValueType {
        self.elem
    }

    /// Number of elements.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements' raw bytes (for fixed-size elements, `len × size`
    /// little-endian values).
    pub fn raw(&self) -> &'a [u8] {
        self.file.get(self.start..self.end).unwrap_or(&[])
    }

    /// Where the elements start in the file.
    pub fn offset(&self) -> usize {
        self.start
    }

    /// Iterates over the elements.
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter {
            cur: Cursor::new(self.file, self.start),
            elem: self.elem,
            left: self.len,
            depth: self.depth,
        }
    }
}

impl<'a> IntoIterator for Array<'a> {
    type Item = Value<'a>;
    type IntoIter = ArrayIter<'a>;
    fn into_iter(self) -> ArrayIter<'a> {
        self.iter()
    }
}

/// Iterator over an [`Array`]'s elements.
#[derive(Clone)]
pub struct ArrayIter<'a> {
    cur: Cursor<'a>,
    elem: ValueType,
    left: u64,
    depth: u32,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The array was validated when the file was parsed.
        match read_value(&mut self.cur, self.elem, self.depth + 1) {
            Ok(v) => Some(v),
            Err(_) => {
                debug_assert!(false, "a validated array failed to read");
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.left).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

/// Reads (and fully validates) one value of type `ty` at the cursor. `depth`
/// is the array nesting level of the value (0 for a key's own value).
pub(super) fn read_value<'a>(
    cur: &mut Cursor<'a>,
    ty: ValueType,
    depth: u32,
) -> Result<Value<'a>, GgufError> {
    let at = cur.pos();
    Ok(match ty {
        ValueType::U8 => Value::U8(cur.u8("value")?),
        ValueType::I8 => Value::I8(cur.u8("value")? as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(cur.array("value")?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(cur.array("value")?)),
        ValueType::U32 => Value::U32(cur.u32("value")?),
        ValueType::I32 => Value::I32(i32::from_le_bytes(cur.array("value")?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(cur.array("value")?)),
        ValueType::U64 => Value::U64(cur.u64("value")?),
        ValueType::I64 => Value::I64(i64::from_le_bytes(cur.array("value")?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(cur.array("value")?)),
        ValueType::Bool => Value::Bool(bool_at(cur.u8("value")?, at)?),
        ValueType::String => Value::String(cur.string("string")?),
        ValueType::Array => Value::Array(read_array(cur, depth)?),
    })
}

fn bool_at(value: u8, offset: usize) -> Result<bool, GgufError> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(GgufError::BadBool {
            offset: offset as u64,
            value,
        }),
    }
}

/// Reads an array header and validates (skips) its elements.
fn read_array<'a>(cur: &mut Cursor<'a>, depth: u32) -> Result<Array<'a>, GgufError> {
    let at = cur.offset();
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::NestingTooDeep { offset: at });
    }
    let id = cur.u32("array type")?;
    let elem = ValueType::from_id(id).ok_or(GgufError::UnknownValueType { offset: at, id })?;
    let len = cur.count(elem.min_size(), "array count")?;
    let start = cur.pos();
    match elem.fixed_size() {
        // `count` bounded len × size by the bytes left.
        Some(size) => {
            let bytes = cur.take(len as usize * size, "array")?;
            if elem == ValueType::Bool {
                for (i, &b) in bytes.iter().enumerate() {
                    bool_at(b, start + i)?;
                }
            }
        }
        None => {
            for _ in 0..len {
                read_value(cur, elem, depth + 1)?;
            }
        }
    }
    Ok(Array {
        elem,
        len,
        file: cur.bytes(),
        start,
        end: cur.pos(),
        depth,
    })
}
