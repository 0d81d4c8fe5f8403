//! Generates the kernel enum from `shaders/kernels.list`, the one list of
//! kernels, with each kernel's committed SPIR-V included by path.

use std::fmt::Write as _;
use std::path::Path;
use std::{env, fs};

fn main() {
    let manifest = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let shaders = Path::new(&manifest).join("../shaders");
    let list = shaders.join("kernels.list");
    println!("cargo:rerun-if-changed={}", list.display());
    let text = fs::read_to_string(&list).expect("shaders/kernels.list is readable");
    // Each line: name, then optionally its source and defines.
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let names: Vec<&str> = lines.iter().map(|l| l[0]).collect();
    let defines = |name: &str, define: &str| {
        lines
            .iter()
            .any(|l| l[0] == name && l.iter().skip(2).any(|d| *d == define))
    };

    let camel = |name: &str| -> String {
        name.split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect()
    };
    let mut out = String::new();
    out.push_str("/// Every compute kernel, as listed in `shaders/kernels.list`.\n");
    out.push_str("#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\npub enum Kernel {\n");
    for n in &names {
        writeln!(out, "    /// `shaders/{n}.comp`.\n    {},", camel(n)).unwrap();
    }
    out.push_str("}\n\nimpl Kernel {\n    /// All kernels, in list order.\n");
    writeln!(out, "    pub const ALL: [Kernel; {}] = [", names.len()).unwrap();
    for n in &names {
        writeln!(out, "        Kernel::{},", camel(n)).unwrap();
    }
    out.push_str("    ];\n\n    /// The kernel's name in the list.\n    pub const fn name(self) -> &'static str {\n        match self {\n");
    for n in &names {
        writeln!(out, "            Kernel::{} => \"{n}\",", camel(n)).unwrap();
    }
    out.push_str("        }\n    }\n\n    /// What the device must have to run the kernel.\n    pub const fn needs(self) -> Needs {\n        match self {\n");
    for n in &names {
        writeln!(
            out,
            "            Kernel::{} => Needs {{ subgroup_arithmetic: {}, float16: {}, cooperative_matrix: {}, integer_dot: {} }},",
            camel(n),
            defines(n, "-DSUBGROUP"),
            defines(n, "-DF16_ARITH"),
            defines(n, "-DCOOPMAT"),
            defines(n, "-DINT_DOT")
        )
        .unwrap();
    }
    out.push_str("        }\n    }\n\n    /// Whether the kernel is a model op (`-DOPS`: the layout of\n    /// `shaders/ops_common.glsl`) rather than an attention kernel.\n    pub const fn is_op(self) -> bool {\n        match self {\n");
    for n in &names {
        writeln!(
            out,
            "            Kernel::{} => {},",
            camel(n),
            defines(n, "-DOPS")
        )
        .unwrap();
    }
    out.push_str("        }\n    }\n\n    /// The committed SPIR-V: plain, or the bounds-checking variant.\n    pub(crate) const fn spirv(self, checked: bool) -> &'static [u8] {\n        match (self, checked) {\n");
    for n in &names {
        for (checked, file) in [
            (false, format!("{n}.spv")),
            (true, format!("{n}.checked.spv")),
        ] {
            let path = shaders.join("spirv").join(&file);
            println!("cargo:rerun-if-changed={}", path.display());
            let path = path
                .canonicalize()
                .unwrap_or_else(|_| panic!("missing {file}: run scripts/build-shaders.sh"));
            writeln!(
                out,
                "            (Kernel::{}, {checked}) => include_bytes!({:?}),",
                camel(n),
                path.display().to_string()
            )
            .unwrap();
        }
    }
    out.push_str("        }\n    }\n}\n");
    let dest = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("kernels.rs");
    fs::write(dest, out).expect("OUT_DIR is writable");
}
