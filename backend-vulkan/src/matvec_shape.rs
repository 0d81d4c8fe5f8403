//! The GPU decode product's shape: `shaders/matvec.comp`'s specialization
//! constants, chosen per device (`PAGODA_VULKAN_MATVEC_SHAPE`).

use std::fmt;

/// The GPU decode product's specialisation (`shaders/matvec.comp`'s
/// constants): output rows per workgroup, whether the activations are
/// staged through shared memory (coalesced loads, read back transposed),
/// whether quant bytes become floats by the exponent trick instead of
/// `unpackUnorm4x8`, activation rows a pass, and invocations per workgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatvecShape {
    /// Output rows a workgroup takes: 2, 4 or 8.
    pub rows: u32,
    /// Stage each pass's activations through shared memory.
    pub stage: bool,
    /// Convert quant bytes with the exponent trick.
    pub magic: bool,
    /// Activation rows a pass reads the weights for: 1, 2, 4 or 8.
    pub batch: u32,
    /// Invocations per workgroup: 64, 128 or 256.
    pub group: u32,
}

/// The default is the fastest at batch 1 on Q4_0 and Q4_K layers of
/// Llama 3 8B's shapes on an H100, of the shapes timed there (`4m-b1-g64`:
/// 838 GB/s on Q4_0 against 683 for `4m-g128`; staging and 8 rows were
/// slower everywhere); batch-1 products take a pipeline specialised for one
/// row per pass, larger batches four (the fastest at batch 16).
impl Default for MatvecShape {
    fn default() -> Self {
        Self {
            rows: 4,
            stage: false,
            magic: true,
            batch: 4,
            group: 64,
        }
    }
}

impl MatvecShape {
    /// Reads a shape written as the row count followed by `s` (stage)
    /// and/or `m` (exponent trick), then optionally `-b` and the batch per
    /// pass, `-g` and the workgroup size (unwritten: the default's 4 and
    /// 64): `4`, `8sm`, `2m-b1-g128`.
    ///
    /// ```
    /// use pagoda_vulkan::MatvecShape;
    /// let shape = MatvecShape::parse("8sm-g128").unwrap();
    /// assert_eq!((shape.rows, shape.stage, shape.magic), (8, true, true));
    /// assert_eq!((shape.batch, shape.group), (4, 128));
    /// assert_eq!(shape.to_string(), "8sm-g128");
    /// assert_eq!(MatvecShape::parse("4m"), Some(MatvecShape::default()));
    /// assert!(MatvecShape::parse("3").is_none());
    /// assert!(MatvecShape::parse("4-b3").is_none());
    /// assert!(MatvecShape::parse("4s-g256").is_none());
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let mut fields = text.trim().split('-');
        let head = fields.next()?;
        let digits = head.trim_end_matches(['s', 'm']);
        let flags = &head[digits.len()..];
        let (stage, magic) = (flags.contains('s'), flags.contains('m'));
        let mut shape = Self {
            rows: digits.parse().ok()?,
            stage,
            magic,
            ..Self::default()
        };
        if ![2, 4, 8].contains(&shape.rows)
            || flags.len() != usize::from(stage) + usize::from(magic)
        {
            return None;
        }
        for field in fields {
            let (key, value) = field.split_at_checked(1)?;
            let value: u32 = value.parse().ok()?;
            match key {
                "b" if [1, 2, 4, 8].contains(&value) => shape.batch = value,
                "g" if [64, 128, 256].contains(&value) => shape.group = value,
                _ => return None,
            }
        }
        // A staged pass of 256 tasks would need more than the 32 KiB of
        // shared memory every device gives.
        (!(shape.stage && shape.group > 128)).then_some(shape)
    }

    /// The kernel's specialization constants, in `constant_id` order.
    pub(crate) fn constants(self) -> [u32; 5] {
        [
            self.rows,
            u32::from(self.stage),
            u32::from(self.magic),
            self.batch,
            self.group,
        ]
    }
}

impl fmt::Display for MatvecShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flag = |on: bool, c: &'static str| if on { c } else { "" };
        write!(
            f,
            "{}{}{}",
            self.rows,
            flag(self.stage, "s"),
            flag(self.magic, "m")
        )?;
        let default = Self::default();
        if self.batch != default.batch {
            write!(f, "-b{}", self.batch)?;
        }
        if self.group != default.group {
            write!(f, "-g{}", self.group)?;
        }
        Ok(())
    }
}
