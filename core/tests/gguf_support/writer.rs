//! A test-only GGUF writer: every value type, nested arrays, tensors laid
//! out at the alignment, and knobs to write malformed fields on purpose.

/// A metadata value to write.
#[derive(Clone, Debug)]
pub enum V {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(Vec<u8>),
    /// Element type id and elements (written with that id, whatever they are).
    Arr(u32, Vec<V>),
    U64(u64),
    I64(i64),
    F64(f64),
    /// Any type id with the given body bytes.
    Raw(u32, Vec<u8>),
}

pub fn s(text: &str) -> V {
    V::Str(text.as_bytes().to_vec())
}

impl V {
    pub fn type_id(&self) -> u32 {
        match self {
            V::U8(_) => 0,
            V::I8(_) => 1,
            V::U16(_) => 2,
            V::I16(_) => 3,
            V::U32(_) => 4,
            V::I32(_) => 5,
            V::F32(_) => 6,
            V::Bool(_) => 7,
            V::Str(_) => 8,
            V::Arr(..) => 9,
            V::U64(_) => 10,
            V::I64(_) => 11,
            V::F64(_) => 12,
            V::Raw(id, _) => *id,
        }
    }

    pub fn body(&self, out: &mut Vec<u8>) {
        match self {
            V::U8(v) => out.push(*v),
            V::I8(v) => out.push(*v as u8),
            V::U16(v) => out.extend(v.to_le_bytes()),
            V::I16(v) => out.extend(v.to_le_bytes()),
            V::U32(v) => out.extend(v.to_le_bytes()),
            V::I32(v) => out.extend(v.to_le_bytes()),
            V::F32(v) => out.extend(v.to_le_bytes()),
            V::Bool(v) => out.push(u8::from(*v)),
            V::Str(b) => string(out, b),
            V::Arr(elem, items) => {
                out.extend(elem.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for i in items {
                    i.body(out);
                }
            }
            V::U64(v) => out.extend(v.to_le_bytes()),
            V::I64(v) => out.extend(v.to_le_bytes()),
            V::F64(v) => out.extend(v.to_le_bytes()),
            V::Raw(_, b) => out.extend(b),
        }
    }
}

pub fn string(out: &mut Vec<u8>, b: &[u8]) {
    out.extend((b.len() as u64).to_le_bytes());
    out.extend(b);
}

/// A tensor to write.
#[derive(Clone, Debug)]
pub struct T {
    pub name: Vec<u8>,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub data: Vec<u8>,
    /// Offset in the data section; `None` places it after the previous one.
    pub offset: Option<u64>,
}

impl T {
    pub fn new(name: &str, dims: &[u64], type_id: u32, data: Vec<u8>) -> T {
        T {
            name: name.as_bytes().to_vec(),
            dims: dims.to_vec(),
            type_id,
            data,
            offset: None,
        }
    }
}

/// Where the writer put things, for tests that rewrite fields.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub kv_offsets: Vec<usize>,
    pub tensor_info_offsets: Vec<usize>,
    pub data_start: usize,
    pub tensor_data: Vec<(usize, usize)>,
}

#[derive(Clone, Debug)]
pub struct Writer {
    pub version: u32,
    pub kvs: Vec<(Vec<u8>, V)>,
    pub tensors: Vec<T>,
    /// Alignment used to lay out data (set `general.alignment` separately).
    pub alignment: u64,
    pub kv_count: Option<u64>,
    pub tensor_count: Option<u64>,
}

impl Writer {
    pub fn new(version: u32) -> Writer {
        Writer {
            version,
            kvs: Vec::new(),
            tensors: Vec::new(),
            alignment: 32,
            kv_count: None,
            tensor_count: None,
        }
    }

    pub fn kv(mut self, key: &str, v: V) -> Writer {
        self.kvs.push((key.as_bytes().to_vec(), v));
        self
    }

    pub fn tensor(mut self, t: T) -> Writer {
        self.tensors.push(t);
        self
    }

    pub fn build(&self) -> Vec<u8> {
        self.build_with_layout().0
    }

    pub fn build_with_layout(&self) -> (Vec<u8>, Layout) {
        let mut layout = Layout::default();
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        let tc = self.tensor_count.unwrap_or(self.tensors.len() as u64);
        let kc = self.kv_count.unwrap_or(self.kvs.len() as u64);
        out.extend(tc.to_le_bytes());
        out.extend(kc.to_le_bytes());
        for (k, v) in &self.kvs {
            layout.kv_offsets.push(out.len());
            string(&mut out, k);
            out.extend(v.type_id().to_le_bytes());
            v.body(&mut out);
        }
        let align = |x: u64| x.div_ceil(self.alignment) * self.alignment;
        let mut next = 0u64;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            let off = t.offset.unwrap_or(align(next));
            next = next.max(off.saturating_add(t.data.len() as u64));
            offsets.push(off);
            layout.tensor_info_offsets.push(out.len());
            string(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.type_id.to_le_bytes());
            out.extend(off.to_le_bytes());
        }
        let data_start = align(out.len() as u64) as usize;
        layout.data_start = data_start;
        if !self.tensors.is_empty() {
            out.resize(data_start, 0);
        }
        for (t, off) in self.tensors.iter().zip(offsets) {
            if t.data.is_empty() {
                layout.tensor_data.push((data_start, 0));
                continue;
            }
            let at = data_start + off as usize;
            if out.len() < at + t.data.len() {
                out.resize(at + t.data.len(), 0);
            }
            out[at..at + t.data.len()].copy_from_slice(&t.data);
            layout.tensor_data.push((at, t.data.len()));
        }
        (out, layout)
    }
}
