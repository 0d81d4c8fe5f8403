//! The Vulkan instance and device: selection, the validation layer, the
//! allocator, and the device's limits and features as reported.

use std::ffi::CStr;
use std::fmt;

use crate::matvec_shape::MatvecShape;
use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use gpu_allocator::AllocationSizes;

use crate::features::{coop_matrix_shape, integer_dot, CoopMatrixShape, IntegerDot};
use crate::validation::ValidationLog;
use crate::{inject, VulkanError};

/// The environment variable that picks a device: its index in Vulkan's
/// enumeration, or a case-insensitive part of its name (`llvmpipe`, `nvidia`).
pub const DEVICE_ENV: &str = "PAGODA_VULKAN_DEVICE";
/// The environment variable that turns the Khronos validation layer on (`1`).
pub const VALIDATION_ENV: &str = "PAGODA_VULKAN_VALIDATION";
/// Shared memory the kernels use per workgroup at most (the tile kernel's
/// queries and page of keys; the decode kernel's key tile, queries and
/// scores: 28.3 KiB). Devices that give less are refused when they open.
const KERNEL_SHARED_MEMORY: u32 = 32 << 10;

/// The environment variable that turns the subgroup kernel variants off
/// (`0`) where the device has them.
pub const SUBGROUPS_ENV: &str = "PAGODA_VULKAN_SUBGROUPS";
/// The environment variable that turns the f16-arithmetic kernel variants
/// off (`0`) where the device has them.
pub const FLOAT16_ENV: &str = "PAGODA_VULKAN_F16";
/// The environment variable that turns the cooperative-matrix prefill
/// product off (`0`) where the device has `VK_KHR_cooperative_matrix`.
pub const COOPMAT_ENV: &str = "PAGODA_VULKAN_COOPMAT";
/// The environment variable that picks the GPU decode product on 8-bit
/// activations in integer dot products (`1`: wherever the device has
/// `VK_KHR_shader_integer_dot_product`; `0`: never; unset: where the device
/// says its mixed-sign 4 × 8-bit dot product is accelerated).
pub const INT_DOT_ENV: &str = "PAGODA_VULKAN_INT_DOT";
/// The environment variable that sets the largest batch the GPU decode
/// product (`shaders/matvec.comp`) takes; `0` turns it off.
pub const MATVEC_ENV: &str = "PAGODA_VULKAN_MATVEC";
/// The environment variable that specialises the GPU decode product (see
/// [`MatvecShape::parse`]), for tuning it on a device.
pub const MATVEC_SHAPE_ENV: &str = "PAGODA_VULKAN_MATVEC_SHAPE";

/// The largest batch the GPU decode product takes by default: it reads the
/// weights once per 8 activation rows, which at 16 rows still beats
/// staging tiles for the prefill kernels.
const MATVEC_MAX_BATCH: u32 = 16;

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// How to open the backend.
#[derive(Debug, Clone, Default)]
pub struct VulkanOptions {
    /// A device index or part of a name; `None` reads [`DEVICE_ENV`], then
    /// prefers a discrete GPU, then an integrated one, then any other
    /// (virtual, then a CPU implementation such as Mesa's lavapipe).
    pub device: Option<String>,
    /// Run under the Khronos validation layer and record every message it
    /// reports (see [`VulkanBackend::validation_messages`](crate::VulkanBackend::validation_messages)).
    /// `None` reads [`VALIDATION_ENV`].
    pub validation: Option<bool>,
    /// Where the validation layer's messages go: a log the caller keeps,
    /// to read what the layer said even when opening fails, or after the
    /// backend is dropped (leaked objects are reported as the device is
    /// destroyed). `None`: a new log.
    pub validation_log: Option<ValidationLog>,
    /// Run the bounds-checking kernels, which check every index and report
    /// an out-of-range access as [`VulkanError::ShaderFault`]. `None` means
    /// on in debug builds (tests), off in release builds.
    pub bounds_checks: Option<bool>,
    /// Caps each KV chunk (one storage-buffer binding) below the device's
    /// `maxStorageBufferRange`, so tests can split a small pool.
    pub max_chunk_bytes: Option<u64>,
    /// Caps each storage binding uploaded weights take below the device's
    /// limits, so tests can split a small model's weights.
    pub max_weight_chunk_bytes: Option<u64>,
    /// Use the kernel variants that reduce with subgroup arithmetic where the
    /// device has them (`None`: yes, unless [`SUBGROUPS_ENV`] is `0`).
    /// `Some(false)` runs the plain variants, e.g. to test them.
    pub subgroups: Option<bool>,
    /// Use the variants that multiply in f16 for f16 stores where the device
    /// has `shaderFloat16` (`None`: yes, unless [`FLOAT16_ENV`] is `0`).
    pub float16: Option<bool>,
    /// Give prefill products (more than 8 activation rows) to the
    /// cooperative-matrix kernel where the device has a shape that fits
    /// (`None`: yes, unless [`COOPMAT_ENV`] is `0`). It multiplies in f16:
    /// weights and activations rounded to f16, sums in f32.
    pub coopmat: Option<bool>,
    /// The largest batch of activation rows the GPU decode product
    /// (`shaders/matvec.comp`, quantized weights, devices with subgroup
    /// arithmetic) takes; `Some(0)` never. `None` reads [`MATVEC_ENV`],
    /// else 16.
    pub matvec_batch: Option<u32>,
    /// How the GPU decode product is specialised; `None` reads
    /// [`MATVEC_SHAPE_ENV`], else [`MatvecShape::default`].
    pub matvec_shape: Option<MatvecShape>,
    /// Round the GPU decode product's activations to 8 bits and multiply
    /// in integer dot products where the device has
    /// `VK_KHR_shader_integer_dot_product`; `None` reads [`INT_DOT_ENV`],
    /// else only where the device accelerates them.
    pub integer_dot: Option<bool>,
}

impl VulkanOptions {
    /// Every choice left to the environment: [`DEVICE_ENV`],
    /// [`VALIDATION_ENV`], [`SUBGROUPS_ENV`], [`FLOAT16_ENV`] and
    /// [`COOPMAT_ENV`] are read when the backend opens.
    pub fn from_env() -> Self {
        Self::default()
    }
}

/// What kind of device was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A discrete GPU.
    Discrete,
    /// An integrated GPU.
    Integrated,
    /// A virtual GPU.
    Virtual,
    /// A CPU implementation (lavapipe, SwiftShader).
    Cpu,
    /// Anything else.
    Other,
}

impl DeviceKind {
    fn of(t: vk::PhysicalDeviceType) -> Self {
        match t {
            vk::PhysicalDeviceType::DISCRETE_GPU => Self::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => Self::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => Self::Virtual,
            vk::PhysicalDeviceType::CPU => Self::Cpu,
            _ => Self::Other,
        }
    }

    /// Lower is preferred.
    fn rank(self) -> u8 {
        self as u8
    }
}

/// The chosen device, its limits and the features this backend uses.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Its index in Vulkan's enumeration.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Discrete, integrated, ...
    pub kind: DeviceKind,
    /// Vulkan version it supports, as `major.minor.patch`.
    pub api_version: String,
    /// Largest range one storage-buffer binding may cover.
    pub max_storage_buffer_range: u64,
    /// Largest single allocation.
    pub max_allocation_bytes: u64,
    /// Shared memory per workgroup.
    pub max_shared_memory: u32,
    /// Invocations one workgroup may have along x (the lesser of the
    /// device's total and x limits).
    pub max_workgroup: u32,
    /// Default subgroup width.
    pub subgroup_size: u32,
    /// Subgroup arithmetic (max, add) in compute shaders: what the
    /// `SUBGROUP` kernel variants need.
    pub subgroup_arithmetic: bool,
    /// Nanoseconds per timestamp tick, if compute timestamps are supported.
    pub timestamp_period_ns: Option<f32>,
    /// `shaderFloat16` (Vulkan 1.2 or later): what the `F16_ARITH` kernel
    /// variants need. Enabled on the device when present.
    pub shader_float16: bool,
    /// `storageBuffer16BitAccess` (reported; f16/bf16 are read as packed words).
    pub storage_16bit: bool,
    /// Whether the bounds-checking kernels are in use.
    pub bounds_checks: bool,
    /// Whether the validation layer is on.
    pub validation: bool,
    /// Whether the subgroup kernel variants are in use.
    pub use_subgroups: bool,
    /// Whether the f16-arithmetic kernel variants are in use (f16 stores).
    pub use_float16: bool,
    /// The cooperative-matrix shape for the prefill product, where the
    /// device has `VK_KHR_cooperative_matrix` with an f16 shape that fits,
    /// `shaderFloat16` and `vulkanMemoryModel` (with device scope).
    pub cooperative_matrix: Option<CoopMatrixShape>,
    /// Whether prefill products use it.
    pub use_coopmat: bool,
    /// The largest batch the GPU decode product takes (0: not in use).
    pub matvec_batch: u32,
    /// Its specialisation.
    pub matvec_shape: MatvecShape,
    /// `VK_KHR_shader_integer_dot_product` with its feature on, and
    /// whether the device accelerates the mixed-sign 4 × 8-bit product.
    pub integer_dot: Option<IntegerDot>,
    /// Whether the GPU decode product rounds activations to 8 bits and
    /// multiplies in integer dot products.
    pub use_integer_dot: bool,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?}, Vulkan {}): storage buffer range {} MiB, shared memory {} KiB, subgroup {}, \
             subgroup arithmetic {}, timestamps {}, shaderFloat16 {}, 16-bit storage {}, \
             cooperative matrix {}, integer dot {}; kernels: subgroups {}, f16 arithmetic {}, \
             cooperative matrix {}, GPU decode product to batch {} (shape {}, 8-bit activations {}), \
             bounds checks {}; validation {}",
            self.name,
            self.kind,
            self.api_version,
            self.max_storage_buffer_range >> 20,
            self.max_shared_memory >> 10,
            self.subgroup_size,
            self.subgroup_arithmetic,
            if self.timestamp_period_ns.is_some() { "yes" } else { "no" },
            self.shader_float16,
            self.storage_16bit,
            self.cooperative_matrix
                .map_or("no".to_string(), |c| format!("{}x{}x{}", c.m, c.n, c.k)),
            match self.integer_dot {
                None => "no",
                Some(d) if d.accelerated => "accelerated",
                Some(_) => "not accelerated",
            },
            self.use_subgroups,
            self.use_float16,
            self.use_coopmat,
            self.matvec_batch,
            self.matvec_shape,
            self.use_integer_dot,
            self.bounds_checks,
            self.validation,
        )
    }
}

/// The loader, the instance and the messenger feeding the validation log.
/// The context's last field, so it is destroyed after the device.
struct Instance {
    handle: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// Keeps the messengers' pointer into the log valid until the instance
    /// (and the messenger chained to its creation) is gone.
    _log: ValidationLog,
    /// The loaded library; dropped after the instance is destroyed.
    _entry: ash::Entry,
}

impl Instance {
    fn new(entry: ash::Entry, log: &ValidationLog, validation: bool) -> Result<Self, VulkanError> {
        // 1.2, so a 1.2 device's shaderFloat16 can be enabled; a 1.1 device
        // still works (only 1.1 features are used on it).
        let app = vk::ApplicationInfo::default()
            .application_name(c"pagoda")
            .api_version(vk::API_VERSION_1_2);
        let layers = [VALIDATION_LAYER.as_ptr()];
        let extensions = [ash::ext::debug_utils::NAME.as_ptr()];
        // Chained to the instance's creation, the messenger also hears what
        // the layer says while the instance is created and destroyed.
        let mut during_creation = log.messenger_info();
        let mut create = vk::InstanceCreateInfo::default().application_info(&app);
        if validation {
            create = create
                .enabled_layer_names(&layers)
                .enabled_extension_names(&extensions)
                .push_next(&mut during_creation);
        }
        inject::before("vkCreateInstance")?;
        // SAFETY: the create info and everything it points to outlive the
        // call; the log the messenger writes to is kept by `_log`.
        let handle = unsafe { entry.create_instance(&create, None) }
            .map_err(VulkanError::vk("vkCreateInstance"))?;
        let mut instance = Self {
            handle,
            debug: None,
            _log: log.clone(),
            _entry: entry,
        };
        if validation {
            let utils = ash::ext::debug_utils::Instance::new(&instance._entry, &instance.handle);
            inject::before("vkCreateDebugUtilsMessengerEXT")?;
            // SAFETY: a valid create info on a live instance; the log the
            // callback writes to outlives the messenger (see `_log`).
            let messenger =
                unsafe { utils.create_debug_utils_messenger(&log.messenger_info(), None) }
                    .map_err(VulkanError::vk("vkCreateDebugUtilsMessengerEXT"))?;
            instance.debug = Some((utils, messenger));
        }
        Ok(instance)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: the instance outlives everything made from it: the device
        // is a field of the context declared before this one (or was never
        // made), so it is already destroyed.
        unsafe {
            if let Some((utils, messenger)) = self.debug.take() {
                utils.destroy_debug_utils_messenger(messenger, None);
            }
            self.handle.destroy_instance(None);
        }
    }
}

/// The logical device, destroyed when dropped. Everything made from it
/// (the allocator, buffers, pipelines, command pools) is dropped first:
/// the allocator is an earlier field of the context, the rest hold the
/// context.
pub(crate) struct Device(ash::Device);

impl std::ops::Deref for Device {
    type Target = ash::Device;

    fn deref(&self) -> &ash::Device {
        &self.0
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: nothing made from the device is left (see the type's
        // docs) and nothing is running on it: the context waits for it to
        // be idle before dropping it, and before a context exists nothing
        // was submitted.
        unsafe { self.0.destroy_device(None) };
    }
}

/// The instance, the device and everything created from them directly.
/// Shared (`Arc`) by the backend, its buffers, stores, pipelines and
/// command pool, so it outlives all of them; when the last owner lets go,
/// it waits for the device to be idle, then its fields are dropped in
/// order: the allocator, the device, the instance.
pub(crate) struct Context {
    allocator: Mutex<Allocator>,
    pub device: Device,
    pub queue: vk::Queue,
    pub queue_family: u32,
    pub info: DeviceInfo,
    pub validation: ValidationLog,
    /// Read only while the device is made; kept to be destroyed last.
    _instance: Instance,
}

fn version(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

impl Context {
    pub fn new(options: &VulkanOptions) -> Result<Arc<Self>, VulkanError> {
        // SAFETY: loading the system's Vulkan loader runs its initialisers;
        // it is the library this backend exists to call.
        let entry =
            unsafe { ash::Entry::load() }.map_err(|e| VulkanError::Loader(e.to_string()))?;
        let validation = options.validation.unwrap_or_else(|| {
            std::env::var(VALIDATION_ENV).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
        });
        if validation {
            // SAFETY: a plain query of the loader.
            let layers = unsafe { entry.enumerate_instance_layer_properties() }
                .map_err(VulkanError::vk("vkEnumerateInstanceLayerProperties"))?;
            let found = layers
                .iter()
                .any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == VALIDATION_LAYER));
            if !found {
                return Err(VulkanError::Unsupported(
                    "validation requested but VK_LAYER_KHRONOS_validation is not installed \
                     (Debian: vulkan-validationlayers)"
                        .into(),
                ));
            }
        }
        let log = options.validation_log.clone().unwrap_or_default();
        let instance = Instance::new(entry, &log, validation)?;
        let (physical, queue_family, mut info) = choose_device(&instance, options.device.clone())?;
        info.bounds_checks = options.bounds_checks.unwrap_or(cfg!(debug_assertions));
        info.validation = validation;
        let wanted = |option: Option<bool>, env: &str| {
            option.unwrap_or_else(|| std::env::var(env).map_or(true, |v| v != "0"))
        };
        info.use_subgroups = info.subgroup_arithmetic && wanted(options.subgroups, SUBGROUPS_ENV);
        info.use_float16 = info.shader_float16 && wanted(options.float16, FLOAT16_ENV);
        info.use_coopmat =
            info.cooperative_matrix.is_some() && wanted(options.coopmat, COOPMAT_ENV);
        // Its shared sums hold 32 subgroups of a 128-invocation workgroup.
        info.matvec_batch = match info.use_subgroups && info.subgroup_size >= 4 {
            false => 0,
            true => options.matvec_batch.unwrap_or_else(|| {
                std::env::var(MATVEC_ENV)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(MATVEC_MAX_BATCH)
            }),
        };
        info.use_integer_dot = info.matvec_batch > 0
            && info.integer_dot.is_some_and(|d| {
                options
                    .integer_dot
                    .unwrap_or_else(|| match std::env::var(INT_DOT_ENV) {
                        Ok(v) => v != "0",
                        Err(_) => d.accelerated,
                    })
            });
        info.matvec_shape = options.matvec_shape.unwrap_or_else(|| {
            std::env::var(MATVEC_SHAPE_ENV)
                .ok()
                .and_then(|v| MatvecShape::parse(&v))
                .unwrap_or_default()
        });

        let features = vk::PhysicalDeviceFeatures::default()
            .shader_storage_buffer_array_dynamic_indexing(true);
        let mut float16 =
            vk::PhysicalDeviceShaderFloat16Int8Features::default().shader_float16(true);
        // The cooperative-matrix kernel declares f16 values and the Vulkan
        // memory model (glslang's choice for cooperative matrices).
        let mut coopmat =
            vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut memory_model = vk::PhysicalDeviceVulkanMemoryModelFeatures::default()
            .vulkan_memory_model(true)
            .vulkan_memory_model_device_scope(true);
        let mut integer_dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(true);
        let mut extensions = Vec::new();
        if info.use_coopmat {
            extensions.push(ash::khr::cooperative_matrix::NAME.as_ptr());
        }
        if info.use_integer_dot {
            extensions.push(ash::khr::shader_integer_dot_product::NAME.as_ptr());
        }
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(queue_family)
            .queue_priorities(&priorities)];
        let mut create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_features(&features)
            .enabled_extension_names(&extensions);
        if info.use_float16 || info.use_coopmat {
            create = create.push_next(&mut float16);
        }
        if info.use_coopmat {
            create = create.push_next(&mut coopmat).push_next(&mut memory_model);
        }
        if info.use_integer_dot {
            create = create.push_next(&mut integer_dot);
        }
        inject::before("vkCreateDevice")?;
        // SAFETY: `physical` came from this instance; the infos outlive the call.
        let device = Device(
            unsafe { instance.handle.create_device(physical, &create, None) }
                .map_err(VulkanError::vk("vkCreateDevice"))?,
        );
        // SAFETY: the queue family and index were requested above.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };
        inject::before("gpu_allocator::vulkan::Allocator::new")?;
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.handle.clone(),
            device: device.0.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: AllocationSizes::default(),
        })?;
        Ok(Arc::new(Self {
            allocator: Mutex::new(allocator),
            device,
            queue,
            queue_family,
            info,
            validation: log,
            _instance: instance,
        }))
    }

    /// The allocator, locked. A panic while it was held cannot have left
    /// it half-updated in a way that matters more than losing the device,
    /// so a poisoned lock is taken as is.
    pub fn allocator(&self) -> std::sync::MutexGuard<'_, Allocator> {
        self.allocator
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: a plain wait on a live device. The context is the last
        // owner of the device, so after the wait nothing uses it and the
        // fields can be destroyed in order (allocator, device, instance).
        let _ = unsafe { self.device.device_wait_idle() };
    }
}

/// Picks the device: the option or [`DEVICE_ENV`] if given, else the best
/// kind with a compute queue and Vulkan 1.1.
fn choose_device(
    loaded: &Instance,
    choice: Option<String>,
) -> Result<(vk::PhysicalDevice, u32, DeviceInfo), VulkanError> {
    let instance = &loaded.handle;
    // SAFETY: plain queries of a live instance.
    let devices = unsafe { instance.enumerate_physical_devices() }
        .map_err(VulkanError::vk("vkEnumeratePhysicalDevices"))?;
    let choice = choice
        .or_else(|| std::env::var(DEVICE_ENV).ok())
        .filter(|c| !c.is_empty());
    let mut candidates = Vec::new();
    for (index, &physical) in devices.iter().enumerate() {
        // SAFETY: `physical` was enumerated from this instance.
        let props = unsafe { instance.get_physical_device_properties(physical) };
        let name = props
            .device_name_as_c_str()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // SAFETY: as above.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let Some(family) = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        else {
            continue;
        };
        if props.api_version < vk::API_VERSION_1_1 {
            continue;
        }
        candidates.push((
            index,
            physical,
            family as u32,
            name,
            props,
            families[family],
        ));
    }
    let pick = match &choice {
        Some(c) => candidates
            .iter()
            .find(|(i, _, _, name, _, _)| {
                c.parse::<usize>().is_ok_and(|n| n == *i)
                    || name.to_lowercase().contains(&c.to_lowercase())
            })
            .ok_or_else(|| {
                let names: Vec<String> = candidates
                    .iter()
                    .map(|(i, _, _, n, _, _)| format!("{i}: {n}"))
                    .collect();
                VulkanError::NoDevice(format!(
                    "{DEVICE_ENV}={c} matches none of [{}]",
                    names.join(", ")
                ))
            })?,
        None => candidates
            .iter()
            .min_by_key(|(i, _, _, _, props, _)| (DeviceKind::of(props.device_type).rank(), *i))
            .ok_or_else(|| {
                VulkanError::NoDevice(format!(
                    "{} devices enumerated, none with a compute queue and Vulkan 1.1",
                    devices.len()
                ))
            })?,
    };
    let (index, physical, family, name, props, family_props) = pick.clone();
    // SAFETY: plain queries of an enumerated device; the chained structs
    // live on this stack frame for the duration of the calls.
    let (features, f16, (subgroup, arithmetic)) = unsafe {
        let features = instance.get_physical_device_features(physical);
        let mut storage16 = vk::PhysicalDevice16BitStorageFeatures::default();
        let mut float16 = vk::PhysicalDeviceShaderFloat16Int8Features::default();
        let mut all = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut storage16)
            .push_next(&mut float16);
        instance.get_physical_device_features2(physical, &mut all);
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut subgroup);
        instance.get_physical_device_properties2(physical, &mut props2);
        (
            features,
            (
                // The f16 feature struct is core from Vulkan 1.2 on.
                float16.shader_float16 == vk::TRUE && props.api_version >= vk::API_VERSION_1_2,
                storage16.storage_buffer16_bit_access == vk::TRUE,
            ),
            (
                subgroup.subgroup_size,
                subgroup
                    .supported_stages
                    .contains(vk::ShaderStageFlags::COMPUTE)
                    && subgroup.supported_operations.contains(
                        vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::ARITHMETIC,
                    ),
            ),
        )
    };
    if features.shader_storage_buffer_array_dynamic_indexing != vk::TRUE {
        return Err(VulkanError::Unsupported(format!(
            "{name} lacks shaderStorageBufferArrayDynamicIndexing, which the chunked KV pool needs"
        )));
    }
    let limits = props.limits;
    if limits.max_compute_shared_memory_size < KERNEL_SHARED_MEMORY {
        return Err(VulkanError::Unsupported(format!(
            "{name} gives a workgroup {} bytes of shared memory; the kernels need {KERNEL_SHARED_MEMORY}",
            limits.max_compute_shared_memory_size
        )));
    }
    // SAFETY: a plain query of an enumerated device.
    let max_allocation = unsafe {
        let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maintenance3);
        instance.get_physical_device_properties2(physical, &mut props2);
        maintenance3.max_memory_allocation_size
    };
    let timestamps = family_props.timestamp_valid_bits > 0 && limits.timestamp_period > 0.0;
    // SAFETY: `physical` was enumerated from this instance.
    let extensions = unsafe { instance.enumerate_device_extension_properties(physical) }
        .map_err(VulkanError::vk("vkEnumerateDeviceExtensionProperties"))?;
    // SAFETY: as above.
    let cooperative_matrix = unsafe {
        coop_matrix_shape(
            &loaded._entry,
            instance,
            physical,
            &props,
            &extensions,
            subgroup,
        )
    }?;
    // SAFETY: as above.
    let integer_dot = unsafe { integer_dot(instance, physical, &extensions) }?;
    let info = DeviceInfo {
        index,
        name,
        kind: DeviceKind::of(props.device_type),
        api_version: version(props.api_version),
        max_storage_buffer_range: u64::from(limits.max_storage_buffer_range),
        max_allocation_bytes: max_allocation,
        max_shared_memory: limits.max_compute_shared_memory_size,
        max_workgroup: limits
            .max_compute_work_group_invocations
            .min(limits.max_compute_work_group_size[0]),
        subgroup_size: subgroup,
        subgroup_arithmetic: arithmetic,
        timestamp_period_ns: timestamps.then_some(limits.timestamp_period),
        shader_float16: f16.0,
        storage_16bit: f16.1,
        bounds_checks: false,
        validation: false,
        use_subgroups: false,
        use_float16: false,
        cooperative_matrix: cooperative_matrix.filter(|_| f16.0),
        use_coopmat: false,
        matvec_batch: 0,
        matvec_shape: MatvecShape::default(),
        integer_dot,
        use_integer_dot: false,
    };
    Ok((physical, family, info))
}
