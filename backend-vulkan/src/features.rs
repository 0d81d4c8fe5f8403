//! The optional device features kernels use beyond Vulkan 1.1, and what a
//! device offers of them: cooperative matrices (the prefill product's
//! shape) and the packed 4 × 8-bit integer dot product (the 8-bit GPU
//! decode product). `context.rs` reads them into `DeviceInfo` and enables
//! those in use.

use std::ffi::CStr;

use ash::vk;

use crate::VulkanError;

/// Invocations per workgroup of the cooperative-matrix product, and its
/// tile: output rows × activation rows × columns staged at a time (`GROUP`,
/// `TR`, `TB`, `KC` in `shaders/matmul_tiled.comp`).
const COOPMAT_GROUP: u32 = 64;
const COOPMAT_TILE: (u32, u32, u32) = (64, 32, 32);

/// The cooperative-matrix shape the prefill product uses: one
/// `m × k` by `k × n` multiply-add in f16 with f32 sums per subgroup
/// (`VK_KHR_cooperative_matrix`, subgroup scope), chosen among the shapes
/// the device lists so that it tiles the kernel's 64 × 32 tile and 32
/// staged columns evenly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoopMatrixShape {
    /// Rows of the product's output (weight rows) per multiply.
    pub m: u32,
    /// Columns of the output (activation rows) per multiply.
    pub n: u32,
    /// The summed dimension (input features) per multiply.
    pub k: u32,
    /// Subgroups a workgroup of 64 has at least (64 / the largest subgroup
    /// width the device may use): the tile's `m × n` pieces are split
    /// among this many, and any further subgroups wait.
    pub subgroups: u32,
}

impl CoopMatrixShape {
    /// The shape to use among the device's `(m, n, k)` f16 × f16 → f32
    /// subgroup shapes, for subgroups at most `max_subgroup` wide: the
    /// largest multiply that tiles the kernel's tile evenly across the
    /// subgroups, if any does.
    pub fn choose(listed: &[(u32, u32, u32)], max_subgroup: u32) -> Option<Self> {
        let (tr, tb, kc) = COOPMAT_TILE;
        if max_subgroup == 0
            || max_subgroup > COOPMAT_GROUP
            || !COOPMAT_GROUP.is_multiple_of(max_subgroup)
        {
            return None;
        }
        let subgroups = COOPMAT_GROUP / max_subgroup;
        listed
            .iter()
            .copied()
            .filter(|&(m, n, k)| {
                m > 0
                    && n > 0
                    && k > 0
                    && tr % m == 0
                    && tb % n == 0
                    && kc % k == 0
                    && ((tr / m) * (tb / n)) % subgroups == 0
            })
            .max_by_key(|&(m, n, k)| (m * n * k, m * n))
            .map(|(m, n, k)| Self { m, n, k, subgroups })
    }

    /// The kernel's specialization constants, in `constant_id` order.
    pub(crate) fn constants(self) -> [u32; 4] {
        [self.m, self.n, self.k, self.subgroups]
    }
}

/// A device's packed 4 × 8-bit integer dot product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntegerDot {
    /// Whether the device says the unsigned × signed product is faster than
    /// the arithmetic it stands for.
    pub accelerated: bool,
}

/// Whether `name` is among the device's `extensions`.
fn has(extensions: &[vk::ExtensionProperties], name: &CStr) -> bool {
    extensions
        .iter()
        .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
}

/// Whether `physical` has `VK_KHR_shader_integer_dot_product` with its
/// feature on, and whether it accelerates the unsigned × signed packed
/// 4 × 8-bit product.
///
/// # Safety
/// `physical` was enumerated from `instance`, which lists `extensions`.
pub(crate) unsafe fn integer_dot(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    extensions: &[vk::ExtensionProperties],
) -> Result<Option<IntegerDot>, VulkanError> {
    if !has(extensions, ash::khr::shader_integer_dot_product::NAME) {
        return Ok(None);
    }
    // SAFETY: plain queries of an enumerated device (the caller's promise);
    // the chained structs outlive the calls, and are chained only where the
    // device has the extension.
    unsafe {
        let mut feature = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
        let mut all = vk::PhysicalDeviceFeatures2::default().push_next(&mut feature);
        instance.get_physical_device_features2(physical, &mut all);
        if feature.shader_integer_dot_product != vk::TRUE {
            return Ok(None);
        }
        let mut properties = vk::PhysicalDeviceShaderIntegerDotProductProperties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut properties);
        instance.get_physical_device_properties2(physical, &mut props2);
        Ok(Some(IntegerDot {
            accelerated: properties.integer_dot_product4x8_bit_packed_mixed_signedness_accelerated
                == vk::TRUE,
        }))
    }
}

/// The cooperative-matrix shape the prefill product can use on `physical`
/// (see [`CoopMatrixShape::choose`]), if it has `VK_KHR_cooperative_matrix`
/// with the feature on, and `vulkanMemoryModel` with device scope.
///
/// # Safety
/// `physical` was enumerated from `instance`, loaded from `entry`, which
/// lists `extensions`.
pub(crate) unsafe fn coop_matrix_shape(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    props: &vk::PhysicalDeviceProperties,
    extensions: &[vk::ExtensionProperties],
    subgroup: u32,
) -> Result<Option<CoopMatrixShape>, VulkanError> {
    let has = |name| has(extensions, name);
    // SAFETY: plain queries of an enumerated device (the caller's promise);
    // the chained structs outlive the calls, and each is chained only where
    // the device has its extension or Vulkan version.
    unsafe {
        if props.api_version < vk::API_VERSION_1_2 || !has(ash::khr::cooperative_matrix::NAME) {
            return Ok(None);
        }
        let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
        let mut memory_model = vk::PhysicalDeviceVulkanMemoryModelFeatures::default();
        let mut all = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut coop)
            .push_next(&mut memory_model);
        instance.get_physical_device_features2(physical, &mut all);
        // Device scope: the bounds-checking variant's atomic fault report.
        if coop.cooperative_matrix != vk::TRUE
            || memory_model.vulkan_memory_model != vk::TRUE
            || memory_model.vulkan_memory_model_device_scope != vk::TRUE
        {
            return Ok(None);
        }
        // The widest subgroup the device may run the kernel with (without
        // a size requested, a device that varies may pick any in range).
        let mut max_subgroup = subgroup;
        if props.api_version >= vk::API_VERSION_1_3 || has(ash::ext::subgroup_size_control::NAME) {
            let mut sizes = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
            let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut sizes);
            instance.get_physical_device_properties2(physical, &mut props2);
            max_subgroup = max_subgroup.max(sizes.max_subgroup_size);
        }
        let coop = ash::khr::cooperative_matrix::Instance::new(entry, instance);
        let listed = coop
            .get_physical_device_cooperative_matrix_properties(physical)
            .map_err(VulkanError::vk(
                "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR",
            ))?;
        let f16 = vk::ComponentTypeKHR::FLOAT16;
        let f32 = vk::ComponentTypeKHR::FLOAT32;
        let shapes: Vec<(u32, u32, u32)> = listed
            .iter()
            .filter(|p| {
                p.scope == vk::ScopeKHR::SUBGROUP
                    && p.a_type == f16
                    && p.b_type == f16
                    && p.c_type == f32
                    && p.result_type == f32
                    && p.saturating_accumulation == vk::FALSE
            })
            .map(|p| (p.m_size, p.n_size, p.k_size))
            .collect();
        Ok(CoopMatrixShape::choose(&shapes, max_subgroup))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(m: u32, n: u32, k: u32, subgroups: u32) -> Option<CoopMatrixShape> {
        Some(CoopMatrixShape { m, n, k, subgroups })
    }

    #[test]
    fn the_largest_listed_shape_that_tiles_evenly_is_chosen() {
        // Mesa 26.1 lavapipe: 8×8×8 at 8 lanes (4 pieces a subgroup) and
        // at 4 lanes (16 subgroups, 2 pieces each).
        assert_eq!(CoopMatrixShape::choose(&[(8, 8, 8)], 8), shape(8, 8, 8, 8));
        assert_eq!(CoopMatrixShape::choose(&[(8, 8, 8)], 4), shape(8, 8, 8, 16));
        // NVIDIA-like lists: the largest multiply wins.
        let nvidia = [(16, 8, 8), (16, 8, 16), (16, 16, 16)];
        assert_eq!(CoopMatrixShape::choose(&nvidia, 32), shape(16, 16, 16, 2));
        // Wave64: one subgroup takes all 8 pieces.
        assert_eq!(
            CoopMatrixShape::choose(&[(16, 16, 16)], 64),
            shape(16, 16, 16, 1)
        );
    }

    #[test]
    fn shapes_that_do_not_tile_evenly_are_refused() {
        // 8 pieces of 16×16 cannot split among 16 subgroups.
        assert_eq!(CoopMatrixShape::choose(&[(16, 16, 16)], 4), None);
        // A 64-column step, or 48 rows, does not divide the tile.
        assert_eq!(
            CoopMatrixShape::choose(&[(16, 16, 64), (48, 16, 16)], 32),
            None
        );
        // Subgroups wider than the workgroup, or of no width; nothing listed.
        assert_eq!(CoopMatrixShape::choose(&[(16, 16, 16)], 128), None);
        assert_eq!(CoopMatrixShape::choose(&[(16, 16, 16)], 0), None);
        assert_eq!(CoopMatrixShape::choose(&[(0, 16, 16)], 32), None);
        assert_eq!(CoopMatrixShape::choose(&[], 32), None);
        // Among several, only the ones that fit count.
        assert_eq!(
            CoopMatrixShape::choose(&[(16, 16, 64), (16, 8, 16)], 32),
            shape(16, 8, 16, 2)
        );
    }
}
